import ChannelAPI
import Foundation

/// The `mobile` channel: an output is delivered once it is whole in the inbox (SQLite or PostgreSQL).
public struct MobileChannel: Channel {
    public let name = "mobile"
    public let inbox: any Inbox
    /// Told about new outbox rows so wake-ups leave at once instead of at the next poll.
    public let dispatcher: PushDispatcher?

    public init(store: any Inbox, dispatcher: PushDispatcher? = nil) {
        self.inbox = store
        self.dispatcher = dispatcher
    }

    public func validate(destination: String) throws(DestinationError) {
        _ = try Destination(parsing: destination)
    }

    public func deliver(_ output: Output, to destination: String) async throws -> DeliveryReceipt {
        let parsed = try Destination(parsing: destination)
        let stored = try await inbox.insertDelivery(output, destination: parsed)
        if stored.wakeUps > 0 { dispatcher?.poke() }
        return DeliveryReceipt(channel: name, deliveryID: stored.id, recipientCount: stored.recipients.count)
    }
}
