import Foundation
import GatewayTestSupport
import PostgreSQL
import Synchronization
import Testing

@Suite("PostgreSQL transactions")
struct PostgresTransactionTests {
    struct Refused: Error {}

    @Test("a transaction commits as a whole or not at all, and others see it only once committed")
    func commitAndRollback() async throws {
        let (pool, _) = try await freshPool(size: 2)
        defer { pool.close() }
        try await pool.withConnection { db in try db.execute("CREATE TABLE t (v text)") }
        try await pool.transaction { db in
            try db.run("INSERT INTO t VALUES ('one')")
            try db.run("INSERT INTO t VALUES ('two')")
        }
        await #expect(throws: Refused.self) {
            try await pool.transaction { db in
                try db.run("INSERT INTO t VALUES ('undone')")
                throw Refused()
            }
        }
        let values = try await pool.withConnection { db in try db.query("SELECT v FROM t ORDER BY v").compactMap { $0.string("v") } }
        #expect(values == ["one", "two"])
    }

    @Test("nested transactions are savepoints: a throw undoes only its own part, and the rest commits with the outer")
    func savepointsNest() async throws {
        let (pool, _) = try await freshPool(size: 1)
        defer { pool.close() }
        let woken = Mutex<[String]>([])
        try await pool.withConnection { db in try db.execute("CREATE TABLE t (v text)") }
        try await pool.transaction { outer in
            try outer.run("INSERT INTO t VALUES ('outer')")
            try outer.transaction { inner in
                try inner.run("INSERT INTO t VALUES ('inner')")
                try inner.transaction { innermost in try innermost.run("INSERT INTO t VALUES ('innermost')") }
                do {
                    try inner.transaction { undone in
                        try undone.run("INSERT INTO t VALUES ('undone')")
                        undone.afterCommit { woken.withLock { $0.append("undone") } }
                        throw Refused()
                    }
                } catch is Refused {}
            }
            // A failed statement inside a savepoint leaves the outer transaction usable.
            do {
                try outer.savepoint { db in try db.execute("SELECT * FROM no_such_table") }
            } catch let error as PostgresError {
                #expect(error.sqlState == "42P01")
            }
            try outer.run("INSERT INTO t VALUES ('after')")
            // Inside: its own rows, not the committed state.
            #expect(try outer.query("SELECT count(*) AS n FROM t").first?.int("n") == 4)
            outer.afterCommit { woken.withLock { $0.append("committed") } }
            #expect(woken.withLock { $0 }.isEmpty, "nothing runs before the commit")
        }
        #expect(woken.withLock { $0 } == ["committed"], "work deferred by a rolled-back savepoint never runs")
        let values = try await pool.withConnection { db in try db.query("SELECT v FROM t ORDER BY v").compactMap { $0.string("v") } }
        #expect(values == ["after", "inner", "innermost", "outer"])
    }

    @Test("a body that swallows a failed statement does not pass for committed")
    func swallowedFailure() async throws {
        let (pool, _) = try await freshPool(size: 1)
        defer { pool.close() }
        try await pool.withConnection { db in try db.execute("CREATE TABLE t (v text PRIMARY KEY)") }
        let error = try await #require(throws: PostgresError.self) {
            try await pool.transaction { db in
                try db.run("INSERT INTO t VALUES ('kept?')")
                _ = try? db.run("INSERT INTO t VALUES ('kept?')")
            }
        }
        #expect(error.sqlState == "25P02")
        #expect(try await pool.withConnection { db in try db.query("SELECT count(*) AS n FROM t").first?.int("n") } == 0)
    }

    @Test("a transaction the caller leaves open is rolled back before the connection serves anyone else")
    func leftOpen() async throws {
        let (pool, _) = try await freshPool(size: 1)
        defer { pool.close() }
        try await pool.withConnection { db in
            try db.execute("CREATE TABLE t (v text)")
            try db.execute("BEGIN")
            try db.run("INSERT INTO t VALUES ('never committed')")
        }
        let state = try await pool.withConnection { db in (db.isInTransaction, try db.query("SELECT count(*) AS n FROM t").first?.int("n")) }
        #expect(state.0 == false && state.1 == 0)
    }

    @Test("a concurrent update under REPEATABLE READ is a serialization failure")
    func serializationFailure() async throws {
        let database = try await freshDatabase()
        let first = try await ConnectionBox.open(database.url)
        let second = try await ConnectionBox.open(database.url)
        try await first.step { db in
            try db.execute("CREATE TABLE accounts (id integer PRIMARY KEY, balance integer)")
            try db.run("INSERT INTO accounts VALUES (1, 100)")
            try db.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            _ = try db.query("SELECT balance FROM accounts WHERE id = 1")
        }
        _ = try await second.step { db in try db.run("UPDATE accounts SET balance = 50 WHERE id = 1") }
        let error = try await #require(throws: PostgresError.self) {
            try await first.step { db in try db.run("UPDATE accounts SET balance = 150 WHERE id = 1") }
        }
        #expect(error.kind == .serializationFailure && error.sqlState == "40001", "\(error)")
        try await first.step { db in try db.execute("ROLLBACK") }
        #expect(try await first.step { db in try db.query("SELECT balance FROM accounts").first?.int("balance") } == 50)
        first.connection.close()
        second.connection.close()
    }

    @Test("the rows a connection changed are counted (the engine seam's commit hook runs only for those)")
    func changeCount() async throws {
        let (pool, _) = try await freshPool(size: 1)
        defer { pool.close() }
        let counts = try await pool.withConnection { db in
            try db.execute("CREATE TABLE t (v integer)")
            let start = db.changeCount
            try db.run("INSERT INTO t VALUES (1), (2), (3)")
            let updated = try db.run("UPDATE t SET v = v + 1 WHERE v > 1")
            _ = try db.query("SELECT * FROM t")
            _ = try db.query("DELETE FROM t WHERE v = 1 RETURNING v")
            return (db.changeCount - start, updated)
        }
        #expect(counts.0 == 6 && counts.1 == 2)
    }
}
