import ChannelAPI

/// What the service worker (`/sw.js`) receives, decrypted: the wake-up's generic words and identifiers, the same
/// a phone gets, never an agent's output. The worker shows `title` and `body` and opens the delivery's page.
public struct WebPushMessage: Encodable, Sendable, Equatable {
    public var title: String
    public var body: String
    public var category: String
    public var threadID: String
    /// Present for inbox deliveries: the worker opens `/#/inbox/<delivery_id>`.
    public var deliveryID: String?
    /// Notifications with the same tag replace each other (a wake-up resent after a crash).
    public var collapseID: String?
    public var timeSensitive: Bool
    /// The wake-up's feature keys (call_id, agent_id, …), strings only.
    public var extra: [String: String]

    public init(_ signal: WakeSignal) {
        title = signal.title
        body = signal.body
        category = signal.category.rawValue
        threadID = signal.threadID
        deliveryID = signal.deliveryID
        collapseID = signal.collapseID
        timeSensitive = signal.timeSensitive
        extra = signal.extra
    }

    enum CodingKeys: String, CodingKey {
        case title, body, category, extra
        case threadID = "thread_id", deliveryID = "delivery_id", collapseID = "collapse_id", timeSensitive = "time_sensitive"
    }
}
