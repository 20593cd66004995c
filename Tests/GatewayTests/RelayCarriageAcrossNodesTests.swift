import ChannelAPI
import Crypto
import Foundation
import GatewayTestSupport
import Household
import Logging
import Mobile
import PostgreSQL
import PostgresStores
import RelayCarriage
import SQLiteStores
import Testing

/// Several gateway processes on one PostgreSQL database carry one relay mailbox: exactly one node runs rounds at a
/// time, and when it stops renewing its lease another takes over and sends what was left, from where it stopped.
@Suite("Relay carriage across nodes")
struct RelayCarriageAcrossNodesTests {
    @Test("one node carries; it stops; after the lease another node takes over and sends the line it left, from where it stopped")
    func takeover() async throws {
        let relay = RelayServerProcess()
        try await relay.start()
        defer { relay.stop() }
        let fixture = try await PostgresEngineFixture.make(migrations: PostgresRelayCarriageStore.migrations)
        // The inbox and keys are SQLite's here (this test is about the carriage's rows and lease, which are PostgreSQL's).
        let local = try migratedDatabase(TestGateway.makeTemporaryDirectory() + "/soulacy.db")
        defer { local.close() }
        let mobile = try MobileStore(database: local)
        let keys = try SQLiteAPIKeyStore(database: local)
        let phone = try await keys.mint(name: "Phone", subject: "alice", role: .operator, kind: .manual, mintedBy: nil)
        let sealingKey = SecureBytes.random(count: 32)
        // Long enough that no stall of a loaded machine lets it run out before B's first round; the test then ends it
        // on the database's clock, where the lease is kept, instead of waiting it out.
        let lease = Duration.seconds(60)
        func node(_ name: String) throws -> (RelayCarriage, PostgresRelayCarriageStore) {
            let store = PostgresRelayCarriageStore(pool: try PostgresPool(url: fixture.database.url, size: 2), sealingKey: sealingKey)
            return (RelayCarriage(url: relay.url, caFile: nil, store: store, node: name, carriageLease: lease, mobile: mobile.inbox, keys: keys,
                                  log: Log(minimum: .error)) { _, _, _ in .noContent }, store)
        }
        let (a, store) = try node("node-a")
        let (b, _) = try node("node-b")
        _ = try await a.enroll(keyID: phone.key.id, subject: "alice")
        _ = try mobile.insertDelivery(Output(agentID: "brief", agentName: "Brief", sessionID: "ses_1", parts: ["first"]), destination: .user("alice"))
        let first = try mobile.latestDeliverySeq()
        try await a.tick()
        try await b.tick()
        let (aCarries, bCarries) = (await a.status().carrying, await b.status().carrying)
        #expect(aCarries && !bCarries, "exactly one node carries")
        #expect(try await store.phones().first?.lastSeq == first, "the carrier sent the first line")

        // Node A stops (no more rounds); a new line waits until B takes the carriage over, after A's lease.
        _ = try mobile.insertDelivery(Output(agentID: "brief", agentName: "Brief", sessionID: "ses_1", parts: ["second"]), destination: .user("alice"))
        let second = try mobile.latestDeliverySeq()
        try await b.tick()
        #expect(!(await b.status().carrying), "B took over a lease A still holds")
        #expect(try await store.phones().first?.lastSeq == first)
        let ended = try await PostgresPool(url: fixture.database.url, size: 1).transaction { db in
            try db.run("UPDATE relay_carrier SET lease_until = (extract(epoch FROM clock_timestamp()) * 1000)::BIGINT - 1 WHERE node = 'node-a'")
        }
        #expect(ended == 1, "A held the carriage")
        try await b.tick()
        #expect(await b.status().carrying, "B did not take over after A's lease ran out")
        #expect(try await store.phones().first?.lastSeq == second, "B did not send the line A left")
        // A comes back: it stands by while B holds the carriage.
        try await a.tick()
        #expect(!(await a.status().carrying))
    }
}
