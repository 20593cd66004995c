import Foundation
import GatewayTestSupport
import PostgreSQL
import Storage
import Synchronization
import Testing

/// PostgreSQL behind the engine seam, as stores and routes use it.
@Suite("PostgreSQL through the engine seam")
struct PostgresStorageSeamTests {
    struct Refused: Error {}

    @Test("transactions through TransactionalStorage: a taken key is .conflict, work waits for the commit, a rollback keeps nothing, the hook runs before COMMIT")
    func seam() async throws {
        let (pool, _) = try await freshPool()
        defer { pool.close() }
        let storage: any TransactionalStorage = pool
        #expect(storage.engine == "postgresql")
        try await storage.checkReadable()
        try await pool.withConnection { try $0.execute("CREATE TABLE t (id TEXT PRIMARY KEY); CREATE TABLE hooked (n INTEGER)") }
        try await storage.withTransaction { try $0.postgresConnection().run("INSERT INTO t VALUES ('a')") }
        let taken = await #expect(throws: (any Error).self) {
            try await storage.withTransaction { try $0.postgresConnection().run("INSERT INTO t VALUES ('a')") }
        }
        guard case .conflict? = taken?.asStorageError else { Issue.record("a taken key is \(String(describing: taken))"); return }
        let syntax = await #expect(throws: (any Error).self) { try await storage.withTransaction { try $0.postgresConnection().run("INSERT INTO nowhere VALUES (1)") } }
        #expect(syntax?.asStorageError == nil, "a statement's own fault is no StorageError: \(String(describing: syntax))")

        let ran = Mutex<[String]>([])
        try? await storage.withTransaction { session -> Void in
            storage.afterCommit { ran.withLock { $0.append("rolled back") } }
            try session.postgresConnection().run("INSERT INTO t VALUES ('b')")
            throw Refused()
        }
        try await storage.withTransaction { session -> Void in
            storage.afterCommit { ran.withLock { $0.append("committed") } }
            try session.postgresConnection().run("INSERT INTO t VALUES ('c')")
        }
        #expect(ran.withLock { $0 } == ["committed"])
        let ids = try await pool.withConnection { try $0.query("SELECT id FROM t ORDER BY id").compactMap { $0.string("id") } }
        #expect(ids == ["a", "c"])

        // A task's commit hook writes in the same transaction, and only for a transaction that changed rows.
        let hook = CommitHook({ session, _ in try session.postgresConnection().run("INSERT INTO hooked VALUES (1)") })
        try await CommitHook.$current.withValue(hook) {
            try await storage.withTransaction { try $0.postgresConnection().run("INSERT INTO t VALUES ('d')") }
            try await storage.withTransaction { _ in }
        }
        #expect(hook.runCount == 1)
        let hooked = try await pool.withConnection { try $0.query("SELECT count(*) AS n FROM hooked").first?.int("n") }
        #expect(hooked == 1)

        // Another engine's session is refused, never used.
        final class OtherEngineSession: StorageSession { var changeCount: Int64 { 0 } }
        #expect(throws: StorageError.self) { try OtherEngineSession().postgresConnection() }
    }

    @Test("a store writing through the pool's own transaction gets the same as through the seam: the task's hook before COMMIT, deferred work after it, nothing on rollback")
    func poolTransactionBindsTheSeam() async throws {
        let (pool, _) = try await freshPool()
        defer { pool.close() }
        try await pool.withConnection { try $0.execute("CREATE TABLE t (id TEXT PRIMARY KEY); CREATE TABLE hooked (n INTEGER)") }
        let hook = CommitHook({ session, _ in try session.postgresConnection().run("INSERT INTO hooked VALUES (1)") })
        let ran = Mutex<[String]>([])
        try await CommitHook.$current.withValue(hook) {
            try? await pool.transaction { db -> Void in
                pool.afterCommit { ran.withLock { $0.append("rolled back") } }
                try db.run("INSERT INTO t VALUES ('x')")
                throw Refused()
            }
            try await pool.transaction { db -> Void in
                pool.afterCommit { ran.withLock { $0.append("committed") } }
                try db.run("INSERT INTO t VALUES ('a')")
                #expect(ran.withLock { $0 }.isEmpty, "deferred work waits for the COMMIT")
            }
        }
        #expect(ran.withLock { $0 } == ["committed"])
        #expect(hook.runCount == 1)
        let rows = try await pool.withConnection { db in
            (try db.query("SELECT count(*) AS n FROM hooked").first?.int("n"), try db.query("SELECT id FROM t ORDER BY id").compactMap { $0.string("id") })
        }
        #expect(rows.0 == 1 && rows.1 == ["a"], "\(rows)")
    }
}
