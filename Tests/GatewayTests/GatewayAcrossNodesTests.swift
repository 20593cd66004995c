import Foundation
import Gateway
import GatewayTestSupport
import JSON
import PostgreSQL
import PostgresStores
import ChannelAPI
import Mobile
import Testing

/// Whole gateways (`Gateway.open` with `SOULACY_DATABASE_URL`) on one PostgreSQL database: the composition root
/// builds every store on PostgreSQL, and two nodes sharing the database and the data directory answer as one gateway.
@Suite("Gateways across nodes")
struct GatewayAcrossNodesTests {
    /// Two gateways on a fresh database and one shared data directory, answering through their routers.
    static func twoNodes() async throws -> (TestGateway, TestGateway) {
        let database = try await PostgresCluster.shared().makeDatabase()
        let directory = TestGateway.makeTemporaryDirectory()
        let a = try await TestGateway.start(directory: directory, environment: environment(database.url, node: "node-a"), mode: .router)
        let b = try await TestGateway.start(directory: directory, environment: environment(database.url, node: "node-b"), mode: .router)
        return (a, b)
    }

    static func environment(_ url: String, node: String) -> [String: String] {
        ["SOULACY_DATABASE_URL": url, "SOULACY_NODE_ID": node, "SOULACY_LONG_POLL_SECONDS": "10", "SOULACY_AGENT_WATCH": "off"]
    }

    @Test("two nodes on one database: health names each node, a phone and a line written on A are read on B, an approval asked on A is decided on B, an Idempotency-Key replays on the other node")
    func twoNodesAreOneGateway() async throws {
        let (a, b) = try await Self.twoNodes()
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

    @Test("a console open on one node hears what happens on another: a line written, an approval asked and decided; its own events once; bursts arrive whole and in order; nothing is carried while no other node has a console open")
    func consoleEventsAcrossNodes() async throws {
        let (a, b) = try await Self.twoNodes()
        let (hubA, hubB) = (a.gateway.stores.mobile.consoleEvents, b.gateway.stores.mobile.consoleEvents)
        // With no console open anywhere, nothing is carried (a gateway nobody watches pays nothing).
        try await Task.sleep(for: .milliseconds(1_200))
        #expect(!hubA.isForwarding && !hubB.isForwarding)
        let onA = a.gateway.stores.mobile.consoleEvents.subscribe(subject: "owner", isAdmin: true, capacity: 1_000)
        let onB = b.gateway.stores.mobile.consoleEvents.subscribe(subject: "owner", isAdmin: true, capacity: 1_000)
        let priyaOnB = b.gateway.stores.mobile.consoleEvents.subscribe(subject: "priya", isAdmin: false, capacity: 1_000)
        // Each node sees the other's open console within a few looks, and forwards from then on.
        #expect(await eventually { hubA.isForwarding && hubB.isForwarding })

        /// The next event within 10 s (nil if none came).
        func next(_ subscription: ConsoleSubscription) async -> ConsoleEvent? {
            await withTaskGroup(of: ConsoleEvent?.self) { group in
                group.addTask { await subscription.next() }
                group.addTask { try? await Task.sleep(for: .seconds(10)); return nil }
                let first = await group.next() ?? nil
                group.cancelAll()
                return first
            }
        }

        let tablet: JSONValue = ["id": "owner-tablet", "name": "Tablet", "platform": "ios", "notifications_enabled": false]
        #expect(try await a.request("POST", "/api/v1/mobile/devices", json: tablet).status == 201)
        let sent = try await a.request("POST", "/api/v1/channels/mobile/test", json: ["to": "user:owner", "title": "Across", "body": "Written on A"])
        let deliveryID = try #require(sent.json["delivery_id"]?.stringValue, "\(sent.json)")
        let heardOnB = await next(onB)
        #expect(heardOnB == .delivery(deliveryID), "node B's console heard \(String(describing: heardOnB))")
        #expect(await next(onA) == .delivery(deliveryID), "node A's own console")

        // An approval asked on A and decided on B: both consoles hear it pending and then approved.
        async let asked = a.request("POST", "/api/v1/approvals", json: ["agent_id": "echo", "tool": "t", "call_id": "call_console", "timeout_seconds": 600])
        let pending = await next(onB)
        #expect(pending == .approval("call_console", state: "pending"), "node B heard \(String(describing: pending))")
        #expect(try await b.request("POST", "/approvals/call_console/approve").json["state"] == "approved")
        _ = try await asked
        var onAEvents: [ConsoleEvent] = []
        while onAEvents.last != .approval("call_console", state: "approved"), let event = await next(onA) { onAEvents.append(event) }
        #expect(onAEvents == [.approval("call_console", state: "pending"), .approval("call_console", state: "approved")],
                "node A's console heard \(onAEvents) (its own events once, B's decision once)")
        let decidedOnB = await next(onB)
        #expect(decidedOnB == .approval("call_console", state: "approved"), "node B heard \(String(describing: decidedOnB))")

        // 400 events for one person with names long enough that they take several NOTIFYs, and one too long for any:
        // every one that fits arrives, in order, and to nobody else.
        let longName = String(repeating: "o", count: 9_000)
        a.gateway.stores.mobile.consoleEvents.publish(.device("too-long"), to: .subjectAndAdmins(longName))
        let burst = (0..<400).map { ConsoleEvent.delivery("dlv_burst_\($0)_" + String(repeating: "x", count: 60)) }
        for event in burst { a.gateway.stores.mobile.consoleEvents.publish(event, to: .subject("owner")) }
        var heard: [ConsoleEvent] = []
        while heard.count < burst.count, let event = await next(onB) { heard.append(event) }
        let misplaced = zip(heard, burst).filter { $0 != $1 }.count
        #expect(heard.count == burst.count && misplaced == 0, "node B heard \(heard.count) of \(burst.count), \(misplaced) out of order or foreign")
        #expect(priyaOnB.queuedCount == 0, "another person heard the owner's events")
        // B's consoles close: A stops forwarding.
        onB.cancel()
        priyaOnB.cancel()
        #expect(await eventually { !hubA.isForwarding }, "node A kept forwarding with no console open elsewhere")
        #expect(hubB.isForwarding, "node A's console is still open: B forwards")
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
