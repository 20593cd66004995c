import ChannelAPI
import Crypto
import Foundation
import HTTPClient
import JSON

/// Wakes browsers through their push service (RFC 8030): each wake-up encrypted to the subscription (RFC 8291),
/// signed for with the gateway's VAPID key (RFC 8292), POSTed to the subscription's endpoint with `TTL`, `Urgency`
/// and `Content-Encoding: aes128gcm`. A browser's push token is its subscription, sealed (see `seal`).
public final class WebPushTransport: WakeTransport {
    public let name = "webpush"
    public let configuration: WebPushConfiguration
    public let keys: WebPushKeys
    public let authorization: VAPIDAuthorization
    private let client: HTTP2Client
    private let clock: any WallClock
    private let log: Log

    /// Without a TTL in the wake-up, a push service keeps it this long for a browser that is offline (as APNs' day).
    public static let defaultTTL = 24 * 3600

    public init(configuration: WebPushConfiguration, keys: WebPushKeys, clock: any WallClock = SystemWallClock(), log: Log = Log()) {
        self.configuration = configuration
        self.keys = keys
        self.clock = clock
        self.log = log
        authorization = VAPIDAuthorization(key: keys.signingKey, publicKey: keys.publicKeyBase64URL, contact: configuration.contact, clock: clock)
        client = HTTP2Client(configuration: HTTP2ClientConfiguration(caFile: configuration.caFile))
    }

    /// The VAPID public key browsers subscribe with (`applicationServerKey`), base64url of the uncompressed point.
    public var publicKey: String { keys.publicKeyBase64URL }

    /// The device id of a browser's subscription: the same endpoint is the same device (a browser that subscribes
    /// again updates its row), and the id gives the endpoint away to no one without the subscription key.
    public func deviceID(for subscription: WebPushSubscription) -> String {
        "web-" + Hex.encode(Array(HMACSHA256.authenticate(Array(("soulacy web push device id v1\n" + subscription.endpoint).utf8), key: keys.subscriptionKey).prefix(16)))
    }

    /// The push token to store for the browser: its subscription sealed under the subscription key, bound to `deviceID`.
    public func seal(_ subscription: WebPushSubscription, deviceID: String) throws -> String {
        try SealedSubscription.seal(subscription, deviceID: deviceID, key: keys.subscriptionKey)
    }

    public func canWake(_ target: WakeTarget) -> Bool {
        target.platform == .web && !target.pushToken.isEmpty
    }

    public func send(_ signal: WakeSignal, to target: WakeTarget) async -> WakeOutcome {
        switch signal.kind {
        case .alert: break
        // A browser must show every push it is sent (userVisibleOnly), and has no Live Activities.
        case .background: return .failed(reason: "a silent wake-up is never sent to a browser (each push must show a notification)")
        case .liveActivity: return .failed(reason: "Live Activities are never sent to browsers")
        }
        guard let subscription = SealedSubscription.open(target.pushToken, deviceID: target.deviceID, key: keys.subscriptionKey) else {
            // Sealed under another key (the key file was replaced) or for another device: the browser subscribes again.
            return .tokenRejected(reason: "Web Push: the stored subscription does not open with this gateway's subscription key")
        }
        let body: [UInt8]
        do {
            body = try WebPushEncryption.encrypt(try WireJSON.encode(WebPushMessage(signal)), to: subscription)
        } catch let error as WebPushEncryptionError {
            if error == .badSubscriptionKey { return .tokenRejected(reason: "Web Push: \(error.description)") }
            return .failed(reason: error.description)
        } catch {
            return .failed(reason: "the Web Push message could not be encoded")
        }
        let now = clock.now()
        let ttl = signal.expiresAt.map { max(0, Int($0.timeIntervalSince(now))) } ?? Self.defaultTTL
        var headers = [("ttl", String(ttl)), ("urgency", signal.priority == .high ? "high" : "normal"),
                       ("content-encoding", "aes128gcm"), ("content-type", "application/octet-stream")]
        if let collapseID = signal.collapseID { headers.append(("topic", Self.topic(collapseID))) }
        let audience = subscription.origin
        // A refused token is signed anew once (a clock that jumped); a second refusal is reported, not looped on.
        for attempt in 0..<2 {
            let vapid: String
            do { vapid = try await authorization.header(audience: audience) } catch { return .failed(reason: "cannot sign the VAPID token: \(error)") }
            let response: ClientResponse
            do {
                response = try await client.send(ClientRequest(method: "POST", url: subscription.endpoint, headers: headers + [("authorization", vapid)], body: body))
            } catch {
                return .retry(after: nil, reason: "Web Push service unreachable: \(error.description)")
            }
            let label = Self.label(status: response.status, body: response.body, endpoint: subscription.endpoint)
            switch response.status {
            case 200...299:
                return .delivered
            case 404, 410:
                return .tokenRejected(reason: label)
            case 401, 403:
                await authorization.rejected(audience: audience, header: vapid)
                if attempt == 0 { continue }
                log.warning("push: the Web Push service at \(audience) refused the VAPID token of device \(target.deviceID): \(label)")
                return .failed(reason: label)
            case 429, 500...599:
                return .retry(after: RetryAfter.parse(response.headers["retry-after"], now: now), reason: label)
            default:
                // 413 and the other refusals: the message is wrong, not the moment.
                return .failed(reason: label)
            }
        }
        return .failed(reason: "Web Push refused the VAPID token")
    }

    /// RFC 8030 §5.4: a topic is at most 32 characters of the base64url alphabet; a collapse id of any shape maps
    /// to one (the same id, the same topic).
    static func topic(_ collapseID: String) -> String {
        String(Base64URL.encode(SHA256.hash(collapseID)).prefix(32))
    }

    /// `Web Push 413 <the service's reason>`: Apple's `{"reason"}`, Mozilla's `{"message"|"error"}`, else the body's
    /// first line; printable ASCII only, short, and never the endpoint (it is the subscription's capability).
    static func label(status: Int, body: [UInt8], endpoint: String) -> String {
        struct ErrorBody: Decodable { let reason: String?; let message: String?; let error: String? }
        var reason = ""
        if let parsed = try? JSONCoding.decode(ErrorBody.self, from: Data(body)) {
            reason = parsed.reason ?? parsed.message ?? parsed.error ?? ""
        } else if body.count <= 4096 {
            reason = String(decoding: body, as: UTF8.self).split(whereSeparator: \.isNewline).first.map(String.init) ?? ""
        }
        reason = reason.replacingOccurrences(of: endpoint, with: "(endpoint)")
        if let path = URLComponents(string: endpoint)?.path, path.count > 1 { reason = reason.replacingOccurrences(of: path, with: "(endpoint)") }
        reason = String(reason.unicodeScalars.filter { $0.isASCII && $0.value >= 0x20 && $0.value < 0x7F }.map(Character.init)).trimmingCharacters(in: .whitespaces)
        if reason.count > 200 { reason = String(reason.prefix(200)) + "…" }
        return reason.isEmpty ? "Web Push \(status)" : "Web Push \(status) \(reason)"
    }
}
