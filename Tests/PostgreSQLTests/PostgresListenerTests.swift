import Foundation
import GatewayTestSupport
import PostgreSQL
import Testing

@Suite("PostgreSQL LISTEN/NOTIFY")
struct PostgresListenerTests {
    @Test("a notification sent on one connection reaches the listener on another, on each of its channels")
    func delivers() async throws {
        let (pool, database) = try await freshPool(size: 2)
        defer { pool.close() }
        let listener = try await PostgresListener.start(url: database.url, channels: ["inbox_changed", "Wake Up \"now\""])
        defer { listener.stop() }
        let log = EventLog(listener)
        try await pool.notify(channel: "inbox_changed", payload: "person-1")
        try await pool.notify(channel: "Wake Up \"now\"", payload: "")
        try await pool.notify(channel: "not_listened", payload: "ignored")
        // Inside a transaction: delivered at its COMMIT, and never after a rollback.
        struct Refused: Error {}
        await #expect(throws: Refused.self) {
            try await pool.transaction { db in
                try db.notify(channel: "inbox_changed", payload: "rolled back")
                throw Refused()
            }
        }
        try await pool.transaction { db in try db.notify(channel: "inbox_changed", payload: "person-2 'quoted' ü") }
        #expect(try await log.wait { events in events.count >= 3 })
        let received = log.notifications
        #expect(received.map(\.channel) == ["inbox_changed", "Wake Up \"now\"", "inbox_changed"])
        #expect(received.map(\.payload) == ["person-1", "", "person-2 'quoted' ü"])
        #expect(received.allSatisfy { $0.senderPID != listener.backendPID })
    }

    @Test("after its backend is terminated the listener reconnects, yields .reconnected, and listens again")
    func reconnects() async throws {
        let (pool, database) = try await freshPool(size: 1)
        defer { pool.close() }
        let listener = try await PostgresListener.start(url: database.url, channels: ["approvals"],
                                                        backoff: .init(initial: .milliseconds(20), maximum: .milliseconds(200)))
        defer { listener.stop() }
        let log = EventLog(listener)
        let first = listener.backendPID
        #expect(first != 0)
        try await pool.notify(channel: "approvals", payload: "before")
        #expect(try await log.wait { $0.count == 1 })
        try await pool.withConnection { db in _ = try db.query("SELECT pg_terminate_backend($1::int)", Int64(first)) }
        #expect(try await log.wait { $0.contains(.reconnected) }, "events: \(log.all)")
        #expect(listener.backendPID != first && listener.backendPID != 0)
        try await pool.notify(channel: "approvals", payload: "after")
        #expect(try await log.wait { $0.count == 3 })
        #expect(log.notifications.map(\.payload) == ["before", "after"])
        #expect(log.all[1] == .reconnected)
    }

    @Test("stopping the listener ends its stream; a listener that cannot connect fails at start without the password")
    func stopAndFailure() async throws {
        let database = try await freshDatabase()
        let listener = try await PostgresListener.start(url: database.url, channels: ["x"])
        let log = EventLog(listener)
        listener.stop()
        #expect(try await log.waitForEnd())
        let error = try await #require(throws: PostgresError.self) {
            try await PostgresListener.start(url: database.url(password: "nope-4321x"), channels: ["x"])
        }
        #expect(error.kind == .connectionLost && !error.description.contains("nope-4321x"))
        await #expect(throws: PostgresError.self) {
            try await PostgresListener.start(url: database.url, channels: [String(repeating: "c", count: 64)])
        }
    }

    @Test("the announcer sends every payload once committed, many in one statement, each as its own notification; odd payloads go alone")
    func announcer() async throws {
        let (pool, database) = try await freshPool(size: 2)
        defer { pool.close() }
        let listener = try await PostgresListener.start(url: database.url, channels: ["inbox_changed"])
        defer { listener.stop() }
        let log = EventLog(listener)
        let announcer = PostgresAnnouncer(pool: pool, channel: "inbox_changed")
        // A burst: 2,500 distinct payloads (more than one statement carries), each queued twice, and two that
        // cannot ride in the joined list (the separator inside, or empty).
        let expected = (0..<2_500).map { "person-\($0)" } + ["two\nlines", ""]
        for payload in expected + expected { announcer.announce(payload) }
        #expect(try await log.wait { $0.count >= expected.count })
        try await Task.sleep(for: .milliseconds(200))
        let received = log.notifications.map(\.payload)
        #expect(Set(received) == Set(expected), "missing: \(Set(expected).subtracting(received).sorted().prefix(5))")
        // Duplicates queued together are sent once; a payload queued again after its batch went may come twice.
        #expect(received.count < expected.count * 2, "\(received.count) notifications for \(expected.count) payloads queued twice")
        #expect(announcer.unsent == 0)
        // A pool that closes stops it: nothing is retried for ever, nothing is sent.
        pool.close()
        announcer.announce("after close")
        try await Task.sleep(for: .milliseconds(300))
        #expect(!log.notifications.map(\.payload).contains("after close"))
    }

    @Test("a payload whose send failed is sent again once the database answers")
    func announcerRetries() async throws {
        let (pool, database) = try await freshPool(size: 1)
        defer { pool.close() }
        let listener = try await PostgresListener.start(url: database.url, channels: ["retry_me"])
        defer { listener.stop() }
        let log = EventLog(listener)
        // The pool's only connection is cut: the first send meets the break, the retry reconnects.
        let pid = try await pool.withConnection { db in try db.query("SELECT pg_backend_pid() AS p").first?.int("p") ?? 0 }
        try await ConnectionBox.open(database.url).step { db in _ = try db.query("SELECT pg_terminate_backend($1::int)", pid) }
        let announcer = PostgresAnnouncer(pool: pool, channel: "retry_me", retryDelay: .milliseconds(20))
        announcer.announce("late, not lost")
        #expect(try await log.wait { $0.count >= 1 })
        #expect(log.notifications.map(\.payload) == ["late, not lost"])
    }
}
