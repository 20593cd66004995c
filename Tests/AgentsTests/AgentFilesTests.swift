import ChannelTesting
import Foundation
import Gateway
import GatewayTestSupport
import APIKit
import Testing

/// Soulacy agent files in a running gateway: the seed's schedule, hot reload, SIGHUP, one-shots, parked agents,
/// and channels this gateway does not have.
@Suite("Agent files in a running gateway", .serialized)
struct AgentFilesTests {
    static func date(_ iso: String) -> Date { try! Date(iso, strategy: .iso8601) }

    func inbox(_ gw: TestGateway, device: String = "phone") async throws -> [JSONValue] {
        try await gw.request("GET", "/api/v1/mobile/deliveries?device_id=\(device)").json["deliveries"]?.arrayValue ?? []
    }

    func agentIDs(_ gw: TestGateway) async throws -> [String] {
        try await gw.request("GET", "/api/v1/agents").json["agents"]?.arrayValue?.compactMap { $0["id"]?.stringValue }.sorted() ?? []
    }

    func write(_ path: String, _ text: String) throws {
        let url = URL(fileURLWithPath: path)
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        try text.write(to: url, atomically: true, encoding: .utf8)
    }

    @Test("the seed's schedule block in a Soulacy file delivers each fire to every phone, templated as the original")
    func seedSchedule() async throws {
        let file = """
            id: morning
            name: Morning
            enabled: true
            runner:
              command: ["/bin/sh", "-c", "echo Good morning"]
            schedule:
              cron: "0 8 * * *"
              timezone: UTC
              output:
                channel: mobile
                to: all
                template: "{agent_name} ({trigger}): {reply}"
            """
        let clock = ManualClock(Self.date("2026-03-10T07:59:30Z"))
        try await withTestGateway(config: file, clock: clock) { (gw) async throws in
            try await gw.registerDevice(id: "phone", key: nil)
            try await gw.registerDevice(id: "tablet", key: nil)
            #expect(await eventually { clock.sleeperCount > 0 })
            clock.advance(to: Self.date("2026-03-10T08:00:00Z"))
            #expect(try await eventually {
                let phone = try await inbox(gw).count
                let tablet = try await inbox(gw, device: "tablet").count
                return phone == 1 && tablet == 1
            })
            #expect(try await inbox(gw).first?["body"] == "Morning (cron): Good morning")
        }
    }

    @Test("saving, adding and deleting agent files takes effect within a second; a broken save keeps the previous version")
    func hotReload() async throws {
        let dir = TestGateway.makeTemporaryDirectory() + "/agents"
        try write(dir + "/echo/SOUL.yaml", "id: echo\nname: Echo\nenabled: true\nrunner: {command: [/bin/cat]}\n")
        try await withTestGateway(agents: dir) { (gw) async throws in
            #expect(try await agentIDs(gw) == ["echo"])
            // Added: listed and runnable within a second.
            try write(dir + "/shout/SOUL.yaml", "id: shout\nenabled: true\nrunner: {command: [/bin/sh, -c, 'tr a-z A-Z']}\n")
            // Polled every 250 ms and taken once it holds still for one poll: about half a second (no timed
            // assertion here; a loaded CI machine may take longer, and the watch is not a benchmark).
            #expect(try await eventually(timeout: .seconds(30)) { try await agentIDs(gw) == ["echo", "shout"] })
            #expect(try await gw.runAgent("shout", input: "hi")["status"] == "succeeded")
            // Saved with a change: the next run uses it.
            try write(dir + "/echo/SOUL.yaml", "id: echo\nname: Echo two\nenabled: true\nrunner: {command: [/bin/cat]}\n")
            #expect(await eventually(timeout: .seconds(30)) { gw.gateway.config.agent(id: "echo")?.name == "Echo two" })
            // A save that no longer loads: the previous version keeps running.
            try write(dir + "/echo/SOUL.yaml", "id: echo\nname: [broken\n")
            // The watcher read the broken save and kept what it had.
            #expect(await eventually(timeout: .seconds(30)) { gw.gateway.catalog.lastReload?.keptPrevious == [dir + "/echo/SOUL.yaml"] })
            #expect(gw.gateway.config.agent(id: "echo")?.name == "Echo two")
            #expect(try await gw.runAgent("echo", input: "still here")["status"] == "succeeded")
            // Switched off, then deleted.
            try write(dir + "/shout/SOUL.yaml", "id: shout\nenabled: false\nrunner: {command: [/bin/cat]}\n")
            #expect(await eventually(timeout: .seconds(30)) { gw.gateway.config.agent(id: "shout")?.enabled == false })
            let refused = try await gw.request("POST", "/api/v1/agents/shout/run", json: ["input": "x"])
            #expect(refused.status == 409 && refused.errorCode == "agent_disabled")
            #expect(try await agentIDs(gw) == ["echo", "shout"], "a disabled agent is listed (enabled false), as both originals list it")
            try FileManager.default.removeItem(atPath: dir + "/shout")
            #expect(await eventually(timeout: .seconds(30)) { gw.gateway.config.agent(id: "shout") == nil })
            #expect(try await agentIDs(gw) == ["echo"], "a deleted agent is gone from the list")
            #expect(try await gw.request("POST", "/api/v1/agents/shout/run", json: ["input": "x"]).status == 404)
        }
    }

    @Test("a schedule edited or deleted on disk is recomputed: the old time no longer fires, the new one does")
    func scheduleReload() async throws {
        let dir = TestGateway.makeTemporaryDirectory() + "/agents"
        let clock = ManualClock(Self.date("2026-03-10T07:00:00Z"))
        func agent(_ cron: String) -> String {
            "id: tick\nenabled: true\nrunner: {command: [/bin/sh, -c, 'echo tick']}\nschedule: {cron: '\(cron)', timezone: UTC, output: {channel: mobile, to: all}}\n"
        }
        try write(dir + "/tick.yaml", agent("0 8 * * *"))
        try await withTestGateway(agents: dir, clock: clock) { (gw) async throws in
            try await gw.registerDevice(id: "phone", key: nil)
            #expect(await gw.gateway.scheduler.nextFires(after: clock.now())["tick"] == Self.date("2026-03-10T08:00:00Z"))
            try write(dir + "/tick.yaml", agent("30 9 * * *"))
            #expect(await eventually(timeout: .seconds(30)) {
                await gw.gateway.scheduler.nextFires(after: clock.now())["tick"] == Self.date("2026-03-10T09:30:00Z")
            })
            try await Task.sleep(for: .milliseconds(200))
            clock.advance(to: Self.date("2026-03-10T08:00:00Z"))
            await settled(gw, clock)
            #expect(try await inbox(gw).isEmpty, "the old 08:00 schedule is gone")
            clock.advance(to: Self.date("2026-03-10T09:30:00Z"))
            #expect(try await eventually { try await inbox(gw).count == 1 })
            try FileManager.default.removeItem(atPath: dir + "/tick.yaml")
            #expect(await eventually(timeout: .seconds(30)) { await gw.gateway.scheduler.nextFires(after: clock.now())["tick"] == nil })
            clock.advance(to: Self.date("2026-03-11T09:30:00Z"))
            try await Task.sleep(for: .milliseconds(300))
            #expect(try await inbox(gw).count == 1, "a deleted agent no longer fires")
        }
    }

    @Test("SIGHUP reloads the agent files of a running soulacy (with polling off)")
    func sighup() async throws {
        let dir = TestGateway.makeTemporaryDirectory()
        let process = try GatewayProcess(directory: dir, config: "id: one\nenabled: true\nrunner: {command: [/bin/cat]}\n",
                                         environment: ["SOULACY_AGENT_WATCH": "off"])
        let key = try #require(try await process.start())
        defer { process.terminate() }
        @Sendable func ids() async throws -> [String] {
            try await process.call("GET", "/api/v1/agents", key: key).json["agents"]?.arrayValue?.compactMap { $0["id"]?.stringValue } ?? []
        }
        let first = try await ids()
        #expect(first == ["one"])
        try "id: two\nenabled: true\nrunner: {command: [/bin/cat]}\n".write(toFile: process.configPath, atomically: true, encoding: .utf8)
        try await Task.sleep(for: .milliseconds(800))
        let unchanged = try await ids()
        #expect(unchanged == ["one"], "with polling off, nothing changes until the signal")
        kill(process.pid, SIGHUP)
        #expect(try await eventually(timeout: .seconds(30)) { try await ids() == ["two"] })
        // The log line is written after the catalog swaps in, by a batched writer: wait for it rather than race it.
        #expect(await eventually(timeout: .seconds(30)) { process.output.contains("agents reloaded: added two; removed one") })
    }

    @Test("a one-shot whose instant has passed fires once at start, and never again after a restart")
    func oneShot() async throws {
        let directory = TestGateway.makeTemporaryDirectory()
        let file = """
            id: once
            enabled: true
            trigger: oneshot
            runner: {command: [/bin/sh, -c, 'echo once']}
            schedule:
              at: 2026-03-10T06:00:00Z
              output: {channel: mobile, to: all}
            """
        let clock = ManualClock(Self.date("2026-03-10T07:00:00Z"))
        try await withTestGateway(config: file, directory: directory, clock: clock) { (gw) async throws in
            try await gw.registerDevice(id: "phone", key: nil)
            #expect(try await eventually { try await inbox(gw).count == 1 })
        }
        try await withTestGateway(config: file, directory: directory, clock: clock) { (gw) async throws in
            try await Task.sleep(for: .milliseconds(500))
            #expect(try await inbox(gw).count == 1, "the fire was recorded: a restart does not repeat it")
            #expect(await gw.gateway.scheduler.nextFires(after: clock.now())["once"] == nil)
        }
    }

    @Test("a future one-shot waits for its instant")
    func futureOneShot() async throws {
        let file = "id: later\nenabled: true\ntrigger: oneshot\nrunner: {command: [/bin/sh, -c, 'echo later']}\nschedule: {at: '2026-03-10T09:00:00Z', output: {channel: mobile, to: all}}\n"
        let clock = ManualClock(Self.date("2026-03-10T07:00:00Z"))
        try await withTestGateway(config: file, clock: clock) { (gw) async throws in
            try await gw.registerDevice(id: "phone", key: nil)
            #expect(await gw.gateway.scheduler.nextFires(after: clock.now())["later"] == Self.date("2026-03-10T09:00:00Z"))
            #expect(await eventually { clock.sleeperCount > 0 })
            #expect(try await inbox(gw).isEmpty)
            clock.advance(to: Self.date("2026-03-10T09:00:00Z"))
            #expect(try await eventually { try await inbox(gw).count == 1 })
        }
    }

    @Test("disabled and parked agents are not scheduled and refuse runs; a channel this gateway lacks is recorded on the run")
    func parkedAndUndeliverable() async throws {
        let dir = TestGateway.makeTemporaryDirectory() + "/agents"
        try write(dir + "/off.yaml", "id: off\nrunner: {command: [/bin/cat]}\nschedule: {cron: '* * * * *'}\n")
        try write(dir + "/bad.yaml", "id: bad\nenabled: true\ntrigger: cron\nrunner: {command: [/bin/cat]}\nschedule: {cron: '99 * * * *'}\n")
        try write(dir + "/tg.yaml", "id: tg\nenabled: true\nrunner: {command: [/bin/sh, -c, 'echo hi']}\nschedule: {cron: '0 7 * * *', output: {channel: telegram, to: 123456789}}\n")
        try await withTestGateway(agents: dir) { (gw) async throws in
            #expect(await gw.gateway.scheduler.nextFires(after: Date()).keys.sorted() == ["tg"])
            for id in ["off", "bad"] {
                let refused = try await gw.request("POST", "/api/v1/agents/\(id)/run", json: ["input": "x"])
                #expect(refused.status == 409 && refused.errorCode == "agent_disabled", "\(id): \(refused.json)")
            }
            let bad = try await gw.request("POST", "/api/v1/agents/bad/run", json: [:])
            #expect(bad.errorMessage?.contains("minute value 99") == true)
            let run = try await gw.runAgent("tg", input: "")
            #expect(run["status"] == "succeeded" && run["note"] == "no channel 'telegram' registered" && run["delivery_id"] == .null)
        }
    }

    @Test("Soulacy's webhook: POST /api/v1/webhooks/<id> with any JSON runs the agent on the mapped text and answers with its reply")
    func soulacyWebhook() async throws {
        let dir = TestGateway.makeTemporaryDirectory() + "/agents"
        try write(dir + "/ci.yaml", "id: ci\nenabled: true\ntrigger: webhook\nrunner: {command: [/bin/cat]}\n")
        try write(dir + "/alerts.yaml", "id: alerts\nenabled: true\ntrigger: webhook\nwebhook: {text_path: data.summary}\nrunner: {command: [/bin/cat]}\n")
        try write(dir + "/nightly.yaml", "id: nightly\nenabled: true\nrunner: {command: [/bin/cat]}\nschedule: {cron: '0 3 * * *'}\n")
        try await withTestGateway(agents: dir) { (gw) async throws in
            let ci = try await gw.request("POST", "/api/v1/webhooks/ci", json: ["issue": ["title": "Build 42 broke"], "action": "opened"])
            #expect(ci.status == 200 && ci.json["reply"] == "Build 42 broke" && ci.json["parts"] == [["type": "text", "text": "Build 42 broke"]], "\(ci.json)")
            #expect(ci.json["user_id"] == "owner" && ci.json["session_id"]?.stringValue?.isEmpty == false)
            let mapped = try await gw.request("POST", "/api/v1/webhooks/alerts", json: ["text": "not this", "data": ["summary": "disk 91% full"]])
            #expect(mapped.json["reply"] == "disk 91% full")
            let raw = try await gw.request("POST", "/api/v1/webhooks/ci", json: ["level": 3])
            #expect(raw.json["reply"] == "{\"level\":3}", "no known field: the compact JSON")
            #expect(try await gw.request("POST", "/api/v1/webhooks/nightly", json: [:]).status == 409)
            #expect(try await gw.request("POST", "/api/v1/webhooks/nope", json: [:]).status == 404)
            #expect(try await gw.request("POST", "/api/v1/webhooks/ci", json: [:], key: .none).status == 401)
            let viewer = try await gw.mintKey(subject: "kid", role: "viewer")
            #expect(try await gw.request("POST", "/api/v1/webhooks/ci", json: [:], key: .some(viewer)).status == 403)
        }
    }

    @Test("examples/agents, what scripts/serve runs: four agents load cleanly; the LLM one says plainly it needs a provider")
    func examples() async throws {
        let dir = RepositoryPaths.root + "/examples/agents"
        let loaded = AgentFiles.load(path: dir, destinations: Gateway.destinationValidators, environment: [:])
        #expect(loaded.problems.isEmpty, "\(loaded.problems)")
        #expect(loaded.config.agents.map(\.trigger) == [.channel, .webhook, .location, .cron])
        // Nothing listens on this port: the run fails with how to fix it.
        try await withTestGateway(agents: dir, environment: ["OLLAMA_HOST": "127.0.0.1:\(freePort())"]) { (gw) async throws in
            let run = try await gw.runAgent("assistant", input: "hello")
            let error = run["error"]?.stringValue ?? ""
            #expect(run["status"] == "failed" && error.hasPrefix("could not reach ollama at http://127.0.0.1:") && error.contains("ollama serve"), "\(error)")
            let hook = try await gw.request("POST", "/api/v1/webhooks/ci-alerts", json: ["alert": ["title": "deploy failed"]])
            #expect(hook.json["reply"] == "CI: deploy failed")
        }
    }
}
