import Foundation
import GatewayTestSupport
import PostgreSQL
import Testing

@Suite("PostgreSQL migrator")
struct PostgresMigratorTests {
    /// Each migration also writes a row into `applied_log`, so one applied twice would show twice.
    static let migrations = [
        PostgresMigration(module: "inbox", version: 1, sql: """
            CREATE TABLE applied_log (id bigserial PRIMARY KEY, step text NOT NULL);
            CREATE TABLE inbox (id bigserial PRIMARY KEY, body text NOT NULL);
            INSERT INTO applied_log (step) VALUES ('inbox 1');
            """),
        PostgresMigration(module: "devices", version: 1, sql: """
            CREATE TABLE devices (id text PRIMARY KEY);
            INSERT INTO applied_log (step) VALUES ('devices 1');
            """),
        PostgresMigration(module: "inbox", version: 2, sql: """
            ALTER TABLE inbox ADD COLUMN read_at bigint;
            INSERT INTO applied_log (step) VALUES ('inbox 2');
            """),
    ]

    @Test("three nodes migrating one database at once apply each migration exactly once, in order")
    func concurrentNodes() async throws {
        let database = try await freshDatabase()
        let pools = try (0..<3).map { _ in try PostgresPool(url: database.url, size: 1) }
        defer { for pool in pools { pool.close() } }
        let migrator = try PostgresMigrator(Self.migrations)
        let applied = try await withThrowingTaskGroup(of: Int.self) { group in
            for pool in pools { group.addTask { try await migrator.migrate(pool).count } }
            return try await group.reduce(into: [Int]()) { $0.append($1) }
        }
        #expect(applied.reduce(0, +) == 3, "every migration applied once in all: \(applied)")
        let log = try await pools[0].withConnection { db in try db.query("SELECT step FROM applied_log ORDER BY id").compactMap { $0.string("step") } }
        #expect(log == ["inbox 1", "devices 1", "inbox 2"])
        let recorded = try await pools[0].withConnection { db in
            try db.query("SELECT module, version, applied_at FROM soulacy_migrations ORDER BY applied_at, module")
        }
        #expect(Set(recorded.map { "\($0.string("module")!) \($0.int("version")!)" }) == ["inbox 1", "devices 1", "inbox 2"])
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        #expect(recorded.allSatisfy { abs(($0.int("applied_at") ?? 0) - now) < 60_000 }, "applied_at is milliseconds of the database's clock")
        // Started again, nothing is left to do; the advisory lock was let go.
        #expect(try await migrator.migrate(pools[1]).isEmpty)
    }

    @Test("a later binary applies only what is newer than the recorded version")
    func onlyNewer() async throws {
        let (pool, _) = try await freshPool(size: 1)
        defer { pool.close() }
        try await PostgresMigrator(Array(Self.migrations.prefix(2))).migrate(pool)
        let later = try PostgresMigrator(Self.migrations)
        let applied = try await later.migrate(pool)
        #expect(applied.map { "\($0.module) \($0.version)" } == ["inbox 2"])
    }

    @Test("a version the database has and this binary lacks stops the migration, naming the module")
    func newerDatabase() async throws {
        let (pool, _) = try await freshPool(size: 1)
        defer { pool.close() }
        try await PostgresMigrator(Self.migrations).migrate(pool)
        try await pool.withConnection { db in
            try db.run("INSERT INTO soulacy_migrations (module, version, applied_at) VALUES ('inbox', 3, 0)")
            // Another program's module is not this binary's business.
            try db.run("INSERT INTO soulacy_migrations (module, version, applied_at) VALUES ('relay', 9, 0)")
        }
        let error = try await #require(throws: PostgresMigrationError.self) { try await PostgresMigrator(Self.migrations).migrate(pool) }
        #expect(error == .unknownVersion(module: "inbox", recorded: 3, known: 2))
        #expect(error.description.contains("inbox") && error.description.contains("newer"), "\(error)")
        // The lock was released on the way out: a migrator of the other modules alone still runs.
        #expect(try await PostgresMigrator([Self.migrations[1]]).migrate(pool).isEmpty)
    }

    @Test("a failing migration leaves neither its changes nor its record, and says which one failed")
    func failingMigration() async throws {
        let (pool, _) = try await freshPool(size: 1)
        defer { pool.close() }
        let broken = PostgresMigration(module: "inbox", version: 1, sql: "CREATE TABLE half (id integer); SELECT 1 / 0;")
        let error = try await #require(throws: PostgresMigrationError.self) { try await PostgresMigrator([broken]).migrate(pool) }
        guard case .failed(let module, let version, let cause) = error else {
            Issue.record("expected .failed, got \(error)")
            return
        }
        #expect(module == "inbox" && version == 1 && cause.sqlState == "22012")
        let left = try await pool.withConnection { db in
            (try db.query("SELECT to_regclass('half') IS NULL AS gone").first?.bool("gone"),
             try db.query("SELECT count(*) AS n FROM soulacy_migrations").first?.int("n"))
        }
        #expect(left.0 == true && left.1 == 0)
        #expect(try await PostgresMigrator(Self.migrations).migrate(pool).count == 3)
    }

    @Test("a list with a version twice or out of order is refused before anything runs")
    func invalidLists() throws {
        let one = PostgresMigration(module: "inbox", version: 1, sql: "SELECT 1")
        let two = PostgresMigration(module: "inbox", version: 2, sql: "SELECT 1")
        #expect(throws: PostgresMigrationError.duplicate(module: "inbox", version: 1)) { try PostgresMigrator([one, one]) }
        #expect(throws: PostgresMigrationError.outOfOrder(module: "inbox", version: 1, after: 2)) { try PostgresMigrator([two, one]) }
        #expect(PostgresMigrator.advisoryLockKey == 0x534F_554C_4143_5921, "the key is fixed for good: every node must take the same one")
    }
}
