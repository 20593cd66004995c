import Foundation
import GatewayTestSupport
import PostgreSQL
import Testing

@Suite("PostgreSQL values")
struct PostgresValueTests {
    @Test("integers at both extremes, doubles, unicode text, booleans and NULLs come back as they went in")
    func scalars() async throws {
        let (pool, _) = try await freshPool(size: 1)
        defer { pool.close() }
        let doubles: [Double] = [0, -0.0, 0.1, -1.5, 1e308, -1e308, .leastNonzeroMagnitude, .pi, .infinity, -.infinity]
        let texts = ["", "plain", "héllo wörld — 日本語 🎉", "e\u{301} and \u{202E}reversed", String(repeating: "ü", count: 5000), "'; DROP TABLE t; --"]
        let rows = try await pool.withConnection { db in
            try db.execute("CREATE TABLE v (id serial PRIMARY KEY, i bigint, small integer, d double precision, t text, f boolean)")
            for value in [Int64.min, Int64.min + 1, -1, 0, 1, Int64.max - 1, Int64.max] {
                try db.run("INSERT INTO v (i) VALUES ($1)", value)
            }
            for value in doubles { try db.run("INSERT INTO v (d) VALUES ($1)", value) }
            for value in texts { try db.run("INSERT INTO v (t) VALUES ($1)", value) }
            try db.run("INSERT INTO v (f, small) VALUES ($1, $2), ($3, $4)", true, Int32.max, false, Int32.min)
            try db.run("INSERT INTO v (i, d, t, f) VALUES ($1, $2, $3, $4)", Int64?.none, Double?.none, String?.none, Bool?.none)
            return try db.query("SELECT * FROM v ORDER BY id")
        }
        #expect(rows.prefix(7).map { $0.int("i") } == [Int64.min, Int64.min + 1, -1, 0, 1, Int64.max - 1, Int64.max])
        let readDoubles = rows.dropFirst(7).prefix(doubles.count).map { $0.double("d") }
        #expect(readDoubles == doubles.map(Optional.some))
        #expect(readDoubles[1]?.sign == .minus, "-0.0 keeps its sign")
        #expect(rows.dropFirst(7 + doubles.count).prefix(texts.count).map { $0.string("t") } == texts.map(Optional.some))
        let flags = rows.dropFirst(7 + doubles.count + texts.count).prefix(2)
        #expect(flags.map { $0.bool("f") } == [true, false])
        #expect(flags.map { $0.int("small") } == [Int64(Int32.max), Int64(Int32.min)])
        let nulls = try #require(rows.last)
        #expect(nulls.int("i") == nil && nulls.double("d") == nil && nulls.string("t") == nil && nulls.bool("f") == nil)
        #expect(nulls["t"] == .null)
        #expect(rows.dropFirst(7 + doubles.count).first?.string("t") == "", "an empty string is not NULL")

        let nan = try await pool.withConnection { db in try db.query("SELECT $1::float8 AS x", Double.nan).first?.double("x") }
        #expect(nan?.isNaN == true)
    }

    @Test("bytea round-trips every byte value, an empty value and a megabyte of random bytes")
    func bytea() async throws {
        let (pool, _) = try await freshPool(size: 1)
        defer { pool.close() }
        var generator = SplitMix(seed: 31)
        let megabyte = (0..<(1 << 20)).map { _ in UInt8.random(in: 0...255, using: &generator) }
        let everyByte = (0...255).map(UInt8.init)
        let read = try await pool.withConnection { db in
            try db.execute("CREATE TABLE b (id integer PRIMARY KEY, data bytea)")
            try db.run("INSERT INTO b VALUES (1, $1), (2, $2), (3, $3), (4, $4)", everyByte, [UInt8](), megabyte, [UInt8]?.none)
            return try db.query("SELECT id, data, length(data) AS n FROM b ORDER BY id")
        }
        #expect(read.map { $0.int("n") } == [256, 0, 1 << 20, nil], "the server stored the lengths given")
        #expect(read[0].bytes("data") == everyByte)
        #expect(read[1].bytes("data") == [])
        #expect(read[2].bytes("data") == megabyte)
        #expect(read[3].bytes("data") == nil)
    }

    @Test("columns of other types read as text; accessors convert between the types a caller expects")
    func otherTypes() async throws {
        let (pool, _) = try await freshPool(size: 1)
        defer { pool.close() }
        let row = try #require(try await pool.withConnection { db in
            try db.query("""
                SELECT 1.25::numeric AS n, '{"a": [1, 2]}'::jsonb AS j, $1::jsonb AS bound, 42::int2 AS small,
                       '2026-12-04 12:00:00+00'::timestamptz AS at, 7 AS seven, NULL::text AS missing
                """, #"{"k": "v"}"#).first
        })
        #expect(row.double("n") == 1.25)
        #expect(row.string("j") == #"{"a": [1, 2]}"#)
        #expect(row.string("bound") == #"{"k": "v"}"#, "an untyped text parameter takes the type the statement needs")
        #expect(row.int("small") == 42)
        #expect(row.string("at")?.hasPrefix("2026-12-04") == true)
        #expect(row.string("seven") == "7" && row.double("seven") == 7)
        #expect(row.string("missing") == nil && row.int("nothing such") == nil)
        #expect(row.columnNames == ["n", "j", "bound", "small", "at", "seven", "missing"])
    }
}
