/// A failed SQLite call: the result code, SQLite's own message and the statement (never its arguments).
public struct SQLiteError: Error, CustomStringConvertible, Sendable {
    public let code: Int32
    public let message: String
    public let sql: String?

    public init(code: Int32, message: String, sql: String? = nil) {
        self.code = code
        self.message = message
        self.sql = sql
    }

    /// The primary result code (SQLITE_CONSTRAINT for every constraint kind, and so on).
    public var primaryCode: Int32 { code & 0xFF }
    public var isConstraintViolation: Bool { primaryCode == 19 }
    public var isBusy: Bool { primaryCode == 5 || primaryCode == 6 }
    public var isDiskFull: Bool { primaryCode == 13 }
    public var isReadOnly: Bool { primaryCode == 8 }

    public var description: String {
        var text = "SQLite error \(code): \(message)"
        if let sql { text += " (in: \(sql))" }
        return text
    }
}
