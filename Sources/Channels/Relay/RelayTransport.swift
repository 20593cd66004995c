import ChannelAPI
import Foundation
import HTTPClient
import JSON

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
    public static func pushBody(_ signal: WakeSignal, target: WakeTarget) -> RelayPushRequest {
        RelayPushRequest(deviceToken: target.pushToken, environment: target.environment.rawValue, bundleID: target.bundleID, title: signal.title,
                         body: signal.body, deepLink: signal.deepLink, category: signal.category.rawValue, threadID: signal.threadID,
                         timeSensitive: signal.timeSensitive, pushType: signal.kind == .background ? "background" : "alert",
                         priority: signal.priority.rawValue, deliveryID: signal.deliveryID, collapseID: signal.collapseID,
                         pushID: signal.wakeID.map { $0.uuidString.lowercased() }, data: signal.extra.isEmpty ? nil : signal.extra)
    }

    /// The body of POST /v1/live: {token, environment, bundle_id, event, priority, payload}, the payload being the
    /// exact APNs body the channel wrote.
    public static func liveBody(_ signal: WakeSignal, target: WakeTarget) -> RelayLiveRequest {
        let payload = signal.liveActivity.flatMap { try? JSONCoding.decode(JSONValue.self, from: Data($0.apnsBody)) } ?? .object([:])
        return RelayLiveRequest(token: target.pushToken, environment: target.environment.rawValue, bundleID: target.bundleID,
                                event: signal.liveActivity?.event.rawValue ?? "update", priority: signal.priority.rawValue, payload: payload)
    }


    public func send(_ signal: WakeSignal, to target: WakeTarget) async -> WakeOutcome {
        await attempt(signal, to: target).outcome
    }

    /// One send with the relay's answer: its status, its `reason`, the id it gave the push (an `apns-id` header, or
    /// `apns_id`/`id` in its body) and the time it took.
    public func attempt(_ signal: WakeSignal, to target: WakeTarget) async -> WakeAttempt {
        let started = ContinuousClock.now
        let live = signal.kind == .liveActivity
        let encoded = live ? try? WireJSON.encode(Self.liveBody(signal, target: target)) : try? WireJSON.encode(Self.pushBody(signal, target: target))
        guard let body = encoded else {
            return WakeAttempt(outcome: .failed(reason: "the relay request could not be encoded"), reason: "the relay request could not be encoded",
                               latency: ContinuousClock.now - started)
        }
        let response: ClientResponse
        do {
            response = try await client.send(ClientRequest(method: "POST", url: configuration.baseURL + (live ? "/v1/live" : "/v1/push"), headers: [
                ("authorization", "Bearer \(configuration.token)"), ("content-type", "application/json"),
            ], body: body))
        } catch {
            let outcome = WakeOutcome.retry(after: nil, reason: "relay unreachable: \(error.description)")
            return WakeAttempt(outcome: outcome, reason: outcome.reason, latency: ContinuousClock.now - started)
        }
        let answer = try? JSONCoding.decode(RelayAnswer.self, from: Data(response.body))
        let reason = answer?.reason
        let label = "relay \(response.status)" + (reason.map { " \($0)" } ?? "")
        let outcome: WakeOutcome
        switch response.status {
        case 200, 201, 202:
            outcome = .delivered
        case 410:
            outcome = .tokenRejected(reason: label)
        case 400 where reason == "BadDeviceToken" || reason == "Unregistered" || reason == "DeviceTokenNotForTopic":
            outcome = .tokenRejected(reason: label)
        case 429, 500, 502, 503, 504:
            outcome = .retry(after: RetryAfter.parse(response.headers["retry-after"]), reason: label)
        default:
            // 401/403: our relay token is wrong; 400: the request is. Neither gets better by retrying.
            outcome = .failed(reason: label)
        }
        let serviceID = (response.headers["apns-id"] ?? answer?.apnsID ?? answer?.id).map { String($0.prefix(256)) }
        return WakeAttempt(outcome: outcome, status: response.status, reason: reason.map { String($0.prefix(256)) }, serviceID: serviceID,
                           latency: ContinuousClock.now - started)
    }

    /// What a relay may say back: a refusal's `reason`, and the id it gave the push when it names one.
    struct RelayAnswer: Decodable {
        let reason: String?
        let apnsID: String?
        let id: String?
        enum CodingKeys: String, CodingKey { case reason, id, apnsID = "apns_id" }

        init(from decoder: any Decoder) throws {
            // Any field of another type is as good as absent: a relay's answer is read, never trusted for shape.
            let container = try decoder.container(keyedBy: CodingKeys.self)
            reason = try? container.decodeIfPresent(String.self, forKey: .reason)
            apnsID = try? container.decodeIfPresent(String.self, forKey: .apnsID)
            id = try? container.decodeIfPresent(String.self, forKey: .id)
        }
    }

}

/// The relay's `POST /v1/push` body.
public struct RelayPushRequest: Encodable, Sendable, Equatable {
    public var deviceToken: String
    public var environment: String
    public var bundleID: String
    public var title: String
    public var body: String
    public var deepLink: String
    public var category: String
    public var threadID: String
    public var timeSensitive: Bool
    public var pushType: String
    public var priority: Int
    public var deliveryID: String?
    public var collapseID: String?
    public var pushID: String?
    /// Feature keys that ride along (call_id, agent_id …), strings only.
    public var data: [String: String]?

    enum CodingKeys: String, CodingKey {
        case environment, title, body, category, priority, data
        case deviceToken = "device_token", bundleID = "bundle_id", deepLink = "deep_link", threadID = "thread_id"
        case timeSensitive = "time_sensitive", pushType = "push_type", deliveryID = "delivery_id", collapseID = "collapse_id", pushID = "push_id"
    }
}

/// The relay's `POST /v1/live` body.
public struct RelayLiveRequest: Encodable, Sendable, Equatable {
    public var token: String
    public var environment: String
    public var bundleID: String
    public var event: String
    public var priority: Int
    public var payload: JSONValue

    enum CodingKeys: String, CodingKey { case token, environment, event, priority, payload, bundleID = "bundle_id" }
}
