import Foundation
import GatewayTestSupport
import PostgreSQL
import Testing

@Suite("PostgreSQL statement cache")
struct PostgresStatementCacheTests {
    @Test("a cached `SELECT *` keeps working after a migration adds a column under it")
    func tableChangedUnderStatement() async throws {
        let (pool, _) = try await freshPool(size: 1)
        defer { pool.close() }
        let columns = try await pool.withConnection { db in
            try db.execute("CREATE TABLE t (a integer)")
            try db.run("INSERT INTO t VALUES ($1)", 1)
            let before = try db.query("SELECT * FROM t").first?.columnNames
            try db.execute("ALTER TABLE t ADD COLUMN b text DEFAULT 'x'")
            let after = try db.query("SELECT * FROM t").first
            return (before, after?.columnNames, after?.string("b"))
        }
        #expect(columns.0 == ["a"] && columns.1 == ["a", "b"] && columns.2 == "x")
    }

    @Test("one statement bound with NULL, an integer and text in turn is prepared for each typing")
    func sameTextOtherTypes() async throws {
        let (pool, _) = try await freshPool(size: 1)
        defer { pool.close() }
        let read = try await pool.withConnection { db in
            try db.execute("CREATE TABLE t (v text)")
            for value: any PostgresBindable in [String?.none, 42, "text", true, [UInt8]([1, 2])] {
                try db.run("INSERT INTO t VALUES ($1::text)", value)
            }
            return try db.query("SELECT v FROM t").map { $0.string("v") }
        }
        #expect(read == [nil, "42", "text", "true", "\\x0102"])
    }

    @Test("past the cache's limit of statements it starts over, and every statement still runs")
    func manyStatements() async throws {
        let (pool, _) = try await freshPool(size: 1)
        defer { pool.close() }
        let (sum, prepared) = try await pool.withConnection { db in
            var sum: Int64 = 0
            for n in 0..<700 { sum += try db.query("SELECT $1::int8 + \(n) AS v", 1).first?.int("v") ?? 0 }
            let prepared = try db.query("SELECT count(*) AS n FROM pg_prepared_statements").first?.int("n") ?? -1
            return (sum, prepared)
        }
        #expect(sum == 700 + Int64(699 * 700 / 2))
        #expect(prepared <= 512, "the server holds at most the cache's statements: \(prepared)")
    }
}
