/// One schema change of one module. Once shipped, a migration's module, version and SQL never change: add a new
/// version. The SQL runs in a transaction (no `CREATE INDEX CONCURRENTLY`), and may hold several statements.
public struct PostgresMigration: Sendable, Equatable {
    public let module: String
    public let version: Int
    public let sql: String

    public init(module: String, version: Int, sql: String) {
        self.module = module
        self.version = version
        self.sql = sql
    }
}

/// Why migrating stopped; each names the module.
public enum PostgresMigrationError: Error, CustomStringConvertible, Equatable {
    /// The same module and version registered twice.
    case duplicate(module: String, version: Int)
    /// A module's versions must rise through the list.
    case outOfOrder(module: String, version: Int, after: Int)
    /// The database records a version of a module this binary does not have: a newer program migrated it.
    case unknownVersion(module: String, recorded: Int, known: Int?)
    /// A migration's SQL (or its record) failed; nothing of it was committed.
    case failed(module: String, version: Int, PostgresError)

    public var description: String {
        switch self {
        case .duplicate(let module, let version):
            "the migration \(module) v\(version) is registered twice; every migration of a module needs its own version"
        case .outOfOrder(let module, let version, let after):
            "the migration \(module) v\(version) is listed after v\(after); a module's versions must rise through the list"
        case .unknownVersion(let module, let recorded, let known):
            "the database has \(module) at version \(recorded), which this binary does not know (it knows up to "
                + (known.map { "v\($0)" } ?? "none of that module")
                + "): a newer version migrated this database; run that version or a later one"
        case .failed(let module, let version, let error):
            "the migration \(module) v\(version) failed and was rolled back: \(error)"
        }
    }
}

/// Every module's migrations in one ordered list, applied once per database, in GRDB's `DatabaseMigrator` shape.
/// What a database has had is recorded in `soulacy_migrations(module, version, applied_at)`; each migration's SQL
/// and its record commit in one transaction. Several nodes starting together take `pg_advisory_lock`
/// (`advisoryLockKey`) in turn: the first applies, the others find the work done.
public struct PostgresMigrator: Sendable {
    /// The session-level advisory lock taken while migrating: "SOULACY!" as eight ASCII bytes. Fixed for good; any
    /// other program on the database must not use it.
    public static let advisoryLockKey: Int64 = 0x534F_554C_4143_5921

    public let migrations: [PostgresMigration]

    /// Refuses a list with a version twice or a module's versions out of order (a startup error, never skipped).
    public init(_ migrations: [PostgresMigration]) throws(PostgresMigrationError) {
        var latest: [String: Int] = [:]
        for migration in migrations {
            if let previous = latest[migration.module] {
                if previous == migration.version { throw .duplicate(module: migration.module, version: migration.version) }
                if previous > migration.version { throw .outOfOrder(module: migration.module, version: migration.version, after: previous) }
            }
            latest[migration.module] = migration.version
        }
        self.migrations = migrations
    }

    /// Applies, in list order, every migration newer than what the database records of its module; returns those
    /// it applied (none when another node got there first). A module this binary does not list is another
    /// program's and left alone; a recorded version of a listed module that the list lacks stops everything.
    @discardableResult
    public func migrate(_ pool: PostgresPool) async throws -> [PostgresMigration] {
        let migrations = self.migrations
        return try await pool.withConnection { db in try Self.migrate(migrations, on: db) }
    }

    /// What the database has of this list, read only (`soulacy doctor`): nil when it has no `soulacy_migrations`
    /// table (never migrated, or not a gateway's database).
    public func status(on db: PostgresConnection) throws(PostgresError) -> (missing: [String], unknown: [String])? {
        guard try db.query("SELECT to_regclass('soulacy_migrations') IS NOT NULL AS found").first?.bool("found") == true else { return nil }
        var listed: [String: Set<Int>] = [:]
        for migration in migrations { listed[migration.module, default: []].insert(migration.version) }
        var recorded: Set<String> = []
        var unknown: [String] = []
        for row in try db.query("SELECT module, version FROM soulacy_migrations ORDER BY module, version") {
            guard let module = row.string("module"), let version = row.int("version").map(Int.init) else { continue }
            // Another program's module is its own business; a version of ours this binary lacks is a newer one's.
            guard let versions = listed[module] else { continue }
            if versions.contains(version) { recorded.insert("\(module).\(version)") } else { unknown.append("\(module).\(version)") }
        }
        let missing = migrations.map { "\($0.module).\($0.version)" }.filter { !recorded.contains($0) }
        return (missing, unknown)
    }

    /// `migrate` on a connection the caller holds (it blocks the calling thread).
    public static func migrate(_ migrations: [PostgresMigration], on db: PostgresConnection) throws -> [PostgresMigration] {
        _ = try db.query("SELECT pg_advisory_lock($1)", advisoryLockKey)
        // A broken connection has released the lock already; the error that broke it is the one that matters.
        defer { _ = try? db.query("SELECT pg_advisory_unlock($1)", advisoryLockKey) }
        // Under the lock: two nodes creating the table at once would collide in the catalog.
        try db.execute("""
            CREATE TABLE IF NOT EXISTS soulacy_migrations (
                module text NOT NULL,
                version bigint NOT NULL,
                applied_at bigint NOT NULL,
                PRIMARY KEY (module, version))
            """)
        var recorded: [String: Int] = [:]
        var known: [String: Set<Int>] = [:]
        for migration in migrations { known[migration.module, default: []].insert(migration.version) }
        for row in try db.query("SELECT module, version FROM soulacy_migrations") {
            guard let module = row.string("module"), let version = row.int("version").map(Int.init) else { continue }
            guard let versions = known[module] else { continue }
            guard versions.contains(version) else {
                throw PostgresMigrationError.unknownVersion(module: module, recorded: version, known: versions.max())
            }
            recorded[module] = max(recorded[module] ?? Int.min, version)
        }
        var applied: [PostgresMigration] = []
        for migration in migrations where migration.version > recorded[migration.module] ?? Int.min {
            do {
                try db.transaction { db in
                    try db.execute(migration.sql)
                    // The database's clock, as every node's leases use.
                    try db.run("""
                        INSERT INTO soulacy_migrations (module, version, applied_at)
                        VALUES ($1, $2, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
                        """, migration.module, migration.version)
                }
            } catch let error as PostgresError {
                throw PostgresMigrationError.failed(module: migration.module, version: migration.version, error)
            }
            recorded[migration.module] = migration.version
            applied.append(migration)
        }
        return applied
    }
}
