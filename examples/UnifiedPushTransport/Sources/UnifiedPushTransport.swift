import ChannelAPI
import Foundation
import HTTPClient

/// An example transport added from outside the core: UnifiedPush, for Android phones without Google services.
/// The app registers its distributor's endpoint URL as its push token; a wake-up is a POST of the generic
/// message to that URL. Register it in a few lines:
///
///     let options = GatewayOptions(configPath: "SOUL.yaml", dataDirectory: ".soulacy",
///                                  extraTransports: [UnifiedPushTransport()])
///
/// Extra transports are tried first, so Android devices with an https:// token use this one and the rest use FCM.
public final class UnifiedPushTransport: WakeTransport {
    public let name = "unifiedpush"
    private let client: HTTP2Client
    /// Plain http:// endpoints on loopback, for local testing only.
    private let allowLoopbackHTTP: Bool

    public init(allowLoopbackHTTP: Bool = false) {
        self.allowLoopbackHTTP = allowLoopbackHTTP
        // Distributors often answer over HTTP/1.1 (a self-hosted ntfy), where each send in flight needs its own
        // connection: a pool, so a burst of wake-ups does not wait in one line behind one connection.
        client = HTTP2Client(configuration: HTTP2ClientConfiguration(maximumConnectionsPerHost: HTTP2ClientConfiguration.pooledConnectionsPerHost))
    }

    public func canWake(_ target: WakeTarget) -> Bool {
        guard target.platform == .android, let url = URL(string: target.pushToken), url.host != nil else { return false }
        return url.scheme == "https" || (allowLoopbackHTTP && url.scheme == "http" && url.host == "127.0.0.1")
    }

    public func send(_ signal: WakeSignal, to target: WakeTarget) async -> WakeOutcome {
        // The same generic fields FCM gets, as one JSON message; never the agent's output.
        var message: [String: String] = ["category": signal.category.rawValue, "title": signal.title, "body": signal.body,
                                         "deep_link": signal.deepLink, "thread_id": signal.threadID,
                                         "time_sensitive": signal.timeSensitive ? "true" : "false"]
        if let id = signal.deliveryID { message["delivery_id"] = id }
        guard signal.kind != .liveActivity, let body = try? JSONSerialization.data(withJSONObject: message, options: [.sortedKeys]) else {
            return .failed(reason: "UnifiedPush carries alerts only")
        }
        let response: ClientResponse
        do {
            response = try await client.send(ClientRequest(method: "POST", url: target.pushToken,
                                                           headers: [("content-type", "application/json"), ("ttl", "86400"), ("urgency", "high")],
                                                           body: Array(body)))
        } catch {
            return .retry(after: nil, reason: "UnifiedPush endpoint unreachable: \(error.description)")
        }
        switch response.status {
        case 200...299: return .delivered
        case 404, 410: return .tokenRejected(reason: "UnifiedPush \(response.status): the endpoint is gone")
        case 429, 500...599:
            return .retry(after: RetryAfter.parse(response.headers["retry-after"]), reason: "UnifiedPush \(response.status)")
        default: return .failed(reason: "UnifiedPush \(response.status)")
        }
    }
}
