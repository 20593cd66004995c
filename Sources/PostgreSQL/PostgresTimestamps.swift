import Foundation

/// Times are stored as integer milliseconds since 1970, as in the SQLite engine's schema.
extension Date {
    public var postgresMillis: Int64 { Int64((timeIntervalSince1970 * 1000).rounded()) }
    public init(postgresMillis: Int64) { self.init(timeIntervalSince1970: Double(postgresMillis) / 1000) }
}
