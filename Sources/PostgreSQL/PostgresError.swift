/// A failed PostgreSQL call: what kind of failure it is (for callers to map), the server's SQLSTATE and primary
/// message, and the statement (never its parameters, never the URL's password).
public struct PostgresError: Error, CustomStringConvertible, Sendable, Equatable {
    /// The failures a caller treats differently; everything else is `.other` (a fault of the statement itself).
    public enum Kind: String, Sendable, Equatable {
        /// 23505: a unique or primary key is taken.
        case uniqueViolation
        /// 40001 or 40P01: a serializable transaction lost a race, or a deadlock was broken; the whole transaction
        /// may be retried.
        case serializationFailure
        /// 53100: the server's disk is full.
        case diskFull
        /// 25006: the server takes reads only (a standby, `default_transaction_read_only`).
        case readOnly
        /// The connection is gone or could not be made (08xxx, 57P01-57P03, a bad connection status): the same
        /// call may work once the pool has reconnected.
        case connectionLost
        case other
    }

    public let kind: Kind
    /// The five-character SQLSTATE, when the server (or this wrapper, mirroring the server) named one.
    public let sqlState: String?
    /// The server's primary message, or libpq's when the server never answered.
    public let message: String
    /// The constraint a violation names (`t_pkey`), when the server named one. The server's detail line is not
    /// kept: it quotes row values ("Key (token)=(…) already exists"), which may be secrets.
    public let constraint: String?
    /// The statement that failed; its parameters are never kept.
    public let sql: String?

    public init(kind: Kind, sqlState: String? = nil, message: String, constraint: String? = nil, sql: String? = nil) {
        self.kind = kind
        self.sqlState = sqlState
        self.message = message
        self.constraint = constraint
        self.sql = sql
    }

    /// The kind an SQLSTATE stands for.
    public static func kind(forSQLState state: String?) -> Kind {
        guard let state else { return .other }
        switch state {
        case "23505": return .uniqueViolation
        case "40001", "40P01": return .serializationFailure
        case "53100": return .diskFull
        case "25006": return .readOnly
        // admin_shutdown, crash_shutdown, cannot_connect_now, and the whole connection-exception class.
        case "57P01", "57P02", "57P03": return .connectionLost
        default: return state.hasPrefix("08") ? .connectionLost : .other
        }
    }

    public var description: String {
        var text = "PostgreSQL error"
        if let sqlState { text += " \(sqlState)" }
        text += " (\(kind.rawValue)): \(message)"
        if let constraint { text += " [constraint \(constraint)]" }
        if let sql { text += " (in: \(Self.abbreviated(sql)))" }
        return text
    }

    /// A huge generated statement (ten thousand `$n`) is not repeated in full in every log line.
    static func abbreviated(_ sql: String) -> String {
        sql.utf8.count <= 500 ? sql : String(sql.prefix(500)) + "… (\(sql.utf8.count) bytes)"
    }
}

/// Printing a database URL without its secret.
public enum PostgresURL {
    /// `url` with its password replaced by `***`, both the one in the user info (`postgres://user:secret@host`)
    /// and a `password=` query parameter. Use it anywhere a URL is printed or logged.
    public static func redacted(_ url: String) -> String {
        var text = ""
        var from = url.startIndex
        for range in passwordRanges(in: url) {
            text += url[from..<range.lowerBound] + "***"
            from = range.upperBound
        }
        return text + url[from...]
    }

    /// The URL's settings as libpq's environment variables (`PGHOST`, `PGPASSWORD`, …), for `pg_dump` and its kin;
    /// a URL libpq cannot read throws, its password never in the message.
    public static func environment(for url: String) throws(PostgresError) -> [String: String] {
        try PostgresConnection.environment(for: url)
    }

    /// Whether `url` is a URL libpq reads as one (`postgres://` or `postgresql://`).
    public static func isPostgresURL(_ url: String) -> Bool {
        url.hasPrefix("postgres://") || url.hasPrefix("postgresql://")
    }

    /// Where the password is written in `url`, in order: the user info's, then any `password=` parameter's value.
    static func passwordRanges(in url: String) -> [Range<String.Index>] {
        var ranges: [Range<String.Index>] = []
        if let schemeEnd = url.range(of: "://") {
            // As libpq reads it: the user info ends at the first '@' before any '/'.
            let rest = url[schemeEnd.upperBound...]
            if let at = rest.firstIndex(where: { $0 == "@" || $0 == "/" }), url[at] == "@",
               let colon = rest[..<at].firstIndex(of: ":") {
                ranges.append(url.index(after: colon)..<at)
            }
        }
        if let query = url.firstIndex(of: "?") {
            var start = url.index(after: query)
            while start < url.endIndex {
                let end = url[start...].firstIndex(of: "&") ?? url.endIndex
                let parameter = url[start..<end]
                if parameter.lowercased().hasPrefix("password=") {
                    ranges.append(url.index(start, offsetBy: "password=".count)..<end)
                }
                start = end < url.endIndex ? url.index(after: end) : end
            }
        }
        return ranges
    }
}
