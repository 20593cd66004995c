import ChannelAPI
import ChannelTesting
import Foundation
import GatewayTestSupport
import APIKit
import Mobile
import Relay
import SQLite
import Testing

/// The relay transport, and Live Activities through APNs or the relay.
@Suite("Relay and Live Activities", .serialized)
struct RelayAndLiveActivityTests {
    static let token = String(repeating: "7e", count: 32)
    static let startToken = String(repeating: "5f", count: 48)
    static let activityToken = String(repeating: "a1", count: 48)

    func relay(_ standIn: RelayStandIn, token: String = RelayStandIn.token) -> RelayTransport {
        RelayTransport(configuration: RelayConfiguration(baseURL: standIn.baseURL, token: token, caFile: standIn.caFile))
    }

    func target(_ token: String = Self.token) -> WakeTarget {
        WakeTarget(deviceID: "iphone", platform: .ios, pushToken: token, environment: .development, bundleID: "dev.soulacy.ios")
    }

    @Test("POST /v1/push carries token, environment, bundle id, delivery id and deep link, with generic text")
    func pushBody() async throws {
        let standIn = try await RelayStandIn.start()
        defer { standIn.stop() }
        #expect(await relay(standIn).send(.delivery(id: "dlv_9", agentID: "a"), to: target()) == .delivered)
        let request = try #require(try await standIn.requests().first)
        #expect(request["path"] == "/v1/push" && request["headers"]?["authorization"]?.stringValue == "Bearer \(RelayStandIn.token)")
        let body = try JSONValue.parse(Array(request["body"]!.stringValue!.utf8))
        #expect(body["device_token"]?.stringValue == Self.token && body["environment"] == "development" && body["bundle_id"] == "dev.soulacy.ios")
        #expect(body["delivery_id"] == "dlv_9" && body["deep_link"] == "soulacy://delivery/dlv_9")
        #expect(body["body"] == "An agent result is ready to review.")
    }

    @Test("relay answers map like APNs: 410 rejects the token, 503 retries, a wrong bearer is a permanent failure")
    func errorMapping() async throws {
        let standIn = try await RelayStandIn.start()
        defer { standIn.stop() }
        let transport = relay(standIn)
        let signal = WakeSignal.delivery(id: "x", agentID: "a")
        try await standIn.script([["status": 410, "reason": "Unregistered"]])
        #expect(await transport.send(signal, to: target()) == .tokenRejected(reason: "relay 410 Unregistered"))
        try await standIn.script([["status": 503, "reason": "ServiceUnavailable"]])
        #expect(await transport.send(signal, to: target()) == .retry(after: nil, reason: "relay 503 ServiceUnavailable"))
        #expect(await transport.send(signal, to: target("zz")) == .tokenRejected(reason: "relay 400 BadDeviceToken"))
        #expect(await relay(standIn, token: "wrong").send(signal, to: target()) == .failed(reason: "relay 401 Unauthorized"))
        let failures = await WakeTransportConformance(transport: transport, acceptedTarget: target(),
                                                      foreignTarget: WakeTarget(deviceID: "p", platform: .android, pushToken: "t", environment: .production, bundleID: "dev.soulacy.android")).run()
        #expect(failures.isEmpty, "\(failures)")
    }

    @Test("through the gateway: the relay wakes iOS when it is all there is; direct APNs wins when both are set")
    func choice() async throws {
        let relayStandIn = try await RelayStandIn.start()
        defer { relayStandIn.stop() }
        let apns = try await APNsStandIn.start()
        defer { apns.stop() }
        let secret = "RELAY-PRIVATE-OUTPUT"
        try await withTestGateway(environment: relayStandIn.environment) { (gw) async throws in
            try await gw.registerDevice(id: "iphone", key: nil, token: Self.token)
            _ = try await gw.runAgent("echo", input: secret, to: "all")
            #expect(try await eventually { try await relayStandIn.requests().count == 1 })
            #expect(!(try await relayStandIn.requests()).map { $0.serialized() }.joined().contains(secret))
        }
        try await withTestGateway(environment: relayStandIn.environment.merging(apns.environment) { $1 }) { (gw) async throws in
            try await gw.registerDevice(id: "iphone", key: nil, token: Self.token)
            _ = try await gw.runAgent("echo", input: "x", to: "all")
            #expect(try await eventually { try await apns.requests().count == 1 })
            #expect(try await relayStandIn.requests().count == 1)  // nothing new
        }
    }

    // MARK: Live Activities

    struct Fixture {
        let store: MobileStore
        let publisher: LiveActivityPublisher
        let recorder: RecordingTransport
        let clock: ManualClock
    }

    static func fixture(startToken: String? = startToken) throws -> Fixture {
        let clock = ManualClock(Date(timeIntervalSince1970: 1_800_000_000))
        let store = try MobileStore(database: try migratedDatabase(TestGateway.makeTemporaryDirectory() + "/db.sqlite"), clock: clock)
        var body: [String: JSONValue] = ["id": "iphone", "notifications_enabled": true, "push_token": .string(token)]
        if let startToken { body["live_start_token"] = .string(startToken) }
        try store.devices.register(try DeviceRegistration(json: JSONObject(body)), subject: "owner")
        try store.devices.register(try DeviceRegistration(json: JSONObject(["id": "pixel", "notifications_enabled": true, "platform": "android", "push_token": "fcm", "live_start_token": "abcd"])), subject: "owner")
        let recorder = RecordingTransport()
        let publisher = try LiveActivityPublisher(store: store, transports: WakeTransportRegistry([recorder]), clock: clock, progressInterval: 10, dismissAfter: 240)
        return Fixture(store: store, publisher: publisher, recorder: recorder, clock: clock)
    }

    static func run(background: Bool, clock: ManualClock) -> ActivityRun {
        ActivityRun(runID: "run_1", sessionID: "ses_1", agentID: "brief", agentName: "Brief", subject: "owner", background: background, startedAt: clock.now())
    }

    func payload(_ sent: RecordingTransport.Sent) throws -> JSONValue {
        try JSONValue.parse(try #require(sent.signal.liveActivity).apnsBody)
    }

    @Test("a chat session's next run keeps its Live Activity while the previous run's end is still being sent")
    func nextRunDuringSlowEnd() async throws {
        let clock = ManualClock(Date(timeIntervalSince1970: 1_800_000_000))
        let store = try MobileStore(database: try migratedDatabase(TestGateway.makeTemporaryDirectory() + "/db.sqlite"), clock: clock)
        try store.devices.register(try DeviceRegistration(json: JSONObject(["id": "iphone", "notifications_enabled": true, "push_token": .string(Self.token),
                                                                             "live_start_token": .string(Self.startToken)])), subject: "owner")
        // APNs answers the end slowly: it is held until the test answers it.
        let transport = HoldingTransport(holds: { $0.liveActivity?.event == .end })
        let publisher = try LiveActivityPublisher(store: store, transports: WakeTransportRegistry([transport]), clock: clock)
        try await publisher.tokens.register(deviceID: "iphone", sessionID: "ses_1", agentID: "brief", token: Self.activityToken, environment: .production, now: clock.now())
        func run(_ id: String) -> ActivityRun {
            ActivityRun(runID: id, sessionID: "ses_1", agentID: "brief", agentName: "Brief", subject: "owner", background: true, startedAt: clock.now())
        }
        await publisher.runStarted(run("run_1"))
        await publisher.toolCalled(sessionID: "ses_1", tool: "search")
        let ending = Task { await publisher.finished(sessionID: "ses_1", succeeded: true) }
        #expect(await eventually { transport.heldCount == 1 })
        // The same session's next run starts while APNs has not answered the first run's end yet.
        await publisher.runStarted(run("run_2"))
        transport.answerHeld()
        await ending.value
        await publisher.toolCalled(sessionID: "ses_1", tool: "search")
        let events = transport.calls.compactMap { $0.signal.liveActivity?.event.rawValue }
        #expect(events == ["start", "end", "start"], "the second run's activity starts: \(events)")
    }

    @Test("a background run starts at its first tool call; progress is coalesced at low priority; waiting and finished go at once")
    func throttling() async throws {
        let f = try Self.fixture()
        await f.publisher.runStarted(Self.run(background: true, clock: f.clock))
        #expect(f.recorder.sent.isEmpty)

        await f.publisher.toolCalled(sessionID: "ses_1", tool: "web_search")
        #expect(f.recorder.sent.count == 1)
        let start = f.recorder.sent[0]
        #expect(start.target.pushToken == Self.startToken && start.target.deviceID == "iphone")  // push-to-start, never Android
        #expect(start.signal.kind == .liveActivity && start.signal.priority == .high)
        #expect(try payload(start)["aps"]?["event"] == "start")
        // The original app's shapes: SoulacyRunAttributes, its attributes, and the content state it draws.
        let started = try payload(start)["aps"]
        #expect(started?["attributes-type"] == "SoulacyRunAttributes")
        #expect(started?["attributes"] == ["run_key": "brief/ses_1", "agent_id": "brief", "agent_name": "Brief", "session_id": "ses_1",
                                           "started_at": .number(1_800_000_000)])
        #expect(started?["content-state"] == ["stage": "running", "detail": "Running web search", "steps": 1, "needs_you": false,
                                              "updated_at": .number(1_800_000_000)])
        #expect(started?["alert"] == nil && started?["timestamp"] == .number(1_800_000_000))

        try await f.publisher.tokens.register(deviceID: "iphone", sessionID: "ses_1", agentID: "brief", token: Self.activityToken, environment: .production, now: f.clock.now())
        for (second, tool) in [(1, "read"), (2, "write"), (3, "calendar"), (4, "email")] {
            f.clock.advance(to: Date(timeIntervalSince1970: 1_800_000_000 + Double(second)))
            await f.publisher.toolCalled(sessionID: "ses_1", tool: tool)
        }
        #expect(f.recorder.sent.count == 1)  // all four coalesced
        #expect(await eventually { f.clock.sleeperCount == 1 })
        f.clock.advance(to: Date(timeIntervalSince1970: 1_800_000_010))
        #expect(await eventually { f.recorder.sent.count == 2 })
        let update = f.recorder.sent[1]
        #expect(update.target.pushToken == Self.activityToken && update.signal.priority == .low)
        #expect(try payload(update)["aps"]?["content-state"]?["steps"] == 5)
        #expect(try payload(update)["aps"]?["content-state"]?["detail"] == "Running email")
        #expect(try payload(update)["aps"]?["content-state"]?["updated_at"] == .number(1_800_000_010))
        #expect(try payload(update)["aps"]?["attributes"] == nil, "attributes go with the start only")

        f.clock.advance(by: .seconds(1))
        await f.publisher.waitingForApproval(Self.run(background: true, clock: f.clock), callID: "call_1", tool: "send_email")
        #expect(f.recorder.sent.count == 3)
        let waiting = try payload(f.recorder.sent[2])
        #expect(f.recorder.sent[2].signal.priority == .high)
        #expect(waiting["aps"]?["content-state"]?["needs_you"] == true && waiting["aps"]?["content-state"]?["call_id"] == "call_1")
        #expect(waiting["aps"]?["content-state"]?["stage"] == "waiting" && waiting["aps"]?["content-state"]?["detail"] == "Needs your approval: send email")
        #expect(waiting["aps"]?["alert"] == ["title": "Brief needs you", "body": "Needs your approval: send email"])

        await f.publisher.approvalAnswered(sessionID: "ses_1", approved: true)
        #expect(f.recorder.sent.count == 4 && f.recorder.sent[3].signal.priority == .low)
        let answered = try payload(f.recorder.sent[3])
        #expect(answered["aps"]?["content-state"]?["detail"] == "Approved, continuing" && answered["aps"]?["content-state"]?["needs_you"] == false)
        #expect(answered["aps"]?["content-state"]?["call_id"] == nil && answered["aps"]?["alert"] == nil)

        await f.publisher.finished(sessionID: "ses_1", succeeded: true)
        #expect(f.recorder.sent.count == 5)
        let end = try payload(f.recorder.sent[4])
        #expect(end["aps"]?["event"] == "end" && f.recorder.sent[4].signal.priority == .high)
        #expect(end["aps"]?["dismissal-date"]?.numberValue == (end["aps"]?["timestamp"]?.numberValue ?? 0) + 240)
        #expect(end["aps"]?["content-state"]?["stage"] == "done" && end["aps"]?["content-state"]?["detail"] == "Finished")
    }

    @Test("an interactive run appears only when it needs approval; a phone with the feature off gets nothing")
    func interactiveAndOff() async throws {
        let f = try Self.fixture()
        await f.publisher.runStarted(Self.run(background: false, clock: f.clock))
        await f.publisher.toolCalled(sessionID: "ses_1", tool: "search")
        #expect(f.recorder.sent.isEmpty)
        await f.publisher.waitingForApproval(Self.run(background: false, clock: f.clock), callID: "c", tool: "pay")
        #expect(f.recorder.sent.count == 1)
        #expect(try payload(f.recorder.sent[0])["aps"]?["event"] == "start")
        #expect(try payload(f.recorder.sent[0])["aps"]?["alert"]?["title"] == "Brief needs you")

        let off = try Self.fixture(startToken: nil)
        await off.publisher.runStarted(Self.run(background: true, clock: off.clock))
        await off.publisher.toolCalled(sessionID: "ses_1", tool: "search")
        #expect(off.recorder.sent.isEmpty)
    }

    /// Registers an iPhone that takes push-to-start Live Activities, then lets the every-minute cron agent fire once
    /// (the gateway's clock starts half a minute before a fire).
    static func registerIPhoneAndFireCron(_ gw: TestGateway, clock: ManualClock) async throws {
        let registered = try await gw.request("POST", "/api/v1/mobile/devices", json: ["notifications_enabled": true, "id": "iphone", "push_token": .string(token),
                                                                                          "live_start_token": .string(startToken)])
        #expect(registered.status == 201)
        #expect(await eventually { clock.sleeperCount >= 1 })
        clock.advance(by: .seconds(61))
    }

    @Test("end to end: a cron run's tool call reaches APNs as a liveactivity push on the liveactivity topic")
    func throughAPNs() async throws {
        let apns = try await APNsStandIn.start()
        defer { apns.stop() }
        let config = """
            agents:
              - id: worker
                name: Worker
                runner:
                  command: ["/bin/sh", "-c", "curl -s -X POST -H \\"Authorization: Bearer $SOULACY_RUN_TOKEN\\" -d '{\\"type\\":\\"tool\\",\\"tool\\":\\"web_search\\"}' $SOULACY_API_URL/api/v1/runs/$SOULACY_RUN_ID/events >/dev/null; echo done"]
                schedule:
                  cron: "* * * * *"
                  output: {channel: mobile, to: all}
            """
        let clock = ManualClock(Date().addingTimeInterval(-30))
        try await withTestGateway(config: config, clock: clock, environment: apns.environment) { (gw) async throws in
            try await Self.registerIPhoneAndFireCron(gw, clock: clock)
            #expect(try await eventually { try await apns.requests().contains { $0["headers"]?["apns-push-type"] == "liveactivity" } })
            let live = try #require(try await apns.requests().first { $0["headers"]?["apns-push-type"] == "liveactivity" })
            #expect(live["status"] == 200)
            #expect(live["token"]?.stringValue == Self.startToken)
            #expect(live["headers"]?["apns-topic"] == "dev.soulacy.ios.push-type.liveactivity")
            #expect(live["headers"]?["apns-priority"] == "10")
            let body = try JSONValue.parse(Array(live["body"]!.stringValue!.utf8))
            #expect(body["aps"]?["event"] == "start" && body["aps"]?["attributes"]?["agent_name"] == "Worker")
            #expect(body["aps"]?["attributes-type"] == "SoulacyRunAttributes" && body["aps"]?["content-state"]?["detail"] == "Running web search")
        }
    }

    @Test("an approval decided in the web console reaches the phone's lock screen: the Live Activity says approved, then the run ends")
    func consoleDecisionOnTheLockScreen() async throws {
        let apns = try await APNsStandIn.start()
        defer { apns.stop() }
        let config = """
            agents:
              - id: mailer
                name: Mailer
                runner:
                  command: ["/bin/sh", "-c", "answer=$(curl -s -X POST -H \\"Authorization: Bearer $SOULACY_RUN_TOKEN\\" -d '{\\"agent_id\\":\\"mailer\\",\\"tool\\":\\"send_email\\",\\"arguments\\":{\\"to\\":\\"ann\\"}}' $SOULACY_API_URL/api/v1/approvals); case $answer in *'\\"approved\\":true'*) echo sent;; *) echo refused;; esac"]
                  timeout: 30s
                schedule:
                  cron: "* * * * *"
                  output: {channel: mobile, to: all}
            """
        let clock = ManualClock(Date().addingTimeInterval(-30))
        try await withTestGateway(config: config, clock: clock, environment: apns.environment) { (gw) async throws in
            try await Self.registerIPhoneAndFireCron(gw, clock: clock)
            @Sendable func live() async throws -> [JSONValue] {
                try await apns.requests().filter { $0["headers"]?["apns-push-type"] == "liveactivity" }.compactMap { request in
                    request["body"]?.stringValue.flatMap { try? JSONValue.parse(Array($0.utf8)) }
                }
            }
            // The lock screen asks.
            #expect(try await eventually(timeout: .seconds(20)) { try await live().contains { $0["aps"]?["content-state"]?["needs_you"] == true } })
            // The activity started: the phone reports its update token, as the app does.
            let started = try #require(try await live().first { $0["aps"]?["event"] == "start" })
            let attributes = try #require(started["aps"]?["attributes"])
            let reported = try await gw.request("POST", "/api/v1/mobile/activities", json: ["device_id": "iphone", "agent_id": attributes["agent_id"] ?? .null,
                                                                                             "session_id": attributes["session_id"] ?? .null,
                                                                                             "token": .string(Self.activityToken), "environment": "production"])
            #expect(reported.status == 201, "\(reported.text)")

            // A person in the web console, signed in with their key, sees it pending and approves it there.
            let signIn = try await gw.request("POST", "/api/v1/console/session", json: ["api_key": .string(gw.adminKey)], key: .none, headers: ["Origin": gw.origin])
            let cookie = try #require(signIn.headers["set-cookie"]?.split(separator: ";").first.map(String.init), "\(signIn.text)")
            let csrf = try #require(signIn.json["csrf_token"]?.stringValue)
            let pending = try await gw.request("GET", "/api/v1/approvals", key: .none, headers: ["Cookie": cookie])
            let approval = try #require(pending.json["approvals"]?.arrayValue?.first, "\(pending.text)")
            #expect(approval["tool"] == "send_email")
            let callID = try #require(approval["call_id"]?.stringValue ?? approval["id"]?.stringValue)
            let decided = try await gw.request("POST", "/api/v1/approvals/\(callID)/approve", key: .none,
                                               headers: ["Cookie": cookie, "X-CSRF-Token": csrf, "Origin": gw.origin])
            #expect(decided.status == 200, "\(decided.text)")

            // The phone's Live Activity says so, and the run goes on to its end with the approved branch.
            #expect(try await eventually(timeout: .seconds(20)) { try await live().contains { $0["aps"]?["content-state"]?["detail"] == "Approved, continuing" } })
            #expect(try await eventually(timeout: .seconds(20)) { try await live().contains { $0["aps"]?["event"] == "end" } })
            let inbox = try await gw.request("GET", "/api/v1/mobile/deliveries")
            #expect(inbox.text.contains("sent") && !inbox.text.contains("refused"), "\(inbox.text)")
            // One decision ever: the phone's own approve now changes nothing.
            let again = try await gw.request("POST", "/api/v1/approvals/\(callID)/deny")
            #expect(again.json["state"] == "approved" || again.status == 409, "\(again.status) \(again.text)")
        }
    }

    @Test("through the relay: POST /v1/live with {token, environment, bundle_id, event, priority, payload}")
    func throughRelay() async throws {
        let standIn = try await RelayStandIn.start()
        defer { standIn.stop() }
        let clock = ManualClock(Date())
        let store = try MobileStore(database: try migratedDatabase(TestGateway.makeTemporaryDirectory() + "/db.sqlite"), clock: clock)
        try store.devices.register(try DeviceRegistration(json: JSONObject(["notifications_enabled": true, "id": "iphone", "push_token": .string(Self.token), "live_start_token": .string(Self.startToken)])), subject: "owner")
        let publisher = try LiveActivityPublisher(store: store, transports: WakeTransportRegistry([relay(standIn)]), clock: clock)
        await publisher.runStarted(Self.run(background: true, clock: clock))
        await publisher.toolCalled(sessionID: "ses_1", tool: "lookup")
        let request = try #require(try await standIn.requests().first)
        #expect(request["path"] == "/v1/live" && request["status"] == 202)
        let body = try JSONValue.parse(Array(request["body"]!.stringValue!.utf8))
        #expect(body["token"]?.stringValue == Self.startToken && body["event"] == "start" && body["priority"] == 10)
        #expect(body["environment"] == "production" && body["bundle_id"] == "dev.soulacy.ios")
        // The payload is the exact APNs body, in the original app's shapes.
        let aps = body["payload"]?["aps"]
        #expect(aps?["attributes-type"] == "SoulacyRunAttributes" && aps?["attributes"]?["run_key"] == "brief/ses_1")
        #expect(aps?["content-state"] == ["stage": "running", "detail": "Running lookup", "steps": 1, "needs_you": false,
                                          "updated_at": aps?["timestamp"] ?? .null])
    }

    @Test("POST /api/v1/mobile/activities validates every field and refuses Android")
    func activityRegistration() async throws {
        try await withTestGateway { (gw) async throws in
            try await gw.registerDevice(id: "iphone", key: nil)
            try await gw.registerDevice(id: "pixel", key: nil, platform: "android")
            let good: [String: JSONValue] = ["device_id": "iphone", "agent_id": "echo", "session_id": "ses_1", "token": .string(Self.activityToken), "environment": "production"]
            let activity = try await gw.request("POST", "/api/v1/mobile/activities", json: .object(good))
            #expect(activity.status == 201 && activity.json["registered"] == true)
            #expect(activity.json["run_key"] == .string("\(good["agent_id"]?.stringValue ?? "")/\(good["session_id"]?.stringValue ?? "")"), "the original's run key")
            // As the original: trimmed fields, a lower-cased token, any environment but development is production.
            var loose = good
            loose["token"] = .string("  " + Self.activityToken.uppercased() + " ")
            loose["environment"] = "sandbox"
            loose["session_id"] = " ses_1 "
            #expect(try await gw.request("POST", "/api/v1/mobile/activities", json: .object(loose)).json["run_key"] == "echo/ses_1")
            let missing = try await gw.request("POST", "/api/v1/mobile/activities", json: ["device_id": "iphone", "token": .string(Self.activityToken)])
            #expect(missing.status == 400 && missing.json["error"] == "device_id, agent_id and session_id are required")
            var foreign = good
            foreign["device_id"] = "nope"
            let refused = try await gw.request("POST", "/api/v1/mobile/activities", json: .object(foreign))
            #expect(refused.status == 403 && refused.json["error"] == "device is registered to another user")
            for (field, value) in [("device_id", JSONValue.string("pixel")), ("device_id", "nope"), ("token", "xyz"), ("token", .string(String(repeating: "ab", count: 257))), ("session_id", ""), ("agent_id", 5)] {
                var body = good
                body[field] = value
                let response = try await gw.request("POST", "/api/v1/mobile/activities", json: .object(body))
                #expect(response.status >= 400 && response.status < 500)
                #expect(response.errorField == field, "\(field)=\(value)")
            }
        }
    }
}
