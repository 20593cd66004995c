import Approvals
import ChannelAPI
import Foundation
import GatewayTestSupport
import PostgreSQL
import PostgresStores
import Storage
import Testing

/// Several gateway processes on one PostgreSQL database: an approval asked on one node and decided on another
/// answers the waiter parked on the first, through LISTEN/NOTIFY and, where a pooler breaks LISTEN, the poll.
@Suite("Approvals across nodes")
struct ApprovalsAcrossNodesTests {
    /// One node: its own pool and broker on the shared database, as a `soulacy serve` process holds them.
    struct Node {
        let pool: PostgresPool
        let broker: ApprovalsBroker

        init(url: String, listen: Bool, pollInterval: Duration = .milliseconds(1500)) throws {
            pool = try PostgresPool(url: url, size: 2)
            broker = ApprovalsBroker(store: PostgresApprovalStore(pool: pool, listenURL: listen ? url : nil, pollInterval: pollInterval),
                                     alerts: nil, clock: SystemWallClock())
        }
    }

    static func database() async throws -> PostgresTestDatabase {
        let fixture = try await PostgresEngineFixture.make(migrations: PostgresApprovalStore.migrations)
        return fixture.database
    }

    func ask(on node: Node, _ callID: String) async throws {
        _ = try await node.broker.open(callID: callID, subject: "alice", agentID: "inbox-triage", agentName: "Inbox triage", sessionID: "ses_1",
                                       tool: "send_email", arguments: "{}", timeout: 600)
    }

    func decide(on node: Node, _ callID: String, approve: Bool, as subject: String = "alice") async throws -> (approval: Approval, decidedNow: Bool) {
        try await node.broker.transactions.withTransaction { session in
            try node.broker.decide(callID: callID, subject: subject, approve: approve, by: "key_\(subject)", in: session)
        }
    }

    @Test("asked on node A, decided on node C: A's waiter hears it; B's racing answer finds it decided")
    func decidedElsewhere() async throws {
        let database = try await Self.database()
        // A poll slower than the test's patience: only the NOTIFY can answer in time.
        let (a, b, c) = (try Node(url: database.url, listen: true, pollInterval: .seconds(600)), try Node(url: database.url, listen: true),
                         try Node(url: database.url, listen: true))
        for node in [a, b, c] { try await node.broker.followOtherWriters() }
        try await ask(on: a, "call_across")
        let waiter = Task { await a.broker.wait(callID: "call_across") }
        try await Task.sleep(for: .milliseconds(200))
        let (decided, now) = try await decide(on: c, "call_across", approve: true)
        #expect(now && decided.state == .approved)
        let (seen, second) = try await decide(on: b, "call_across", approve: false)
        #expect(!second && seen.state == .approved, "a second node's answer must find the first decision")
        let state = try await withTimeout(.seconds(20)) { await waiter.value }
        #expect(state == .approved)
        for node in [a, b, c] { await node.broker.stopFollowing() }
    }

    @Test("with LISTEN broken by a pooler, the poll answers the waiter")
    func pollOnly() async throws {
        let database = try await Self.database()
        let (a, c) = (try Node(url: database.url, listen: false, pollInterval: .milliseconds(200)), try Node(url: database.url, listen: false))
        try await a.broker.followOtherWriters()
        try await ask(on: a, "call_polled")
        let waiter = Task { await a.broker.wait(callID: "call_polled") }
        try await Task.sleep(for: .milliseconds(100))
        #expect(try await decide(on: c, "call_polled", approve: false).decidedNow)
        #expect(try await withTimeout(.seconds(20)) { await waiter.value } == .denied)
        await a.broker.stopFollowing()
    }

    @Test("a waiter's listening connection cut mid-wait: it reconnects, re-reads, and still hears the decision")
    func listenerReconnects() async throws {
        let database = try await Self.database()
        let (a, c) = (try Node(url: database.url, listen: true, pollInterval: .seconds(600)), try Node(url: database.url, listen: false))
        try await a.broker.followOtherWriters()
        try await ask(on: a, "call_cut")
        let waiter = Task { await a.broker.wait(callID: "call_cut") }
        // Cut every listening connection of node A; the decision is taken while it is down or coming back. Only this
        // test's database: the cluster is shared with other suites running now, whose listeners must not be cut.
        _ = try await c.pool.withConnection { db in
            try db.query("""
                SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                WHERE application_name = 'soulacy-approvals' AND datname = current_database()
                """)
        }
        #expect(try await decide(on: c, "call_cut", approve: true).decidedNow)
        #expect(try await withTimeout(.seconds(20)) { await waiter.value } == .approved)
        await a.broker.stopFollowing()
    }
}

struct TimedOut: Error {}

/// `work`'s value, or `TimedOut` after `limit` (so a lost wake-up fails the test instead of hanging the suite).
func withTimeout<T: Sendable>(_ limit: Duration, _ work: @escaping @Sendable () async -> T) async throws -> T {
    try await withThrowingTaskGroup(of: T.self) { group in
        group.addTask { await work() }
        group.addTask {
            try await Task.sleep(for: limit)
            throw TimedOut()
        }
        defer { group.cancelAll() }
        return try await group.next()!
    }
}
