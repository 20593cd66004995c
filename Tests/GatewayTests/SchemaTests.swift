import ChannelDelivery
import Foundation
import Gateway
import GatewayTestSupport
import Mobile
import SQLite
import Testing

/// One migrator for the whole database: a fresh database and one upgraded from the oldest shipped schema end alike.
@Suite("Schema and migrations")
struct SchemaTests {
    /// The migrations of the first landed version (commit e87d78e): the oldest database anyone can have.
    static let oldestShipped = ["mobile.1-inbox", "auth.1-api-keys", "runs.1"]

    /// Every table, index and column, as SQLite describes them.
    static func schema(_ database: DatabasePool) throws -> [String] {
        try database.read { db in
            var lines: [String] = []
            for row in try db.query("SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name") {
                lines.append("\(row.string("type") ?? "") \(row.string("name") ?? "") on \(row.string("tbl_name") ?? ""): \(row.string("sql") ?? "")")
                guard row.string("type") == "table", let table = row.string("name") else { continue }
                for column in try db.query("SELECT name, type, \"notnull\" AS nn, dflt_value, pk FROM pragma_table_info(?)", table) {
                    lines.append("  \(table).\(column.string("name") ?? "") \(column.string("type") ?? "") notnull=\(column.int("nn") ?? 0) default=\(column.string("dflt_value") ?? "-") pk=\(column.int("pk") ?? 0)")
                }
            }
            return lines
        }
    }

    @Test("a duplicate migration id is refused at registration, naming the id")
    func duplicates() throws {
        var migrator = DatabaseMigrator()
        try migrator.register([Migration("x.1", "SELECT 1")])
        #expect(throws: MigrationError.duplicate("x.1")) { try migrator.register([Migration("x.2", "SELECT 1"), Migration("x.1", "SELECT 2")]) }
        #expect(MigrationError.duplicate("x.1").description.contains("'x.1'"))
        // The gateway's own lists hold no duplicate.
        #expect(try GatewaySchema.migrator().migrations.count == MobileSchema.migrations.count + GatewaySchema.migrations.count
                 + ChannelOutboxSchema.migrations.count + SQLiteChannelInboundStore.migrations.count)
    }

    @Test("fresh and upgraded from the oldest shipped schema end with the same schema, and the old rows are kept")
    func freshEqualsUpgraded() throws {
        let directory = TestGateway.makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let fresh = try DatabasePool(path: directory + "/fresh.db")
        try GatewaySchema.migrator().migrate(fresh)

        let old = try DatabasePool(path: directory + "/old.db")
        let all = try GatewaySchema.migrator().migrations
        try old.migrate(all.filter { Self.oldestShipped.contains($0.id) })
        try old.transaction { db in
            try db.run("INSERT INTO mobile_devices (id, subject, name, platform, bundle_id, notifications_enabled, created_at, updated_at) VALUES ('phone', 'owner', 'Phone', 'ios', 'b', 1, 1, 1)")
            try db.run("INSERT INTO mobile_deliveries (seq, id, destination, destination_kind, destination_value, agent_id, agent_name, session_id, title, body, parts, metadata, created_at) VALUES (1, 'dlv_1', 'all', 'all', '', 'echo', 'Echo', 's', 't', 'kept body', '[\"kept body\"]', '{}', 1)")
            try db.run("INSERT INTO runs (id, agent_id, session_id, trigger, status, started_at) VALUES ('run_1', 'echo', 's', 'api', 'succeeded', 1)")
        }
        #expect(try DatabaseMigrator.applied(old).count == 3)
        try GatewaySchema.migrator().migrate(old)

        #expect(try Self.schema(old) == Self.schema(fresh))
        #expect(Set(try DatabaseMigrator.applied(old)) == Set(all.map(\.id)))
        #expect(try DatabaseMigrator.applied(fresh) == all.map(\.id))
        #expect(try old.read { try $0.query("SELECT body FROM mobile_deliveries WHERE id = 'dlv_1'").first?.string("body") } == "kept body")
        #expect(try old.read { try $0.query("SELECT subject FROM runs WHERE id = 'run_1'").first?.string("subject") } == "owner")
        // Migrating again changes nothing.
        try GatewaySchema.migrator().migrate(old)
        #expect(try Self.schema(old) == Self.schema(fresh))
        fresh.close()
        old.close()
    }
}
