import ChannelAPI
import Foundation
import HTTPClient

public struct RelayConfiguration: Sendable {
    public var baseURL: String
    /// Bearer token for the relay; never logged.
    public var token: String
    public var caFile: String?

    public init(baseURL: String, token: String, caFile: String? = nil) {
        self.baseURL = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
        self.token = token
        self.caFile = caFile
    }

    /// nil when no relay is configured; an error when only half of it is.
    public static func fromEnvironment(_ env: [String: String]) throws(RelayConfigurationError) -> RelayConfiguration? {
        let url = env["SOULACY_MOBILE_PUSH_RELAY_URL"]
        let token = env["SOULACY_MOBILE_PUSH_RELAY_TOKEN"]
        if url == nil && token == nil { return nil }
        guard let url, !url.isEmpty else { throw .missing("SOULACY_MOBILE_PUSH_RELAY_URL") }
        guard let token, !token.isEmpty else { throw .missing("SOULACY_MOBILE_PUSH_RELAY_TOKEN") }
        guard let parsed = URL(string: url), parsed.scheme == "https" || parsed.scheme == "http", parsed.host != nil else {
            throw .invalidURL(url)
        }
        return RelayConfiguration(baseURL: url, token: token, caFile: env["SOULACY_MOBILE_PUSH_RELAY_CA_FILE"])
    }
}

public enum RelayConfigurationError: Error, Sendable, Equatable, CustomStringConvertible {
    case missing(String)
    case invalidURL(String)

    public var description: String {
        switch self {
        case .missing(let variable): return "the push relay is partly configured: \(variable) is not set (set both SOULACY_MOBILE_PUSH_RELAY_URL and _TOKEN, or neither)"
        case .invalidURL(let url): return "SOULACY_MOBILE_PUSH_RELAY_URL: '\(url)' is not an http(s) URL"
        }
    }
}

/// Wakes iOS devices through a trusted relay that holds the APNs credentials: POST <relay>/v1/push for alerts,
/// POST <relay>/v1/live for Live Activities (the exact APNs body as `payload`). Text is generic, as with APNs.
public final class RelayTransport: WakeTransport {
    public let name = "relay"
    public let configuration: RelayConfiguration
    private let client: HTTP2Client

    public init(configuration: RelayConfiguration) {
        self.configuration = configuration
        client = HTTP2Client(configuration: HTTP2ClientConfiguration(caFile: configuration.caFile))
    }

    public func canWake(_ target: WakeTarget) -> Bool {
        target.platform == .ios && !target.pushToken.isEmpty
    }

    /// The body of POST /v1/push.
    public static func pushBody(_ signal: WakeSignal, target: WakeTarget) -> [String: Any] {
        var body: [String: Any] = [
            "device_token": target.pushToken, "environment": target.environment.rawValue, "bundle_id": target.bundleID,
            "title": signal.title, "body": signal.body, "deep_link": signal.deepLink, "category": signal.category.rawValue,
            "thread_id": signal.threadID, "time_sensitive": signal.timeSensitive, "push_type": signal.kind == .background ? "background" : "alert",
            "priority": signal.priority.rawValue,
        ]
        if let id = signal.deliveryID { body["delivery_id"] = id }
        if let collapse = signal.collapseID { body["collapse_id"] = collapse }
        if let wake = signal.wakeID { body["push_id"] = wake.uuidString.lowercased() }
        let extra = signal.extra.filter { $0.key != "apns_payload" }
        if !extra.isEmpty { body["data"] = extra }
        return body
    }

    /// The body of POST /v1/live: {token, environment, bundle_id, event, priority, payload}.
    public static func liveBody(_ signal: WakeSignal, target: WakeTarget) -> [String: Any] {
        let payload = signal.extra["apns_payload"].flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) } ?? [:]
        return ["token": target.pushToken, "environment": target.environment.rawValue, "bundle_id": target.bundleID,
                "event": signal.extra["live_event"] ?? "update", "priority": signal.priority.rawValue, "payload": payload]
    }

    public func send(_ signal: WakeSignal, to target: WakeTarget) async -> WakeOutcome {
        let live = signal.kind == .liveActivity
        let object = live ? Self.liveBody(signal, target: target) : Self.pushBody(signal, target: target)
        guard let body = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]) else {
            return .failed(reason: "the relay request could not be encoded")
        }
        let response: ClientResponse
        do {
            response = try await client.send(ClientRequest(method: "POST", url: configuration.baseURL + (live ? "/v1/live" : "/v1/push"), headers: [
                ("authorization", "Bearer \(configuration.token)"), ("content-type", "application/json"),
            ], body: Array(body)))
        } catch {
            return .retry(after: nil, reason: "relay unreachable: \(error.description)")
        }
        let reason = (try? JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any])?["reason"] as? String
        let label = "relay \(response.status)" + (reason.map { " \($0)" } ?? "")
        switch response.status {
        case 200, 201, 202:
            return .delivered
        case 410:
            return .tokenRejected(reason: label)
        case 400 where reason == "BadDeviceToken" || reason == "Unregistered" || reason == "DeviceTokenNotForTopic":
            return .tokenRejected(reason: label)
        case 429, 500, 502, 503, 504:
            return .retry(after: RetryAfter.parse(response.headers["retry-after"]), reason: label)
        default:
            // 401/403: our relay token is wrong; 400: the request is. Neither gets better by retrying.
            return .failed(reason: label)
        }
    }

}
