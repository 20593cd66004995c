import Foundation

/// A schema change, identified by a stable id. Once shipped, a migration's id and SQL never change; add a new one.
public struct Migration: Sendable {
    public let id: String
    public let sql: String
    public init(_ id: String, _ sql: String) {
        self.id = id
        self.sql = sql
    }
}

public enum MigrationError: Error, CustomStringConvertible, Equatable {
    case duplicate(String)

    public var description: String {
        switch self {
        case .duplicate(let id): return "the migration '\(id)' is registered twice; every migration needs its own id"
        }
    }
}

/// The schema's history in one ordered list, in GRDB's `DatabaseMigrator` shape: the composition root registers each
/// module's list and migrates once, before any store exists. Each migration runs in its own transaction and is
/// recorded in `schema_migrations`, so a database of any earlier version upgrades in place.
public struct DatabaseMigrator: Sendable {
    public private(set) var migrations: [Migration] = []

    public init() {}

    /// Adds migrations after those registered; an id seen before is a startup error, never silently skipped.
    public mutating func register(_ list: [Migration]) throws(MigrationError) {
        var seen = Set(migrations.map(\.id))
        for migration in list {
            guard seen.insert(migration.id).inserted else { throw .duplicate(migration.id) }
            migrations.append(migration)
        }
    }

    /// Applies what the database has not had yet, in order.
    public func migrate(_ database: DatabasePool) throws {
        try database.transaction { db in
            try db.execute("CREATE TABLE IF NOT EXISTS schema_migrations (id TEXT PRIMARY KEY, applied_at INTEGER NOT NULL)")
        }
        for migration in migrations {
            try database.transaction { db in
                guard try db.query("SELECT 1 FROM schema_migrations WHERE id = ?", migration.id).isEmpty else { return }
                try db.execute(migration.sql)
                try db.run("INSERT INTO schema_migrations (id, applied_at) VALUES (?, ?)", migration.id, Date().sqliteMillis)
            }
        }
    }

    /// The ids the database has applied, in the order they were applied.
    public static func applied(_ database: DatabasePool) throws -> [String] {
        try database.read { db in
            guard try !db.query("SELECT 1 FROM sqlite_master WHERE name = 'schema_migrations'").isEmpty else { return [] }
            return try db.query("SELECT id FROM schema_migrations ORDER BY applied_at, rowid").compactMap { $0.string("id") }
        }
    }
}
