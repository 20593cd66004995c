/// An outbound channel plugin: takes finished outputs and delivers them somewhere durable.
public protocol Channel: Sendable {
    /// The name SOUL.yaml uses in `output.channel`.
    var name: String { get }

    /// Checks a destination at config load, so a typo is an error with a line number, not a lost result.
    func validate(destination: String) throws(DestinationError)

    /// Delivers `output`. Returning means the output is stored for good; throwing means it is not.
    func deliver(_ output: Output, to destination: String) async throws -> DeliveryReceipt
}

public struct ChannelRegistryError: Error, Sendable, CustomStringConvertible {
    public let description: String
}

/// Channels by name. Built at start-up and read-only afterwards.
public struct ChannelRegistry: Sendable {
    private var channels: [String: any Channel] = [:]

    public init(_ channels: [any Channel] = []) {
        for channel in channels { self.channels[channel.name] = channel }
    }

    public mutating func register(_ channel: any Channel) {
        channels[channel.name] = channel
    }

    public var names: [String] { channels.keys.sorted() }

    public func has(_ name: String) -> Bool { channels[name] != nil }

    public func channel(named name: String) throws(ChannelRegistryError) -> any Channel {
        guard let channel = channels[name] else {
            throw ChannelRegistryError(description: "unknown channel '\(name)'; registered: \(names.joined(separator: ", "))")
        }
        return channel
    }
}
