import Foundation
import Gateway
import GatewayTestSupport
import APIKit
import Testing

/// The console's agents, health and pairing cards (docs/console-api.md), read as the page reads them.
@Suite("Console: agents, health, pairing", .serialized)
struct ConsoleOverviewTests {
    static let agentsFile = """
        id: brief
        name: Morning brief
        enabled: true
        trigger: cron
        runner: {command: ["/bin/sh", "-c", "echo brief"]}
        schedule: {cron: "30 7 * * 1-5", timezone: Europe/Berlin, output: {channel: mobile, to: all}}
        """

    func agentsDirectory() throws -> String {
        let root = TestGateway.makeTemporaryDirectory() + "/agents"
        try FileManager.default.createDirectory(atPath: root + "/brief", withIntermediateDirectories: true)
        try Self.agentsFile.write(toFile: root + "/brief/SOUL.yaml", atomically: true, encoding: .utf8)
        return root
    }

    @Test("agents: the trigger, the next three fires in the agent's zone, your last runs with duration and outputs, nobody else's")
    func agents() async throws {
        let root = try agentsDirectory()
        try await withTestGateway(agents: root) { gw in
            let priya = try await gw.mintKey(subject: "priya", role: "operator")
            let run = try await gw.request("POST", "/api/v1/agents/brief/run", json: [:], key: .some(priya))
            #expect(run.status == 202 || run.status == 200, "\(run.status) \(run.text)")
            let runID = try #require(run.json["run_id"]?.stringValue ?? run.json["id"]?.stringValue, "\(run.text)")
            #expect(try await gw.request("GET", "/api/v1/runs/\(runID)?wait=true", key: .some(priya)).json["status"] == "succeeded")

            let page = try await gw.request("GET", "/api/v1/console/agents", key: .some(priya))
            #expect(page.status == 200, "\(page.text)")
            let agent = try #require(page.json["agents"]?.arrayValue?.first { $0["id"] == "brief" })
            #expect(agent["name"] == "Morning brief" && agent["enabled"] == true)
            #expect(agent["trigger"]?["kind"] == "cron" && agent["trigger"]?["schedule"] == "30 7 * * 1-5" && agent["trigger"]?["timezone"] == "Europe/Berlin")
            // Each fire is 07:30 on a weekday in Berlin, whatever the host's zone, strictly increasing.
            let fires = try #require(agent["next_fires"]?.arrayValue?.compactMap { $0.stringValue }.compactMap { try? Date($0, strategy: .iso8601) })
            #expect(fires.count == 3 && fires == fires.sorted() && Set(fires).count == 3)
            var berlin = Calendar(identifier: .gregorian)
            berlin.timeZone = try #require(TimeZone(identifier: "Europe/Berlin"))
            for fire in fires {
                let parts = berlin.dateComponents([.hour, .minute, .weekday], from: fire)
                #expect(parts.hour == 7 && parts.minute == 30 && (2...6).contains(parts.weekday ?? 0), "\(fire)")
            }
            let last = try #require(agent["last_runs"]?.arrayValue?.first)
            #expect(last["id"] == .string(runID) && last["status"] == "succeeded" && last["trigger"]?.stringValue != nil)
            #expect((last["duration_ms"]?.numberValue ?? -1) >= 0 && last["started_at"]?.stringValue != nil)
            #expect(last["outputs"]?.arrayValue?.first?["channel"] == "mobile", "\(last)")
            #expect(page.json["problems"]?.arrayValue?.isEmpty == true)

            // The same agent for another person: no runs of priya's.
            let ana = try await gw.mintKey(subject: "ana", role: "viewer")
            let theirs = try await gw.request("GET", "/api/v1/console/agents", key: .some(ana))
            #expect(theirs.json["agents"]?.arrayValue?.first { $0["id"] == "brief" }?["last_runs"]?.arrayValue?.isEmpty == true)
            #expect(try await gw.request("GET", "/api/v1/console/agents", key: .none).status == 401)
        }
    }

    @Test("agents: a file that does not load shows its problem with file:line:col, relative to the agents folder, and goes once fixed")
    func problemsOnReload() async throws {
        let root = try agentsDirectory()
        try await withTestGateway(agents: root) { gw in
            try "id: brief\nname: Morning brief\nenabled: true\nschedule: {cron: \"61 7 * * *\"}\nrunner: {command: [/bin/true]}\n"
                .write(toFile: root + "/brief/SOUL.yaml", atomically: true, encoding: .utf8)
            _ = gw.gateway.catalog.reload()
            let page = try await gw.request("GET", "/api/v1/console/agents")
            let problem = try #require(page.json["problems"]?.arrayValue?.first { $0["severity"] == "error" }, "\(page.text)")
            #expect(problem["file"] == "brief/SOUL.yaml" && problem["line"] == 4 && (problem["column"]?.numberValue ?? 0) > 0, "\(problem)")
            #expect(problem["message"]?.stringValue?.isEmpty == false)
            // The previous version stays in use meanwhile.
            #expect(page.json["agents"]?.arrayValue?.first { $0["id"] == "brief" }?["trigger"]?["schedule"] == "30 7 * * 1-5")

            try Self.agentsFile.write(toFile: root + "/brief/SOUL.yaml", atomically: true, encoding: .utf8)
            _ = gw.gateway.catalog.reload()
            #expect(try await gw.request("GET", "/api/v1/console/agents").json["problems"]?.arrayValue?.isEmpty == true)
        }
    }

    @Test("health: every push service and channel, configured or not, the outboxes' depth and age, no relay when none is set")
    func health() async throws {
        try await withTestGateway { gw in
            let viewer = try await gw.mintKey(subject: "ana", role: "viewer")
            let page = try await gw.request("GET", "/api/v1/console/health", key: .some(viewer))
            #expect(page.status == 200, "\(page.text)")
            #expect(page.json["status"] == "ok" && page.json["database"] == "ok")
            let push = try #require(page.json["push"]?.arrayValue)
            let names = Set(push.compactMap { $0["name"]?.stringValue })
            #expect(names.isSuperset(of: ["apns", "fcm", "relay", "webpush"]))
            #expect(push.allSatisfy { $0["configured"]?.boolValue != nil })
            #expect(page.json["channels"]?.arrayValue?.first?["name"] == "mobile")
            #expect(page.json["outbox"]?["pending"] == 0 && page.json["outbox"]?["oldest_pending_age_seconds"] == .null)
            #expect(page.json["channel_outbox"]?["pending"] == 0)
            #expect(page.json["relay"] == .null)
        }
    }

    @Test("pairing card: the code with its QR as SVG that a real renderer and decoder read back as the app's link")
    func pairingQR() async throws {
        try await withTestGateway { gw in
            let card = try await gw.request("POST", "/api/v1/console/pairing", json: [:])
            #expect(card.status == 200, "\(card.text)")
            let link = try #require(card.json["pair_url"]?.stringValue)
            let svg = try #require(card.json["qr_svg"]?.stringValue)
            #expect(svg.hasPrefix("<svg") && svg.contains("viewBox") && !svg.contains("<script"))
            #expect(card.json["code"]?.stringValue?.count == 16 && card.json["expires_at"]?.stringValue != nil)
            // Drawn by librsvg and read by zbar: the SVG is a QR code any camera reads, not just a picture of one.
            let dir = TestGateway.makeTemporaryDirectory()
            try svg.write(toFile: dir + "/qr.svg", atomically: true, encoding: .utf8)
            let render = try await runProgram("/usr/bin/rsvg-convert", ["-w", "400", "-h", "400", "-b", "white", "-o", dir + "/qr.png", dir + "/qr.svg"])
            #expect(render.status == 0, "\(render.output)")
            let decoded = try await runProgram("/usr/bin/zbarimg", ["--quiet", "--raw", dir + "/qr.png"])
            // (zbar may say on stderr that it found no D-Bus; the code is the one line it prints alone.)
            let lines = decoded.output.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
            #expect(decoded.status == 0 && lines.contains(link), "\(decoded.output)")

            // The same rules as pairing/tokens: a viewer cannot pair for someone else.
            let viewer = try await gw.mintKey(subject: "ana", role: "viewer")
            let refused = try await gw.request("POST", "/api/v1/console/pairing", json: ["name": "Bob"], key: .some(viewer))
            #expect(refused.status == 403)
        }
    }
}
