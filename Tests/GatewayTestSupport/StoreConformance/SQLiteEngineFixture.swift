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

    public func storedValues() async throws -> [[UInt8]] {
        try await database.asyncRead { db in
            let tables = try db.query("SELECT name FROM sqlite_master WHERE type = 'table'").compactMap { $0.string("name") }
            return try tables.flatMap { table in
                try db.query("SELECT * FROM \"\(table)\"").flatMap { row in
                    row.values.compactMap { value -> [UInt8]? in
                        switch value {
                        case .null: nil
                        case .integer(let number): Array(String(number).utf8)
                        case .real(let number): Array(String(number).utf8)
                        case .text(let text): Array(text.utf8)
                        case .blob(let bytes): bytes
                        }
                    }
                }
            }
        }
    }
}
