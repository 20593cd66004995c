import APIKit
import Foundation

/// The Web Push stand-in (`webpush_standin.py`): a push service written from RFC 8030/8291/8292 that verifies each
/// VAPID token, decrypts each message with `http_ece` and records the plaintext, and plays the browser whose
/// subscriptions it hands out.
public final class WebPushStandIn: StandInProcess, @unchecked Sendable {
    public static func start() async throws -> WebPushStandIn {
        let standIn = WebPushStandIn(directory: TestGateway.makeTemporaryDirectory())
        try await standIn.start()
        return standIn
    }

    init(directory: String) {
        super.init(script: "webpush_standin.py", directory: directory, arguments: [])
    }

    /// The settings that make a gateway trust this stand-in's certificate.
    public var environment: [String: String] { ["SOULACY_WEBPUSH_CA_FILE": caFile] }

    /// A browser's subscription, as `PushSubscription.toJSON()` gives it.
    public struct Subscription: Sendable {
        public let id: String
        public let endpoint: String
        public let p256dh: String
        public let auth: String

        public var json: JSONValue { ["endpoint": .string(endpoint), "expirationTime": nil, "keys": ["p256dh": .string(p256dh), "auth": .string(auth)]] }
    }

    /// A new browser subscription; with `applicationServerKey`, pushes must carry that VAPID key (RFC 8292 §4).
    public func subscribe(applicationServerKey: String? = nil) async throws -> Subscription {
        let made = try await control("POST", "/control/subscribe", json: ["application_server_key": applicationServerKey.map { .string($0) } ?? .null])
        guard let id = made["id"]?.stringValue, let endpoint = made["endpoint"]?.stringValue, let p256dh = made["p256dh"]?.stringValue,
              let auth = made["auth"]?.stringValue else { throw TestFailure("the Web Push stand-in made no subscription: \(made)") }
        return Subscription(id: id, endpoint: endpoint, p256dh: p256dh, auth: auth)
    }

    /// The browser unsubscribed: its endpoint answers 410 Gone from now on.
    public func unsubscribe(_ subscription: Subscription) async throws {
        try await control("POST", "/control/unsubscribe", json: ["id": .string(subscription.id)])
    }
}
