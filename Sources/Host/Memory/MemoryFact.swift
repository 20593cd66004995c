import Foundation

/// One remembered fact, belonging to one person (`subject`), as every engine stores it.
public struct MemoryFact: Sendable, Equatable {
    public var id: String
    public var subject: String
    public var content: String
    public var category: String
    public var agentID: String
    public var status: String
    public var source: String
    public var createdAt: Date
    public var updatedAt: Date
    public var expiresAt: Date?

    public init(id: String, subject: String, content: String, category: String, agentID: String, status: String, source: String,
                createdAt: Date, updatedAt: Date, expiresAt: Date?) {
        self.id = id
        self.subject = subject
        self.content = content
        self.category = category
        self.agentID = agentID
        self.status = status
        self.source = source
        self.createdAt = createdAt
        self.updatedAt = updatedAt
        self.expiresAt = expiresAt
    }

    /// A new active fact with a fresh id, created and last changed `now`.
    public static func new(_ content: String, subject: String, source: String, category: String, agentID: String,
                           expiresAt: Date?, now: Date) -> MemoryFact {
        MemoryFact(id: MemoryFacts.newID(), subject: subject, content: content, category: category, agentID: agentID, status: "active",
                   source: source, createdAt: now, updatedAt: now, expiresAt: expiresAt)
    }

    /// Who a new fact's first change is recorded as: the person, or `extracted` for what a model drew from a conversation.
    public var creator: String { source == "extracted" ? source : subject }
}

/// What a fact edit may change; nil leaves a field as it is.
public struct MemoryFactEdit: Sendable, Equatable {
    public var content: String?
    public var category: String?
    public var agentID: String?
    /// `.some(nil)` clears the expiry.
    public var expiresAt: Date??

    public init(content: String? = nil, category: String? = nil, agentID: String? = nil, expiresAt: Date?? = nil) {
        self.content = content
        self.category = category
        self.agentID = agentID
        self.expiresAt = expiresAt
    }

    /// `fact` with this edit applied, last changed `now` (every engine applies an edit the same way).
    public func applied(to fact: MemoryFact, at now: Date) -> MemoryFact {
        var fact = fact
        if let content { fact.content = content }
        if let category { fact.category = category }
        if let agentID { fact.agentID = agentID }
        if let expiresAt { fact.expiresAt = expiresAt }
        fact.updatedAt = now
        return fact
    }
}

/// One entry of the change feed: a fact's current state, or a tombstone (`fact` nil, `event` `deleted`).
public struct MemoryFactChange: Sendable, Equatable {
    public var cursor: Int64
    public var factID: String
    public var event: String
    public var fact: MemoryFact?

    public init(cursor: Int64, factID: String, event: String, fact: MemoryFact?) {
        self.cursor = cursor
        self.factID = factID
        self.event = event
        self.fact = fact
    }
}

/// One page of the change feed, as `/memory/facts/sync` answers it.
public struct MemoryFactChanges: Sendable, Equatable {
    public var changes: [MemoryFactChange]
    /// Where the next page starts: the last change's cursor (the given cursor when the page is empty; 0 on a reset).
    public var nextCursor: Int64
    public var hasMore: Bool
    /// The given cursor is ahead of anything this database wrote (the phone synced with another one): drop the copy
    /// and start again from 0.
    public var reset: Bool

    public init(changes: [MemoryFactChange], nextCursor: Int64, hasMore: Bool, reset: Bool) {
        self.changes = changes
        self.nextCursor = nextCursor
        self.hasMore = hasMore
        self.reset = reset
    }

    /// The answer to a cursor from another database.
    public static let resetToStart = MemoryFactChanges(changes: [], nextCursor: 0, hasMore: false, reset: true)
}

/// One entry of a fact's history: what it was after each change, and who made the change.
public struct MemoryFactHistoryEvent: Sendable, Equatable {
    public var id: Int64
    public var factID: String
    public var event: String
    public var content: String
    public var category: String
    public var status: String
    public var actor: String
    public var createdAt: Date

    public init(id: Int64, factID: String, event: String, content: String, category: String, status: String, actor: String, createdAt: Date) {
        self.id = id
        self.factID = factID
        self.event = event
        self.content = content
        self.category = category
        self.status = status
        self.actor = actor
        self.createdAt = createdAt
    }
}
