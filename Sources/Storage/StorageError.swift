/// Why a store could not do what it was asked, in terms every engine shares and the HTTP layer answers
/// (507 for `full`, 503 for `readOnly` and `unavailable`, 409 for `conflict`). An engine's own error conforms to
/// `StorageFailure` and says which of these it is; the HTTP layer never sees SQLite or PostgreSQL codes.
public enum StorageError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The disk or the database's size limit is reached: nothing of the write was stored.
    case full(String)
    /// The database takes reads only (a read-only file, a standby server).
    case readOnly(String)
    /// The database cannot answer now (busy, locked, the connection lost); the same call may succeed later.
    case unavailable(String)
    /// Another writer got there first (a unique key taken, a serialization failure after its retries).
    case conflict(String)

    public var description: String {
        switch self {
        case .full(let detail): "storage full: \(detail)"
        case .readOnly(let detail): "storage read-only: \(detail)"
        case .unavailable(let detail): "storage unavailable: \(detail)"
        case .conflict(let detail): "storage conflict: \(detail)"
        }
    }
}

/// An engine's error that knows which `StorageError` it is (nil: a fault of the statement itself, a bug).
public protocol StorageFailure: Error {
    var storageError: StorageError? { get }
}

extension StorageError: StorageFailure {
    public var storageError: StorageError? { self }
}

extension Error {
    /// This error as a `StorageError`, when it is one or an engine's error that names one.
    public var asStorageError: StorageError? { (self as? any StorageFailure)?.storageError }
}
