import Foundation
import Gateway
import GatewayTestSupport
import JSON
import PostgreSQL
import PostgresStores
import ChannelAPI
import Testing

/// Whole gateways (`Gateway.open` with `SOULACY_DATABASE_URL`) on one PostgreSQL database: the composition root
/// builds every store on PostgreSQL, and two nodes sharing the database and the data directory answer as one gateway.
@Suite("Gateways across nodes")
struct GatewayAcrossNodesTests {
    static func environment(_ url: String, node: String) -> [String: String] {
        ["SOULACY_DATABASE_URL": url, "SOULACY_NODE_ID": node, "SOULACY_LONG_POLL_SECONDS": "10", "SOULACY_AGENT_WATCH": "off"]
    }

    @Test("two nodes on one database: health names each node, a phone and a line written on A are read on B, an approval asked on A is decided on B, an Idempotency-Key replays on the other node")
    func twoNodesAreOneGateway() async throws {
        let database = try await PostgresCluster.shared().makeDatabase()
        let directory = TestGateway.makeTemporaryDirectory()
        let a = try await TestGateway.start(directory: directory, environment: Self.environment(database.url, node: "node-a"), mode: .router)
        let b = try await TestGateway.start(directory: directory, environment: Self.environment(database.url, node: "node-b"), mode: .router)
        #expect(a.adminKey == b.adminKey, "the second node read the owner's key the first minted")
        #expect(try await b.gateway.bootstrapAdminKey() == nil, "the second node minted another owner key")

        for (gw, node) in [(a, "node-a"), (b, "node-b")] {
            let health = try await gw.request("GET", "/api/v1/health")
            #expect(health.status == 200 && health.json["node"]?.stringValue == node && health.json["engine"]?.stringValue == "postgresql", "\(health.json)")
        }

        let phone: JSONValue = ["id": "owner-phone", "name": "Phone", "platform": "ios", "notifications_enabled": true,
                                "push_token": .string(String(repeating: "cd", count: 32)), "push_environment": "production"]
        let registered = try await a.request("POST", "/api/v1/mobile/devices", json: phone)
        #expect(registered.status == 201, "\(registered.json)")
        let sent = try await a.request("POST", "/api/v1/channels/mobile/test", json: ["to": "user:owner", "title": "Across", "body": "Written on A"])
        #expect(sent.status == 201 && sent.json["recipients"] == 1, "\(sent.json)")
        let deliveryID = try #require(sent.json["delivery_id"]?.stringValue)
        let shown = await eventually {
            (try? await b.request("GET", "/api/v1/mobile/deliveries?device_id=owner-phone"))?.json["deliveries"]?[0]?["id"]?.stringValue == deliveryID
        }
        #expect(shown, "node B never showed the line written on node A")
        let console = try await b.request("GET", "/api/v1/console/deliveries/\(deliveryID)")
        #expect(console.status == 200 && console.json["devices"]?[0]?["device_id"] == "owner-phone", "\(console.json)")
        let devices = try await b.request("GET", "/api/v1/console/devices")
        #expect(devices.json["devices"]?.arrayValue?.compactMap { $0["id"]?.stringValue } == ["owner-phone"], "\(devices.json)")

        // An approval asked on A (which waits for the decision) is decided on B: A's waiter hears it.
        async let asked = a.request("POST", "/api/v1/approvals", json: ["agent_id": "echo", "tool": "t", "call_id": "call_across", "timeout_seconds": 600])
        let pending = await eventually { (try? await b.request("GET", "/api/v1/approvals/call_across"))?.json["state"] == "pending" }
        #expect(pending, "node B never saw the approval asked on A")
        let decided = try await b.request("POST", "/approvals/call_across/approve")
        #expect(decided.json["state"] == "approved", "\(decided.json)")
        let answer = try await asked
        #expect(answer.json["state"] == "approved" && answer.json["approved"] == true, "A's waiter heard \(answer.json)")

        // A retry that lands on the other node is answered from the shared log.
        let tablet: JSONValue = ["id": "owner-tablet", "name": "Tablet", "platform": "ios", "notifications_enabled": false]
        let first = try await a.request("POST", "/api/v1/mobile/devices", json: tablet, headers: ["Idempotency-Key": "register-tablet"])
        let retried = try await b.request("POST", "/api/v1/mobile/devices", json: tablet, headers: ["Idempotency-Key": "register-tablet"])
        #expect(first.status == 201 && retried.status == 201 && retried.headers["idempotent-replayed"] == "true" && retried.body == first.body,
                "first \(first.status) \(first.json), retried \(retried.status) \(retried.headers)")
        await a.stop()
        await b.stop()
    }

    @Test("three nodes starting together on an empty database and data directory: migrated once, one owner key, one TLS identity for all")
    func nodesStartingTogether() async throws {
        let database = try await PostgresCluster.shared().makeDatabase()
        let directory = TestGateway.makeTemporaryDirectory()
        try TestGateway.defaultConfig.write(toFile: directory + "/SOUL.yaml", atomically: true, encoding: .utf8)
        try "".write(toFile: directory + "/gateway-config.yaml", atomically: true, encoding: .utf8)
        let gateways = try await withThrowingTaskGroup(of: Gateway.self) { group in
            for node in ["n1", "n2", "n3"] {
                group.addTask {
                    var options = GatewayOptions(configPath: directory + "/SOUL.yaml", dataDirectory: directory + "/data", port: 0,
                                                 log: Log(minimum: .error), environment: Self.environment(database.url, node: node))
                    options.gatewayConfigPath = directory + "/gateway-config.yaml"
                    return try await Gateway.open(options: options)
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        let pins = Set(gateways.compactMap(\.tlsPin))
        #expect(gateways.count == 3 && pins.count == 1 && gateways.allSatisfy { $0.tlsPin != nil }, "TLS pins: \(gateways.map(\.tlsPin))")
        let tokens = try await withThrowingTaskGroup(of: String?.self) { group in
            for gateway in gateways { group.addTask { try await gateway.bootstrapAdminKey() } }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(tokens.compactMap { $0 }.count == 1, "owner keys minted: \(tokens.compactMap { $0 }.count)")
        let connection = try PostgresConnection(url: database.url)
        let modules = try connection.query("SELECT count(*) AS n FROM soulacy_migrations").first?.int("n") ?? 0
        #expect(modules == Int64(PostgresGatewaySchema.migrations.count), "\(modules) migrations recorded, once each")
        for gateway in gateways { await gateway.stop() }
    }
}
