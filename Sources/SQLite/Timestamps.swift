import Foundation

/// Times are stored as integer milliseconds since 1970, everywhere in the schema.
extension Date {
    /// Total: a date past what Int64 milliseconds hold is clamped to it (NaN is 0), since Int64(_:) would trap.
    public var sqliteMillis: Int64 {
        let millis = (timeIntervalSince1970 * 1000).rounded()
        if millis.isNaN { return 0 }
        if millis >= Double(Int64.max) { return .max }
        return millis <= Double(Int64.min) ? .min : Int64(millis)
    }
    public init(sqliteMillis: Int64) { self.init(timeIntervalSince1970: Double(sqliteMillis) / 1000) }
}

extension Row {
    /// A millisecond column as a date, nil when NULL.
    public func date(_ name: String) -> Date? { int(name).map(Date.init(sqliteMillis:)) }
}
