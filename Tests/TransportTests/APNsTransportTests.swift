import APNs
import ChannelAPI
import ChannelTesting
import Foundation
import GatewayTestSupport
import APIKit
import Testing

/// The APNs transport against a local stand-in that speaks HTTP/2 over TLS and checks what Apple checks.
@Suite("APNs transport", .serialized)
struct APNsTransportTests {
    static let token = String(repeating: "ab", count: 32)

    func transport(_ standIn: APNsStandIn, clock: any WallClock = SystemWallClock()) throws -> APNsTransport {
        let config = try #require(try APNsConfiguration.fromEnvironment(standIn.environment))
        return try APNsTransport(configuration: config, clock: clock)
    }

    func target(_ token: String = Self.token, environment: WakeTarget.Environment = .production) -> WakeTarget {
        WakeTarget(deviceID: "d1", platform: .ios, pushToken: token, environment: environment, bundleID: "dev.soulacy.ios")
    }

    @Test("a delivery wake-up goes out over HTTP/2 with a verified ES256 token and Apple's headers")
    func deliveredWithHeaders() async throws {
        let standIn = try await APNsStandIn.start()
        defer { standIn.stop() }
        let apns = try transport(standIn)
        var signal = WakeSignal.delivery(id: "dlv_1", agentID: "brief")
        signal.wakeID = UUID()
        signal.collapseID = "dlv_1"
        #expect(await apns.send(signal, to: target()) == .delivered)
        let received = try await standIn.requests()
        let request = try #require(received.first)
        #expect(request["status"] == 200)
        #expect(request["http_version"] == "2")
        #expect(request["token"]?.stringValue == Self.token)
        let headers = try #require(request["headers"])
        #expect(headers["apns-push-type"] == "alert")
        #expect(headers["apns-topic"] == "dev.soulacy.ios")
        #expect(headers["apns-priority"] == "10")
        #expect(headers["apns-collapse-id"] == "dlv_1")
        #expect(headers["apns-id"]?.stringValue == signal.wakeID!.uuidString.lowercased())
        #expect(Int(headers["apns-expiration"]?.stringValue ?? "") ?? 0 > Int(Date().timeIntervalSince1970))
        let body = try JSONValue.parse(Array((request["body"]?.stringValue ?? "").utf8))
        #expect(body["aps"]?["alert"]?["body"] == "An agent result is ready to review.")
        #expect(body["aps"]?["category"] == "SOULACY_DELIVERY")
        #expect(body["deep_link"] == "soulacy://delivery/dlv_1")
        #expect(body["delivery_id"] == "dlv_1")
        #expect(body["thread_id"] == "delivery-brief")
    }

    @Test("one provider token and one multiplexed connection serve many pushes")
    func reuse() async throws {
        let standIn = try await APNsStandIn.start()
        defer { standIn.stop() }
        let apns = try transport(standIn)
        await withTaskGroup(of: WakeOutcome.self) { group in
            for i in 0..<40 {
                group.addTask { await apns.send(.delivery(id: "dlv_\(i)", agentID: "a"), to: target()) }
            }
            for await outcome in group { #expect(outcome == .delivered) }
        }
        let received = try await standIn.requests()
        #expect(received.count == 40)
        #expect(Set(received.compactMap { $0["headers"]?["authorization"]?.stringValue }).count == 1)
        #expect(Set(received.compactMap { $0["connection"]?.stringValue }).count == 1)
        #expect(await apns.providerToken.issuedCount == 1)
    }

    @Test("the provider token is renewed at 50 minutes, not before")
    func tokenAge() async throws {
        let standIn = try await APNsStandIn.start()
        defer { standIn.stop() }
        // Start 55 minutes in the past so every token the clock signs is one Apple would still accept.
        let clock = ManualClock(Date().addingTimeInterval(-55 * 60))
        let apns = try transport(standIn, clock: clock)
        #expect(await apns.send(.delivery(id: "a", agentID: "a"), to: target()) == .delivered)
        clock.advance(by: .seconds(49 * 60))
        #expect(await apns.send(.delivery(id: "b", agentID: "a"), to: target()) == .delivered)
        #expect(await apns.providerToken.issuedCount == 1)
        clock.advance(by: .seconds(2 * 60))
        #expect(await apns.send(.delivery(id: "c", agentID: "a"), to: target()) == .delivered)
        #expect(await apns.providerToken.issuedCount == 2)
        let iats = try await standIn.requests().compactMap { $0["jwt_iat"]?.numberValue }
        #expect(iats.count == 3 && iats[0] == iats[1] && iats[2] - iats[0] == 51 * 60)
    }

    @Test("Apple's answers map to retry, token rejected, renew the provider token, or permanent failure")
    func errorMapping() async throws {
        let standIn = try await APNsStandIn.start()
        defer { standIn.stop() }
        let apns = try transport(standIn)
        let signal = WakeSignal.delivery(id: "dlv", agentID: "a")

        try await standIn.script([["status": 410, "reason": "Unregistered"]])
        #expect(await apns.send(signal, to: target()) == .tokenRejected(reason: "APNs 410 Unregistered"))
        try await standIn.script([["status": 400, "reason": "BadDeviceToken"]])
        #expect(await apns.send(signal, to: target()) == .tokenRejected(reason: "APNs 400 BadDeviceToken"))
        try await standIn.script([["status": 429, "reason": "TooManyRequests", "retry_after": 120]])
        #expect(await apns.send(signal, to: target()) == .retry(after: .seconds(120), reason: "APNs 429 TooManyRequests"))
        try await standIn.script([["status": 500, "reason": "InternalServerError"]])
        #expect(await apns.send(signal, to: target()) == .retry(after: nil, reason: "APNs 500 InternalServerError"))
        try await standIn.script([["status": 503, "reason": "ServiceUnavailable"]])
        #expect(await apns.send(signal, to: target()) == .retry(after: nil, reason: "APNs 503 ServiceUnavailable"))
        try await standIn.script([["status": 400, "reason": "BadTopic"]])
        #expect(await apns.send(signal, to: target()) == .failed(reason: "APNs 400 BadTopic"))

        // ExpiredProviderToken: a fresh token is signed and the push goes through on the retry.
        try await standIn.script([["status": 403, "reason": "ExpiredProviderToken"]])
        #expect(await apns.send(signal, to: target()) == .delivered)
        #expect(await apns.providerToken.issuedCount == 2)
        // A second rejection within 20 minutes does not renew again (Apple's rate rule).
        try await standIn.script([["status": 403, "reason": "ExpiredProviderToken"]])
        guard case .retry(let after?, _) = await apns.send(signal, to: target()) else { Issue.record("expected a delayed retry"); return }
        #expect(after > .seconds(60))
        #expect(await apns.providerToken.issuedCount == 2)

        // The stand-in's own checks: a token that is not 32 bytes of hex is BadDeviceToken.
        #expect(await apns.send(signal, to: target("zz")) == .tokenRejected(reason: "APNs 400 BadDeviceToken"))
    }

    @Test("a payload over 4 KB is refused before it leaves; sandbox tokens go to the sandbox host")
    func limitsAndEnvironment() async throws {
        let standIn = try await APNsStandIn.start()
        defer { standIn.stop() }
        let apns = try transport(standIn)
        var big = WakeSignal.delivery(id: "dlv", agentID: "a")
        big.extra = ["padding": String(repeating: "x", count: 5000)]
        guard case .failed(let reason) = await apns.send(big, to: target()) else { Issue.record("expected a failure"); return }
        #expect(reason.contains("4096"))
        #expect(try await standIn.requests().isEmpty)
        #expect(await apns.send(.delivery(id: "s", agentID: "a"), to: target(environment: .development)) == .delivered)
    }

    @Test("an unreachable service is a retry, not a failure")
    func unreachable() async throws {
        let standIn = try await APNsStandIn.start()
        let apns = try transport(standIn)
        standIn.stop()
        guard case .retry = await apns.send(.delivery(id: "x", agentID: "a"), to: target()) else { Issue.record("expected retry"); return }
    }

    @Test("the APNs transport passes the channel testing kit's conformance suite")
    func conformance() async throws {
        let standIn = try await APNsStandIn.start()
        defer { standIn.stop() }
        let failures = await WakeTransportConformance(
            transport: try transport(standIn), acceptedTarget: target(),
            foreignTarget: WakeTarget(deviceID: "a", platform: .android, pushToken: "fcm-token", environment: .production, bundleID: "dev.soulacy.android")
        ).run()
        #expect(failures.isEmpty, "\(failures)")
    }

    @Test("configuration: partial settings, bad ids and loose or missing key files are refused with the file named")
    func configuration() async throws {
        let standIn = try await APNsStandIn.start()
        defer { standIn.stop() }
        var env = standIn.environment
        env["SOULACY_MOBILE_APNS_KEY_ID"] = nil
        #expect(throws: APNsConfigurationError.missing("SOULACY_MOBILE_APNS_KEY_ID")) { try APNsConfiguration.fromEnvironment(env) }
        env = standIn.environment
        env["SOULACY_MOBILE_APNS_TEAM_ID"] = "short"
        #expect(throws: APNsConfigurationError.self) { try APNsConfiguration.fromEnvironment(env) }
        #expect(try APNsConfiguration.fromEnvironment([:]) == nil)

        chmod(standIn.keyFile, 0o644)
        do {
            _ = try APNsConfiguration.fromEnvironment(standIn.environment)
            Issue.record("a group-readable key was accepted")
        } catch {
            #expect(error.description.contains(standIn.keyFile))
            #expect(error.description.contains("readable by group or others"))
            #expect(!error.description.contains("BEGIN PRIVATE KEY"))
        }
        chmod(standIn.keyFile, 0o600)
        env = standIn.environment
        env["SOULACY_MOBILE_APNS_PRIVATE_KEY_FILE"] = standIn.directory + "/missing.p8"
        #expect { try APNsConfiguration.fromEnvironment(env) } throws: { "\($0)".contains("missing.p8") }
        // A file that is not a P-256 key.
        let notAKey = standIn.directory + "/not-a-key.p8"
        try "hello".write(toFile: notAKey, atomically: true, encoding: .utf8)
        chmod(notAKey, 0o600)
        env["SOULACY_MOBILE_APNS_PRIVATE_KEY_FILE"] = notAKey
        let config = try #require(try APNsConfiguration.fromEnvironment(env))
        #expect { try APNsTransport(configuration: config) } throws: { "\($0)".contains("not-a-key.p8") }
    }
}
