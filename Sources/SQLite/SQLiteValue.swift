/// A value bound to or read from a statement.
public enum SQLiteValue: Sendable, Equatable {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)
    case blob([UInt8])
}

/// Types that bind as a statement argument.
public protocol SQLiteBindable: Sendable {
    var sqliteValue: SQLiteValue { get }
}

extension SQLiteValue: SQLiteBindable { public var sqliteValue: SQLiteValue { self } }
extension Int: SQLiteBindable { public var sqliteValue: SQLiteValue { .integer(Int64(self)) } }
extension Int64: SQLiteBindable { public var sqliteValue: SQLiteValue { .integer(self) } }
extension Double: SQLiteBindable { public var sqliteValue: SQLiteValue { .real(self) } }
extension String: SQLiteBindable { public var sqliteValue: SQLiteValue { .text(self) } }
extension Bool: SQLiteBindable { public var sqliteValue: SQLiteValue { .integer(self ? 1 : 0) } }
extension Array: SQLiteBindable where Element == UInt8 { public var sqliteValue: SQLiteValue { .blob(self) } }
extension Optional: SQLiteBindable where Wrapped: SQLiteBindable {
    public var sqliteValue: SQLiteValue { self?.sqliteValue ?? .null }
}

/// Column names of one result, shared by its rows: a lookup by name is a hash, not a scan.
public final class ColumnNames: Sendable {
    public let names: [String]
    let index: [String: Int]

    init(_ names: [String]) {
        self.names = names
        var index: [String: Int] = [:]
        for (i, name) in names.enumerated() where index[name] == nil { index[name] = i }
        self.index = index
    }
}

/// One result row, read by column name or index.
public struct Row: Sendable {
    let names: ColumnNames
    public let values: [SQLiteValue]

    init(names: ColumnNames, values: [SQLiteValue]) {
        self.names = names
        self.values = values
    }

    public var columns: [String] { names.names }

    public subscript(_ index: Int) -> SQLiteValue { values[index] }
    public subscript(_ name: String) -> SQLiteValue {
        guard let index = names.index[name] else { return .null }
        return values[index]
    }

    public func string(_ name: String) -> String? {
        switch self[name] {
        case .text(let s): return s
        case .integer(let i): return String(i)
        case .real(let d): return String(d)
        case .blob(let b): return String(decoding: b, as: UTF8.self)
        case .null: return nil
        }
    }
    public func int(_ name: String) -> Int64? {
        switch self[name] {
        case .integer(let i): return i
        case .real(let d): return Int64(d)
        case .text(let s): return Int64(s)
        default: return nil
        }
    }
    public func bool(_ name: String) -> Bool? { int(name).map { $0 != 0 } }
    public func blob(_ name: String) -> [UInt8]? {
        switch self[name] {
        case .blob(let b): return b
        case .text(let s): return Array(s.utf8)
        default: return nil
        }
    }
}
