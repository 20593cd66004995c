import Foundation
import Synchronization
import JSON

/// One inbox line as every reader gets it, in the original app's shape: the inbox list, the single line and the
/// record the relay carries down are all this one view. `Encodable` is the definition; `write(into:)` is the inbox
/// list's measured fast path (stored parts and metadata spliced in, no decoding), and a test holds the two to the
/// same bytes under `JSONCoding.encoder`.
public struct DeliveryView: Sendable, Encodable {
    public let delivery: Delivery
    /// Whether the line carries how to show it: list items do, as the original sends it there.
    public let includesPresentation: Bool
    /// Whether the reader is one phone (or person) with read state; the relay's record has none yet.
    public let hasReadState: Bool

    public init(_ delivery: Delivery, includesPresentation: Bool = false, hasReadState: Bool = true) {
        self.delivery = delivery
        self.includesPresentation = includesPresentation
        self.hasReadState = hasReadState
    }

    /// A list item: the line with its presentation, derived from the body.
    public static func listItem(_ delivery: Delivery) -> DeliveryView {
        DeliveryView(delivery, includesPresentation: true)
    }

    /// The presentation, derived from the body (nil when there is no text).
    public var presentation: Presentation? { includesPresentation ? Presentation(markdown: delivery.body) : nil }

    enum CodingKeys: String, CodingKey {
        case agentID = "agent_id", agentName = "agent_name", body, createdAt = "created_at", destination, id, metadata, parts
        case presentation, read, readAt = "read_at", sessionID = "session_id", title
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(delivery.agentID, forKey: .agentID)
        try container.encode(delivery.agentName, forKey: .agentName)
        try container.encode(delivery.body, forKey: .body)
        try container.encode(JSONValue.iso8601(delivery.createdAt), forKey: .createdAt)
        try container.encode(delivery.destination.description, forKey: .destination)
        try container.encode(delivery.id, forKey: .id)
        try container.encode(delivery.metadata, forKey: .metadata)
        try container.encode(delivery.partObjects, forKey: .parts)
        try container.encodeIfPresent(presentation, forKey: .presentation)
        if hasReadState {
            try container.encode(delivery.readAt != nil, forKey: .read)
            // Omitted while unread, as the original writes it.
            if let readAt = delivery.readAt { try container.encode(JSONValue.iso8601(readAt), forKey: .readAt) }
        }
        try container.encode(delivery.sessionID, forKey: .sessionID)
        try container.encode(delivery.title, forKey: .title)
    }

    /// The list item's JSON around its read state, for a renderer that keeps lines (they never change once written):
    /// `head` runs from `{` through the presentation, `tail` from `session_id` to `}`, and
    /// `writeReadState(_:into:)` goes between them for the reader at hand. The three together are `write(into:)`'s
    /// bytes for a list item, a test holds them so.
    public static func listFragments(_ d: Delivery) -> (head: [UInt8], tail: [UInt8]) {
        var out = JSONWriter(capacity: 256 + d.body.utf8.count * 2 + d.partsJSON.utf8.count + d.metadataJSON.utf8.count)
        out.beginObject()
        writeHead(d, presentation: true, into: &out)
        var tail = Array(#","session_id":"#.utf8)
        JSONValue.writeString(d.sessionID, into: &tail)
        tail.append(contentsOf: #","title":"#.utf8)
        JSONValue.writeString(d.title, into: &tail)
        tail.append(UInt8(ascii: "}"))
        return (out.bytes, tail)
    }

    /// A list item's read state as it follows the head: `,"read":false`, or `,"read":true,"read_at":"…"`.
    public static func writeReadState(_ readAt: Date?, into out: inout [UInt8]) {
        guard let readAt else { out.append(contentsOf: #","read":false"#.utf8); return }
        out.append(contentsOf: #","read":true,"read_at":""#.utf8)
        JSONValue.writeISO8601(readAt, into: &out)
        out.append(UInt8(ascii: "\""))
    }

    /// Lines never change, so each line's presentation is worked out once and kept (as JSON) for every page that
    /// shows it again; a bounded number, the oldest forgotten first.
    private static let presentations = PresentationCache(capacity: 20_000)

    /// The single line's answer: the view's keys and `wake_ups` beside them, in one object.
    public struct WithWakeUps: Encodable, Sendable {
        /// How one phone was woken for the line: the outbox row's state, tries, transport and last outcome.
        public struct WakeUp: Encodable, Sendable {
            var deviceID, state: String
            var attempts: Int
            var transport, outcome: Nullable<String>

            public init(_ entry: OutboxEntry) {
                deviceID = entry.deviceID
                state = entry.state.rawValue
                attempts = entry.attempts
                transport = Nullable(entry.transport)
                outcome = Nullable(entry.outcome)
            }

            enum CodingKeys: String, CodingKey {
                case state, attempts, transport, outcome
                case deviceID = "device_id"
            }
        }

        let view: DeliveryView
        let wakeUps: [WakeUp]

        public init(view: DeliveryView, wakeUps: [WakeUp]) {
            self.view = view
            self.wakeUps = wakeUps
        }

        private enum Key: String, CodingKey { case wakeUps = "wake_ups" }

        public func encode(to encoder: any Encoder) throws {
            try view.encode(to: encoder)
            var container = encoder.container(keyedBy: Key.self)
            try container.encode(wakeUps, forKey: .wakeUps)
        }
    }

    /// The keys before the read state, in an object `out` has begun: the line's own fields, then its presentation.
    private static func writeHead(_ d: Delivery, presentation: Bool, into out: inout JSONWriter) {
        out.key("agent_id"); out.string(d.agentID)
        out.key("agent_name"); out.string(d.agentName)
        out.key("body"); out.string(d.body)
        out.key("created_at"); out.timestamp(d.createdAt)
        out.key("destination"); out.string(d.destination.description)
        out.key("id"); out.string(d.id)
        out.key("metadata"); out.raw(d.metadataJSON)
        out.key("parts"); out.raw(d.partsJSON)
        if presentation, let json = presentations.json(id: d.id, body: d.body) {
            out.key("presentation"); out.raw(json)
        }
    }

    /// The same JSON written straight to bytes, keys sorted as `JSONCoding.encoder` sorts them.
    public func write(into out: inout JSONWriter) {
        let d = delivery
        out.beginObject()
        Self.writeHead(d, presentation: includesPresentation, into: &out)
        if hasReadState {
            out.key("read"); out.bool(d.readAt != nil)
            if let readAt = d.readAt { out.key("read_at"); out.timestamp(readAt) }
        }
        out.key("session_id"); out.string(d.sessionID)
        out.key("title"); out.string(d.title)
        out.endObject()
    }
}

/// Presentations as JSON by delivery id, bounded: the inbox re-renders a page after any write, and its older lines
/// need not be read again.
final class PresentationCache: Sendable {
    private struct State {
        /// The body's hash with its presentation: a line's body never changes, but an id met again with another
        /// body (another gateway in the same process, a test) must not get the first one's.
        var json: [String: (body: Int, json: String?)] = [:]
        var order: [String] = []
        var oldest = 0
    }
    private let state = Mutex(State())
    private let capacity: Int
    private static let encoder = JSONCoding.encoder

    init(capacity: Int) { self.capacity = capacity }

    /// The presentation of the line `id` as JSON, or nil when the body has nothing to present.
    func json(id: String, body: String) -> String? {
        let bodyHash = body.hashValue
        if let hit = state.withLock({ $0.json[id] }), hit.body == bodyHash { return hit.json }
        let json = Presentation(markdown: body).flatMap { try? Self.encoder.encode($0) }.map { String(decoding: $0, as: UTF8.self) }
        state.withLock { state in
            guard state.json.updateValue((bodyHash, json), forKey: id) == nil else { return }
            state.order.append(id)
            if state.order.count - state.oldest > capacity {
                state.json[state.order[state.oldest]] = nil
                state.oldest += 1
                // Compact now and then, so the order list does not grow without end.
                if state.oldest > capacity { state.order.removeFirst(state.oldest); state.oldest = 0 }
            }
        }
        return json
    }
}
