import Foundation
import JSON

/// One inbox line as every reader gets it, in the original app's shape: the inbox list, the single line and the
/// record the relay carries down are all this one view. `Encodable` is the definition; `write(into:)` is the inbox
/// list's measured fast path (stored parts and metadata spliced in, no decoding), and a test holds the two to the
/// same bytes under `JSONCoding.encoder`.
public struct DeliveryView: Sendable, Encodable {
    public let delivery: Delivery
    /// How to show the line: list items carry it, as the original sends it there.
    public let presentation: Presentation?
    /// Whether the reader is one phone (or person) with read state; the relay's record has none yet.
    public let hasReadState: Bool

    public init(_ delivery: Delivery, presentation: Presentation? = nil, hasReadState: Bool = true) {
        self.delivery = delivery
        self.presentation = presentation
        self.hasReadState = hasReadState
    }

    /// A list item: the line with its presentation, derived from the body.
    public static func listItem(_ delivery: Delivery) -> DeliveryView {
        DeliveryView(delivery, presentation: Presentation(markdown: delivery.body))
    }

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

    private static let presentationEncoder = JSONCoding.encoder

    /// The same JSON written straight to bytes, keys sorted as `JSONCoding.encoder` sorts them.
    public func write(into out: inout JSONWriter) {
        let d = delivery
        out.beginObject()
        out.key("agent_id"); out.string(d.agentID)
        out.key("agent_name"); out.string(d.agentName)
        out.key("body"); out.string(d.body)
        out.key("created_at"); out.timestamp(d.createdAt)
        out.key("destination"); out.string(d.destination.description)
        out.key("id"); out.string(d.id)
        out.key("metadata"); out.raw(d.metadataJSON)
        out.key("parts"); out.raw(d.partsJSON)
        if let presentation, let json = try? Self.presentationEncoder.encode(presentation) {
            out.key("presentation"); out.raw(String(decoding: json, as: UTF8.self))
        }
        if hasReadState {
            out.key("read"); out.bool(d.readAt != nil)
            if let readAt = d.readAt { out.key("read_at"); out.timestamp(readAt) }
        }
        out.key("session_id"); out.string(d.sessionID)
        out.key("title"); out.string(d.title)
        out.endObject()
    }
}
