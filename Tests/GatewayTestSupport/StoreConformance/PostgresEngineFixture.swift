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

    public func atRest(table: String) async throws -> [UInt8] {
        let quoted = try await pool.withConnection { try $0.quoteIdentifier(table) }
        return try await pool.withConnection { db in
            try db.query("SELECT r::text AS row FROM \(quoted) r").flatMap { Array(($0.string("row") ?? "").utf8) + [10] }
        }
    }

    public func effects() async throws -> [String] {
        try await pool.withConnection { try $0.query("SELECT value FROM conformance_effects ORDER BY value").compactMap { $0.string("value") } }
    }
}
