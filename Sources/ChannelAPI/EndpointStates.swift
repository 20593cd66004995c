import Foundation
import Synchronization

/// An endpoint a channel stopped sending to because the service said it is gone for good (a webhook's 410 Gone).
/// It stays disabled across restarts, until the endpoint's entry in the gateway config changes: the channel
/// compares `fingerprint` with the one of the endpoint as configured now.
public struct DisabledEndpoint: Sendable, Equatable {
    /// The configured channel id (`webhook`).
    public var channel: String
    /// The channel's own key for the endpoint (`endpoint:alerts`); never a secret.
    public var endpoint: String
    /// A hash of the endpoint's configured settings when it was disabled (never the settings themselves).
    public var fingerprint: String
    /// How people see the endpoint named (`alerts`, `channels.webhook.url`); never a secret.
    public var display: String
    /// What the service answered, already scrubbed of secrets.
    public var reason: String
    public var since: Date

    public init(channel: String, endpoint: String, fingerprint: String, display: String, reason: String, since: Date) {
        self.channel = channel
        self.endpoint = endpoint
        self.fingerprint = fingerprint
        self.display = display
        self.reason = reason
        self.since = since
    }
}

/// Where channels keep the endpoints they disabled. The framework owns it and hands it to each attempt
/// (`OutboundChannel.attempt(_:endpoints:)`): in the gateway it is a table of its database, so a channel never
/// opens the database itself. Every call may throw when the storage does.
public protocol EndpointStateStore: Sendable {
    /// The channel's record for `endpoint`, whatever its fingerprint.
    func disabled(channel: String, endpoint: String) async throws -> DisabledEndpoint?
    /// All of the channel's records, oldest first.
    func disabled(channel: String) async throws -> [DisabledEndpoint]
    /// Records (or replaces) the channel's record for `record.endpoint`.
    func disable(_ record: DisabledEndpoint) async throws
    /// Forgets the channel's record for `endpoint` (its config changed); nothing when there is none.
    func enable(channel: String, endpoint: String) async throws
}

/// A channel that disables endpoints the service says are gone (a webhook's 410): it says which of its configured
/// endpoints `store` holds disabled now, so the gateway can show them (the console's health page) until the
/// endpoint's config entry changes.
public protocol EndpointDisablingChannel: OutboundChannel {
    /// The records in `store` that still disable one of this channel's endpoints as configured now, oldest first.
    func disabledEndpoints(in store: any EndpointStateStore) async throws -> [DisabledEndpoint]
}

/// The endpoints disabled in this process only: what a channel uses when it is attempted without the
/// framework's store (a test, an embedder calling `attempt(_:)`). Lost with the process.
public final class ProcessEndpointStates: EndpointStateStore {
    private let records = Mutex<[String: DisabledEndpoint]>([:])

    public init() {}

    private static func key(_ channel: String, _ endpoint: String) -> String { channel + "\u{0}" + endpoint }

    public func disabled(channel: String, endpoint: String) async throws -> DisabledEndpoint? {
        records.withLock { $0[Self.key(channel, endpoint)] }
    }

    public func disabled(channel: String) async throws -> [DisabledEndpoint] {
        records.withLock { $0.values.filter { $0.channel == channel } }.sorted { ($0.since, $0.endpoint) < ($1.since, $1.endpoint) }
    }

    public func disable(_ record: DisabledEndpoint) async throws {
        records.withLock { $0[Self.key(record.channel, record.endpoint)] = record }
    }

    public func enable(channel: String, endpoint: String) async throws {
        _ = records.withLock { $0.removeValue(forKey: Self.key(channel, endpoint)) }
    }
}
