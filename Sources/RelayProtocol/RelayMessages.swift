import Crypto
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
    /// `IdempotencyCredential.secret(bearer:)` of the phone's API key, base64url: the gateway seals this call's
    /// answer under it, as it does for the same key sent over Wi-Fi or the tailnet, so a retry on any path opens
    /// it. Derived, so the key itself never travels through the relay, even sealed.
    public var credential: String?

    public init(id: String, method: String, path: String, body: JSONValue?, credential: String? = nil) {
        self.id = id
        self.method = method
        self.path = path
        self.body = body
        self.credential = credential
    }
}

/// The secret a caller's idempotent answers are sealed under, derived from its API key: every path of one caller
/// has it (the bearer on Wi-Fi and the tailnet, `RelayCommand.credential` through the relay), and the gateway
/// stores neither it nor the key, so the database alone opens no answer.
public enum IdempotencyCredential {
    public static func secret(bearer: String) -> [UInt8] {
        (try? HKDF.deriveKey(secret: Array(bearer.utf8), salt: Array("soulacy idempotency credential v1".utf8), info: "")) ?? []
    }

    public static func encoded(bearer: String) -> String { Base64URL.encode(secret(bearer: bearer)) }
}

/// The gateway's answer to a command, sent down: the whole response, or why it was not applied.
public struct RelayResult: Codable, Sendable, Equatable {
    public var id: String
    public var status: Int
    public var contentType: String?
    /// The response body, base64.
    public var bodyB64: String?
    /// `not_openable` (the gateway could not open or place the command), `result_too_large`, `invalid_json`.
    public var error: String?
    /// The answer came from the idempotency log (`Idempotent-Replayed: true` on a direct path).
    public var replayed: Bool?

    public init(id: String, status: Int, contentType: String? = nil, bodyB64: String? = nil, error: String? = nil, replayed: Bool? = nil) {
        self.id = id
        self.status = status
        self.contentType = contentType
        self.bodyB64 = bodyB64
        self.error = error
        self.replayed = replayed
    }

    enum CodingKeys: String, CodingKey {
        case id, status, error, replayed
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
