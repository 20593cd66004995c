import APNs
import ChannelAPI
import ChannelTesting
import FCM
import Foundation
import GatewayTestSupport
import APIKit
import Testing

/// What each transport reports of one try besides its outcome: the service's status, its own reason, its id for the
/// message (APNs `apns-id`, FCM's message `name`) and the latency, against the stand-ins.
@Suite("Wake attempts", .serialized)
struct WakeAttemptTests {
    static let iosToken = String(repeating: "ab", count: 32)

    @Test("APNs: 200 with the apns-id it answered; 410 with Apple's reason; unreachable with no status and no id")
    func apns() async throws {
        let standIn = try await APNsStandIn.start()
        defer { standIn.stop() }
        let config = try #require(try APNsConfiguration.fromEnvironment(standIn.environment))
        let apns = try APNsTransport(configuration: config)
        let target = WakeTarget(deviceID: "d1", platform: .ios, pushToken: Self.iosToken, environment: .production, bundleID: "dev.soulacy.ios")
        var signal = WakeSignal.delivery(id: "dlv_1", agentID: "brief")
        signal.wakeID = UUID()
        let delivered = await apns.attempt(signal, to: target)
        #expect(delivered.outcome == .delivered && delivered.status == 200 && delivered.reason == nil)
        let answered = try #require(try await standIn.requests().first?["headers"]?["apns-id"]?.stringValue)
        #expect(delivered.serviceID == signal.wakeID!.uuidString.lowercased() && delivered.serviceID == answered)
        #expect(delivered.latency > .zero && delivered.latencyMilliseconds >= 0)
        // With no apns-id of ours, APNs makes one up and says which.
        let unnamed = await apns.attempt(.delivery(id: "dlv_2", agentID: "brief"), to: target)
        #expect(unnamed.serviceID.flatMap(UUID.init(uuidString:)) != nil)

        try await standIn.control("POST", "/control/unregister", json: ["token": .string(Self.iosToken)])
        let gone = await apns.attempt(signal, to: target)
        #expect(gone.outcome == .tokenRejected(reason: "APNs 410 Unregistered") && gone.status == 410 && gone.reason == "Unregistered")
        #expect(gone.serviceID == signal.wakeID!.uuidString.lowercased())
        try await standIn.script([["status": 429, "reason": "TooManyRequests", "retry_after": 7]])
        let busy = await apns.attempt(signal, to: WakeTarget(deviceID: "d2", platform: .ios, pushToken: String(repeating: "cd", count: 32),
                                                             environment: .production, bundleID: "dev.soulacy.ios"))
        #expect(busy.outcome == .retry(after: .seconds(7), reason: "APNs 429 TooManyRequests") && busy.status == 429 && busy.reason == "TooManyRequests")
        // `send` is the attempt's outcome, as before.
        #expect(await apns.send(signal, to: target) == .tokenRejected(reason: "APNs 410 Unregistered"))

        standIn.stop()
        let down = await apns.attempt(signal, to: target)
        guard case .retry = down.outcome else { Issue.record("unreachable APNs is not a retry: \(down.outcome)"); return }
        #expect(down.status == nil && down.serviceID == nil && down.reason?.hasPrefix("APNs unreachable") == true)
    }

    @Test("FCM: 200 with the message name it gave; a refusal with its error code")
    func fcm() async throws {
        let standIn = try await FCMStandIn.start()
        defer { standIn.stop() }
        let config = try #require(try FCMConfiguration.fromEnvironment(standIn.environment))
        let fcm = try FCMTransport(configuration: config, log: Log(minimum: .error))
        let target = WakeTarget(deviceID: "pixel", platform: .android, pushToken: "fcm-token-" + String(repeating: "Ab9", count: 20),
                                environment: .production, bundleID: "dev.soulacy.android")
        let signal = WakeSignal.delivery(id: "dlv_1", agentID: "brief")
        let delivered = await fcm.attempt(signal, to: target)
        #expect(delivered.outcome == .delivered && delivered.status == 200)
        #expect(delivered.serviceID?.hasPrefix("projects/\(FCMStandIn.project)/messages/") == true, "\(String(describing: delivered.serviceID))")
        try await standIn.script([["status": 503, "state": "UNAVAILABLE", "code": "UNAVAILABLE", "retry_after": 30]])
        let busy = await fcm.attempt(signal, to: target)
        #expect(busy.outcome == .retry(after: .seconds(30), reason: "FCM 503 UNAVAILABLE") && busy.status == 503 && busy.reason == "UNAVAILABLE")
        #expect(busy.serviceID == nil)
    }

    @Test("a transport that implements only send still reports its outcome and latency")
    func defaultAttempt() async throws {
        let scripted = ScriptedTransport(script: [.tokenRejected(reason: "gone")])
        let target = WakeTarget(deviceID: "d", platform: .ios, pushToken: "t", environment: .production, bundleID: "b")
        let attempt = await scripted.attempt(.delivery(id: "x", agentID: "a"), to: target)
        #expect(attempt.outcome == .tokenRejected(reason: "gone") && attempt.reason == "gone" && attempt.status == nil && attempt.serviceID == nil)
        #expect(attempt.latency >= .zero)
        #expect(WakeOutcome.retry(after: nil, reason: "r").label == "retry" && WakeOutcome.delivered.reason == nil)
    }
}
