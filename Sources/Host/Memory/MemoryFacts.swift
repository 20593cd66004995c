import Crypto

/// What every engine's memory facts share: the limits the API checks, the built-in categories, how many facts a
/// model sees, and the shape of a fact's id.
public enum MemoryFacts {
    /// The longest fact, in Unicode scalars.
    public static let maximumLength = 400
    public static let builtInCategories = ["preference", "identity", "constraint", "entity"]
    /// How many facts, at most, go into a model's system message.
    public static let promptFacts = 5
    /// Facts one person may keep (any status): each is a row and a change, so an unbounded number is a disk any
    /// operator key could fill.
    public static let maximumFactsPerPerson = 5_000
    /// A fact's history keeps its newest changes only; edits beyond it drop the oldest (the feed needs only the last).
    public static let historyPerFact = 100
    /// The statuses a fact can have; `counts` answers each of them.
    public static let statuses = ["active", "superseded", "retracted"]

    /// `fact_` and 16 lowercase hex digits (64 random bits).
    public static func newID() -> String {
        "fact_" + Hex.encode(SecureBytes.random(count: 8))
    }

    /// Refuses a feed page no engine can answer, before any statement runs.
    public static func checkPage(since: Int64, limit: Int) throws(MemoryFactError) {
        guard since >= 0 else { throw .invalidCursor(since) }
        guard limit >= 1 else { throw .invalidLimit(limit) }
    }
}

/// A request a memory fact store refuses whatever its engine.
public enum MemoryFactError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A feed cursor below 0 (cursors start at 0).
    case invalidCursor(Int64)
    /// A page of fewer than one change.
    case invalidLimit(Int)
    /// The person already keeps `MemoryFacts.maximumFactsPerPerson` facts.
    case tooManyFacts

    public var description: String {
        switch self {
        case .invalidCursor(let cursor): "memory facts: the feed cursor \(cursor) is negative; cursors start at 0"
        case .invalidLimit(let limit): "memory facts: a feed page of \(limit) changes; a page holds at least 1"
        case .tooManyFacts: "memory facts: \(MemoryFacts.maximumFactsPerPerson) facts are kept for you already; forget some first"
        }
    }
}
