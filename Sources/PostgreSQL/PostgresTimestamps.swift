import Foundation

/// Times are stored as integer milliseconds since 1970, as in the SQLite engine's schema.
extension Date {
    /// Total: a date past what Int64 milliseconds hold is clamped to it (NaN is 0), since Int64(_:) would trap.
    public var postgresMillis: Int64 {
        let millis = (timeIntervalSince1970 * 1000).rounded()
        if millis.isNaN { return 0 }
        if millis >= Double(Int64.max) { return .max }
        return millis <= Double(Int64.min) ? .min : Int64(millis)
    }
    public init(postgresMillis: Int64) { self.init(timeIntervalSince1970: Double(postgresMillis) / 1000) }
}
