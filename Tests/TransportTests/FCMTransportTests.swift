import ChannelAPI
import ChannelTesting
import FCM
import Foundation
import GatewayTestSupport
import APIKit
import Testing

/// The FCM transport against a local stand-in for Google's token endpoint and the FCM HTTP v1 API.
@Suite("FCM transport", .serialized)
struct FCMTransportTests {
    static let token = "fcm-registration-token:APA91b" + String(repeating: "Xy_-", count: 30)

    func transport(_ standIn: FCMStandIn, clock: any WallClock = SystemWallClock(), env extra: [String: String] = [:]) throws -> FCMTransport {
        let config = try #require(try FCMConfiguration.fromEnvironment(standIn.environment.merging(extra) { $1 }))
        return try FCMTransport(configuration: config, clock: clock, log: Log(minimum: .error))
    }

    func target(_ token: String = Self.token) -> WakeTarget {
        WakeTarget(deviceID: "pixel", platform: .android, pushToken: token, environment: .production, bundleID: "dev.soulacy.android")
    }

    static func approval() -> WakeSignal {
        WakeSignal(category: .approval, title: "Approval needed", body: "Brief wants to use send_email", deepLink: "soulacy://approval/call_1",
                   threadID: "approvals", timeSensitive: true, extra: ["call_id": "call_1", "agent_id": "brief", "session_id": "s1", "tool": "send_email"])
    }

    @Test("a data-only, high-priority message with a string-only data map and no notification block")
    func messageShape() async throws {
        let standIn = try await FCMStandIn.start()
        defer { standIn.stop() }
        let fcm = try transport(standIn)
        #expect(await fcm.send(.delivery(id: "dlv_7", agentID: "brief"), to: target()) == .delivered)
        #expect(await fcm.send(Self.approval(), to: target()) == .delivered)
        let sent = try await standIn.requests()
        #expect(sent.count == 2)
        #expect(sent.allSatisfy { $0["status"] == 200 && $0["project"] == .string(FCMStandIn.project) })
        let delivery = try JSONValue.parse(Array(sent[0]["body"]!.stringValue!.utf8))["message"]!
        #expect(delivery["token"]?.stringValue == Self.token)
        #expect(delivery["notification"] == nil)
        #expect(delivery["android"]?["priority"] == "high")
        let data = try #require(delivery["data"]?.objectValue)
        #expect(data.values.allSatisfy { $0.stringValue != nil })
        #expect(data == ["category": "SOULACY_DELIVERY", "title": "Soulacy", "body": "An agent result is ready to review.",
                         "deep_link": "soulacy://delivery/dlv_7", "thread_id": "delivery-brief", "time_sensitive": "false", "delivery_id": "dlv_7"])
        let approval = try JSONValue.parse(Array(sent[1]["body"]!.stringValue!.utf8))["message"]!["data"]!
        #expect(approval["time_sensitive"] == "true")
        #expect(approval["delivery_id"] == nil)  // only inbox deliveries carry one
        #expect(approval["call_id"] == "call_1" && approval["tool"] == "send_email" && approval["agent_id"] == "brief")
        #expect(approval["deep_link"] == "soulacy://approval/call_1")
    }

    @Test("one access token serves many sends; concurrent senders share one refresh")
    func tokenReuse() async throws {
        let standIn = try await FCMStandIn.start()
        defer { standIn.stop() }
        let fcm = try transport(standIn)
        await withTaskGroup(of: WakeOutcome.self) { group in
            for i in 0..<30 { group.addTask { await fcm.send(.delivery(id: "d\(i)", agentID: "a"), to: target()) } }
            for await outcome in group { #expect(outcome == .delivered) }
        }
        #expect(try await standIn.tokenRequests().count == 1)
        #expect(await fcm.accessTokens.exchanges == 1)
        #expect(Set(try await standIn.requests().compactMap { $0["headers"]?["authorization"]?.stringValue }).count == 1)
    }

    @Test("the access token is refreshed shortly before it expires, and once after a 401")
    func refresh() async throws {
        let standIn = try await FCMStandIn.start()
        defer { standIn.stop() }
        // 56 minutes in the past, so each assertion the clock signs is still in Google's accepted window.
        let clock = ManualClock(Date().addingTimeInterval(-56 * 60))
        let fcm = try transport(standIn, clock: clock)
        #expect(await fcm.send(.delivery(id: "a", agentID: "a"), to: target()) == .delivered)
        clock.advance(by: .seconds(50 * 60))  // 10 minutes left of 60: still reused
        #expect(await fcm.send(.delivery(id: "b", agentID: "a"), to: target()) == .delivered)
        #expect(await fcm.accessTokens.exchanges == 1)
        clock.advance(by: .seconds(6 * 60))   // 4 minutes left: inside the margin, refreshed
        #expect(await fcm.send(.delivery(id: "c", agentID: "a"), to: target()) == .delivered)
        #expect(await fcm.accessTokens.exchanges == 2)

        // The service forgets every token: the 401 forces exactly one refresh and the send goes through.
        try await standIn.control("POST", "/control/revoke")
        #expect(await fcm.send(.delivery(id: "d", agentID: "a"), to: target()) == .delivered)
        #expect(await fcm.accessTokens.exchanges == 3)
        #expect(try await standIn.tokenRequests().allSatisfy { $0["status"] == 200 })
    }

    @Test("UNREGISTERED or 404 rejects the token, 503/429 retry with Retry-After, INVALID_ARGUMENT is permanent")
    func errorMapping() async throws {
        let standIn = try await FCMStandIn.start()
        defer { standIn.stop() }
        let fcm = try transport(standIn)
        let signal = WakeSignal.delivery(id: "x", agentID: "a")
        try await standIn.control("POST", "/control/unregister", json: ["token": .string("gone-token")])
        #expect(await fcm.send(signal, to: target("gone-token")) == .tokenRejected(reason: "FCM 404 UNREGISTERED"))
        try await standIn.script([["status": 503, "state": "UNAVAILABLE", "code": "UNAVAILABLE", "retry_after": 30]])
        #expect(await fcm.send(signal, to: target()) == .retry(after: .seconds(30), reason: "FCM 503 UNAVAILABLE"))
        try await standIn.script([["status": 429, "state": "RESOURCE_EXHAUSTED", "code": "QUOTA_EXCEEDED"]])
        #expect(await fcm.send(signal, to: target()) == .retry(after: nil, reason: "FCM 429 QUOTA_EXCEEDED"))
        try await standIn.script([["status": 400, "state": "INVALID_ARGUMENT", "code": "INVALID_ARGUMENT"]])
        #expect(await fcm.send(signal, to: target()) == .failed(reason: "FCM 400 INVALID_ARGUMENT"))
        // A wrong project is the sender's problem for this token.
        let other = try transport(standIn, env: ["SOULACY_MOBILE_FCM_PROJECT_ID": "another-project"])
        #expect(await other.send(signal, to: target()) == .tokenRejected(reason: "FCM 403 SENDER_ID_MISMATCH"))
        // Live Activities never go to Android.
        var live = signal
        live.kind = .liveActivity
        guard case .failed = await fcm.send(live, to: target()) else { Issue.record("a Live Activity went to Android"); return }
    }

    @Test("the FCM transport passes the conformance suite")
    func conformance() async throws {
        let standIn = try await FCMStandIn.start()
        defer { standIn.stop() }
        let failures = await WakeTransportConformance(
            transport: try transport(standIn), acceptedTarget: target(),
            foreignTarget: WakeTarget(deviceID: "i", platform: .ios, pushToken: String(repeating: "a", count: 64), environment: .production, bundleID: "dev.soulacy.ios")
        ).run()
        #expect(failures.isEmpty, "\(failures)")
    }

    @Test("the credentials file is validated at start: unreadable, too open, wrong type, missing fields")
    func credentials() async throws {
        let standIn = try await FCMStandIn.start()
        defer { standIn.stop() }
        let file = standIn.credentialsFile
        chmod(file, 0o604)
        #expect { try FCMConfiguration.fromEnvironment(standIn.environment) } throws: { "\($0)".contains("readable by group or others") && "\($0)".contains(file) }
        chmod(file, 0o600)
        var env = standIn.environment
        env["SOULACY_MOBILE_FCM_CREDENTIALS_FILE"] = standIn.directory + "/nope.json"
        #expect { try FCMConfiguration.fromEnvironment(env) } throws: { "\($0)".contains("nope.json") }
        let original = try JSONValue.parse(Array(try String(contentsOfFile: file, encoding: .utf8).utf8))
        for (change, expected) in [("type", "type is 'authorized_user'"), ("client_email", "'client_email' is missing"), ("private_key", "'private_key' is missing")] {
            guard case .object(var fields) = original else { return }
            if change == "type" { fields["type"] = "authorized_user" } else { fields[change] = nil }
            let bad = standIn.directory + "/bad-\(change).json"
            try JSONValue.object(fields).serialized().write(toFile: bad, atomically: true, encoding: .utf8)
            chmod(bad, 0o600)
            env["SOULACY_MOBILE_FCM_CREDENTIALS_FILE"] = bad
            #expect { try FCMConfiguration.fromEnvironment(env) } throws: { "\($0)".contains(expected) && !"\($0)".contains("BEGIN PRIVATE KEY") }
        }
        #expect(try FCMConfiguration.fromEnvironment([:]) == nil)
        #expect(try FCMConfiguration.fromEnvironment(standIn.environment)?.projectID == FCMStandIn.project)
        #expect(try FCMConfiguration.fromEnvironment(standIn.environment.merging(["SOULACY_MOBILE_FCM_PROJECT_ID": "override"]) { $1 })?.projectID == "override")
    }

    @Test("through the gateway: Android goes to FCM and iOS to APNs; an unregistered token is cleared; no output in any byte")
    func alongsideAPNs() async throws {
        let fcm = try await FCMStandIn.start()
        defer { fcm.stop() }
        let apns = try await APNsStandIn.start()
        defer { apns.stop() }
        let secret = "ANDROID-PRIVATE-OUTPUT"
        try await withTestGateway(environment: fcm.environment.merging(apns.environment) { $1 }) { (gw) async throws in
            try await gw.registerDevice(id: "pixel", key: nil, platform: "android", token: Self.token)
            try await gw.registerDevice(id: "iphone", key: nil, token: String(repeating: "ab", count: 32))
            _ = try await gw.runAgent("echo", input: secret, to: "all")
            #expect(try await eventually {
                let android = try await fcm.requests().count
                let ios = try await apns.requests().count
                return android == 1 && ios == 1
            })
            #expect(!(try await fcm.requests()).map { $0.serialized() }.joined().contains(secret))

            try await fcm.control("POST", "/control/unregister", json: ["token": .string(Self.token)])
            _ = try await gw.runAgent("echo", input: "again", to: "device:pixel")
            #expect(try await eventually { try gw.gateway.mobileStore.devices.device(id: "pixel")?.pushToken == nil })
            #expect(try gw.gateway.mobileStore.devices.device(id: "iphone")?.pushToken != nil)
        }
    }
}

extension FCMConfiguration: Equatable {
    public static func == (a: FCMConfiguration, b: FCMConfiguration) -> Bool { a.projectID == b.projectID && a.clientEmail == b.clientEmail }
}
