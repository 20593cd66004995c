import ChannelTesting
import Foundation
import GatewayTestSupport
import APIKit
import Testing

/// Location triggers fired by phones, and webhook triggers fired by anything that knows the secret.
@Suite("Location and webhook triggers", .serialized)
struct TriggerTests {
    static func config(cooldown: String = "30m", device: String = "\"\"", command: String = "[\"/bin/cat\"]") -> String {
        """
        agents:
          - id: home
            name: Home arrival
            runner:
              command: \(command)
            trigger: location
            location:
              name: Home
              latitude: 52.52
              longitude: 13.405
              radius_m: 150
              on: enter
              device: \(device)
              cooldown: \(cooldown)
          - id: hook
            name: Hook
            runner:
              command: ["/bin/cat"]
            trigger: webhook
            webhook:
              secret_env: HOOK_SECRET
              output: {channel: mobile, to: all}
        """
    }

    static let hookSecret = "a-long-webhook-secret-value"

    func fire(_ gw: TestGateway, _ body: [String: JSONValue], key: String? = nil, agent: String = "home") async throws -> TestResponse {
        try await gw.request("POST", "/api/v1/mobile/triggers/\(agent)/fire", json: .object(body), key: .some(key))
    }

    @Test("triggers are listed for the phone that may fire them, with max_regions")
    func listing() async throws {
        try await withTestGateway(config: Self.config(device: "[phone-a]"), environment: ["HOOK_SECRET": Self.hookSecret], mode: .router) { (gw) async throws in
            try await gw.registerDevice(id: "phone-a", key: nil)
            try await gw.registerDevice(id: "phone-b", key: nil)
            let a = try await gw.request("GET", "/api/v1/mobile/triggers?device_id=phone-a")
            #expect(a.json["max_regions"] == 20)
            let trigger = try #require(a.json["triggers"]?.arrayValue?.first)
            #expect(trigger["agent_id"] == "home" && trigger["name"] == "Home" && trigger["radius_m"] == 150 && trigger["on"] == "enter")
            #expect(trigger["latitude"] == 52.52 && trigger["cooldown"] == "30m" && trigger["agent_name"] == "Home arrival")
            #expect(try await gw.request("GET", "/api/v1/mobile/triggers?device_id=phone-b").json["triggers"]?.arrayValue?.isEmpty == true)
            // As the original: without device_id every trigger is listed; device and cooldown are omitted when empty; no-store.
            let all = try await gw.request("GET", "/api/v1/mobile/triggers")
            #expect(all.status == 200 && all.json["triggers"]?.arrayValue?.count == 1 && all.headers["cache-control"] == "no-store")
            #expect(trigger["device"] == "phone-a")
        }
    }

    @Test("a fire starts the run and the reply reaches that phone, with the location in its metadata")
    func fires() async throws {
        try await withTestGateway(config: Self.config(), environment: ["HOOK_SECRET": Self.hookSecret], mode: .router) { (gw) async throws in
            try await gw.registerDevice(id: "phone", key: nil)
            try await gw.registerDevice(id: "other", key: nil)
            let fired = try await fire(gw, ["event": "enter", "device_id": "phone", "latitude": 52.5201, "longitude": 13.4049, "accuracy_m": 12, "region_name": "Home"])
            #expect(fired.status == 202 && fired.json["ok"] == true && fired.json["agent_id"] == "home")
            #expect(fired.json["session_id"]?.stringValue?.wholeMatch(of: /location-home-[0-9]{19}/) != nil, "the original's session: \(fired.json)")
            let runID = try #require(fired.json["run_id"]?.stringValue)
            _ = try await gw.request("GET", "/api/v1/runs/\(runID)?wait=true")
            let line = try #require(try await gw.request("GET", "/api/v1/mobile/deliveries?device_id=phone").json["deliveries"]?.arrayValue?.first)
            #expect(line["destination"] == "device:phone")
            #expect(line["metadata"]?["trigger"] == "location" && line["metadata"]?["location.event"] == "enter" && line["metadata"]?["location.name"] == "Home")
            #expect(line["body"]?.stringValue?.contains("\"event\":\"enter\"") == true)
            #expect(try await gw.request("GET", "/api/v1/mobile/deliveries?device_id=other").json["deliveries"]?.arrayValue?.isEmpty == true)
        }
    }

    @Test("every refusal is a clear answer naming its reason")
    func refusals() async throws {
        try await withTestGateway(config: Self.config(device: "[phone]"), environment: ["HOOK_SECRET": Self.hookSecret], mode: .router) { (gw) async throws in
            try await gw.registerDevice(id: "phone", key: nil)
            try await gw.registerDevice(id: "tablet", key: nil)
            let viewer = try await gw.mintKey(subject: "owner", role: "viewer")
            let wrongEvent = try await fire(gw, ["event": "exit", "device_id": "phone"])
            #expect(wrongEvent.status == 202 && wrongEvent.json["ignored"] == true && wrongEvent.json["reason"] == "agent runs on enter, not exit")
            // The event is read trimmed and lower-cased, and checked before the phone (the original's order).
            #expect(try await fire(gw, ["event": " EXIT "]).json["reason"] == "agent runs on enter, not exit")
            let noDevice = try await fire(gw, ["event": "enter"])
            #expect(noDevice.status == 400 && noDevice.errorField == "device_id")
            let notAllowed = try await fire(gw, ["event": "enter", "device_id": "tablet"])
            #expect(notAllowed.status == 403 && notAllowed.errorCode == "device_not_allowed")
            #expect(try await fire(gw, ["event": "arrive", "device_id": "phone"]).errorField == "event")
            #expect(try await fire(gw, ["event": "enter", "device_id": "phone", "latitude": 91]).errorField == "latitude")
            #expect(try await fire(gw, ["event": "enter", "device_id": "phone"], key: viewer).status == 403)
            // Not a location trigger: 409, as the original answers (SOULACY-AGENTS.md §9); an unknown agent is 404.
            #expect(try await fire(gw, ["event": "enter", "device_id": "phone"], agent: "hook").status == 409)
            #expect(try await fire(gw, ["event": "enter", "device_id": "phone"], agent: "nope").status == 404)
            let priya = try await gw.mintKey(subject: "priya", role: "operator")
            #expect(try await fire(gw, ["event": "enter", "device_id": "phone"], key: priya).status == 403)
        }
    }

    @Test("the cooldown holds across concurrent fires and a restart, then lets the next fire through")
    func cooldown() async throws {
        let directory = TestGateway.makeTemporaryDirectory()
        // The cooldown runs on the gateway's clock: a manual one moves only when the test says so.
        let clock = ManualClock(Date(timeIntervalSince1970: 1_780_000_000))
        try await withTestGateway(config: Self.config(cooldown: "2s"), directory: directory, clock: clock, environment: ["HOOK_SECRET": Self.hookSecret], mode: .router) { (gw) async throws in
            try await gw.registerDevice(id: "phone", key: nil)
            let answers = try await withThrowingTaskGroup(of: TestResponse.self) { group in
                for _ in 0..<12 { group.addTask { try await fire(gw, ["event": "enter", "device_id": "phone"]) } }
                var all: [TestResponse] = []
                for try await a in group { all.append(a) }
                return all
            }
            #expect(answers.filter { $0.json["run_id"] != nil }.count == 1)
            #expect(answers.allSatisfy { $0.json["run_id"] != nil || $0.json["reason"] == "cooldown" || $0.status == 409 })
            await gw.gateway.runs.waitForAll()
        }
        try await withTestGateway(config: Self.config(cooldown: "2s"), directory: directory, clock: clock, environment: ["HOOK_SECRET": Self.hookSecret], mode: .router) { (gw) async throws in
            let cooling = try await fire(gw, ["event": "enter", "device_id": "phone"])
            #expect(cooling.json["reason"] == "cooldown")
            // A Go duration string, as the original app reads it.
            #expect(cooling.json["retry_after"]?.stringValue?.wholeMatch(of: /[12]s/) != nil, "\(cooling.json)")
            clock.advance(by: .milliseconds(1900))
            #expect(try await fire(gw, ["event": "enter", "device_id": "phone"]).json["reason"] == "cooldown", "still inside the two seconds")
            clock.advance(by: .milliseconds(200))
            #expect(try await fire(gw, ["event": "enter", "device_id": "phone"]).json["run_id"] != nil)
        }
    }

    @Test("a fire while the agent runs is 409")
    func alreadyRunning() async throws {
        // The run goes on until the test opens the gate, so the second fire meets it running however slow the machine.
        let gate = TestGateway.makeTemporaryDirectory() + "/open"
        let command = "[\"/bin/sh\", \"-c\", \"while [ ! -e \(gate) ]; do sleep 0.05; done; echo hi\"]"
        try await withTestGateway(config: Self.config(cooldown: "0s", command: command), environment: ["HOOK_SECRET": Self.hookSecret], mode: .router) { (gw) async throws in
            try await gw.registerDevice(id: "phone", key: nil)
            #expect(try await fire(gw, ["event": "enter", "device_id": "phone"]).status == 202)
            let busy = try await fire(gw, ["event": "enter", "device_id": "phone"])
            #expect(busy.status == 409 && busy.errorCode == "already_running")
            #expect(FileManager.default.createFile(atPath: gate, contents: nil))
            await gw.gateway.runs.waitForAll()
        }
    }

    @Test("a webhook runs its agent with the body as input; a wrong secret or unknown hook is the same 401")
    func webhook() async throws {
        try await withTestGateway(config: Self.config(), environment: ["HOOK_SECRET": Self.hookSecret], mode: .router) { (gw) async throws in
            try await gw.registerDevice(id: "phone", key: nil)
            let ok = try await gw.request("POST", "/hooks/hook", body: Array("build 42 passed".utf8), key: .none, headers: ["X-Soulacy-Secret": Self.hookSecret])
            #expect(ok.status == 202)
            _ = try await gw.request("GET", "/api/v1/runs/\(ok.json["run_id"]!.stringValue!)?wait=true")
            let line = try await gw.request("GET", "/api/v1/mobile/deliveries?device_id=phone").json["deliveries"]?.arrayValue?.first
            #expect(line?["body"] == "build 42 passed" && line?["metadata"]?["trigger"] == "webhook")
            #expect(try await gw.request("POST", "/hooks/hook", body: Array("x".utf8), key: .some(Self.hookSecret)).status == 202)
            await gw.gateway.runs.waitForAll()
            let wrong = try await gw.request("POST", "/hooks/hook", body: Array("x".utf8), key: .none, headers: ["X-Soulacy-Secret": "a-long-webhook-secret-valuX"])
            let unknown = try await gw.request("POST", "/hooks/nope", body: Array("x".utf8), key: .none, headers: ["X-Soulacy-Secret": Self.hookSecret])
            let missing = try await gw.request("POST", "/hooks/hook", body: Array("x".utf8), key: .none)
            for r in [wrong, unknown, missing] {
                #expect(r.status == 401)
                #expect(r.errorMessage == "the webhook secret is wrong or the hook does not exist")
            }
        }
    }
}
