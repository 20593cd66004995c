import Foundation

/// How a database stands against a migrator's list: what it has applied, what it still lacks, and what it has that
/// the list does not know (a newer program migrated it).
public struct MigrationStatus: Sendable, Equatable {
    public var applied: [String]
    /// In the list's order.
    public var missing: [String]
    /// Sorted.
    public var unknown: [String]
}

extension DatabaseMigrator {
    /// Read through `connection` (a read-only one is enough); nil when the database has no `schema_migrations` table
    /// (it was never migrated: not this program's database, or its first start failed).
    public func status(_ connection: Connection) throws(SQLiteError) -> MigrationStatus? {
        guard try !connection.query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'").isEmpty else { return nil }
        let applied = try connection.query("SELECT id FROM schema_migrations ORDER BY applied_at, rowid").compactMap { $0.string("id") }
        let known = Set(migrations.map(\.id)), done = Set(applied)
        return MigrationStatus(applied: applied, missing: migrations.map(\.id).filter { !done.contains($0) },
                               unknown: applied.filter { !known.contains($0) }.sorted())
    }
}

extension Connection {
    /// The main file's size as SQLite counts it (page_count × page_size), WAL not included.
    public func databaseBytes() throws(SQLiteError) -> Int64 {
        let pages = try query("PRAGMA page_count").first?.int("page_count") ?? 0
        let size = try query("PRAGMA page_size").first?.int("page_size") ?? 0
        return pages * size
    }
}
