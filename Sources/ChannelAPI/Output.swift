import Foundation

/// What a finished agent run produced, handed to a channel for delivery.
public struct Output: Sendable, Equatable, Codable {
    public var agentID: String
    public var agentName: String
    public var sessionID: String
    /// Shown as the inbox line's title; defaults to the original's "Result from <agent id>".
    public var title: String
    /// Text parts of the reply; the body joins the non-empty ones with blank lines, as the original.
    public var parts: [String]
    /// Free-form string facts about the run (trigger, location.event, …).
    public var metadata: [String: String]

    public init(agentID: String, agentName: String, sessionID: String, title: String? = nil, parts: [String], metadata: [String: String] = [:]) {
        self.agentID = agentID
        self.agentName = agentName
        self.sessionID = sessionID
        self.title = title ?? "Result from \(agentID)"
        self.parts = parts
        self.metadata = metadata
    }

    public var body: String { parts.filter { !$0.isEmpty }.joined(separator: "\n\n") }
}

/// Proof that a channel has taken an output for good.
public struct DeliveryReceipt: Sendable, Equatable {
    public let channel: String
    public let deliveryID: String
    /// How many devices (or other endpoints) the delivery is addressed to right now.
    public let recipientCount: Int

    public init(channel: String, deliveryID: String, recipientCount: Int) {
        self.channel = channel
        self.deliveryID = deliveryID
        self.recipientCount = recipientCount
    }
}
