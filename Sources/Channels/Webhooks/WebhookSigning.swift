import ChannelAPI
import Crypto
import Foundation

/// One configured signing secret, as both schemes use it.
///
/// - Standard Webhooks (https://www.standardwebhooks.com, "Signature scheme"): the key is the base64-decoded part
///   after `whsec_`. A secret without the prefix is used as its raw UTF-8 bytes, the way the original's `secret`
///   always was; note that Standard Webhooks libraries base64-decode whatever string they are given, so a receiver
///   using one with such a secret must pass the raw bytes (Python: `Webhook(secret.encode())`).
/// - Soulacy's own `X-Soulacy-Signature` (the original channel adapter, soulacy-personal `internal/channels/webhook/sign.go`):
///   the key is the secret string exactly as configured (trimmed), `whsec_` prefix included.
struct WebhookSecret: Sendable, Equatable {
    /// As configured (trimmed); a secret: never in a reason or a log line.
    let configured: String
    let standardKey: [UInt8]

    static let prefix = "whsec_"

    init(_ text: String, field: String) throws(ChannelConfigError) {
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !trimmed.isEmpty else { throw ChannelConfigError(field: field, problem: "must not be empty") }
        configured = trimmed
        if trimmed.hasPrefix(Self.prefix) {
            var encoded = String(trimmed.dropFirst(Self.prefix.count))
            while encoded.count % 4 != 0 { encoded += "=" }
            guard let key = Data(base64Encoded: encoded), !key.isEmpty else {
                throw ChannelConfigError(field: field, problem: "starts with whsec_ but the rest is not base64 (Standard Webhooks secrets are whsec_<base64 of 24 to 64 random bytes>)")
            }
            guard key.count >= 24 else {
                throw ChannelConfigError(field: field, problem: "holds \(key.count) bytes after whsec_; Standard Webhooks asks for at least 24 random bytes")
            }
            standardKey = Array(key)
        } else {
            standardKey = Array(trimmed.utf8)
        }
    }
}

/// The signature headers of one attempt, over the exact body bytes that are sent.
enum WebhookSignature {
    /// `webhook-signature`: `v1,<base64 HMAC-SHA256(key, "{id}.{timestamp}.{body}")>` per secret, space-separated
    /// (several during a key rotation; a receiver accepts the delivery when any of them verifies).
    static func standard(id: String, timestamp: Int64, body: [UInt8], secrets: [WebhookSecret]) -> String {
        let signed = Array("\(id).\(timestamp).".utf8) + body
        return secrets.map { "v1," + Data(HMACSHA256.authenticate(signed, key: $0.standardKey)).base64EncodedString() }
            .joined(separator: " ")
    }

    /// `X-Soulacy-Signature`: `sha256=<lowercase hex HMAC-SHA256(secret, "<timestamp>.<body>")>`, with the timestamp
    /// in `X-Soulacy-Timestamp`, as the original adapter sends it. One signature: the original's verifier checks one.
    static func soulacy(timestamp: Int64, body: [UInt8], secret: WebhookSecret) -> String {
        "sha256=" + Hex.encode(HMACSHA256.authenticate(Array("\(timestamp).".utf8) + body, key: Array(secret.configured.utf8)))
    }

    /// The headers for one attempt: the Standard Webhooks three (the id is sent even unsigned, as an idempotency
    /// key) and, with a secret, Soulacy's two, signed with the first secret.
    static func headers(id: String, timestamp: Int64, body: [UInt8], secrets: [WebhookSecret]) -> [(String, String)] {
        var headers = [("webhook-id", id), ("webhook-timestamp", String(timestamp))]
        guard let first = secrets.first else { return headers }
        headers.append(("webhook-signature", standard(id: id, timestamp: timestamp, body: body, secrets: secrets)))
        headers.append(("X-Soulacy-Timestamp", String(timestamp)))
        headers.append(("X-Soulacy-Signature", soulacy(timestamp: timestamp, body: body, secret: first)))
        return headers
    }
}
