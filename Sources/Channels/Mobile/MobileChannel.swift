import ChannelAPI
import Foundation

/// The `mobile` channel: an output is delivered once it is whole in the SQLite inbox.
public struct MobileChannel: Channel {
    public let name = "mobile"
    public let store: MobileStore

    public init(store: MobileStore) {
        self.store = store
    }

    public func validate(destination: String) throws(DestinationError) {
        _ = try Destination(parsing: destination)
    }

    public func deliver(_ output: Output, to destination: String) async throws -> DeliveryReceipt {
        let parsed = try Destination(parsing: destination)
        let stored = try store.insertDelivery(output, destination: parsed)
        return DeliveryReceipt(channel: name, deliveryID: stored.id, recipientCount: stored.recipients.count)
    }
}
