/// A value bound to a statement's `$n` or read from a result column. Timestamps travel as `int64` milliseconds
/// since 1970, as in the SQLite engine.
///
/// Integers bind as `bigint`, doubles as `double precision`, booleans as `boolean`, bytes as `bytea` (all binary,
/// exact); text binds untyped, so the server reads it as whatever the statement needs (`text`, `jsonb`, a
/// timestamp). Columns accept a `bigint` for any integer type; a function that takes `integer` wants a cast:
/// `pg_terminate_backend($1::int)`.
public enum PostgresValue: Sendable, Equatable, Hashable {
    case null
    case int64(Int64)
    case double(Double)
    case text(String)
    case bytea([UInt8])
    case bool(Bool)
}

/// Types that bind as a statement parameter.
public protocol PostgresBindable: Sendable {
    var postgresValue: PostgresValue { get }
}

extension PostgresValue: PostgresBindable { public var postgresValue: PostgresValue { self } }
extension Int: PostgresBindable { public var postgresValue: PostgresValue { .int64(Int64(self)) } }
extension Int64: PostgresBindable { public var postgresValue: PostgresValue { .int64(self) } }
extension Int32: PostgresBindable { public var postgresValue: PostgresValue { .int64(Int64(self)) } }
extension Double: PostgresBindable { public var postgresValue: PostgresValue { .double(self) } }
extension String: PostgresBindable { public var postgresValue: PostgresValue { .text(self) } }
extension Substring: PostgresBindable { public var postgresValue: PostgresValue { .text(String(self)) } }
extension Bool: PostgresBindable { public var postgresValue: PostgresValue { .bool(self) } }
extension Array: PostgresBindable where Element == UInt8 { public var postgresValue: PostgresValue { .bytea(self) } }
extension Optional: PostgresBindable where Wrapped: PostgresBindable {
    public var postgresValue: PostgresValue { self?.postgresValue ?? .null }
}

/// The column names of one result, shared by its rows: a lookup by name is a hash, not a scan.
public final class PostgresColumns: Sendable {
    public let names: [String]
    let index: [String: Int]

    init(_ names: [String]) {
        self.names = names
        var index: [String: Int] = [:]
        // The first of two equal names wins, as in `SELECT a.id, b.id`.
        for (i, name) in names.enumerated() where index[name] == nil { index[name] = i }
        self.index = index
    }
}

/// One result row, read by column name (or index). Every accessor answers nil for NULL and for a column the
/// result does not have.
public struct PostgresRow: Sendable {
    let columns: PostgresColumns
    public let values: [PostgresValue]

    init(columns: PostgresColumns, values: [PostgresValue]) {
        self.columns = columns
        self.values = values
    }

    public var columnNames: [String] { columns.names }

    public subscript(_ index: Int) -> PostgresValue { values[index] }
    public subscript(_ name: String) -> PostgresValue {
        guard let index = columns.index[name] else { return .null }
        return values[index]
    }

    public func int(_ name: String) -> Int64? {
        switch self[name] {
        case .int64(let value): value
        case .text(let text): Int64(text)
        case .bool(let value): value ? 1 : 0
        case .double(let value): value.isFinite && value.rounded() == value && abs(value) < 9.2e18 ? Int64(value) : nil
        case .null, .bytea: nil
        }
    }

    public func double(_ name: String) -> Double? {
        switch self[name] {
        case .double(let value): value
        case .int64(let value): Double(value)
        // numeric comes back as text: its exact digits, read as the nearest double here.
        case .text(let text): Double(text)
        case .null, .bytea, .bool: nil
        }
    }

    public func string(_ name: String) -> String? {
        switch self[name] {
        case .text(let text): text
        case .int64(let value): String(value)
        case .double(let value): String(value)
        case .bool(let value): value ? "true" : "false"
        case .bytea(let bytes): String(decoding: bytes, as: UTF8.self)
        case .null: nil
        }
    }

    public func bytes(_ name: String) -> [UInt8]? {
        switch self[name] {
        case .bytea(let bytes): bytes
        case .text(let text): Array(text.utf8)
        case .null, .int64, .double, .bool: nil
        }
    }

    public func bool(_ name: String) -> Bool? {
        switch self[name] {
        case .bool(let value): value
        case .int64(let value): value != 0
        case .text(let text): ["t", "true", "1"].contains(text) ? true : (["f", "false", "0"].contains(text) ? false : nil)
        case .null, .double, .bytea: nil
        }
    }
}

/// Type OIDs (pg_type) the wrapper binds with and decodes; every other type is read as its text form.
enum PostgresType {
    static let unspecified: UInt32 = 0
    static let bool: UInt32 = 16
    static let bytea: UInt32 = 17
    static let int8: UInt32 = 20
    static let int2: UInt32 = 21
    static let int4: UInt32 = 23
    static let oid: UInt32 = 26
    static let float4: UInt32 = 700
    static let float8: UInt32 = 701
}
