import ChannelAPI
import Crypto
import Foundation
import HTTPClient
import JSON

/// Wakes Android devices through the FCM HTTP v1 API: data-only, high priority, no notification block,
/// a data map of strings only. The app renders the generic text and fetches the content from the gateway.
public final class FCMTransport: WakeTransport, ReportsCredentialTimes {
    public let name = "fcm"
    public let configuration: FCMConfiguration
    public let accessTokens: FCMAccessTokenCache

    /// When the OAuth2 access token in use expires: a gateway that cannot renew it stops waking Android phones then.
    public var credentialTimes: [CredentialTime] {
        accessTokens.currentExpiry.map { [CredentialTime(credential: "fcm_access_token", event: .expires, at: $0)] } ?? []
    }
    private let client: HTTP2Client
    private let log: Log

    public init(configuration: FCMConfiguration, clock: any WallClock = SystemWallClock(), log: Log = Log()) throws(FCMConfigurationError) {
        let key: SigningKey
        do { key = try SigningKey(pem: configuration.privateKeyPEM, algorithm: .rs256) } catch {
            throw .unusableKey(configuration.credentialsFile, error.description)
        }
        self.configuration = configuration
        self.log = log
        client = HTTP2Client(configuration: HTTP2ClientConfiguration(caFile: configuration.caFile))
        accessTokens = FCMAccessTokenCache(configuration: configuration, key: key, client: client, clock: clock)
    }

    public func canWake(_ target: WakeTarget) -> Bool {
        target.platform == .android && !target.pushToken.isEmpty
    }

    /// The message body FCM receives for a wake-up: data only (the app shows its own generic notification).
    public static func message(_ signal: WakeSignal, token: String) -> FCMMessage {
        var data: [String: String] = [
            "category": signal.category.rawValue, "title": signal.title, "body": signal.body, "deep_link": signal.deepLink,
            "thread_id": signal.threadID, "time_sensitive": signal.timeSensitive ? "true" : "false",
        ]
        if let id = signal.deliveryID { data["delivery_id"] = id }
        for (key, value) in signal.extra where data[key] == nil { data[key] = value }
        let ttl = signal.expiresAt.map { "\(max(0, Int($0.timeIntervalSinceNow)))s" }
        return FCMMessage(message: .init(token: token, data: data, android: .init(priority: "high", collapseKey: signal.collapseID, ttl: ttl)))
    }


    public func send(_ signal: WakeSignal, to target: WakeTarget) async -> WakeOutcome {
        await attempt(signal, to: target).outcome
    }

    /// One send with Google's answer: its status, its error code, the message `name` it gave, and the time it took.
    public func attempt(_ signal: WakeSignal, to target: WakeTarget) async -> WakeAttempt {
        let started = ContinuousClock.now
        func answer(_ outcome: WakeOutcome, _ response: ClientResponse? = nil, code: String? = nil) -> WakeAttempt {
            let name = response.flatMap { $0.status == 200 ? Self.messageName(in: $0.body) : nil }
            return WakeAttempt(outcome: outcome, status: response?.status, reason: code ?? (response == nil ? outcome.reason : nil),
                               serviceID: name, latency: ContinuousClock.now - started)
        }
        guard signal.kind != .liveActivity else { return answer(.failed(reason: "Live Activities are never sent to Android")) }
        guard let body = try? WireJSON.encode(Self.message(signal, token: target.pushToken)) else {
            return answer(.failed(reason: "the FCM message could not be encoded"))
        }
        let url = "\(configuration.baseURL)/v1/projects/\(configuration.projectID)/messages:send"
        for attempt in 0..<2 {
            let accessToken: String
            do { accessToken = try await accessTokens.token() } catch {
                return answer(.retry(after: nil, reason: "FCM OAuth2: \(error.description)"))
            }
            let response: ClientResponse
            do {
                response = try await client.send(ClientRequest(method: "POST", url: url, headers: [
                    ("authorization", "Bearer \(accessToken)"), ("content-type", "application/json; charset=utf-8"),
                ], body: body))
            } catch {
                return answer(.retry(after: nil, reason: "FCM unreachable: \(error.description)"))
            }
            let error = FCMError(status: response.status, body: response.body)
            switch response.status {
            case 200:
                return answer(.delivered, response)
            case 401:
                // A token FCM no longer accepts: mint a new one, once.
                await accessTokens.invalidate(accessToken)
                if attempt == 0 { continue }
                return answer(.retry(after: nil, reason: "FCM 401 \(error.code) after a fresh access token"), response, code: error.code)
            case 404:
                return answer(.tokenRejected(reason: "FCM 404 \(error.code)"), response, code: error.code)
            case 429, 500, 502, 503, 504:
                return answer(.retry(after: RetryAfter.parse(response.headers["retry-after"]), reason: "FCM \(response.status) \(error.code)"), response, code: error.code)
            default:
                if error.code == "UNREGISTERED" || error.code == "SENDER_ID_MISMATCH" {
                    return answer(.tokenRejected(reason: "FCM \(response.status) \(error.code)"), response, code: error.code)
                }
                // The message is wrong, not the moment: do not retry. The token stays out of the log.
                log.warning("push: FCM refused a message for device \(target.deviceID): \(response.status) \(error.code): \(error.message)")
                return answer(.failed(reason: "FCM \(response.status) \(error.code)"), response, code: error.code)
            }
        }
        return answer(.retry(after: nil, reason: "FCM refused the access token"))
    }

    /// The `name` of the message FCM accepted (`projects/<project>/messages/<id>`), as its answer to a send carries it.
    static func messageName(in body: [UInt8]) -> String? {
        struct Accepted: Decodable { let name: String? }
        guard let name = (try? JSONCoding.decode(Accepted.self, from: Data(body)))?.name, !name.isEmpty else { return nil }
        return String(name.prefix(256))
    }

}

/// FCM's error body: `{"error": {"code", "message", "status", "details": [{"errorCode"}]}}`.
struct FCMError {
    let code: String
    let message: String

    /// The body as Google documents it; every field may be missing.
    struct Body: Decodable {
        struct Detail: Decodable { let errorCode: String? }
        struct Inner: Decodable { let message: String?; let status: String?; let details: [Detail]? }
        let error: Inner?
    }

    init(status: Int, body: [UInt8]) {
        let error = (try? JSONCoding.decode(Body.self, from: Data(body)))?.error
        let fcmCode = error?.details?.compactMap(\.errorCode).first
        code = fcmCode ?? error?.status ?? "HTTP \(status)"
        // Google's messages can quote the token; keep only the first sentence and drop anything token-shaped.
        let text = error?.message ?? ""
        message = String(text.prefix { $0 != ":" }.prefix(200))
    }
}

/// FCM HTTP v1's `messages:send` body, as Google documents it (only the fields a wake-up uses).
public struct FCMMessage: Encodable, Sendable, Equatable {
    public struct Android: Encodable, Sendable, Equatable {
        public var priority: String
        public var collapseKey: String?
        /// A duration in seconds with an `s` suffix ("3600s").
        public var ttl: String?
        enum CodingKeys: String, CodingKey { case priority, ttl, collapseKey = "collapse_key" }
    }
    public struct Message: Encodable, Sendable, Equatable {
        public var token: String
        public var data: [String: String]
        public var android: Android
    }
    public var message: Message
}
