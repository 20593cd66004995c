import Foundation
import Memory
import Storage

/// What every engine's `MemoryFactStore` must do: a fact added reads back as it was written and is its person's alone
/// (no other person reads, edits, forgets, syncs or purges it); an edit changes only what it names and an expiry
/// passed hides an active fact; edits and deletions reach the feed, a deletion as a tombstone, one entry per fact; the
/// feed pages by cursor (`hasMore`, `nextCursor`) and answers a cursor from another database with a reset; a purge
/// forgets one agent's facts or all and leaves tombstones; counts cover every status; a fact's history lists its
/// changes in order with their actors; writes join the caller's transaction (committing with its other effects,
/// undone when it throws); and facts added by many tasks at once each appear in the feed exactly once, under distinct
/// increasing cursors; a fact's history keeps its newest `MemoryFacts.historyPerFact` changes and a person at most
/// `MemoryFacts.maximumFactsPerPerson` facts. Returns the broken rules (empty: conformant).
public struct MemoryFactStoreConformance: Sendable {
    public let fixture: any StorageEngineFixture
    public let store: any MemoryFactStore

    public init(fixture: any StorageEngineFixture, store: any MemoryFactStore) {
        self.fixture = fixture
        self.store = store
    }

    struct Refused: Error {}

    /// Every change after `since`, following `nextCursor` a page of `limit` at a time (at most 100 pages).
    func feed(_ subject: String, since: Int64 = 0, limit: Int = 500, agentID: String? = nil) async throws -> [MemoryFactChange] {
        var all: [MemoryFactChange] = []
        var cursor = since
        for _ in 0..<100 {
            let page = try await store.changes(subject: subject, since: cursor, limit: limit, agentID: agentID)
            all += page.changes
            cursor = page.nextCursor
            if !page.hasMore { break }
        }
        return all
    }

    /// Equal as stored: times to the millisecond every engine keeps.
    static func same(_ a: MemoryFact?, _ b: MemoryFact?) -> Bool {
        guard let a, let b else { return a == nil && b == nil }
        let ms = { (date: Date) in (date.timeIntervalSince1970 * 1000).rounded() }
        return a.id == b.id && a.subject == b.subject && a.content == b.content && a.category == b.category && a.agentID == b.agentID
            && a.status == b.status && a.source == b.source && ms(a.createdAt) == ms(b.createdAt) && ms(a.updatedAt) == ms(b.updatedAt)
            && a.expiresAt.map(ms) == b.expiresAt.map(ms)
    }

    public func run() async -> [ConformanceFailure] {
        var failures: [ConformanceFailure] = []
        func check(_ rule: String, _ holds: Bool, _ detail: @autoclosure () -> String) {
            if !holds { failures.append(ConformanceFailure(rule: rule, detail: "\(fixture.engine): \(detail())")) }
        }
        let store = self.store
        let person = { (name: String) in "\(name)-\(UUID().uuidString.prefix(8).lowercased())" }
        do {
            // Added and read back.
            let ana = person("ana"), bo = person("bo")
            let later = Date().addingTimeInterval(86_400)
            let tea = try await store.add("Prefers green tea", subject: ana, source: "manual", category: "preference", agentID: "brief", expiresAt: later)
            check("add and read back", tea.id.hasPrefix("fact_") && tea.status == "active" && tea.content == "Prefers green tea" && tea.subject == ana,
                  "add returned \(tea)")
            let read = try await store.fact(id: tea.id, subject: ana)
            check("add and read back", Self.same(read, tea), "read back \(String(describing: read)), added \(tea)")
            let vegan = try await store.add("Is vegan", subject: ana, source: "extracted", category: "identity", agentID: "", expiresAt: nil)
            let listed = try await store.facts(subject: ana, status: "active", agentID: nil, limit: 200)
            check("add and read back", Set(listed.map(\.id)) == [tea.id, vegan.id], "the active list holds \(listed.map(\.id))")
            check("newest first", zip(listed, listed.dropFirst()).allSatisfy { $0.createdAt >= $1.createdAt }, "listed \(listed.map(\.createdAt))")
            let briefs = try await store.facts(subject: ana, status: "active", agentID: "brief", limit: 200)
            check("one agent's facts", briefs.map(\.id) == [tea.id], "agent brief's facts: \(briefs.map(\.id))")
            let one = try await store.facts(subject: ana, status: "active", agentID: nil, limit: 1)
            check("limit", one.count == 1, "a limit of 1 gave \(one.count) facts")
            let retracted = try await store.facts(subject: ana, status: "retracted", agentID: nil, limit: 200)
            check("by status", retracted.isEmpty, "retracted facts: \(retracted.map(\.id))")
            let expired = try await store.add("Is in Lisbon this week", subject: ana, source: "manual", category: "entity", agentID: "",
                                              expiresAt: Date().addingTimeInterval(-60))
            let active = try await store.facts(subject: ana, status: "active", agentID: nil, limit: 200)
            check("an expired fact is not active", !active.contains { $0.id == expired.id }, "a fact that expired a minute ago is listed")

            // Another person sees, edits, forgets, syncs and purges none of it.
            check("per-person isolation", try await store.fact(id: tea.id, subject: bo) == nil, "\(bo) reads \(ana)'s fact")
            check("per-person isolation", try await store.facts(subject: bo, status: "active", agentID: nil, limit: 200).isEmpty, "\(bo) lists facts")
            check("per-person isolation", try await store.update(id: tea.id, subject: bo, MemoryFactEdit(content: "Hates tea")) == nil,
                  "\(bo) edited \(ana)'s fact")
            check("per-person isolation", try await !store.delete(id: tea.id, subject: bo), "\(bo) deleted \(ana)'s fact")
            check("per-person isolation", try await store.purge(subject: bo) == 0, "\(bo)'s purge removed something")
            check("per-person isolation", try await feed(bo).isEmpty, "\(bo)'s feed shows changes")
            check("per-person isolation", try await store.history(id: tea.id, subject: bo).isEmpty, "\(bo) reads \(ana)'s fact's history")
            check("per-person isolation", Self.same(try await store.fact(id: tea.id, subject: ana), tea), "\(ana)'s fact changed")

            // Edits change only what they name; deletions leave tombstones; the feed keeps one entry per fact.
            let before = try await feed(ana)
            check("feed", Set(before.map(\.factID)) == [tea.id, vegan.id, expired.id] && before.allSatisfy { $0.event == "created" && $0.fact != nil },
                  "the feed after three adds: \(before.map { "\($0.factID) \($0.event)" })")
            let mark = before.last?.cursor ?? 0
            let edited = try await store.update(id: tea.id, subject: ana, MemoryFactEdit(content: "Prefers oolong", expiresAt: .some(nil)), actor: "steward")
            check("update", edited?.content == "Prefers oolong" && edited?.category == "preference" && edited?.agentID == "brief" && edited?.expiresAt == nil,
                  "the edit gave \(String(describing: edited))")
            let reread = try await store.fact(id: tea.id, subject: ana)
            check("update", Self.same(reread, edited), "read back \(String(describing: reread)), edited \(String(describing: edited))")
            check("delete", try await store.delete(id: vegan.id, subject: ana), "the delete found nothing")
            check("delete", try await store.fact(id: vegan.id, subject: ana) == nil, "a deleted fact reads back")
            check("delete", try await !store.delete(id: vegan.id, subject: ana), "a second delete found the fact")
            let after = try await feed(ana, since: mark)
            let edit = after.first { $0.factID == tea.id }, tombstone = after.first { $0.factID == vegan.id }
            check("update reaches the feed", edit?.event == "updated" && Self.same(edit?.fact, edited), "after the edit: \(String(describing: edit))")
            check("delete leaves a tombstone", tombstone?.event == "deleted" && tombstone?.fact == nil && tombstone != nil,
                  "after the delete: \(String(describing: tombstone))")
            check("feed", after.count == 2 && (after.first?.cursor ?? 0) > mark, "since \(mark): \(after.map { "\($0.cursor) \($0.factID) \($0.event)" })")
            let whole = try await feed(ana)
            check("one entry per fact", whole.count == 3 && Set(whole.map(\.factID)).count == 3,
                  "from 0: \(whole.map { "\($0.cursor) \($0.factID) \($0.event)" })")

            // History: each change in order, with its actor.
            let history = try await store.history(id: tea.id, subject: ana)
            check("history", history.map(\.event) == ["created", "updated"] && history.map(\.content) == ["Prefers green tea", "Prefers oolong"]
                  && history.map(\.actor) == [ana, "steward"] && (history.first?.id ?? 0) < (history.last?.id ?? 0),
                  "history \(history.map { "\($0.id) \($0.event) \($0.content) by \($0.actor)" })")
            let gone = try await store.history(id: vegan.id, subject: ana)
            check("history", gone.map(\.event) == ["created", "deleted"] && gone.first?.actor == "extracted", "a deleted fact's history: \(gone.map { "\($0.event) by \($0.actor)" })")
            check("history", try await store.history(id: "fact_0000000000000000", subject: ana).isEmpty, "an unknown fact has a history")

            // Paging by cursor.
            let cy = person("cy")
            var added: [String] = []
            for n in 0..<5 { added.append(try await store.add("Fact \(n)", subject: cy, source: "manual", category: "preference", agentID: n < 2 ? "brief" : "",
                                                              expiresAt: nil).id) }
            let first = try await store.changes(subject: cy, since: 0, limit: 2, agentID: nil)
            check("cursor paging", first.changes.count == 2 && first.hasMore && !first.reset && first.nextCursor == first.changes.last?.cursor,
                  "the first page of 2: \(first)")
            let paged = try await feed(cy, limit: 2)
            check("cursor paging", paged.map(\.factID) == added && zip(paged, paged.dropFirst()).allSatisfy { $0.cursor < $1.cursor },
                  "pages of 2 gave \(paged.map { "\($0.cursor) \($0.factID)" }) for \(added)")
            let end = paged.last?.cursor ?? 0
            let beyond = try await store.changes(subject: cy, since: end, limit: 2, agentID: nil)
            check("cursor paging", beyond.changes.isEmpty && !beyond.hasMore && !beyond.reset && beyond.nextCursor == end, "past the end: \(beyond)")
            let foreign = try await store.changes(subject: cy, since: end + 1_000_000_000, limit: 2, agentID: nil)
            check("a cursor from another database resets", foreign.reset && foreign.changes.isEmpty && foreign.nextCursor == 0, "a cursor far ahead: \(foreign)")
            let agentFeed = try await feed(cy, agentID: "brief")
            check("one agent's feed", agentFeed.map(\.factID) == Array(added.prefix(2)), "agent brief's feed: \(agentFeed.map(\.factID))")
            var refused = false
            do { _ = try await store.changes(subject: cy, since: -1, limit: 2, agentID: nil) } catch let error as MemoryFactError {
                refused = error == .invalidCursor(-1)
            }
            check("a negative cursor is refused", refused, "since -1 was answered")

            // Counts and purge.
            let counts = try await store.counts(subject: cy)
            check("counts", counts == ["active": 5, "superseded": 0, "retracted": 0], "counts \(counts)")
            let nobody = try await store.counts(subject: person("nobody"))
            check("counts", nobody == ["active": 0, "superseded": 0, "retracted": 0], "a person without facts: \(nobody)")
            let cursorBeforePurge = paged.last?.cursor ?? 0
            check("purge one agent's", try await store.purge(subject: cy, agentID: "brief") == 2, "purging agent brief's facts")
            let left = try await store.facts(subject: cy, status: "active", agentID: nil, limit: 200).map(\.id)
            check("purge one agent's", Set(left) == Set(added.dropFirst(2)), "left after the agent's purge: \(left)")
            check("purge", try await store.purge(subject: cy) == 3, "purging the rest")
            check("purge", try await store.facts(subject: cy, status: "active", agentID: nil, limit: 200).isEmpty, "facts left after a purge")
            let tombstones = try await feed(cy, since: cursorBeforePurge)
            check("purge leaves tombstones", Set(tombstones.map(\.factID)) == Set(added) && tombstones.allSatisfy { $0.event == "deleted" && $0.fact == nil },
                  "after the purges: \(tombstones.map { "\($0.factID) \($0.event)" })")
            check("counts", try await store.counts(subject: cy)["active"] == 0, "active facts counted after a purge")

            // Writes join the caller's transaction: they commit with its other effects, and a throw undoes them.
            let dee = person("dee")
            let effect = "memory-\(dee)"
            let joined = try await store.transactions.withTransaction { session in
                try fixture.writeEffect(effect, in: session)
                return try store.add("Walks to work", subject: dee, source: "manual", category: "preference", agentID: "", expiresAt: nil, in: session)
            }
            let committed = try await store.fact(id: joined.id, subject: dee)
            let effects = try await fixture.effects()
            check("joins the caller's transaction", committed != nil && effects.contains(effect), "the fact or the caller's effect is missing after the commit")
            var undone: MemoryFact?
            _ = try? await store.transactions.withTransaction { session -> Void in
                undone = try store.add("Never said", subject: dee, source: "manual", category: "preference", agentID: "", expiresAt: nil, in: session)
                _ = try store.update(id: joined.id, subject: dee, MemoryFactEdit(content: "Drives to work"), actor: nil, in: session)
                throw Refused()
            }
            _ = try? await store.transactions.withTransaction { session -> Void in
                _ = try store.delete(id: joined.id, subject: dee, actor: nil, in: session)
                _ = try store.purge(subject: dee, agentID: nil, in: session)
                throw Refused()
            }
            if let undone {
                check("a rolled-back write leaves nothing", try await store.fact(id: undone.id, subject: dee) == nil, "a fact added in a rolled-back transaction reads back")
                check("a rolled-back write leaves nothing", try await store.history(id: undone.id, subject: dee).isEmpty, "a rolled-back add has a history")
            } else {
                check("a rolled-back write leaves nothing", false, "nothing was added inside the transaction")
            }
            let kept = try await store.fact(id: joined.id, subject: dee)
            check("a rolled-back write leaves nothing", kept?.content == "Walks to work", "after rolled-back edits and deletes: \(String(describing: kept))")
            let deeFeed = try await feed(dee)
            check("a rolled-back write leaves nothing", deeFeed.map(\.factID) == [joined.id] && deeFeed.first?.event == "created",
                  "the feed after rolled-back writes: \(deeFeed.map { "\($0.factID) \($0.event)" })")

            // Many tasks add at once (several gateways on one database): each fact once in the feed, cursors distinct and increasing.
            let eve = person("eve")
            let raced = try await withThrowingTaskGroup(of: String.self) { group in
                for n in 0..<24 {
                    group.addTask { try await store.add("Raced \(n)", subject: eve, source: "manual", category: "preference", agentID: "", expiresAt: nil).id }
                }
                return try await group.reduce(into: Set<String>()) { $0.insert($1) }
            }
            let racedFeed = try await feed(eve, limit: 5)
            check("concurrent adds each once in the feed", racedFeed.count == 24 && Set(racedFeed.map(\.factID)) == raced,
                  "\(racedFeed.count) entries, \(Set(racedFeed.map(\.factID)).intersection(raced).count) of 24 facts")
            check("concurrent adds each once in the feed", zip(racedFeed, racedFeed.dropFirst()).allSatisfy { $0.cursor < $1.cursor },
                  "cursors \(racedFeed.map(\.cursor))")

            // Compaction: a fact deleted long ago leaves nothing; a phone whose cursor is below what went starts afresh,
            // one that saw the tombstone reads on.
            let gil = person("gil")
            let keptForGil = try await store.add("Kept", subject: gil, source: "manual", category: "preference", agentID: "", expiresAt: nil)
            let beforeDelete = try await feed(gil).last?.cursor ?? 0
            let doomed = try await store.add("Forgotten soon", subject: gil, source: "manual", category: "preference", agentID: "", expiresAt: nil)
            _ = try await store.delete(id: doomed.id, subject: gil)
            let sawTombstone = try await feed(gil).last?.cursor ?? 0
            let compacted = try await store.compactTombstones(before: Date().addingTimeInterval(60))
            let fresh = try await feed(gil)
            let stale = try await store.changes(subject: gil, since: beforeDelete, limit: 100, agentID: nil)
            let current = try await store.changes(subject: gil, since: sawTombstone, limit: 100, agentID: nil)
            let doomedHistory = try await store.history(id: doomed.id, subject: gil)
            check("tombstones compacted", compacted >= 1 && fresh.map(\.factID) == [keptForGil.id] && doomedHistory.isEmpty,
                  "compacted \(compacted); the feed from 0: \(fresh.map { "\($0.factID) \($0.event)" })")
            check("tombstones compacted", stale.reset && !current.reset && current.changes.isEmpty,
                  "a cursor before the compacted tombstone reset: \(stale.reset); one after it: reset \(current.reset), \(current.changes.count) changes")

            // Bounds: a fact's history keeps its newest changes, and a person keeps a bounded number of facts.
            let fay = person("fay")
            let longEdited = try await store.add("Edit 0", subject: fay, source: "manual", category: "preference", agentID: "", expiresAt: nil)
            try await fixture.storage.withTransaction { session in
                for n in 1...(MemoryFacts.historyPerFact + 20) {
                    _ = try store.update(id: longEdited.id, subject: fay, MemoryFactEdit(content: "Edit \(n)"), actor: nil, in: session)
                }
            }
            let trimmed = try await store.history(id: longEdited.id, subject: fay)
            check("history bounded", trimmed.count <= MemoryFacts.historyPerFact + 1 && trimmed.last?.content == "Edit \(MemoryFacts.historyPerFact + 20)",
                  "after \(MemoryFacts.historyPerFact + 20) edits the history holds \(trimmed.count) changes, the last \(trimmed.last?.content ?? "none")")
            let fayFeed = try await feed(fay)
            check("history bounded", fayFeed.count == 1 && fayFeed.first?.fact?.content == "Edit \(MemoryFacts.historyPerFact + 20)",
                  "the feed after the edits: \(fayFeed.map { $0.fact?.content ?? $0.event })")
            try await fixture.storage.withTransaction { session in
                for n in 1..<MemoryFacts.maximumFactsPerPerson {
                    _ = try store.add("Fact \(n)", subject: fay, source: "manual", category: "preference", agentID: "", expiresAt: nil, in: session)
                }
            }
            do {
                _ = try await store.add("One too many", subject: fay, source: "manual", category: "preference", agentID: "", expiresAt: nil)
                check("facts per person bounded", false, "a fact past \(MemoryFacts.maximumFactsPerPerson) was kept")
            } catch let error as MemoryFactError {
                check("facts per person bounded", error == .tooManyFacts, "refused with \(error)")
            }
            let other = try? await store.add("Someone else's", subject: person("gus"), source: "manual", category: "preference", agentID: "", expiresAt: nil)
            check("facts per person bounded", other != nil, "another person could not add a fact")
            if try await store.delete(id: longEdited.id, subject: fay) {
                let after = try? await store.add("Room again", subject: fay, source: "manual", category: "preference", agentID: "", expiresAt: nil)
                check("facts per person bounded", after != nil, "no fact could be added after one was forgotten")
            }
        } catch {
            failures.append(ConformanceFailure(rule: "no errors", detail: "\(fixture.engine): \(error)"))
        }
        return failures
    }
}
