import Foundation
import Gateway
import GatewayTestSupport
import JSON
import PostgreSQL
import SQLite
import Testing

/// `soulacy migrate`: a SQLite gateway with phones, lines, receipts, facts, approvals and runs copied into PostgreSQL,
/// then served from there with the same data directory: the same owner key, inbox, read states and facts.
@Suite("Gateway migrate", .serialized)
struct GatewayMigrateTests {
    /// What the API shows of the owner's gateway: the inbox of each device and of the person, facts and approvals.
    static func views(_ gw: TestGateway) async throws -> [String: JSONValue] {
        var views: [String: JSONValue] = [:]
        for path in ["/api/v1/mobile/deliveries?device_id=owner-phone", "/api/v1/mobile/deliveries?device_id=owner-tablet",
                     "/api/v1/mobile/devices", "/api/v1/memory/facts", "/api/v1/approvals?state=all", "/api/v1/api-keys"] {
            let answer = try await gw.request("GET", path)
            #expect(answer.status == 200, "\(path): \(answer.status) \(answer.json)")
            // The facts' answer names the store's engine (`provider`): the one field that must differ.
            var view = answer.json
            if case .object(var fields) = view, fields["provider"] != nil {
                fields["provider"] = nil
                view = .object(fields)
            }
            views[path] = view
        }
        return views
    }

    @Test("a SQLite gateway copied into PostgreSQL serves the same owner key, inbox, read states, devices, facts and approvals; a second copy into the same database is refused")
    func migrateAndServe() async throws {
        let directory = TestGateway.makeTemporaryDirectory()
        let sqlite = try await TestGateway.start(directory: directory, mode: .router)
        let phone: JSONValue = ["id": "owner-phone", "name": "Phone \u{1F4F1}", "platform": "ios", "notifications_enabled": true,
                                "push_token": .string(String(repeating: "ab", count: 32)), "push_environment": "production"]
        #expect(try await sqlite.request("POST", "/api/v1/mobile/devices", json: phone).status == 201)
        #expect(try await sqlite.request("POST", "/api/v1/mobile/devices", json: ["id": "owner-tablet", "name": "Tablet", "platform": "ios",
                                                                                  "notifications_enabled": false]).status == 201)
        var lines: [String] = []
        for (n, to) in ["user:owner", "all", "device:owner-phone", "user:owner"].enumerated() {
            let sent = try await sqlite.request("POST", "/api/v1/channels/mobile/test", json: ["to": .string(to), "title": .string("Line \(n) ✓"), "body": .string("Body \(n)")])
            lines.append(try #require(sent.json["delivery_id"]?.stringValue))
        }
        #expect(try await sqlite.request("POST", "/api/v1/mobile/deliveries/\(lines[1])/read", json: ["device_id": "owner-phone"]).status == 200)
        #expect(try await sqlite.request("POST", "/api/v1/memory/facts", json: ["content": "Prefers tea", "category": "preference"]).status == 201)
        _ = try await sqlite.request("POST", "/api/v1/approvals", json: ["agent_id": "echo", "tool": "t", "call_id": "call_migrated", "wait": false])
        #expect(try await sqlite.request("POST", "/approvals/call_migrated/approve").json["state"] == "approved")
        #expect(try await sqlite.request("POST", "/api/v1/agents/echo/trigger", json: ["input": "hello"]).status == 200)
        let before = try await Self.views(sqlite)
        await sqlite.stop()
        // A run a crash left running, as the file holds it after a kill -9.
        let file = try Connection(path: directory + "/data/soulacy.db")
        _ = try file.run("INSERT INTO runs (id, agent_id, session_id, trigger, status, started_at, subject) VALUES ('run_crashed', 'echo', 'ses_crashed', 'api', 'running', 1, 'owner')")
        // More rows than one statement copies (7,500 of run_events' four columns): the copy goes page by page.
        let eventsBefore = try file.query("SELECT count(*) AS n FROM run_events").first?.int("n") ?? 0
        _ = try file.run("""
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000)
            INSERT INTO run_events (run_id, at, kind, detail) SELECT 'run_crashed', i, 'progress', 'step ' || i FROM n
            """)
        file.close()

        let database = try await PostgresCluster.shared().makeDatabase()
        let report = try await GatewayMigrationStore.copy(sqlitePath: directory + "/data/soulacy.db", to: database.url)
        #expect(report.rows["mobile_deliveries"] == 4 && report.rows["mobile_devices"] == 2 && report.rows["mobile_receipts"] == 1
                && report.rows["approvals"] == 1 && (report.rows["api_keys"] ?? 0) >= 1, "\(report.rows)")
        #expect(report.inboxesCompared >= 1, "\(report)")
        #expect(report.skipped.isEmpty, "tables of the SQLite file left behind: \(report.skipped)")
        #expect(report.interruptedRuns == 1 && report.rows["runs"] == 2, "\(report)")
        #expect(report.rows["run_events"] == Int(eventsBefore) + 20000, "\(String(describing: report.rows["run_events"])) run events copied")

        // The same data directory (its keys) on PostgreSQL: nothing new minted, everything as it was.
        let postgres = try await TestGateway.start(directory: directory, environment: ["SOULACY_DATABASE_URL": database.url], mode: .router)
        #expect(try await postgres.gateway.bootstrapAdminKey() == nil, "a second owner key was minted on the copy")
        let after = try await Self.views(postgres)
        for (path, view) in before {
            #expect(after[path] == view, "\(path) differs:\nSQLite: \(view)\nPostgreSQL: \(String(describing: after[path]))")
        }
        let crashed = try await postgres.request("GET", "/api/v1/runs/run_crashed")
        #expect(crashed.json["status"] == "interrupted", "\(crashed.json)")
        let health = try await postgres.request("GET", "/api/v1/health")
        #expect(health.json["engine"] == "postgresql", "\(health.json)")
        // Serial columns go on after the copied rows: a new line is written and listed first.
        let fresh = try await postgres.request("POST", "/api/v1/channels/mobile/test", json: ["to": "user:owner", "title": "New", "body": "After"])
        #expect(fresh.status == 201, "\(fresh.json)")
        let page = try await postgres.request("GET", "/api/v1/mobile/deliveries?device_id=owner-phone")
        #expect(page.json["deliveries"]?[0]?["id"] == fresh.json["delivery_id"], "\(page.json)")
        await postgres.stop()

        await #expect(throws: GatewayMigrationStore.Failure.self) {
            _ = try await GatewayMigrationStore.copy(sqlitePath: directory + "/data/soulacy.db", to: database.url)
        }
    }

    @Test("soulacy migrate copies into an empty database, prints no password, and without a URL says what it needs; soulacy pair and console-code write to the PostgreSQL database a gateway redeems from")
    func command() async throws {
        let directory = TestGateway.makeTemporaryDirectory()
        let gateway = try await TestGateway.start(directory: directory, mode: .router)
        _ = try await gateway.request("POST", "/api/v1/channels/mobile/test", json: ["to": "all", "title": "One", "body": "Line"])
        await gateway.stop()
        let database = try await PostgresCluster.shared().makeDatabase()
        // The binary runs under this run's sanitizer settings, without the developer's SOULACY_DATABASE_URL.
        let environment = sanitizerEnvironment().merging(["PATH": "/usr/bin:/bin"]) { $1 }
        func runSoulacy(_ arguments: [String]) async throws -> (status: Int32, output: String) {
            try await runProgram(RepositoryPaths.soulacyBinary, arguments, environment: environment)
        }
        let copied = try await runSoulacy(["migrate", "--from", directory + "/data", "--to", database.url])
        #expect(copied.status == 0 && copied.output.contains("Copied") && copied.output.contains("mobile_deliveries: 1 rows"), "\(copied.output)")
        if let password = URLComponents(string: database.url)?.password, !password.isEmpty {
            #expect(!copied.output.contains(password), "the password was printed")
        }
        let again = try await runSoulacy(["migrate", "--from", directory + "/data", "--to", database.url])
        #expect(again.status == 1 && again.output.contains("not empty"), "\(again.output)")
        let missing = try await runSoulacy(["migrate", "--from", directory + "/data"])
        #expect(missing.status == 64 && missing.output.contains("--to"), "\(missing.output)")

        // `soulacy pair` and `soulacy console-code` write to the gateway's PostgreSQL database, not a file beside it:
        // what they print is redeemed through a gateway on that database.
        let onPostgres = environment.merging(["SOULACY_DATABASE_URL": database.url]) { $1 }
        let paired = try await runProgram(RepositoryPaths.soulacyBinary, ["pair", "--data", directory + "/data", "--name", "Robin"], environment: onPostgres)
        let pairingCode = paired.output.split(separator: "\n").drop { !$0.hasPrefix("Pairing code for Robin") }.dropFirst().first
            .map { $0.trimmingCharacters(in: .whitespaces) }
        let consoleCode = try await runProgram(RepositoryPaths.soulacyBinary, ["console-code", "--data", directory + "/data"], environment: onPostgres)
        let signInCode = consoleCode.output.split(separator: "\n").drop { !$0.hasPrefix("Console sign-in code") }.dropFirst().first
            .map { $0.trimmingCharacters(in: .whitespaces) }
        #expect(paired.status == 0 && pairingCode != nil && consoleCode.status == 0 && signInCode != nil, "\(paired.output)\n\(consoleCode.output)")
        let served = try await TestGateway.start(directory: directory, environment: ["SOULACY_DATABASE_URL": database.url], mode: .router)
        let redeemed = try await served.request("POST", "/api/v1/pairing/redeem", json: ["code": .string(pairingCode ?? ""), "name": "Robin's phone"], key: .none)
        #expect(redeemed.status == 200 || redeemed.status == 201, "\(redeemed.status) \(redeemed.json)")
        #expect(redeemed.json["token"]?.stringValue != nil, "\(redeemed.json)")
        let signedIn = try await served.request("POST", "/api/v1/console/session", json: ["code": .string(signInCode ?? "")], key: .none)
        #expect(signedIn.status == 200, "\(signedIn.status) \(signedIn.json)")
        await served.stop()
    }
}
