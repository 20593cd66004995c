internal import CSQLite
import Foundation
import Glibc

// SQLite's SQLITE_TRANSIENT: tells sqlite3_bind_* to copy the bytes before the call returns.
private let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

/// How hard each commit is pushed to disk.
public enum Durability: String, Sendable {
    /// fsync on every commit (synchronous=FULL): a commit that returned survives power loss.
    case full
    /// WAL with synchronous=NORMAL: survives a crash of the process, may lose the last commits on power loss.
    case normal
}

/// A compiled statement and the names of the columns it returns (nil: it returns none).
struct PreparedStatement {
    let handle: OpaquePointer
    let columns: ColumnNames?
}

/// One SQLite connection. Not thread-safe by itself: `DatabasePool` hands it to one thread at a time.
public final class Connection {
    private var handle: OpaquePointer?
    private var statements: [String: PreparedStatement] = [:]
    public let path: String

    /// Process-wide settings, applied once before the first connection opens.
    private static let configured: Bool = {
        _ = soulacy_sqlite3_disable_memory_statistics()
        return true
    }()

    public init(path: String, readOnly: Bool = false, busyTimeoutMilliseconds: Int32 = 5000, durability: Durability = .full) throws(SQLiteError) {
        _ = Self.configured
        self.path = path
        var db: OpaquePointer?
        // A new database is owner-only from its first byte (SQLite would create it 0644 under the usual umask); its
        // -wal and -shm files take the database's mode.
        if !readOnly, !path.isEmpty, path != ":memory:", !path.hasPrefix("file:") {
            let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
            if fd >= 0 { Glibc.close(fd) }
        }
        let flags = (readOnly ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE)) | SQLITE_OPEN_NOMUTEX
        let rc = sqlite3_open_v2(path, &db, flags, nil)
        guard rc == SQLITE_OK, let db else {
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? "cannot open"
            sqlite3_close_v2(db)
            throw SQLiteError(code: rc, message: "\(message): \(path)")
        }
        handle = db
        sqlite3_extended_result_codes(db, 1)
        sqlite3_busy_timeout(db, busyTimeoutMilliseconds)
        if !readOnly {
            try execute("PRAGMA journal_mode=WAL")
            try execute("PRAGMA synchronous=\(durability == .full ? "FULL" : "NORMAL")")
            // Checkpoint less often: hot pages (index tails) are then copied into the file once, not many times.
            try execute("PRAGMA wal_autocheckpoint=8000")
            // Deleted or rewritten content is zeroed where that costs no extra write (a revoked secret does not
            // linger in a page's free space).
            try execute("PRAGMA secure_delete=FAST")
        }
        try execute("PRAGMA foreign_keys=ON")
        // Statement journals (one per SAVEPOINT of a group commit) in memory: on disk, past 64 KB they spill to a
        // temporary file that is never truncated, and every job of a batch then writes its pages there again.
        try execute("PRAGMA temp_store=MEMORY")
    }

    deinit { close() }

    /// Closes the file now (its descriptors with it); any later use fails with SQLITE_MISUSE, nothing crashes.
    public func close() {
        for statement in statements.values { sqlite3_finalize(statement.handle) }
        statements = [:]
        if let handle { sqlite3_close_v2(handle) }
        handle = nil
    }

    private func error(_ code: Int32, sql: String?) -> SQLiteError {
        guard let handle else { return Self.closedError(sql: sql) }
        return SQLiteError(code: code, message: String(cString: sqlite3_errmsg(handle)), sql: sql)
    }

    /// SQLite's own functions dereference a closed (NULL) handle: every entry point asks for the handle here.
    private func openHandle(sql: String?) throws(SQLiteError) -> OpaquePointer {
        guard let handle else { throw Self.closedError(sql: sql) }
        return handle
    }

    private static func closedError(sql: String?) -> SQLiteError {
        SQLiteError(code: SQLITE_MISUSE, message: "the database connection is closed (the gateway is stopping)", sql: sql)
    }

    /// Rows changed by INSERT, UPDATE and DELETE on this connection since it opened (0 once closed).
    public var totalChanges: Int64 { handle.map { sqlite3_total_changes64($0) } ?? 0 }

    /// Runs one or more statements that take no arguments and return nothing useful.
    public func execute(_ sql: String) throws(SQLiteError) {
        let handle = try openHandle(sql: sql)
        var message: UnsafeMutablePointer<CChar>?
        let rc = sqlite3_exec(handle, sql, nil, nil, &message)
        if rc != SQLITE_OK {
            let text = message.map { String(cString: $0) } ?? String(cString: sqlite3_errmsg(handle))
            sqlite3_free(message)
            throw SQLiteError(code: rc, message: text, sql: sql)
        }
    }

    // Prepared statements are cached by their SQL text, so each is compiled once per connection; the column
    // names of a result are read once with it. Every use binds all parameters, and a use resets on its way out.
    private func prepared(_ sql: String) throws(SQLiteError) -> PreparedStatement {
        if let cached = statements[sql] { return cached }
        let connection = try openHandle(sql: sql)
        var handle: OpaquePointer?
        let rc = sqlite3_prepare_v3(connection, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &handle, nil)
        guard rc == SQLITE_OK, let handle else { throw error(rc, sql: sql) }
        let count = sqlite3_column_count(handle)
        let statement = PreparedStatement(handle: handle, columns: count == 0 ? nil : ColumnNames((0..<count).map { String(cString: sqlite3_column_name(handle, $0)) }))
        statements[sql] = statement
        return statement
    }

    private func bind(_ arguments: [any SQLiteBindable], to statement: OpaquePointer, sql: String) throws(SQLiteError) {
        guard Int(sqlite3_bind_parameter_count(statement)) == arguments.count else {
            throw SQLiteError(code: SQLITE_RANGE, message: "expected \(sqlite3_bind_parameter_count(statement)) arguments, got \(arguments.count)", sql: sql)
        }
        for (offset, argument) in arguments.enumerated() {
            let index = Int32(offset + 1)
            let rc: Int32
            switch argument.sqliteValue {
            case .null: rc = sqlite3_bind_null(statement, index)
            case .integer(let v): rc = sqlite3_bind_int64(statement, index, v)
            case .real(let v): rc = sqlite3_bind_double(statement, index, v)
            case .text(let v):
                // Bound from its UTF-8 with its length, without a NUL-terminated copy. (An empty buffer may have
                // no address, and a nil pointer would bind NULL instead of ''.)
                var text = v
                rc = text.withUTF8 { bytes in
                    bytes.withMemoryRebound(to: CChar.self) { chars in
                        guard let base = chars.baseAddress else { return sqlite3_bind_text(statement, index, "", 0, transient) }
                        return sqlite3_bind_text(statement, index, base, Int32(chars.count), transient)
                    }
                }
            case .blob(let v):
                // An empty array may have no address, and a nil pointer would bind NULL instead of an empty blob.
                rc = v.isEmpty ? sqlite3_bind_zeroblob(statement, index, 0)
                    : v.withUnsafeBytes { sqlite3_bind_blob(statement, index, $0.baseAddress, Int32($0.count), transient) }
            }
            guard rc == SQLITE_OK else { throw error(rc, sql: sql) }
        }
    }

    private func readRow(_ statement: OpaquePointer, columns: ColumnNames) -> Row {
        var values: [SQLiteValue] = []
        values.reserveCapacity(columns.names.count)
        for i in 0..<Int32(columns.names.count) {
            switch sqlite3_column_type(statement, i) {
            case SQLITE_INTEGER: values.append(.integer(sqlite3_column_int64(statement, i)))
            case SQLITE_FLOAT: values.append(.real(sqlite3_column_double(statement, i)))
            case SQLITE_TEXT:
                // By length, not up to the first NUL: text may hold NUL characters and must read back whole.
                let count = Int(sqlite3_column_bytes(statement, i))
                let text = sqlite3_column_text(statement, i).map { String(decoding: UnsafeBufferPointer(start: $0, count: count), as: UTF8.self) } ?? ""
                values.append(.text(text))
            case SQLITE_BLOB:
                let count = Int(sqlite3_column_bytes(statement, i))
                if count == 0 { values.append(.blob([])) } else {
                    let pointer = sqlite3_column_blob(statement, i)!.assumingMemoryBound(to: UInt8.self)
                    values.append(.blob(Array(UnsafeBufferPointer(start: pointer, count: count))))
                }
            default: values.append(.null)
            }
        }
        return Row(names: columns, values: values)
    }

    /// Runs a statement and returns every row it produces.
    @discardableResult
    public func query(_ sql: String, _ arguments: any SQLiteBindable...) throws(SQLiteError) -> [Row] {
        try query(sql, arguments: arguments)
    }

    @discardableResult
    public func query(_ sql: String, arguments: [any SQLiteBindable]) throws(SQLiteError) -> [Row] {
        let prepared = try prepared(sql)
        let statement = prepared.handle
        defer { sqlite3_reset(statement) }
        try bind(arguments, to: statement, sql: sql)
        var rows: [Row] = []
        while true {
            let rc = sqlite3_step(statement)
            if rc == SQLITE_ROW, let columns = prepared.columns { rows.append(readRow(statement, columns: columns)); continue }
            if rc == SQLITE_DONE { break }
            throw error(rc, sql: sql)
        }
        return rows
    }

    /// Runs a statement for its effect; returns the number of rows it changed.
    @discardableResult
    public func run(_ sql: String, _ arguments: any SQLiteBindable...) throws(SQLiteError) -> Int {
        try run(sql, arguments: arguments)
    }

    @discardableResult
    public func run(_ sql: String, arguments: [any SQLiteBindable]) throws(SQLiteError) -> Int {
        try query(sql, arguments: arguments)
        return Int(sqlite3_changes(try openHandle(sql: sql)))
    }

    public var lastInsertRowID: Int64 { handle.map { sqlite3_last_insert_rowid($0) } ?? 0 }

    @discardableResult
    /// Runs `body` inside BEGIN IMMEDIATE … COMMIT; any thrown error rolls the whole transaction back.
    public func transaction<T>(_ body: (Connection) throws -> T) throws -> T {
        try inTransaction(begin: "BEGIN IMMEDIATE", body)
    }

    /// Runs `body` in a savepoint of the open transaction: its changes are kept with the transaction, or undone
    /// alone when it throws.
    public func savepoint<T>(_ body: (Connection) throws -> T) throws -> T {
        try execute("SAVEPOINT nested")
        do {
            let value = try body(self)
            try execute("RELEASE nested")
            return value
        } catch {
            try? execute("ROLLBACK TO nested")
            try? execute("RELEASE nested")
            throw error
        }
    }

    /// Runs reads inside one deferred transaction: they all see the same committed state.
    /// Writes a consistent copy of this database to a new file at `path` (`VACUUM INTO`: one read transaction, so
    /// one commit's snapshot while other connections go on writing).
    public func vacuum(into path: String) throws(SQLiteError) {
        _ = try query("VACUUM INTO ?", path)
    }

    public func readTransaction<T>(_ body: (Connection) throws -> T) throws -> T {
        try inTransaction(begin: "BEGIN", body)
    }

    private func inTransaction<T>(begin: String, _ body: (Connection) throws -> T) throws -> T {
        try execute(begin)
        do {
            let value = try body(self)
            try execute("COMMIT")
            return value
        } catch {
            try? execute("ROLLBACK")
            throw error
        }
    }

    /// Copies the WAL into the file and empties it: older versions of rewritten pages are gone from the disk.
    public func checkpointAndTruncate() throws {
        try execute("PRAGMA wal_checkpoint(TRUNCATE)")
    }

    /// `PRAGMA integrity_check`: "ok" when the file is sound.
    public func integrityCheck() throws(SQLiteError) -> String {
        try query("PRAGMA integrity_check").compactMap { $0.string("integrity_check") }.joined(separator: "\n")
    }
}
