import Foundation
import PostgreSQL
import Storage

/// PostgreSQL as the conformance suites run it: a fresh database on the test process's throwaway cluster, migrated
/// with the migrations the suite names, plus a scratch table for effects.
public struct PostgresEngineFixture: StorageEngineFixture {
    public let engine = "postgresql"
    public let pool: PostgresPool
    public let database: PostgresTestDatabase
    public var storage: any TransactionalStorage { pool }

    static let scratch = PostgresMigration(module: "conformance", version: 1, sql: "CREATE TABLE conformance_effects (value TEXT NOT NULL)")

    public static func make(migrations: [PostgresMigration]) async throws -> PostgresEngineFixture {
        let database = try await PostgresCluster.shared().makeDatabase()
        let pool = try PostgresPool(url: database.url, size: 4)
        _ = try await PostgresMigrator(migrations + [scratch]).migrate(pool)
        return PostgresEngineFixture(pool: pool, database: database)
    }

    public func writeEffect(_ value: String, in session: any StorageSession) throws {
        try session.postgresConnection().run("INSERT INTO conformance_effects (value) VALUES ($1)", value)
    }

    public func effects() async throws -> [String] {
        try await pool.withConnection { try $0.query("SELECT value FROM conformance_effects ORDER BY value").compactMap { $0.string("value") } }
    }

    public func storedValues() async throws -> [[UInt8]] {
        try await pool.withConnection { db in
            let tables = try db.query("SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'")
                .compactMap { $0.string("table_name") }
            return try tables.flatMap { table in
                try db.query("SELECT * FROM \(try db.quoteIdentifier(table))").flatMap { row in
                    row.values.compactMap { value -> [UInt8]? in
                        switch value {
                        case .null: nil
                        case .int64(let number): Array(String(number).utf8)
                        case .double(let number): Array(String(number).utf8)
                        case .bool(let flag): Array(String(flag).utf8)
                        case .text(let text): Array(text.utf8)
                        case .bytea(let bytes): bytes
                        }
                    }
                }
            }
        }
    }
}
