import Foundation

/// Times are stored as integer milliseconds since 1970, everywhere in the schema.
extension Date {
    public var sqliteMillis: Int64 { Int64((timeIntervalSince1970 * 1000).rounded()) }
    public init(sqliteMillis: Int64) { self.init(timeIntervalSince1970: Double(sqliteMillis) / 1000) }
}

extension Row {
    /// A millisecond column as a date, nil when NULL.
    public func date(_ name: String) -> Date? { int(name).map(Date.init(sqliteMillis:)) }
}
