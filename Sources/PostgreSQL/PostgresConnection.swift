internal import CPostgres
import Foundation
import Glibc

/// Transaction isolation levels, for `transaction(isolation:_:)`.
public enum PostgresIsolation: String, Sendable {
    case readCommitted = "READ COMMITTED"
    case repeatableRead = "REPEATABLE READ"
    case serializable = "SERIALIZABLE"
}

/// One libpq connection, opened from a `postgres://` or `postgresql://` URL (libpq reads the URL itself, TLS
/// included: `sslmode=require` and the rest). Statements run with `$1…$n` parameters, never interpolated, through a
/// per-connection cache of prepared statements. Not thread-safe by itself: `PostgresPool` hands it to one thread at
/// a time, and it blocks that thread on the network.
public final class PostgresConnection {
    private var handle: OpaquePointer?
    /// Prepared statement names by SQL text and parameter types (a text parameter may be prepared untyped for one
    /// call and a bytea for another).
    private var statements: [String: String] = [:]
    private var nextStatement = 0
    private var depth = 0
    private var afterCommitWork: [() -> Void] = []
    /// Strings that must never appear in an error: the URL's password, as written and as libpq decoded it.
    private let secrets: [String]
    /// The URL with its password replaced by `***`: what errors and logs may show.
    public let redactedURL: String
    /// Rows inserted, updated or deleted through this connection so far (the engine seam's commit hook runs only
    /// for a transaction that changed something).
    public private(set) var changeCount: Int64 = 0

    /// Statements kept prepared per connection; past this many (a caller building SQL text on the fly) the cache
    /// starts over rather than growing on the server without bound.
    static let statementCacheLimit = 512
    /// PostgreSQL's protocol carries at most this many parameters in one statement.
    public static let maximumParameters = 65535

    /// Opens the connection, blocking the calling thread until the server has answered (at most `connect_timeout`,
    /// ten seconds unless the URL says otherwise). `applicationName` shows in `pg_stat_activity` unless the URL
    /// names one.
    public init(url: String, applicationName: String = "soulacy") throws(PostgresError) {
        redactedURL = PostgresURL.redacted(url)
        guard PostgresURL.isPostgresURL(url) else {
            throw PostgresError(kind: .other, message: "the database URL must start with postgres:// or postgresql:// (got \(redactedURL.prefix(40)))")
        }
        secrets = try Self.secrets(in: url)
        // Before the URL: a default the URL may override. After it: what this wrapper relies on (UTF-8 text).
        let keywords = ["connect_timeout", "dbname", "fallback_application_name", "client_encoding"]
        let values = ["10", url, applicationName, "UTF8"]
        let connection = Self.withCStrings(keywords) { keywords in
            Self.withCStrings(values) { values in PQconnectdbParams(keywords, values, 1) }
        }
        guard let connection, PQstatus(connection) == CONNECTION_OK else {
            let message = connection.map { String(cString: PQerrorMessage($0)) } ?? "out of memory"
            PQfinish(connection)
            throw PostgresError(kind: .connectionLost, message: "could not connect to \(redactedURL): \(Self.scrub(Self.trimmed(message), secrets))")
        }
        soulacy_pq_silence_notices(connection)
        handle = connection
    }

    deinit { close() }

    /// Closes the connection now; any later use fails with `.connectionLost`, nothing crashes.
    public func close() {
        if let handle { PQfinish(handle) }
        handle = nil
        statements = [:]
    }

    /// The server process serving this connection (`pg_backend_pid()`), 0 when closed.
    public var backendPID: Int32 { handle.map { PQbackendPID($0) } ?? 0 }

    /// Whether the connection runs over TLS.
    public var isTLS: Bool { handle.map { PQsslInUse($0) == 1 } ?? false }

    /// Whether libpq knows the connection to be broken (it learns it on the next call that touches the socket).
    public var isBroken: Bool { handle.map { PQstatus($0) == CONNECTION_BAD } ?? true }

    /// Whether a transaction is open (begun with `transaction` or a `BEGIN` of the caller's own).
    public var isInTransaction: Bool {
        guard let handle else { return false }
        let status = PQtransactionStatus(handle)
        return status == PQTRANS_INTRANS || status == PQTRANS_INERROR || status == PQTRANS_ACTIVE
    }

    // MARK: Statements

    /// Runs SQL without parameters through the simple query protocol: several statements separated by `;` are
    /// allowed (migrations), results are dropped.
    public func execute(_ sql: String) throws(PostgresError) {
        guard let handle else { throw Self.closedError(sql: sql) }
        guard !sql.utf8.contains(0) else {
            throw PostgresError(kind: .other, sqlState: "22021", message: "the statement contains a NUL character", sql: sql)
        }
        let result = PQexec(handle, sql)
        defer { PQclear(result) }
        try check(result, sql: sql, parameters: [])
    }

    /// Runs one statement with `$1…$n` bound to `arguments` and returns its rows.
    public func query(_ sql: String, _ arguments: any PostgresBindable...) throws(PostgresError) -> [PostgresRow] {
        try query(sql, arguments: arguments)
    }

    public func query(_ sql: String, arguments: [any PostgresBindable]) throws(PostgresError) -> [PostgresRow] {
        let result = try executePrepared(sql, arguments.map(\.postgresValue))
        defer { PQclear(result) }
        return Self.rows(of: result)
    }

    /// Runs one statement with `$1…$n` bound to `arguments`; returns the rows it inserted, updated or deleted.
    @discardableResult
    public func run(_ sql: String, _ arguments: any PostgresBindable...) throws(PostgresError) -> Int {
        try run(sql, arguments: arguments)
    }

    @discardableResult
    public func run(_ sql: String, arguments: [any PostgresBindable]) throws(PostgresError) -> Int {
        let result = try executePrepared(sql, arguments.map(\.postgresValue))
        defer { PQclear(result) }
        return Int(String(cString: PQcmdTuples(result))) ?? 0
    }

    /// Sends a notification (`pg_notify`, both values as parameters). Inside a transaction it is delivered when that
    /// commits, and never if it rolls back: a write and its hint go together.
    public func notify(channel: String, payload: String = "") throws(PostgresError) {
        try PostgresListener.validate(channel: channel)
        _ = try query("SELECT pg_notify($1, $2)", channel, payload)
    }

    /// `name` quoted as an SQL identifier by libpq (for LISTEN, which takes no parameters).
    public func quoteIdentifier(_ name: String) throws(PostgresError) -> String {
        guard let handle else { throw Self.closedError(sql: nil) }
        guard !name.utf8.contains(0), let quoted = PQescapeIdentifier(handle, name, name.utf8.count) else {
            throw PostgresError(kind: .other, message: "cannot quote the identifier: \(Self.trimmed(String(cString: PQerrorMessage(handle))))")
        }
        defer { PQfreemem(quoted) }
        return String(cString: quoted)
    }

    // MARK: Transactions

    /// Runs `body` in one transaction: all of it commits, or none. Called inside another transaction of this
    /// connection, it is a SAVEPOINT of that one: a throw undoes only the inner part, and it commits with the outer.
    /// `isolation` applies to the outermost transaction only.
    @discardableResult
    public func transaction<T>(isolation: PostgresIsolation? = nil, _ body: (PostgresConnection) throws -> T) throws -> T {
        if depth > 0 { return try savepoint(body) }
        try execute(isolation.map { "BEGIN ISOLATION LEVEL \($0.rawValue)" } ?? "BEGIN")
        depth = 1
        let value: T
        do {
            value = try body(self)
            // COMMIT of an aborted transaction answers ROLLBACK without an error: a body that swallowed a failed
            // statement must not pass for committed.
            if let handle, PQtransactionStatus(handle) == PQTRANS_INERROR {
                throw PostgresError(kind: .other, sqlState: "25P02",
                                    message: "a statement of the transaction failed and its error was caught; nothing was committed")
            }
            try execute("COMMIT")
        } catch {
            depth = 0
            afterCommitWork = []
            rollBackQuietly("ROLLBACK")
            throw error
        }
        depth = 0
        let work = afterCommitWork
        afterCommitWork = []
        for item in work { item() }
        return value
    }

    /// A savepoint inside the open transaction (`transaction` calls it when nested).
    @discardableResult
    public func savepoint<T>(_ body: (PostgresConnection) throws -> T) throws -> T {
        guard depth > 0 else { return try transaction(body) }
        let name = "soulacy_savepoint_\(depth)"
        try execute("SAVEPOINT \(name)")
        depth += 1
        defer { depth -= 1 }
        let pending = afterCommitWork.count
        do {
            let value = try body(self)
            if let handle, PQtransactionStatus(handle) == PQTRANS_INERROR {
                throw PostgresError(kind: .other, sqlState: "25P02",
                                    message: "a statement of the savepoint failed and its error was caught; it was rolled back")
            }
            try execute("RELEASE SAVEPOINT \(name)")
            return value
        } catch {
            // Work deferred by the undone part goes with it.
            afterCommitWork.removeSubrange(pending...)
            rollBackQuietly("ROLLBACK TO SAVEPOINT \(name); RELEASE SAVEPOINT \(name)")
            throw error
        }
    }

    /// Runs `work` once what this connection is writing is committed: at once outside a transaction, after the
    /// outermost COMMIT inside one, never after a rollback.
    public func afterCommit(_ work: @escaping () -> Void) {
        if depth > 0 { afterCommitWork.append(work) } else { work() }
    }

    private func rollBackQuietly(_ sql: String) {
        // A lost connection rolls back by itself; the body's error is the one worth reporting.
        guard let handle, PQstatus(handle) == CONNECTION_OK else { return }
        PQclear(PQexec(handle, sql))
    }

    // MARK: Pool support

    /// Before the pool hands the connection out: a connection the server closed since its last use (a restart,
    /// `pg_terminate_backend`) is noticed without blocking and reconnected, so the call that follows works.
    func prepareForUse() throws(PostgresError) {
        guard let handle else { throw Self.closedError(sql: nil) }
        // Readable while idle means the server said something unasked: a FATAL before it closed, then EOF. libpq
        // takes the message as a notice and learns of the close only on the read after it, hence a few rounds.
        for _ in 0..<4 {
            var descriptor = pollfd(fd: PQsocket(handle), events: Int16(POLLIN), revents: 0)
            guard PQstatus(handle) == CONNECTION_OK, poll(&descriptor, 1, 0) > 0, PQconsumeInput(handle) == 1 else { break }
            _ = PQisBusy(handle)
            drainNotifications()
        }
        if PQstatus(handle) != CONNECTION_OK { try reconnect() }
    }

    /// Reconnects with the same settings; the server forgot the prepared statements and any transaction.
    func reconnect() throws(PostgresError) {
        guard let handle else { throw Self.closedError(sql: nil) }
        statements = [:]
        depth = 0
        afterCommitWork = []
        PQreset(handle)
        guard PQstatus(handle) == CONNECTION_OK else {
            throw PostgresError(kind: .connectionLost,
                                message: "could not reconnect to \(redactedURL): \(Self.scrub(Self.trimmed(String(cString: PQerrorMessage(handle))), secrets))")
        }
    }

    /// After the pool's caller is done: a transaction it left open (a `BEGIN` of its own) is rolled back, so the
    /// next caller starts clean.
    func finishUse() {
        depth = 0
        afterCommitWork = []
        if isInTransaction { rollBackQuietly("ROLLBACK") }
    }

    /// Notifications libpq has read (a listening connection), oldest first.
    @discardableResult
    func drainNotifications() -> [PostgresNotification] {
        guard let handle else { return [] }
        var received: [PostgresNotification] = []
        while let notify = PQnotifies(handle) {
            received.append(PostgresNotification(channel: String(cString: notify.pointee.relname),
                                                 payload: String(cString: notify.pointee.extra),
                                                 senderPID: notify.pointee.be_pid))
            PQfreemem(notify)
        }
        return received
    }

    /// Reads what the server sent without blocking (false: the connection broke).
    func consumeInput() -> Bool {
        guard let handle else { return false }
        return PQconsumeInput(handle) == 1 && PQstatus(handle) == CONNECTION_OK
    }

    /// The socket libpq reads, to wait on with poll (-1 when closed).
    var socket: Int32 { handle.map { PQsocket($0) } ?? -1 }

    // MARK: Binding and results

    private struct BoundParameters {
        var types: [UInt32] = []
        /// Every value back to back, each text one NUL-terminated; offsets into it (nil for NULL).
        var storage: [UInt8] = [0]
        var offsets: [Int?] = []
        var lengths: [Int32] = []
        var formats: [Int32] = []
    }

    private func bind(_ values: [PostgresValue], sql: String) throws(PostgresError) -> BoundParameters {
        guard values.count <= Self.maximumParameters else {
            throw PostgresError(kind: .other, sqlState: "54000",
                                message: "\(values.count) parameters given; PostgreSQL takes at most \(Self.maximumParameters) in one statement", sql: sql)
        }
        var bound = BoundParameters()
        bound.types.reserveCapacity(values.count)
        for (index, value) in values.enumerated() {
            func binary(_ bytes: some Collection<UInt8>, type: UInt32) {
                bound.types.append(type)
                bound.offsets.append(bound.storage.count)
                bound.storage.append(contentsOf: bytes)
                bound.lengths.append(Int32(bytes.count))
                bound.formats.append(1)
            }
            switch value {
            case .null:
                bound.types.append(PostgresType.unspecified)
                bound.offsets.append(nil)
                bound.lengths.append(0)
                bound.formats.append(0)
            case .int64(let number):
                // Binary, big-endian: exact, nothing formatted or parsed.
                withUnsafeBytes(of: number.bigEndian) { binary($0, type: PostgresType.int8) }
            case .double(let number):
                withUnsafeBytes(of: number.bitPattern.bigEndian) { binary($0, type: PostgresType.float8) }
            case .bool(let flag):
                binary([flag ? 1 : 0], type: PostgresType.bool)
            case .bytea(let bytes):
                guard bytes.count < Int(Int32.max) else {
                    throw PostgresError(kind: .other, sqlState: "54000", message: "parameter $\(index + 1) is \(bytes.count) bytes, more than a value can hold", sql: sql)
                }
                binary(bytes, type: PostgresType.bytea)
            case .text(let text):
                // PostgreSQL's text cannot hold NUL (the server refuses it as 22021); libpq would cut the value there.
                let utf8 = text.utf8
                guard !utf8.contains(0) else {
                    throw PostgresError(kind: .other, sqlState: "22021",
                                        message: "parameter $\(index + 1) is text with a NUL character, which PostgreSQL's text cannot hold (bind it as bytea)", sql: sql)
                }
                guard utf8.count < Int(Int32.max) else {
                    throw PostgresError(kind: .other, sqlState: "54000", message: "parameter $\(index + 1) is \(utf8.count) bytes, more than a value can hold", sql: sql)
                }
                // Untyped: the server infers the type from the statement (text, varchar, jsonb, timestamptz…).
                bound.types.append(PostgresType.unspecified)
                bound.offsets.append(bound.storage.count)
                bound.storage.append(contentsOf: utf8)
                bound.storage.append(0)
                bound.lengths.append(Int32(utf8.count))
                bound.formats.append(0)
            }
        }
        return bound
    }

    private func executePrepared(_ sql: String, _ values: [PostgresValue]) throws(PostgresError) -> OpaquePointer {
        guard let handle else { throw Self.closedError(sql: sql) }
        guard !sql.utf8.contains(0) else {
            throw PostgresError(kind: .other, sqlState: "22021", message: "the statement contains a NUL character", sql: sql)
        }
        let bound = try bind(values, sql: sql)
        let key = sql + "\u{1}" + bound.types.map(String.init).joined(separator: ",")
        var attempt = 0
        while true {
            attempt += 1
            let name = try preparedName(for: key, sql: sql, types: bound.types, values: values)
            let result = Self.execute(prepared: name, bound, count: values.count, on: handle)
            do throws(PostgresError) {
                try check(result, sql: sql, parameters: values)
                return result!
            } catch {
                PQclear(result)
                // 0A000 "cached plan must not change result type" (a migration changed a table under a `SELECT *`),
                // 26000 the statement is gone (someone ran DEALLOCATE): prepared afresh. Outside a transaction
                // nothing ran, so it is tried once more at once; inside one, the transaction is aborted either way.
                guard error.sqlState == "0A000" || error.sqlState == "26000" else { throw error }
                statements[key] = nil
                guard PQtransactionStatus(handle) == PQTRANS_IDLE else { throw error }
                if error.sqlState == "0A000" { PQclear(PQexec(handle, "DEALLOCATE \(name)")) }
                guard attempt < 2 else { throw error }
            }
        }
    }

    private static func execute(prepared name: String, _ bound: BoundParameters, count: Int, on handle: OpaquePointer) -> OpaquePointer? {
        bound.storage.withUnsafeBufferPointer { storage in
            let base = UnsafeRawPointer(storage.baseAddress!)
            let pointers: [UnsafePointer<CChar>?] = bound.offsets.map { offset in
                offset.map { (base + $0).assumingMemoryBound(to: CChar.self) }
            }
            return pointers.withUnsafeBufferPointer { pointers in
                bound.lengths.withUnsafeBufferPointer { lengths in
                    bound.formats.withUnsafeBufferPointer { formats in
                        PQexecPrepared(handle, name, Int32(count), pointers.baseAddress, lengths.baseAddress, formats.baseAddress, 0)
                    }
                }
            }
        }
    }

    private func preparedName(for key: String, sql: String, types: [UInt32], values: [PostgresValue]) throws(PostgresError) -> String {
        if let name = statements[key] { return name }
        guard let handle else { throw Self.closedError(sql: sql) }
        if statements.count >= Self.statementCacheLimit, PQtransactionStatus(handle) != PQTRANS_INERROR {
            PQclear(PQexec(handle, "DEALLOCATE ALL"))
            statements = [:]
        }
        nextStatement += 1
        let name = "soulacy_\(nextStatement)"
        let result = types.withUnsafeBufferPointer { types in
            PQprepare(handle, name, sql, Int32(types.count), types.baseAddress)
        }
        defer { PQclear(result) }
        try check(result, sql: sql, parameters: values)
        statements[key] = name
        return name
    }

    /// Throws when `result` is a failure; counts the rows a write changed.
    private func check(_ result: OpaquePointer?, sql: String, parameters: [PostgresValue]) throws(PostgresError) {
        guard let result else { throw failure(nil, sql: sql, parameters: parameters) }
        let status = PQresultStatus(result)
        switch status {
        case PGRES_COMMAND_OK, PGRES_TUPLES_OK, PGRES_EMPTY_QUERY:
            let tag = String(cString: PQcmdStatus(result))
            if tag.hasPrefix("INSERT") || tag.hasPrefix("UPDATE") || tag.hasPrefix("DELETE") || tag.hasPrefix("MERGE") {
                changeCount += Int64(String(cString: PQcmdTuples(result))) ?? 0
            }
        case PGRES_COPY_IN, PGRES_COPY_OUT, PGRES_COPY_BOTH:
            abandonCopy()
            throw PostgresError(kind: .other, message: "COPY to or from the client is not supported by this wrapper", sql: sql)
        default:
            throw failure(result, sql: sql, parameters: parameters)
        }
    }

    /// Leaves a COPY state the statement put the connection in, so it can be used again.
    private func abandonCopy() {
        guard let handle else { return }
        _ = PQputCopyEnd(handle, "COPY is not supported")
        var buffer: UnsafeMutablePointer<CChar>?
        while PQgetCopyData(handle, &buffer, 0) > 0 { PQfreemem(buffer) }
        while let pending = PQgetResult(handle) { PQclear(pending) }
    }

    private func failure(_ result: OpaquePointer?, sql: String?, parameters: [PostgresValue]) -> PostgresError {
        let broken = handle.map { PQstatus($0) == CONNECTION_BAD } ?? true
        // A value the statement was given may be echoed by the server ("invalid input syntax for type uuid: …").
        var secrets = self.secrets
        for case .text(let text) in parameters where text.utf8.count >= 6 { secrets.append(text) }
        func field(_ code: Character) -> String? {
            guard let result, let value = PQresultErrorField(result, Int32(code.asciiValue!)) else { return nil }
            return Self.scrub(String(cString: value), secrets)
        }
        let state = field("C")
        if let message = field("M") {
            let kind = broken ? PostgresError.Kind.connectionLost : PostgresError.kind(forSQLState: state)
            return PostgresError(kind: kind, sqlState: state, message: message, constraint: field("n"), sql: sql)
        }
        let message = handle.map { Self.trimmed(String(cString: PQerrorMessage($0))) } ?? "the connection is closed"
        return PostgresError(kind: broken ? PostgresError.Kind.connectionLost : PostgresError.kind(forSQLState: state), sqlState: state,
                             message: Self.scrub(message.isEmpty ? "no answer from the server" : message, secrets), sql: sql)
    }

    private static func rows(of result: OpaquePointer) -> [PostgresRow] {
        let rowCount = PQntuples(result)
        let columnCount = PQnfields(result)
        guard columnCount > 0 else { return [] }
        let columns = PostgresColumns((0..<columnCount).map { String(cString: PQfname(result, $0)) })
        let types = (0..<columnCount).map { PQftype(result, $0) }
        var rows: [PostgresRow] = []
        rows.reserveCapacity(Int(rowCount))
        for row in 0..<rowCount {
            var values: [PostgresValue] = []
            values.reserveCapacity(Int(columnCount))
            for column in 0..<columnCount {
                guard PQgetisnull(result, row, column) == 0, let pointer = PQgetvalue(result, row, column) else {
                    values.append(.null)
                    continue
                }
                let bytes = UnsafeRawBufferPointer(start: pointer, count: Int(PQgetlength(result, row, column)))
                values.append(decode(bytes, type: types[Int(column)]))
            }
            rows.append(PostgresRow(columns: columns, values: values))
        }
        return rows
    }

    /// A column in text format as a value: integers, floats, booleans and bytea decoded, everything else as text.
    private static func decode(_ bytes: UnsafeRawBufferPointer, type: UInt32) -> PostgresValue {
        let text = { String(decoding: bytes, as: UTF8.self) }
        switch type {
        case PostgresType.int8, PostgresType.int4, PostgresType.int2, PostgresType.oid:
            return Int64(text()).map(PostgresValue.int64) ?? .text(text())
        case PostgresType.float8, PostgresType.float4:
            return Double(text()).map(PostgresValue.double) ?? .text(text())
        case PostgresType.bool:
            return .bool(bytes.first == UInt8(ascii: "t"))
        case PostgresType.bytea:
            return .bytea(decodeBytea(bytes))
        default:
            return .text(text())
        }
    }

    /// bytea's text output: `\x` and two hex digits a byte (the default `bytea_output`), or the older escape form.
    static func decodeBytea(_ bytes: UnsafeRawBufferPointer) -> [UInt8] {
        guard bytes.count >= 2, bytes[0] == UInt8(ascii: "\\"), bytes[1] == UInt8(ascii: "x") else {
            return decodeEscapedBytea(bytes)
        }
        func nibble(_ c: UInt8) -> UInt8 {
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): c - UInt8(ascii: "A") + 10
            default: 0
            }
        }
        let count = (bytes.count - 2) / 2
        return [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            for i in 0..<count {
                buffer[i] = nibble(bytes[2 + 2 * i]) << 4 | nibble(bytes[3 + 2 * i])
            }
            initialized = count
        }
    }

    private static func decodeEscapedBytea(_ bytes: UnsafeRawBufferPointer) -> [UInt8] {
        // PQunescapeBytea wants a NUL-terminated string.
        var terminated = Array(bytes)
        terminated.append(0)
        var length = 0
        guard let decoded = terminated.withUnsafeBufferPointer({ PQunescapeBytea($0.baseAddress, &length) }) else { return [] }
        defer { PQfreemem(decoded) }
        return Array(UnsafeBufferPointer(start: decoded, count: length))
    }

    // MARK: Helpers

    static func closedError(sql: String?) -> PostgresError {
        PostgresError(kind: .connectionLost, message: "the connection is closed", sql: sql)
    }

    static func trimmed(_ message: String) -> String {
        message.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }.joined(separator: " ")
    }

    static func scrub(_ message: String, _ secrets: [String]) -> String {
        var message = message
        for secret in secrets where !secret.isEmpty { message = message.replacingOccurrences(of: secret, with: "***") }
        return message
    }

    /// Every setting of `url` as libpq reads it (its keyword, the environment variable libpq's programs read it
    /// from, its value if set); a malformed URL throws here, its password never in the message.
    private static func settings(of url: String) throws(PostgresError) -> [(keyword: String, variable: String?, value: String?)] {
        var error: UnsafeMutablePointer<CChar>?
        guard let options = PQconninfoParse(url, &error) else {
            let message = error.map { String(cString: $0) } ?? "out of memory"
            PQfreemem(error)
            let written = PostgresURL.passwordRanges(in: url).map { String(url[$0]) }
            throw PostgresError(kind: .other, message: "the database URL \(PostgresURL.redacted(url)) is not valid: \(scrub(trimmed(message), written))")
        }
        defer { PQconninfoFree(options) }
        var settings: [(keyword: String, variable: String?, value: String?)] = []
        var option = options
        while let keyword = option.pointee.keyword {
            settings.append((String(cString: keyword), option.pointee.envvar.map { String(cString: $0) }, option.pointee.val.map { String(cString: $0) }))
            option += 1
        }
        return settings
    }

    /// The URL's password as written (percent-encoded, in the user info or a `password=` parameter) and as libpq
    /// decodes it; parsing the URL here also refuses a malformed one before any connection is tried.
    static func secrets(in url: String) throws(PostgresError) -> [String] {
        let decoded = try settings(of: url).filter { $0.keyword == "password" }.compactMap(\.value)
        let secrets = PostgresURL.passwordRanges(in: url).map { String(url[$0]) } + decoded
        // Longest first, so a password that contains another secret is replaced whole.
        return secrets.filter { !$0.isEmpty }.sorted { $0.count > $1.count }
    }

    /// The URL's settings as the environment variables libpq's programs read (`PGHOST`, `PGPASSWORD`, `PGSSLMODE`,
    /// …), so `pg_dump` and `pg_restore` connect where the gateway does without the password on a command line.
    static func environment(for url: String) throws(PostgresError) -> [String: String] {
        try checkScheme(url)
        var environment: [String: String] = [:]
        for setting in try settings(of: url) {
            if let variable = setting.variable, let value = setting.value { environment[variable] = value }
        }
        return environment
    }

    /// Checks `url` as libpq would read it, without connecting.
    static func validate(_ url: String) throws(PostgresError) {
        try checkScheme(url)
        _ = try secrets(in: url)
    }

    private static func checkScheme(_ url: String) throws(PostgresError) {
        guard PostgresURL.isPostgresURL(url) else {
            throw PostgresError(kind: .other, message: "the database URL must start with postgres:// or postgresql://")
        }
    }

    private static func withCStrings<R>(_ strings: [String], _ body: (UnsafePointer<UnsafePointer<CChar>?>) -> R) -> R {
        let copies = strings.map { strdup($0) }
        defer { for copy in copies { free(copy) } }
        let pointers: [UnsafePointer<CChar>?] = copies.map { UnsafePointer($0) } + [nil]
        return pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
    }
}

/// A notification sent with NOTIFY / `pg_notify` on a channel this node listens on.
public struct PostgresNotification: Sendable, Equatable {
    public let channel: String
    public let payload: String
    /// The server process of the connection that sent it.
    public let senderPID: Int32

    public init(channel: String, payload: String, senderPID: Int32) {
        self.channel = channel
        self.payload = payload
        self.senderPID = senderPID
    }
}
