import ChannelAPI
import ChannelTesting
import Foundation
import GatewayTestSupport
import APIKit
import Mobile
import PostgreSQL
import PostgresStores
import Testing

/// Several gateway processes on one PostgreSQL database, each with its own push dispatcher: every wake-up is sent
/// exactly once whichever node claims it, and every row ends settled.
@Suite("Push dispatch across nodes")
struct PushAcrossNodesTests {
    /// One node: its own pool, inbox and dispatcher on the shared database, as a `soulacy serve` process holds them.
    struct Node {
        let inbox: PostgresInbox
        let transport = RecordingTransport(name: "apns")
        let dispatcher: PushDispatcher

        init(url: String) throws {
            let pool = try PostgresPool(url: url, size: 3)
            inbox = PostgresInbox(pool: pool, listenURL: nil)
            // Small batches, so the nodes' claims interleave over the backlog instead of one node taking it all.
            dispatcher = PushDispatcher(outbox: PostgresPushOutbox(pool: pool), devices: inbox, consoleEvents: inbox.consoleEvents,
                                        transports: WakeTransportRegistry([transport]), log: Log(minimum: .error), batchSize: 10)
        }
    }

    @Test("three nodes drain one backlog together: 300 wake-ups, each sent once, every row settled sent")
    func eachWakeUpOnce() async throws {
        let fixture = try await PostgresEngineFixture.make(migrations: PostgresMobileSchema.migrations)
        let nodes = try (0..<3).map { _ in try Node(url: fixture.database.url) }
        let registration = try DeviceRegistration(json: JSONObject([
            "id": "alice-phone", "name": "Alice's phone", "platform": "ios", "notifications_enabled": true,
            "push_token": .string(String(repeating: "ab", count: 32)), "push_environment": "production"]))
        _ = try await nodes[0].inbox.register(registration, subject: "alice", keyID: nil)
        // Lines written on every node, then drained by all three at once.
        var lines: [String] = []
        for index in 0..<300 {
            let line = try await nodes[index % 3].inbox.insertDelivery(
                Output(agentID: "brief", agentName: "Brief", sessionID: "ses_\(index)", parts: ["line \(index)"]), destination: .user("alice"))
            lines.append(line.id)
        }
        await withDiscardingTaskGroup { group in
            for node in nodes { group.addTask { await node.dispatcher.drain() } }
        }
        let sent = nodes.flatMap { $0.transport.sent }
        #expect(sent.count == 300, "sent \(sent.count) wake-ups for 300 lines: per node \(nodes.map { $0.transport.sent.count })")
        #expect(sent.allSatisfy { $0.target.deviceID == "alice-phone" })
        let counts = try await PostgresPushOutbox(pool: try PostgresPool(url: fixture.database.url, size: 1)).counts()
        #expect(counts.filter { $0.value > 0 } == [.sent: 300], "\(counts)")
        // Each line's wake-up was sent by one node: the lines named in the sends are the lines written, once each.
        let named = sent.compactMap { $0.signal.deliveryID }
        #expect(named.count == 300 && Set(named) == Set(lines), "\(Set(lines).subtracting(named).count) lines without a wake-up")
    }
}
