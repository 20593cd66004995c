import Crypto
import Foundation
import JSON

/// A browser's push subscription (`PushSubscription.toJSON()`): the push resource to POST to (RFC 8030), and the
/// keys RFC 8291 encrypts each message to. Only a subscription that passed every rule exists.
public struct WebPushSubscription: Sendable, Equatable {
    public static let maximumEndpointLength = 2048

    public let endpoint: String
    /// The browser's ECDH public key: an uncompressed P-256 point (65 bytes).
    public let p256dh: [UInt8]
    /// The browser's 16-byte authentication secret.
    public let auth: [UInt8]

    /// Checks each part; a refusal names the field as the browser's JSON has it (`endpoint`, `keys.p256dh`,
    /// `keys.auth`).
    public init(endpoint: String, p256dh: String, auth: String) throws(JSONFieldError) {
        self.endpoint = try Self.checkedEndpoint(endpoint)
        guard let key = Self.base64URL(p256dh), key.count == 65, key[0] == 0x04 else {
            throw .invalid("keys.p256dh", "must be the browser's P-256 public key: 65 bytes (an uncompressed point, 0x04 ‖ X ‖ Y) in base64url, got \(Self.describe(p256dh))")
        }
        guard P256PublicKey.isValid(key) else { throw .invalid("keys.p256dh", "is not a point on the P-256 curve") }
        guard let secret = Self.base64URL(auth), secret.count == 16 else {
            throw .invalid("keys.auth", "must be the browser's 16-byte authentication secret in base64url, got \(Self.describe(auth))")
        }
        self.p256dh = key
        self.auth = secret
    }

    /// From the body `{"endpoint", "keys": {"p256dh", "auth"}, "expirationTime"?}`.
    public init(json body: JSONObject) throws(JSONFieldError) {
        let endpoint = try body.string("endpoint", maxLength: Self.maximumEndpointLength)
        guard let value = body.fields["keys"], value != .null else { throw .missing("keys") }
        guard case .object(let fields) = value else { throw .wrongType("keys", expected: "an object with p256dh and auth", got: value) }
        let keys = JSONObject(fields, path: "keys")
        try self.init(endpoint: endpoint, p256dh: try keys.string("p256dh", maxLength: 200), auth: try keys.string("auth", maxLength: 200))
    }

    /// `scheme://host[:port]` of the endpoint: the VAPID token's `aud`.
    public var origin: String { Self.origin(of: endpoint) ?? endpoint }

    /// An https: URL with a host (http: only to this machine, for local tests), no credentials, no fragment.
    static func checkedEndpoint(_ text: String) throws(JSONFieldError) -> String {
        guard !text.isEmpty else { throw .invalid("endpoint", "must not be empty") }
        guard text.utf8.count <= maximumEndpointLength else { throw .invalid("endpoint", "must be at most \(maximumEndpointLength) bytes") }
        guard !text.unicodeScalars.contains(where: { $0.properties.isWhitespace || $0.properties.generalCategory == .control || !$0.isASCII }) else {
            throw .invalid("endpoint", "must be a URL without spaces or control characters")
        }
        guard let parts = URLComponents(string: text), let scheme = parts.scheme?.lowercased(), let host = parts.host, !host.isEmpty else {
            throw .invalid("endpoint", "must be the push service's https:// URL the browser gave")
        }
        guard parts.user == nil, parts.password == nil, parts.fragment == nil else {
            throw .invalid("endpoint", "must not carry credentials or a fragment")
        }
        switch scheme {
        case "https": break
        case "http" where isLoopback(host): break
        case "http": throw .invalid("endpoint", "must be https:// (plain http is allowed only to this machine, for tests)")
        default: throw .invalid("endpoint", "must be an https:// URL, got a \(scheme): URL")
        }
        return text
    }

    static func isLoopback(_ host: String) -> Bool {
        let name = host.lowercased().trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        return name == "localhost" || name == "::1" || name.hasPrefix("127.")
    }

    static func origin(of endpoint: String) -> String? {
        guard let parts = URLComponents(string: endpoint), let scheme = parts.scheme?.lowercased(), var host = parts.host?.lowercased() else { return nil }
        if host.contains(":") && !host.hasPrefix("[") { host = "[\(host)]" }
        let defaultPort = scheme == "https" ? 443 : 80
        if let port = parts.port, port != defaultPort { return "\(scheme)://\(host):\(port)" }
        return "\(scheme)://\(host)"
    }

    /// Strict base64url (RFC 4648 §5): its alphabet only, padding optional; nil for anything else.
    static func base64URL(_ text: String) -> [UInt8]? {
        let unpadded = text.hasSuffix("==") ? text.dropLast(2) : (text.hasSuffix("=") ? text.dropLast() : Substring(text))
        guard !unpadded.isEmpty, unpadded.utf8.allSatisfy(base64URLAlphabet.contains) else { return nil }
        return Base64URL.decode(String(unpadded))
    }

    private static let base64URLAlphabet = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    private static func describe(_ text: String) -> String {
        guard let bytes = base64URL(text) else { return text.isEmpty ? "an empty string" : "text that is not base64url" }
        return "\(bytes.count) bytes"
    }
}

/// How a subscription is kept: sealed (AES-256-GCM under the key file beside the database, bound to its device id),
/// as a device's push token. Neither the endpoint nor the auth secret is readable from the database alone.
enum SealedSubscription {
    static let prefix = "wp1."
    static func header(deviceID: String) -> String { "soulacy web push subscription v1 " + deviceID }

    /// What is sealed: the three parts, base64url, in a fixed JSON shape.
    struct Stored: Codable {
        let e: String
        let p: String
        let a: String
    }

    static func seal(_ subscription: WebPushSubscription, deviceID: String, key: [UInt8]) throws -> String {
        let stored = Stored(e: subscription.endpoint, p: Base64URL.encode(subscription.p256dh), a: Base64URL.encode(subscription.auth))
        return prefix + (try SealedBox.seal(Array(try JSONEncoder().encode(stored)), key: key, header: header(deviceID: deviceID)))
    }

    /// nil when the token was not sealed by this key for this device (another gateway's, a key file replaced).
    static func open(_ token: String, deviceID: String, key: [UInt8]) -> WebPushSubscription? {
        guard token.hasPrefix(prefix), let bytes = try? SealedBox.open(String(token.dropFirst(prefix.count)), key: key, header: header(deviceID: deviceID)),
              let stored = try? JSONDecoder().decode(Stored.self, from: Data(bytes)) else { return nil }
        return try? WebPushSubscription(endpoint: stored.e, p256dh: stored.p, auth: stored.a)
    }
}
