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
}
