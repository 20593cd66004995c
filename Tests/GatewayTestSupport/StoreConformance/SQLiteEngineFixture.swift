import Foundation
import Gateway
import SQLite
import Storage

/// SQLite as the conformance suites run it: a real file in a temporary directory, migrated with the gateway's whole
/// schema, plus a scratch table for effects.
public struct SQLiteEngineFixture: StorageEngineFixture {
    public let engine = "sqlite"
    public let database: DatabasePool
    public var storage: any TransactionalStorage { database }

    public init() throws {
        let path = TestGateway.makeTemporaryDirectory() + "/conformance.sqlite"
        database = try DatabasePool(path: path)
        try GatewaySchema.migrator().migrate(database)
        try database.write { try $0.execute("CREATE TABLE conformance_effects (value TEXT NOT NULL)") }
    }

    public func writeEffect(_ value: String, in session: any StorageSession) throws {
        try session.sqliteConnection().run("INSERT INTO conformance_effects (value) VALUES (?)", value)
    }

    public func effects() async throws -> [String] {
        try await database.asyncRead { try $0.query("SELECT value FROM conformance_effects ORDER BY value").compactMap { $0.string("value") } }
    }

    public func atRest(table: String) async throws -> [UInt8] {
        // The whole file, free pages and the WAL included: a secret anywhere in them is recoverable.
        [database.path, database.path + "-wal"].flatMap { path in FileManager.default.contents(atPath: path).map { [UInt8]($0) } ?? [] }
    }
}
