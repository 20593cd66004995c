import ChannelTesting
import Foundation
import GatewayTestSupport
import APIKit
import Testing

/// SOUL.yaml schedules fire on the (controlled) clock and their output lands in the durable inbox.
@Suite("Scheduled delivery", .serialized)
struct ScheduleDeliveryTests {
    static func config(cron: String = "0 8 * * *", command: String = "[\"/bin/echo\", \"scheduled hello\"]", to: String = "all", extra: String = "") -> String {
        """
        agents:
          - id: brief
            name: Brief
            runner:
              command: \(command)
              timeout: 30s
            schedule:
              cron: "\(cron)"
              timezone: Europe/Berlin
        \(extra)
              output:
                channel: mobile
                to: \(to)
                template: "Brief: {reply}"
        """
    }

    static func date(_ iso: String) -> Date { try! Date(iso, strategy: .iso8601) }

    func inbox(_ gw: TestGateway, device: String = "phone") async throws -> [JSONValue] {
        try await gw.request("GET", "/api/v1/mobile/deliveries?device_id=\(device)").json["deliveries"]?.arrayValue ?? []
    }

    @Test("a cron fire at 08:00 Berlin runs the agent and stores its templated output for every device")
    func fires() async throws {
        // 06:59:30 UTC is 07:59:30 in Berlin (CET) on 10 March 2026.
        let clock = ManualClock(Self.date("2026-03-10T06:59:30Z"))
        try await withTestGateway(config: Self.config(), clock: clock) { (gw) async throws in
            try await gw.registerDevice(id: "phone", key: nil)
            #expect(await eventually { clock.sleeperCount >= 1 })
            #expect(try await inbox(gw).isEmpty)
            clock.advance(to: Self.date("2026-03-10T07:00:00Z"))
            #expect(try await eventually { try await inbox(gw).count == 1 })
            let line = try #require(try await inbox(gw).first)
            #expect(line["body"] == "Brief: scheduled hello")
            #expect(line["agent_id"] == "brief")
            #expect(line["metadata"]?["trigger"] == "cron")
            // Nothing more until the next day's 08:00.
            clock.advance(to: Self.date("2026-03-10T12:00:00Z"))
            await settled(gw, clock)
            #expect(try await inbox(gw).count == 1)
            clock.advance(to: Self.date("2026-03-11T07:00:00Z"))
            #expect(try await eventually { try await inbox(gw).count == 2 })
        }
    }

    @Test("a fire while the previous run is still going is skipped: runs never overlap")
    func noOverlap() async throws {
        let clock = ManualClock(Self.date("2026-03-10T06:59:30Z"))
        // The run goes on until the test opens the gate, so the second fire meets it running however slow the machine.
        let gate = TestGateway.makeTemporaryDirectory() + "/open"
        let slow = "[\"/bin/sh\", \"-c\", \"while [ ! -e \(gate) ]; do sleep 0.05; done; echo slow done\"]"
        try await withTestGateway(config: Self.config(cron: "* * * * *", command: slow), clock: clock) { (gw) async throws in
            try await gw.registerDevice(id: "phone", key: nil)
            #expect(await eventually { clock.sleeperCount >= 1 })
            clock.advance(to: Self.date("2026-03-10T07:00:00Z"))
            #expect(await eventually { await gw.gateway.runs.isRunning("brief") })
            #expect(await eventually { clock.sleeperCount >= 1 })
            clock.advance(to: Self.date("2026-03-10T07:01:00Z"))  // fires while the first run waits at the gate
            let skipped = "soulacy_cron_fires_total{outcome=\"skipped_running\"} 1"
            #expect(await eventually(timeout: .seconds(30)) { (try? await gw.request("GET", "/metrics").text.contains(skipped)) == true })
            #expect(FileManager.default.createFile(atPath: gate, contents: nil))
            #expect(await eventually(timeout: .seconds(30)) { await !gw.gateway.runs.isRunning("brief") })
            let runs = try gw.gateway.database.read { db in try db.query("SELECT COUNT(*) AS n FROM runs WHERE agent_id = 'brief'").first?.int("n") }
            #expect(runs == 1)
            #expect(try await inbox(gw).count == 1)
        }
    }

    @Test("a fire another gateway on the same database already ran is not run again; the next one is")
    func fireRunOnceAcrossGateways() async throws {
        let clock = ManualClock(Self.date("2026-03-10T06:59:30Z"))
        try await withTestGateway(config: Self.config(), clock: clock) { (gw) async throws in
            try await gw.registerDevice(id: "phone", key: nil)
            #expect(await eventually { clock.sleeperCount >= 1 })
            // Another node took the 08:00 Berlin fire: its row is in the shared table.
            let taken = Self.date("2026-03-10T07:00:00Z")
            try gw.gateway.database.write { db in
                _ = try db.run("INSERT INTO schedule_fires (agent_id, fire_at, run_id) VALUES ('brief', ?, 'run_elsewhere')", Int64(taken.timeIntervalSince1970 * 1000))
            }
            clock.advance(to: taken)
            await settled(gw, clock)
            let runs = { @Sendable in try gw.gateway.database.read { db in try db.query("SELECT COUNT(*) AS n FROM runs WHERE agent_id = 'brief'").first?.int("n") } }
            #expect(try runs() == 0)
            #expect(try await inbox(gw).isEmpty)
            clock.advance(to: Self.date("2026-03-11T07:00:00Z"))
            #expect(try await eventually { try await inbox(gw).count == 1 })
            #expect(try runs() == 1)
        }
    }

    @Test("run_missed_on_startup replays one fire missed while the gateway was down, within the window")
    func missedOnStartup() async throws {
        let directory = TestGateway.makeTemporaryDirectory()
        let config = Self.config(extra: "      run_missed_on_startup: true\n      missed_startup_window: 6h")
        // First start on the 10th at 06:00 UTC records the baseline; the gateway is then down over 08:00 Berlin.
        try await withTestGateway(config: config, directory: directory, clock: ManualClock(Self.date("2026-03-10T06:00:00Z"))) { (gw) async throws in
            try await gw.registerDevice(id: "phone", key: nil)
            #expect(await eventually { (try? await gw.gateway.runStore.lastFire(agentID: "brief")) != nil })
        }
        try await withTestGateway(config: config, directory: directory, clock: ManualClock(Self.date("2026-03-10T09:00:00Z"))) { (gw) async throws in
            #expect(try await eventually { try await inbox(gw).count == 1 })
            #expect(try await inbox(gw).first?["metadata"]?["trigger"] == "cron-missed")
        }
        // Restarting again does not replay the same fire a second time.
        let later = ManualClock(Self.date("2026-03-10T09:30:00Z"))
        try await withTestGateway(config: config, directory: directory, clock: later) { (gw) async throws in
            await settled(gw, later)
            #expect(try await inbox(gw).count == 1)
        }
        // Down past the window: nothing is replayed.
        let pastWindow = ManualClock(Self.date("2026-03-11T20:00:00Z"))
        try await withTestGateway(config: config, directory: directory, clock: pastWindow) { (gw) async throws in
            await settled(gw, pastWindow)
            #expect(try await inbox(gw).count == 1)
        }
    }

    @Test("a failing run sends Soulacy's failure notice: the default template with the error; a custom one with the error only on include_error")
    func failureNotice() async throws {
        let config = """
            agents:
              - id: broken
                name: Broken
                runner:
                  command: ["/bin/sh", "-c", "echo disk-full-detail >&2; exit 3"]
                notify_on_failure:
                  channel: mobile
                  to: all
              - id: quiet
                runner:
                  command: ["/bin/sh", "-c", "echo quiet-detail >&2; exit 4"]
                notify_on_failure: {channel: mobile, to: all, template: "{agent_name} stopped at {timestamp}"}
              - id: loud
                runner:
                  command: ["/bin/sh", "-c", "echo loud-detail >&2; exit 5"]
                notify_on_failure: {channel: mobile, to: all, template: "{agent_id} stopped", include_error: true}
            """
        try await withTestGateway(config: config) { (gw) async throws in
            try await gw.registerDevice(id: "phone", key: nil)
            let run = try await gw.runAgent("broken", input: "")
            #expect(run["status"] == "failed")
            #expect(run["error"]?.stringValue?.contains("status 3") == true)
            var lines = try await inbox(gw)
            #expect(lines.count == 1)
            #expect(lines.first?["title"] == "Broken failed")
            let body = lines.first?["body"]?.stringValue ?? ""
            #expect(body.hasPrefix("🚨 Soulacy agent broken failed at 20") && body.contains("status 3: disk-full-detail"), "\(body)")

            _ = try await gw.runAgent("quiet", input: "")
            lines = try await inbox(gw)
            let quiet = lines.first { $0["title"] == "quiet failed" }?["body"]?.stringValue ?? ""
            #expect(quiet.hasPrefix("quiet stopped at 20") && !quiet.contains("quiet-detail") && !quiet.contains("{timestamp}"), "\(quiet)")

            _ = try await gw.runAgent("loud", input: "")
            lines = try await inbox(gw)
            let loud = lines.first { $0["title"] == "loud failed" }?["body"]?.stringValue ?? ""
            #expect(loud.hasPrefix("loud stopped\n\n") && loud.contains("status 5: loud-detail"), "\(loud)")
        }
    }
}

/// The scheduler has looked at the manual clock (it sleeps on it again) and every run it started has finished:
/// what has not happened by now will not, without sleeping and hoping.
func settled(_ gw: TestGateway, _ clock: ManualClock) async {
    _ = await eventually { clock.sleeperCount >= 1 }
    await gw.gateway.runs.waitForAll()
}
