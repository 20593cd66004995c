import Foundation
import GatewayTestSupport
import JSON
import PostgreSQL
import Synchronization
import Testing

/// Three real `soulacy serve` processes on one PostgreSQL database and one shared data directory, with clients spread
/// over them and an APNs stand-in, as the several-gateways issue asks: every acknowledged line stored once and woken,
/// a once-a-second cron fired once a second in all, an approval asked on one node answered when another decides, an
/// `Idempotency-Key` replayed by another node; then one node killed with SIGKILL mid-burst, and the same holds, its
/// claimed wake-ups taken over once its lease runs out.
@Suite("Gateway processes across nodes", .serialized)
struct GatewayProcessesAcrossNodesTests {
    /// The test kit's echo agent, and a once-a-second cron.
    static let config = TestGateway.defaultConfig + """

          - id: ticker
            name: Ticker
            runner:
              command: ["/bin/true"]
              timeout: 10s
            schedule:
              cron: "* * * * * *"
        """
    static let token = String(repeating: "e1", count: 32)

    /// Line ids the gateway acknowledged (201), in any order.
    final class Acknowledged: Sendable {
        private let ids = Mutex<[String]>([])
        func add(_ id: String) { ids.withLock { $0.append(id) } }
        var all: [String] { ids.withLock { $0 } }
    }

    @Test("three processes are one gateway; after SIGKILL of one mid-burst every acknowledged line is stored once and woken, and the cron fires once a second")
    func threeProcesses() async throws {
        let database = try await PostgresCluster.shared().makeDatabase()
        let apns = try await APNsStandIn.start()
        defer { apns.stop() }
        let directory = TestGateway.makeTemporaryDirectory()
        let nodes = try ["node-a", "node-b", "node-c"].map { node in
            try GatewayProcess(directory: directory, config: Self.config, environment: apns.environment.merging([
                "SOULACY_DATABASE_URL": database.url, "SOULACY_NODE_ID": node, "SOULACY_OUTBOX_LEASE_SECONDS": "3",
                "SOULACY_LONG_POLL_SECONDS": "20", "SOULACY_TLS": "off", "SOULACY_AGENT_WATCH": "off"]) { $1 })
        }
        defer { for node in nodes { node.kill9() } }
        // Started together on an empty database and data directory: one of them mints the owner's key.
        async let startA = nodes[0].start(), startB = nodes[1].start(), startC = nodes[2].start()
        let printed = try await [startA, startB, startC]
        #expect(printed.compactMap { $0 }.count == 1, "owner keys printed: \(printed.compactMap { $0 }.count)")
        let key = try #require(printed.compactMap { $0 }.first)
        let (a, b, c) = (nodes[0], nodes[1], nodes[2])
        for (node, name) in zip(nodes, ["node-a", "node-b", "node-c"]) {
            let health = try await node.call("GET", "/api/v1/health", key: key)
            #expect(health.json["node"]?.stringValue == name && health.json["engine"] == "postgresql", "\(health.json)")
        }

        let phone: JSONValue = ["id": "owner-phone", "name": "Phone", "platform": "ios", "notifications_enabled": true,
                                "push_token": .string(Self.token), "push_environment": "production"]
        #expect(try await a.call("POST", "/api/v1/mobile/devices", key: key, json: phone).status == 201)

        // An approval asked on A, decided on C: A's waiting request hears it.
        async let asked = a.call("POST", "/api/v1/approvals", key: key, json: ["agent_id": "echo", "tool": "t", "call_id": "call_nodes", "timeout_seconds": 600])
        #expect(await eventually { (try? await c.call("GET", "/api/v1/approvals/call_nodes", key: key))?.json["state"] == "pending" })
        #expect(try await c.call("POST", "/approvals/call_nodes/approve", key: key).json["state"] == "approved")
        let answer = try await asked
        #expect(answer.json["approved"] == true, "A's waiter heard \(answer.json)")

        // A retry that lands on another node is answered from the shared log.
        let tablet: JSONValue = ["id": "owner-tablet", "name": "Tablet", "platform": "ios", "notifications_enabled": false]
        let first = try await a.call("POST", "/api/v1/mobile/devices", key: key, json: tablet, headers: ["Idempotency-Key": "tablet-once"])
        let again = try await b.call("POST", "/api/v1/mobile/devices", key: key, json: tablet, headers: ["Idempotency-Key": "tablet-once"])
        #expect(first.status == 201 && again.status == 201 && again.json == first.json, "\(first) then \(again)")

        // A burst of lines spread over the three nodes; B is killed once 30 are acknowledged, while APNs answers
        // slowly enough that B holds claimed wake-ups in flight.
        try await apns.delay(milliseconds: 1000)
        let pool = try PostgresPool(url: database.url, size: 1)
        defer { pool.close() }
        @Sendable func query(_ sql: String, _ arguments: [any PostgresBindable] = []) async throws -> [PostgresRow] {
            try await pool.withConnection { try $0.query(sql, arguments: arguments) }
        }
        let acknowledged = Acknowledged()
        let burst = Task {
            await withTaskGroup(of: Void.self) { group in
                for worker in 0..<6 {
                    group.addTask {
                        for n in 0..<25 {
                            let node = nodes[(worker + n) % 3]
                            let sent = try? await node.call("POST", "/api/v1/channels/mobile/test", key: key,
                                                            json: ["to": "user:owner", "title": "Line", "body": .string("worker \(worker) line \(n)")])
                            if sent?.status == 201, let id = sent?.json["delivery_id"]?.stringValue { acknowledged.add(id) }
                        }
                    }
                }
            }
        }
        #expect(await eventually(timeout: .seconds(60)) { acknowledged.all.count >= 30 }, "\(acknowledged.all.count) acknowledged")
        // What B has claimed and not settled just before it dies (APNs answers after a second, so it holds some),
        // read first: read after the kill, a stall past the 3 s lease would find the rows already taken over.
        let heldByB = try await query("SELECT count(*) AS n FROM mobile_push_outbox WHERE state = 'pending' AND lease_owner LIKE $1",
                                      ["%|\(b.pid)|%"]).first?.int("n") ?? 0
        b.kill9()
        await burst.value
        let acked = acknowledged.all
        #expect(acked.count >= 60, "only \(acked.count) lines were acknowledged by the two nodes left")

        try await apns.delay(milliseconds: 0)
        let ackedList = acked.joined(separator: ",")
        // Every acknowledged line is stored exactly once, and readable through a node that lived.
        let stored = try await query("SELECT id FROM mobile_deliveries WHERE id = ANY(string_to_array($1, ','))", [ackedList]).compactMap { $0.string("id") }
        #expect(Set(acked).isSubset(of: Set(stored)) && Set(acked).count == acked.count, "\(Set(acked).subtracting(stored).count) acknowledged lines missing")
        let sample = try #require(acked.last)
        let read = try await c.call("GET", "/api/v1/mobile/deliveries/\(sample)?device_id=owner-phone", key: key)
        #expect(read.status == 200, "\(read)")

        // Every wake-up is sent: B's claimed rows pass to A and C once its 3 s lease has run out.
        let settled = await eventually(timeout: .seconds(60)) {
            (try? await query("SELECT count(*) AS n FROM mobile_push_outbox WHERE state <> 'sent'").first?.int("n")) == 0
        }
        let rows = try await query("SELECT wake_id, delivery_id FROM mobile_push_outbox WHERE delivery_id = ANY(string_to_array($1, ','))", [ackedList])
        #expect(settled && Set(rows.compactMap { $0.string("delivery_id") }) == Set(acked), "wake-ups not all sent, or not one per acknowledged line")
        let received = try await apns.requests().compactMap { $0["headers"]?["apns-id"]?.stringValue?.lowercased() }
        let wakeIDs = rows.compactMap { $0.string("wake_id")?.lowercased() }
        #expect(Set(wakeIDs).isSubset(of: Set(received)), "\(Set(wakeIDs).subtracting(received).count) wake-ups never reached APNs")
        // Only a wake-up B had sent but not yet recorded when it died may go twice.
        let repeated = received.count - Set(received).count
        #expect(repeated <= 256, "\(repeated) wake-ups were sent more than once")

        // The cron: one run per scheduled second across all nodes, none twice, through the kill (watched for 10 fires).
        _ = await eventually(timeout: .seconds(30)) {
            (try? await query("SELECT count(*) AS n FROM schedule_fires WHERE agent_id = 'ticker'").first?.int("n") ?? 0) ?? 0 >= 10
        }
        let fires = try await query("SELECT fire_at, run_id FROM schedule_fires WHERE agent_id = 'ticker' ORDER BY fire_at")
        let runs = try await query("SELECT id, node_id FROM runs WHERE agent_id = 'ticker'")
        let seconds = fires.compactMap { $0.int("fire_at") }
        #expect(Set(runs.compactMap { $0.string("id") }) == Set(fires.compactMap { $0.string("run_id") }) && runs.count == fires.count,
                "\(runs.count) ticker runs for \(fires.count) fires")
        if let firstFire = seconds.first, let lastFire = seconds.last {
            let span = Int((lastFire - firstFire) / 1000) + 1
            // At most one run a second; at least half the seconds, since a loaded machine's stall may pass a second
            // by (a scheduler fires the latest second it missed, not each one) or meet the last run still starting.
            #expect(seconds.allSatisfy { $0 % 1000 == 0 } && fires.count <= span && fires.count >= span / 2,
                    "\(fires.count) fires over \(span) seconds")
        }
        #expect(heldByB > 0, "B held no claimed wake-up when it died: nothing was taken over")
        #expect(Set(runs.compactMap { $0.string("node_id") }).count >= 2, "the ticker ran on \(Set(runs.compactMap { $0.string("node_id") }))")
        a.terminate()
        c.terminate()
    }
}
