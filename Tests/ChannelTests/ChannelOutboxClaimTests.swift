import ChannelAPI
import ChannelDelivery
import Foundation
import GatewayTestSupport
import SQLite
import Testing

/// The SQLite channel outbox's claim over a backlog: due rows in the order they were made, a few at a time, each claim
/// reading only as far as it takes (the index gives the order), never sorting the whole backlog.
@Suite("Channel outbox claims over a backlog")
struct ChannelOutboxClaimTests {
    @Test("2,000 sends made at one instant are claimed ten at a time in id order (the order made, to the millisecond), each once")
    func order() async throws {
        let database = try migratedDatabase(TestGateway.makeTemporaryDirectory() + "/soulacy.db")
        defer { database.close() }
        let outbox = SQLiteChannelOutbox(database: database)
        let now = Date()
        let output = Output(agentID: "a", agentName: "A", sessionID: "s", parts: ["p"])
        let sends = (0..<2_000).map { _ in PendingChannelSend(channel: "webhook", destination: "bench", output: output, subject: "owner") }
        try await outbox.enqueue(sends, runID: nil, now: now)
        var claimed: [String] = []
        while true {
            let batch = try await outbox.claimDue(owner: "test", now: now.addingTimeInterval(1), lease: 60, limit: 10)
            if batch.isEmpty { break }
            #expect(batch.count == 10)
            claimed += batch.map(\.id)
        }
        #expect(claimed == sends.map(\.id).sorted())
    }

    @Test("the claim's selection reads the due index in order: no sort of the due rows")
    func plan() throws {
        let database = try migratedDatabase(TestGateway.makeTemporaryDirectory() + "/soulacy.db")
        defer { database.close() }
        // The selection inside SQLiteChannelOutbox.claimDue, as it runs there.
        let plan = try database.read { db in
            try db.query("""
                EXPLAIN QUERY PLAN
                SELECT id FROM channel_outbox
                WHERE state = 'pending' AND next_attempt_at <= ? AND (lease_until IS NULL OR lease_until < ?)
                ORDER BY next_attempt_at, id LIMIT ?
                """, Int64(1), Int64(1), Int64(10)).compactMap { $0.string("detail") }
        }
        #expect(plan.contains { $0.contains("channel_outbox_due") }, "\(plan)")
        #expect(!plan.contains { $0.contains("TEMP B-TREE") }, "\(plan)")
    }
}
