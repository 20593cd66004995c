import Foundation
import GatewayTestSupport
import PostgreSQL
import Testing

@Suite("PostgreSQL errors")
struct PostgresErrorTests {
    @Test("a syntax error and a unique violation are typed errors with their SQLSTATE; the row's values stay out")
    func typedErrors() async throws {
        let (pool, _) = try await freshPool(size: 1)
        defer { pool.close() }
        let syntax = try await #require(throws: PostgresError.self) {
            try await pool.withConnection { db in try db.execute("SELEC 1") }
        }
        #expect(syntax.sqlState == "42601" && syntax.kind == .other)
        #expect(syntax.sql == "SELEC 1" && syntax.description.contains("syntax error"))

        let secretKey = "tok_4f9a8b7c6d5e"
        let unique = try await #require(throws: PostgresError.self) {
            try await pool.withConnection { db in
                try db.execute("CREATE TABLE tokens (token text PRIMARY KEY)")
                try db.run("INSERT INTO tokens VALUES ($1)", secretKey)
                try db.run("INSERT INTO tokens VALUES ($1)", secretKey)
            }
        }
        #expect(unique.kind == .uniqueViolation && unique.sqlState == "23505")
        #expect(unique.constraint == "tokens_pkey")
        #expect(!unique.description.contains(secretKey), "the server's detail quotes the key; it is not kept: \(unique)")

        // A parameter the server echoes in its message is taken out too.
        let echoed = try await #require(throws: PostgresError.self) {
            try await pool.withConnection { db in try db.query("SELECT $1::uuid", "not-a-uuid-secret") }
        }
        #expect(echoed.sqlState == "22P02" && !echoed.description.contains("not-a-uuid-secret"), "\(echoed)")
        // The connection is still good after each failure.
        #expect(try await pool.withConnection { db in try db.query("SELECT 1 AS one").first?.int("one") } == 1)
    }

    @Test("a read-only session's write is .readOnly; SQLSTATEs map to the kinds callers tell apart")
    func kinds() async throws {
        let (pool, _) = try await freshPool(size: 1)
        defer { pool.close() }
        let readOnly = try await #require(throws: PostgresError.self) {
            try await pool.withConnection { db in
                try db.execute("CREATE TABLE t (v integer)")
                try db.execute("SET default_transaction_read_only = on")
                defer { try? db.execute("SET default_transaction_read_only = off") }
                try db.run("INSERT INTO t VALUES (1)")
            }
        }
        #expect(readOnly.kind == .readOnly && readOnly.sqlState == "25006", "\(readOnly)")
        let kinds: [String: PostgresError.Kind] = [
            "23505": .uniqueViolation, "23503": .other, "40001": .serializationFailure, "40P01": .serializationFailure,
            "53100": .diskFull, "25006": .readOnly, "08006": .connectionLost, "08001": .connectionLost, "57P01": .connectionLost,
            "57P03": .connectionLost, "42601": .other,
        ]
        for (state, kind) in kinds { #expect(PostgresError.kind(forSQLState: state) == kind, "\(state)") }
        #expect(PostgresError.kind(forSQLState: nil) == .other)
    }

    @Test("a wrong password fails with the server's reason and never shows the password")
    func wrongPassword() async throws {
        let database = try await freshDatabase()
        let wrong = "Wr0ng-pass-7c1e"
        let url = database.url(password: wrong)
        let direct = try await #require(throws: PostgresError.self) { try await ConnectionBox.open(url) }
        #expect(direct.kind == .connectionLost)
        #expect(direct.description.contains("password authentication failed"), "\(direct)")
        #expect(!direct.description.contains(wrong), "\(direct)")
        #expect(direct.description.contains("postgres://soulacy:***@127.0.0.1"), "the URL is named, redacted: \(direct)")

        let pool = try PostgresPool(url: url, size: 2)
        defer { pool.close() }
        #expect(!pool.redactedURL.contains(wrong))
        let pooled = try await #require(throws: PostgresError.self) { try await pool.connectAll() }
        #expect(pooled.kind == .connectionLost && !pooled.description.contains(wrong))
    }

    @Test("URLs print without their password, wherever it is written")
    func redaction() throws {
        #expect(PostgresURL.redacted("postgres://app:s3cr%40t@db.example:5433/soulacy?sslmode=require")
                == "postgres://app:***@db.example:5433/soulacy?sslmode=require")
        #expect(PostgresURL.redacted("postgresql://db.example/soulacy?user=app&password=hunter22&sslmode=verify-full")
                == "postgresql://db.example/soulacy?user=app&password=***&sslmode=verify-full")
        #expect(PostgresURL.redacted("postgres://app@db.example/x") == "postgres://app@db.example/x")
        #expect(PostgresURL.redacted("postgres://db.example/x:y@z") == "postgres://db.example/x:y@z", "an '@' after the path is no user info")
        let malformed = #expect(throws: PostgresError.self) { try PostgresPool(url: "postgres://app:hunter22@db/x?nonsense=1") }
        #expect(malformed.map { !$0.description.contains("hunter22") } == true, "\(String(describing: malformed))")
        #expect(throws: PostgresError.self) { try PostgresPool(url: "mysql://app@db/x") }
    }

    @Test("text with a NUL character is refused before it is sent, naming the parameter")
    func nulInText() async throws {
        let (pool, _) = try await freshPool(size: 1)
        defer { pool.close() }
        let refused = try await #require(throws: PostgresError.self) {
            try await pool.withConnection { db in try db.query("SELECT $1::text, $2::text", "fine", "a\u{0}b") }
        }
        #expect(refused.sqlState == "22021" && refused.message.contains("$2") && refused.message.contains("NUL"), "\(refused)")
        // As bytea the same bytes are fine.
        let bytes = try await pool.withConnection { db in try db.query("SELECT $1::bytea AS b", Array("a\u{0}b".utf8)).first?.bytes("b") }
        #expect(bytes == [97, 0, 98])
    }

    @Test("ten thousand parameters, a 10 MB text, a 10,000-deep expression and too many parameters: answers or typed errors, no crash")
    func hugeInputs() async throws {
        let (pool, _) = try await freshPool(size: 1)
        defer { pool.close() }
        let count = 10_000
        let values = "(" + (1...count).map { "$\($0)::int8" }.joined(separator: "), (") + ")"
        let total = try await pool.withConnection { db in
            try db.query("SELECT sum(v) AS total FROM (VALUES \(values)) AS t(v)", arguments: Array(1...count)).first?.int("total")
        }
        #expect(total == Int64(count * (count + 1) / 2))

        let tenMegabytes = String(repeating: "0123456789abcdef", count: 10 * 65536)
        let length = try await pool.withConnection { db in
            try db.query("SELECT length($1::text) AS n, md5($1::text) = md5(repeat('0123456789abcdef', 655360)) AS same", tenMegabytes).first
        }
        #expect(length?.int("n") == 10 * 1_048_576 && length?.bool("same") == true)

        // The server's parser or stack limit may refuse it (54001, or bison's "memory exhausted" as a syntax error):
        // either way it is an answer or a typed error.
        let deep = String(repeating: "(", count: 10_000) + "1" + String(repeating: ")", count: 10_000)
        do {
            let value = try await pool.withConnection { db in try db.query("SELECT \(deep) AS v").first?.int("v") }
            #expect(value == 1)
        } catch let error as PostgresError {
            #expect(error.sqlState == "54001" || error.sqlState == "42601", "\(error)")
            #expect(error.description.count < 1000, "a huge statement is abbreviated in the error")
        }

        let tooMany = try await #require(throws: PostgresError.self) {
            try await pool.withConnection { db in try db.query("SELECT 1", arguments: Array(repeating: 1, count: 70_000)) }
        }
        #expect(tooMany.message.contains("65535"))
        #expect(try await pool.withConnection { db in try db.query("SELECT 2 AS two").first?.int("two") } == 2)
    }
}
