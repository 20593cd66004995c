import Foundation
import Mobile
import PostgreSQL
import PostgresStores
import SQLite

/// `soulacy migrate`: copies a SQLite gateway's database into an empty PostgreSQL database, in one snapshot of the
/// file and one PostgreSQL transaction (all of it, or nothing), then checks every table's row count and every
/// person's inbox, read through both engines' stores, page by page.
///
/// The copy goes by table and column name: the PostgreSQL schema is the same rows as SQLite's (the conformance
/// suites hold both engines to one contract), with text a phone or a service wrote kept as BYTEA, flags as booleans,
/// and a run's node (`node_id`, PostgreSQL only) set to `migrated`. Sealed values (destinations, relay secrets,
/// console codes) are copied as they are: the gateway on PostgreSQL reads them with the same data directory's keys.
public enum GatewayMigrationStore {
    public struct Report: Sendable, Equatable {
        /// Rows copied, by table.
        public var rows: [String: Int] = [:]
        /// People whose inbox was read through both engines and found the same.
        public var inboxesCompared = 0
        /// Tables of the SQLite file that have no PostgreSQL counterpart (bookkeeping only), left behind.
        public var skipped: [String] = []
        /// Runs the SQLite file still had running (a crash), copied as interrupted.
        public var interruptedRuns = 0
    }

    public enum Failure: Error, CustomStringConvertible, Equatable {
        case targetNotEmpty(table: String, rows: Int)
        case sourceMissing(String)
        case column(table: String, column: String, reason: String)
        case mismatch(String)
        case notCopied(table: String, columns: [String])

        public var description: String {
            switch self {
            case .targetNotEmpty(let table, let rows):
                "the target database is not empty (\(table) holds \(rows) rows): migrate copies into an empty database only"
            case .sourceMissing(let path): "no gateway database at \(path)"
            case .column(let table, let column, let reason): "\(table).\(column): \(reason)"
            case .mismatch(let what): "after the copy, \(what)"
            case .notCopied(let table, let columns):
                "\(table) has columns PostgreSQL's schema lacks (\(columns.joined(separator: ", "))): a newer soulacy wrote this file; migrate with that version"
            }
        }
    }

    /// SQLite's own bookkeeping, the migrations list, and what SQLite's triggers keep from rows that are copied (the
    /// inbox's counts, each phone's latest wake-up): never copied (PostgreSQL keeps its own or reads the rows).
    static let bookkeeping: Set<String> = ["sqlite_sequence", "schema_migrations", "soulacy_migrations", "mobile_line_counts", "mobile_receipt_counts",
                                           "mobile_device_last_wakes"]

    /// Copies `sqlitePath` into the database at `url` (migrated to this binary's schema first). The SQLite file is
    /// read in one snapshot and never written; stop the gateway first, or lines written after the snapshot stay behind.
    public static func copy(sqlitePath: String, to url: String) async throws -> Report {
        guard FileManager.default.fileExists(atPath: sqlitePath) else { throw Failure.sourceMissing(sqlitePath) }
        let pool = try await PostgresGatewaySchema.openPool(url: url, size: 2).pool
        defer { pool.close() }
        let source = try Connection(path: sqlitePath, readOnly: true)
        defer { source.close() }
        var report = Report()
        try await pool.withConnection { target in
            let targetTables = Set(try target.query("SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'")
                .compactMap { $0.string("table_name") }).subtracting(bookkeeping)
            for table in targetTables.sorted() {
                let rows = try target.query("SELECT count(*) AS n FROM \(try target.quoteIdentifier(table))").first?.int("n") ?? 0
                if rows > 0 { throw Failure.targetNotEmpty(table: table, rows: Int(rows)) }
            }
            try source.readTransaction { source in
                let sourceTables = try source.query("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").compactMap { $0.string("name") }
                report.skipped = sourceTables.filter { !targetTables.contains($0) && !bookkeeping.contains($0) }
                try target.transaction { target in
                    for table in sourceTables where targetTables.contains(table) {
                        report.rows[table] = try copyTable(table, from: source, to: target)
                    }
                    // Runs a crashed gateway left running: what its next start on SQLite would mark. No node would on
                    // PostgreSQL, where each marks only its own.
                    if report.rows["runs"] != nil {
                        report.interruptedRuns = try target.run("""
                            UPDATE runs SET status = 'interrupted', finished_at = $1, error = 'the gateway stopped during the run' WHERE status = 'running'
                            """, Date().postgresMillis)
                    }
                }
            }
            // Counted again after the commit: what PostgreSQL holds now, table by table.
            for (table, copied) in report.rows {
                let now = Int(try target.query("SELECT count(*) AS n FROM \(try target.quoteIdentifier(table))").first?.int("n") ?? 0)
                if now != copied { throw Failure.mismatch("\(table) holds \(now) rows, not the \(copied) copied") }
            }
        }
        report.inboxesCompared = try await compareInboxes(sqlitePath: sqlitePath, pool: pool)
        return report
    }

    /// One table: the columns both engines have, each value converted to the target column's type.
    static func copyTable(_ table: String, from source: Connection, to target: PostgresConnection) throws -> Int {
        let sourceColumns = try source.query("SELECT name FROM pragma_table_info(?)", table).compactMap { $0.string("name") }
        let targetColumns = try target.query("""
            SELECT column_name, data_type, is_nullable, column_default FROM information_schema.columns
            WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position
            """, table)
        let targetNames = Set(targetColumns.compactMap { $0.string("column_name") })
        let lost = sourceColumns.filter { !targetNames.contains($0) }
        // Nothing is left behind silently: a column only SQLite has would be data lost.
        guard lost.isEmpty else { throw Failure.notCopied(table: table, columns: lost) }
        var columns: [(name: String, type: String)] = []
        var filled: [(name: String, value: PostgresValue)] = []
        for column in targetColumns {
            guard let name = column.string("column_name"), let type = column.string("data_type") else { continue }
            if sourceColumns.contains(name) {
                columns.append((name, type))
            } else if name == "node_id" {
                filled.append((name, .text("migrated")))
            } else if column.string("is_nullable") == "NO", column.string("column_default") == nil {
                throw Failure.column(table: table, column: name, reason: "PostgreSQL requires it and the SQLite file has no such column")
            }
        }
        guard !columns.isEmpty else { return 0 }
        let quotedTable = try target.quoteIdentifier(table)
        let names = try (columns.map(\.name) + filled.map(\.name)).map { try target.quoteIdentifier($0) }
        let sourceNames = columns.map { "\"\($0.name)\"" }.joined(separator: ", ")
        // A few hundred rows a statement: fewer round trips, far below PostgreSQL's 65,535 parameters. The file is read
        // a statement's worth at a time along its rowid (in the caller's snapshot), so a large inbox is never held whole.
        let perStatement = max(1, 30_000 / names.count)
        var copied = 0
        var lastRowID = Int64.min
        while true {
            let rows = try source.query("SELECT rowid AS soulacy_rowid, \(sourceNames) FROM \"\(table)\" WHERE rowid > ? ORDER BY rowid LIMIT ?",
                                        lastRowID, perStatement)
            guard let last = rows.last?.int("soulacy_rowid") else { break }
            var arguments: [any PostgresBindable] = []
            var tuples: [String] = []
            for row in rows {
                var placeholders: [String] = []
                for (index, column) in columns.enumerated() {
                    arguments.append(try value(row[index + 1], as: column.type, table: table, column: column.name))
                    placeholders.append("$\(arguments.count)")
                }
                for fill in filled {
                    arguments.append(fill.value)
                    placeholders.append("$\(arguments.count)")
                }
                tuples.append("(" + placeholders.joined(separator: ", ") + ")")
            }
            try target.run("INSERT INTO \(quotedTable) (\(names.joined(separator: ", "))) VALUES \(tuples.joined(separator: ", "))", arguments: arguments)
            copied += rows.count
            lastRowID = last
        }
        // Serial columns given explicit values: the sequence goes on after the largest, or the next insert collides.
        for column in columns where copied > 0 {
            let sequence = try target.query("SELECT pg_get_serial_sequence($1, $2) AS s", quotedTable, column.name).first?.string("s")
            if let sequence {
                _ = try target.query("SELECT setval($1, (SELECT max(\(try target.quoteIdentifier(column.name))) FROM \(quotedTable)))", sequence)
            }
        }
        return copied
    }

    /// One SQLite value as the PostgreSQL column's type wants it.
    static func value(_ value: SQLiteValue, as type: String, table: String, column: String) throws -> PostgresValue {
        switch (value, type) {
        case (.null, _): return .null
        case (.blob(let bytes), "bytea"): return .bytea(bytes)
        case (.text(let text), "bytea"): return .bytea(Array(text.utf8))
        case (.integer(let number), "boolean"): return .bool(number != 0)
        case (.integer(let number), "bigint"), (.integer(let number), "integer"), (.integer(let number), "smallint"): return .int64(number)
        case (.real(let number), "bigint"), (.real(let number), "integer"): return .int64(Int64(number))
        case (.integer(let number), "double precision"), (.integer(let number), "real"), (.integer(let number), "numeric"): return .double(Double(number))
        case (.real(let number), "double precision"), (.real(let number), "real"), (.real(let number), "numeric"): return .double(number)
        case (.text(let text), "text"), (.text(let text), "jsonb"), (.text(let text), "json"), (.text(let text), "character varying"):
            guard !text.utf8.contains(0) else {
                throw Failure.column(table: table, column: column, reason: "a value holds a NUL character, which a PostgreSQL \(type) column cannot store")
            }
            return .text(text)
        case (.integer(let number), "text"): return .text(String(number))
        case (.blob(let bytes), "text"):
            guard let text = String(validating: bytes, as: UTF8.self), !bytes.contains(0) else {
                throw Failure.column(table: table, column: column, reason: "a value is bytes that are not text, and the PostgreSQL column is text")
            }
            return .text(text)
        default:
            throw Failure.column(table: table, column: column, reason: "a SQLite \(value) cannot go into a PostgreSQL \(type) column")
        }
    }

    /// Every person's whole inbox (each device's view and the person's), page by page, read through SQLite's store
    /// and PostgreSQL's: the same lines, texts, read states and unread counts. Returns how many people were compared.
    static func compareInboxes(sqlitePath: String, pool: PostgresPool) async throws -> Int {
        let database = try DatabasePool(path: sqlitePath, readerCount: 1)
        defer { database.close() }
        let sqlite = try MobileStore(database: database)
        let postgres = PostgresInbox(pool: pool, listenURL: nil)
        let devices = try await sqlite.devices.registry.allDevices()
        let people = Set(devices.map(\.subject)).union(try database.read { db in
            try db.query("SELECT DISTINCT destination_value AS s FROM mobile_deliveries WHERE destination_kind = 'user'").compactMap { $0.string("s") }
        })
        for subject in people.sorted() {
            for device in [nil] + devices.filter({ $0.subject == subject }).map(\.id) {
                var cursor: Int64?
                while true {
                    let before = try await sqlite.inbox.deliveries(subject: subject, deviceID: device, before: cursor, limit: 100)
                    let after = try await postgres.deliveries(subject: subject, deviceID: device, before: cursor, limit: 100)
                    let view = device.map { "\(subject)'s device \($0)" } ?? subject
                    guard before.items == after.items, before.unreadCount == after.unreadCount, before.hasMore == after.hasMore else {
                        throw Failure.mismatch("\(view)'s inbox reads differently on PostgreSQL (\(after.items.count) lines, \(after.unreadCount) unread) than on SQLite (\(before.items.count), \(before.unreadCount))")
                    }
                    guard before.hasMore, let last = before.items.last else { break }
                    cursor = last.seq
                }
            }
        }
        return people.count
    }
}
