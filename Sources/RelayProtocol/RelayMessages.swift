import Foundation
import JSON

/// A call the phone sends up through the relay: applied by the gateway once, as the phone, with `id` as its
/// Idempotency-Key.
public struct RelayCommand: Codable, Sendable, Equatable {
    public var id: String
    public var method: String
    /// The path with its query (`/api/v1/mobile/deliveries?limit=5`).
    public var path: String
    public var body: JSONValue?

    public init(id: String, method: String, path: String, body: JSONValue?) {
        self.id = id
        self.method = method
        self.path = path
        self.body = body
    }
}

/// The gateway's answer to a command, sent down: the whole response, or why it was not applied.
public struct RelayResult: Codable, Sendable, Equatable {
    public var id: String
    public var status: Int
    public var contentType: String?
    /// The response body, base64.
    public var bodyB64: String?
    /// `not_openable` (the gateway could not open or place the command), `result_too_large`.
    public var error: String?

    public init(id: String, status: Int, contentType: String? = nil, bodyB64: String? = nil, error: String? = nil) {
        self.id = id
        self.status = status
        self.contentType = contentType
        self.bodyB64 = bodyB64
        self.error = error
    }

    enum CodingKeys: String, CodingKey {
        case id, status, error
        case contentType = "content_type", bodyB64 = "body_b64"
    }
}

/// An inbox line sent down. `after` is the sequence of the record before it, so a phone that sees a gap knows it.
public struct RelayLine: Codable, Sendable, Equatable {
    public var after: Int64
    public var seq: Int64
    public var kind: String
    public var id: String
    /// The line as the inbox shows it; absent when it was too large to carry (read it over a direct path).
    public var record: JSONValue?
    public var tooLarge: Bool?

    public init(after: Int64, seq: Int64, kind: String = "delivery", id: String, record: JSONValue?, tooLarge: Bool? = nil) {
        self.after = after
        self.seq = seq
        self.kind = kind
        self.id = id
        self.record = record
        self.tooLarge = tooLarge
    }

    enum CodingKeys: String, CodingKey {
        case after, seq, kind, id, record
        case tooLarge = "too_large"
    }
}

/// The sealed payload of a wake-up through the relay: which line woke the phone.
public struct RelayNudge: Codable, Sendable, Equatable {
    public var id: String
    public var seq: Int64
    public var title: String

    public init(id: String, seq: Int64, title: String) {
        self.id = id
        self.seq = seq
        self.title = title
    }
}

/// A page of a phone's mailbox items, as the relay answers `GET …/items` and the phone reads it: each item is
/// sealed (`ciphertext`), or a marker that it was too large to hold (`too_large`).
public struct MailboxItemPage: Codable, Sendable, Equatable {
    public struct Item: Codable, Sendable, Equatable {
        public var n: Int64
        public var ciphertext: String?
        public var tooLarge: Bool?

        public init(n: Int64, ciphertext: String? = nil, tooLarge: Bool? = nil) {
            self.n = n
            self.ciphertext = ciphertext
            self.tooLarge = tooLarge
        }

        enum CodingKeys: String, CodingKey {
            case n, ciphertext
            case tooLarge = "too_large"
        }
    }

    public var items: [Item]
    /// Whether the gateway polled the mailbox lately.
    public var inboxOnline: Bool?

    public init(items: [Item], inboxOnline: Bool?) {
        self.items = items
        self.inboxOnline = inboxOnline
    }

    enum CodingKeys: String, CodingKey {
        case items
        case inboxOnline = "inbox_online"
    }
}
