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
}
