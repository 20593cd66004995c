import ChannelAPI
import Crypto
import Foundation
import HTTPClient

/// Wakes Android devices through the FCM HTTP v1 API: data-only, high priority, no notification block,
/// a data map of strings only. The app renders the generic text and fetches the content from the gateway.
public final class FCMTransport: WakeTransport {
    public let name = "fcm"
    public let configuration: FCMConfiguration
    public let accessTokens: FCMAccessTokenCache
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

    /// The message body FCM receives for a wake-up.
    public static func message(_ signal: WakeSignal, token: String) -> [String: Any] {
        var data: [String: String] = [
            "category": signal.category.rawValue, "title": signal.title, "body": signal.body, "deep_link": signal.deepLink,
            "thread_id": signal.threadID, "time_sensitive": signal.timeSensitive ? "true" : "false",
        ]
        if let id = signal.deliveryID { data["delivery_id"] = id }
        for (key, value) in signal.extra where data[key] == nil && key != "apns_payload" { data[key] = value }
        var android: [String: Any] = ["priority": "high"]
        if let collapse = signal.collapseID { android["collapse_key"] = collapse }
        if let expires = signal.expiresAt { android["ttl"] = "\(max(0, Int(expires.timeIntervalSinceNow)))s" }
        return ["message": ["token": token, "data": data, "android": android]]
    }

    public func send(_ signal: WakeSignal, to target: WakeTarget) async -> WakeOutcome {
        guard signal.kind != .liveActivity else { return .failed(reason: "Live Activities are never sent to Android") }
        guard let body = try? JSONSerialization.data(withJSONObject: Self.message(signal, token: target.pushToken), options: [.sortedKeys]) else {
            return .failed(reason: "the FCM message could not be encoded")
        }
        let url = "\(configuration.baseURL)/v1/projects/\(configuration.projectID)/messages:send"
        for attempt in 0..<2 {
            let accessToken: String
            do { accessToken = try await accessTokens.token() } catch {
                return .retry(after: nil, reason: "FCM OAuth2: \(error.description)")
            }
            let response: ClientResponse
            do {
                response = try await client.send(ClientRequest(method: "POST", url: url, headers: [
                    ("authorization", "Bearer \(accessToken)"), ("content-type", "application/json; charset=utf-8"),
                ], body: Array(body)))
            } catch {
                return .retry(after: nil, reason: "FCM unreachable: \(error.description)")
            }
            let error = FCMError(status: response.status, body: response.body)
            switch response.status {
            case 200:
                return .delivered
            case 401:
                // A token FCM no longer accepts: mint a new one, once.
                await accessTokens.invalidate(accessToken)
                if attempt == 0 { continue }
                return .retry(after: nil, reason: "FCM 401 \(error.code) after a fresh access token")
            case 404:
                return .tokenRejected(reason: "FCM 404 \(error.code)")
            case 429, 500, 502, 503, 504:
                return .retry(after: RetryAfter.parse(response.headers["retry-after"]), reason: "FCM \(response.status) \(error.code)")
            default:
                if error.code == "UNREGISTERED" || error.code == "SENDER_ID_MISMATCH" {
                    return .tokenRejected(reason: "FCM \(response.status) \(error.code)")
                }
                // The message is wrong, not the moment: do not retry. The token stays out of the log.
                log.warning("push: FCM refused a message for device \(target.deviceID): \(response.status) \(error.code): \(error.message)")
                return .failed(reason: "FCM \(response.status) \(error.code)")
            }
        }
        return .retry(after: nil, reason: "FCM refused the access token")
    }

}

/// FCM's error body: `{"error": {"code", "message", "status", "details": [{"errorCode"}]}}`.
struct FCMError {
    let code: String
    let message: String

    init(status: Int, body: [UInt8]) {
        let object = (try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any])?["error"] as? [String: Any]
        let details = (object?["details"] as? [[String: Any]]) ?? []
        let fcmCode = details.compactMap { $0["errorCode"] as? String }.first
        code = fcmCode ?? (object?["status"] as? String) ?? "HTTP \(status)"
        // Google's messages can quote the token; keep only the first sentence and drop anything token-shaped.
        let text = (object?["message"] as? String) ?? ""
        message = String(text.prefix { $0 != ":" }.prefix(200))
    }
}
