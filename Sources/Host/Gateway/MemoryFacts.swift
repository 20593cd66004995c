import Crypto
import Foundation
import SQLite

/// Adaptive-memory facts ("Remember something"), each belonging to one person.
public final class MemoryFactStore: Sendable {
    public static let maximumLength = 2000
    public static let migrations: [Migration] = [
        Migration("memory.1", """
            CREATE TABLE memory_facts (
                id TEXT PRIMARY KEY,
                subject TEXT NOT NULL,
                text TEXT NOT NULL,
                source TEXT NOT NULL,
                created_at INTEGER NOT NULL
            );
            CREATE INDEX memory_facts_by_subject ON memory_facts (subject, created_at);
            """),
    ]

    public struct Fact: Sendable, Equatable {
        public let id: String
        public let text: String
        public let source: String
        public let createdAt: Date
    }

    let database: DatabasePool

    public init(database: DatabasePool) throws {
        self.database = database
        try database.migrate(Self.migrations)
    }

    public func add(_ text: String, subject: String, source: String) throws -> Fact {
        let fact = Fact(id: "fact_" + Hex.encode(SecureBytes.random(count: 8)), text: text, source: source, createdAt: Date())
        try database.transaction { db in
            try db.run("INSERT INTO memory_facts (id, subject, text, source, created_at) VALUES (?, ?, ?, ?, ?)",
                       fact.id, subject, text, source, fact.createdAt.sqliteMillis)
        }
        return fact
    }

    public func facts(subject: String) throws -> [Fact] {
        try database.read { db in
            try db.query("SELECT * FROM memory_facts WHERE subject = ? ORDER BY created_at DESC, id LIMIT 500", subject).map {
                Fact(id: $0.string("id") ?? "", text: $0.string("text") ?? "", source: $0.string("source") ?? "",
                     createdAt: $0.date("created_at") ?? Date(sqliteMillis: 0))
            }
        }
    }

    public func delete(id: String, subject: String) throws -> Bool {
        try database.transaction { db in try db.run("DELETE FROM memory_facts WHERE id = ? AND subject = ?", id, subject) > 0 }
    }
}
