import ChannelAPI
import Foundation
import JSON

/// Soulacy's External Channel Protocol v1: one JSON object per line (NDJSON, UTF-8), the sidecar's stdout to the
/// gateway and the gateway to its stdin. Unknown frame types and unknown fields are ignored by both sides; that is
/// how the protocol grows. Our additions are of that kind: `id` on `send`, the `ack`/`nack` frames, and the `ack`
/// capability a sidecar declares in its hello to get them.
public enum SidecarProtocol {
    /// The gateway's version; the handshake settles on min(this, the sidecar's).
    public static let version = 1
    /// The longest line either side reads (the original's scanner limit).
    public static let maximumLineBytes = 1 << 20
    /// A sidecar that lists this in its hello `capabilities` answers every `send` with `ack` or `nack`.
    public static let ackCapability = "ack"
    /// The longest `id`, `chat_id` or `sender_id` of a `message` the gateway takes: they become keys, session ids and
    /// `send.to`, and no platform's ids come near it (our guard; the original has none).
    public static let maximumIdentifierBytes = 1024
}

/// `hello {protocol, name, capabilities?}`: the sidecar's first frame, within 5 s of its start.
public struct HelloFrame: Codable, Sendable, Equatable {
    /// The highest version the sidecar speaks (≥ 1).
    public var `protocol`: Int?
    /// Names the integration (`matrix`).
    public var name: String?
    public var capabilities: [String]?

    public init(protocol: Int?, name: String?, capabilities: [String]? = nil) {
        self.protocol = `protocol`
        self.name = name
        self.capabilities = capabilities
    }

    public var acknowledgesSends: Bool { capabilities?.contains(SidecarProtocol.ackCapability) ?? false }
}

/// `hello_ack {protocol, shared_dir?}`: the settled version, and the per-run scratch directory when there is one.
public struct HelloAckFrame: Codable, Sendable, Equatable {
    public var `protocol`: Int
    public var sharedDir: String?

    enum CodingKeys: String, CodingKey {
        case `protocol`
        case sharedDir = "shared_dir"
    }

    public init(protocol: Int, sharedDir: String? = nil) {
        self.protocol = `protocol`
        self.sharedDir = sharedDir
    }
}

/// `status {connected, detail, qr?}`: the platform connection, as the channel's status shows it.
public struct StatusFrame: Codable, Sendable, Equatable {
    public var connected: Bool?
    public var detail: String?
    public var qr: String?

    public init(connected: Bool?, detail: String? = nil, qr: String? = nil) {
        self.connected = connected
        self.detail = detail
        self.qr = qr
    }
}

/// `message {id?, chat_id, sender_id?, sender_name?, text, timestamp?, is_group?}`: a person wrote to the channel.
public struct MessageFrame: Codable, Sendable, Equatable {
    public var id: String?
    public var chatID: String?
    public var senderID: String?
    public var senderName: String?
    public var text: String?
    /// Unix seconds.
    public var timestamp: Double?
    public var isGroup: Bool?

    enum CodingKeys: String, CodingKey {
        case id, text, timestamp
        case chatID = "chat_id"
        case senderID = "sender_id"
        case senderName = "sender_name"
        case isGroup = "is_group"
    }

    public init(id: String? = nil, chatID: String?, senderID: String? = nil, senderName: String? = nil, text: String?,
                timestamp: Double? = nil, isGroup: Bool? = nil) {
        self.id = id
        self.chatID = chatID
        self.senderID = senderID
        self.senderName = senderName
        self.text = text
        self.timestamp = timestamp
        self.isGroup = isGroup
    }
}

extension MessageFrame {
    /// The message as the framework runs it, or why it is refused (in words without its text). As the original:
    /// `chat_id` and `text` must be there and not blank, the sender is the chat when it has none, the text goes to the
    /// agent trimmed, and a frame without an `id` gets a fresh one (so only frames with ids are kept from repeating).
    public func inboundMessage() throws(SidecarFrameError) -> InboundMessage {
        guard let chat = chatID, !chat.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty else {
            throw SidecarFrameError(description: "a message frame without chat_id")
        }
        let text = (self.text ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
        guard !text.isEmpty else { throw SidecarFrameError(description: "a message frame without text") }
        // A reply goes to this chat as one frame's `to`; a configured destination may not hold a line break either.
        guard !chat.contains(where: \.isNewline) else { throw SidecarFrameError(description: "a message frame whose chat_id is not one line") }
        let limit = SidecarProtocol.maximumIdentifierBytes
        for (field, value) in [("id", id), ("chat_id", chat), ("sender_id", senderID)] where (value?.utf8.count ?? 0) > limit {
            throw SidecarFrameError(description: "a message frame whose \(field) is over \(limit) bytes")
        }
        let sender = senderID.flatMap { $0.isEmpty ? nil : $0 } ?? chat
        return InboundMessage(id: id.flatMap { $0.isEmpty ? nil : $0 } ?? UUID().uuidString, replyTo: chat, senderID: sender,
                              senderName: senderName.flatMap { $0.isEmpty ? nil : String($0.prefix(200)) }, text: text, isDirect: !(isGroup ?? false))
    }
}

/// `error {detail | error}`: the platform is in trouble (the sidecar keeps running).
public struct ErrorFrame: Codable, Sendable, Equatable {
    public var detail: String?
    public var error: String?

    public init(detail: String? = nil, error: String? = nil) {
        self.detail = detail
        self.error = error
    }
}

/// `send {to, text, id?}`: deliver this to the platform. `id` is the delivery's id, the same on every attempt.
public struct SendFrame: Codable, Sendable, Equatable {
    public var to: String
    public var text: String
    public var id: String?

    public init(to: String, text: String, id: String? = nil) {
        self.to = to
        self.text = text
        self.id = id
    }
}

/// `ack {id, remote_id?}`: the platform took the send with this id.
public struct AckFrame: Codable, Sendable, Equatable {
    public var id: String?
    /// The platform's id for the message, when it gives one.
    public var remoteID: String?

    enum CodingKeys: String, CodingKey {
        case id
        case remoteID = "remote_id"
    }

    public init(id: String?, remoteID: String? = nil) {
        self.id = id
        self.remoteID = remoteID
    }
}

/// `nack {id, retry_after?, reason?}`: not delivered this time; try again, not sooner than `retry_after` seconds.
public struct NackFrame: Codable, Sendable, Equatable {
    public var id: String?
    public var retryAfter: Double?
    public var reason: String?

    enum CodingKeys: String, CodingKey {
        case id, reason
        case retryAfter = "retry_after"
    }

    public init(id: String?, retryAfter: Double? = nil, reason: String? = nil) {
        self.id = id
        self.retryAfter = retryAfter
        self.reason = reason
    }
}

/// One frame of either direction, by its `type`.
public enum SidecarFrame: Sendable, Equatable {
    case hello(HelloFrame)
    case helloAck(HelloAckFrame)
    case status(StatusFrame)
    case message(MessageFrame)
    case error(ErrorFrame)
    case send(SendFrame)
    case shutdown
    case ack(AckFrame)
    case nack(NackFrame)
    /// A type this gateway does not know: ignored, never an error.
    case unknown(type: String)

    public var type: String {
        switch self {
        case .hello: "hello"
        case .helloAck: "hello_ack"
        case .status: "status"
        case .message: "message"
        case .error: "error"
        case .send: "send"
        case .shutdown: "shutdown"
        case .ack: "ack"
        case .nack: "nack"
        case .unknown(let type): type
        }
    }
}

/// Why a line is not a frame.
public struct SidecarFrameError: Error, Sendable, Equatable, CustomStringConvertible {
    public let description: String
}

extension SidecarFrame {
    private struct Envelope: Decodable { var type: String? }
    private struct TypeField: Encodable { var type: String }

    /// Decodes one line (without its newline). A line that is not a JSON object, or has no `type`, is an error; a
    /// known type whose fields have the wrong JSON types is too (as the original's decoder says).
    public static func decode(_ line: some Collection<UInt8>) throws(SidecarFrameError) -> SidecarFrame {
        let bytes = Array(line)
        guard bytes.first(where: { $0 != 0x20 && $0 != 0x09 }) == UInt8(ascii: "{") else {
            throw SidecarFrameError(description: "not a JSON object")
        }
        do {
            let envelope = try JSONCoding.decode(Envelope.self, from: bytes, what: "the frame")
            guard let type = envelope.type, !type.isEmpty else { throw SidecarFrameError(description: "the frame has no type") }
            switch type {
            case "hello": return .hello(try JSONCoding.decode(HelloFrame.self, from: bytes))
            case "hello_ack": return .helloAck(try JSONCoding.decode(HelloAckFrame.self, from: bytes))
            case "status": return .status(try JSONCoding.decode(StatusFrame.self, from: bytes))
            case "message": return .message(try JSONCoding.decode(MessageFrame.self, from: bytes))
            case "error": return .error(try JSONCoding.decode(ErrorFrame.self, from: bytes))
            case "send": return .send(try JSONCoding.decode(SendFrame.self, from: bytes))
            case "shutdown": return .shutdown
            case "ack": return .ack(try JSONCoding.decode(AckFrame.self, from: bytes))
            case "nack": return .nack(try JSONCoding.decode(NackFrame.self, from: bytes))
            default: return .unknown(type: type)
            }
        } catch let error as SidecarFrameError {
            throw error
        } catch let error as JSONFieldError {
            throw SidecarFrameError(description: error.message)
        } catch let error as DecodingError {
            throw SidecarFrameError(description: Self.explain(error))
        } catch {
            throw SidecarFrameError(description: "not valid JSON")
        }
    }

    private static func explain(_ error: DecodingError) -> String {
        switch error {
        case .typeMismatch(_, let context), .valueNotFound(_, let context), .keyNotFound(_, let context):
            let path = context.codingPath.map(\.stringValue).joined(separator: ".")
            return path.isEmpty ? "not valid JSON" : "field \(path) has the wrong type"
        case .dataCorrupted: return "not valid JSON"
        @unknown default: return "not valid JSON"
        }
    }

    /// The frame as one line, with its trailing `\n`.
    public func line() -> [UInt8] {
        var object: [String: JSONValue] = ["type": .string(type)]
        func merge(_ value: some Encodable) {
            // Every payload is a flat object of scalars and string lists; encode it and take its fields.
            if let data = try? JSONCoding.encoder.encode(value), case .object(let fields)? = try? JSONCoding.decode(JSONValue.self, from: data) {
                object.merge(fields) { current, _ in current }
            }
        }
        switch self {
        case .hello(let f): merge(f)
        case .helloAck(let f): merge(f)
        case .status(let f): merge(f)
        case .message(let f): merge(f)
        case .error(let f): merge(f)
        case .send(let f): merge(f)
        case .ack(let f): merge(f)
        case .nack(let f): merge(f)
        case .shutdown, .unknown: break
        }
        return JSONValue.object(object).serializedBytes() + [UInt8(ascii: "\n")]
    }
}
