import Foundation
import Storage

/// One engine as the store conformance suites see it: its transactions, and an effect any test can make in one of
/// them (a row of a scratch table, written with the engine's own SQL), so a suite can check what commits with what
/// without knowing the engine.
public protocol StorageEngineFixture: Sendable {
    /// `sqlite` or `postgresql`: shown in a failure.
    var engine: String { get }
    var storage: any TransactionalStorage { get }
    /// Writes `value` into the scratch table inside `session`'s transaction.
    func writeEffect(_ value: String, in session: any StorageSession) throws
    /// The scratch table's values, sorted.
    func effects() async throws -> [String]
    /// Every value of every row of every table, as bytes (text as UTF-8, blobs as themselves, numbers as their
    /// decimal digits): a suite checks that no secret is at rest without knowing the engine's tables or types.
    func storedValues() async throws -> [[UInt8]]
}

/// A rule a store broke on one engine.
public struct ConformanceFailure: Sendable, CustomStringConvertible {
    public let rule: String
    public let detail: String
    public var description: String { "\(rule): \(detail)" }

    public init(rule: String, detail: String) {
        self.rule = rule
        self.detail = detail
    }
}

/// Whether `needle` occurs in `haystack` (a stored value holding a secret in any form).
func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
    guard !needle.isEmpty, haystack.count >= needle.count else { return false }
    let first = needle[0]
    var index = 0
    while index <= haystack.count - needle.count {
        if haystack[index] == first, haystack[index..<index + needle.count].elementsEqual(needle) { return true }
        index += 1
    }
    return false
}
