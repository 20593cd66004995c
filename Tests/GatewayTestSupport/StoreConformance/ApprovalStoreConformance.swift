import Approvals
import Foundation
import Storage

/// What every engine's `ApprovalStore` must do: a request is stored once per call id (another person's use of the
/// id is refused), reads give back what was stored, a pending approval is decided at most once (of concurrent
/// decisions exactly one wins), never by another person and never after it expired, a decision in a transaction
/// that is rolled back leaves it pending, and a store other processes write tells of their decisions. Returns the
/// broken rules (empty: conformant).
public struct ApprovalStoreConformance: Sendable {
    public let fixture: any StorageEngineFixture
    public let store: any ApprovalStore
    /// A second handle on the same database, as another gateway process would hold it (nil: the engine has none).
    public let otherNode: (any ApprovalStore)?

    public init(fixture: any StorageEngineFixture, store: any ApprovalStore, otherNode: (any ApprovalStore)? = nil) {
        self.fixture = fixture
        self.store = store
        self.otherNode = otherNode
    }

    struct Rollback: Error {}

    public func run() async -> [ConformanceFailure] {
        var failures: [ConformanceFailure] = []
        let engine = fixture.engine
        func check(_ rule: String, _ holds: Bool, _ detail: @autoclosure () -> String) {
            if !holds { failures.append(ConformanceFailure(rule: rule, detail: "\(engine): \(detail())")) }
        }
        let store = self.store
        let storage = store.storage
        let start = Date(timeIntervalSince1970: 1_780_000_000.123)
        func request(_ id: String, subject: String = "alice", at created: Date = start, for seconds: TimeInterval = 600) -> Approval {
            Approval(callID: id, subject: subject, agentID: "inbox-triage", agentName: "Inbox triage", sessionID: "ses_1", tool: "send_email",
                     arguments: #"{"to":"bank@example.com","body":"ünïcode ✓"}"#, state: .pending, decidedBy: nil, decidedAt: nil,
                     createdAt: created, expiresAt: created.addingTimeInterval(seconds))
        }
        func insert(_ approval: Approval) async throws -> (approval: Approval, created: Bool) {
            try await storage.withTransaction { try store.insertIfNew(approval, in: $0) }
        }
        func decide(_ id: String, subject: String = "alice", _ state: Approval.State, at now: Date) async throws -> Bool {
            try await storage.withTransaction { try store.decide(callID: id, subject: subject, state: state, by: "key_\(subject)", at: now, in: $0) }
        }
        let tag = UUID().uuidString.prefix(8)
        do {
            // Stored once, read back whole.
            let asked = request("call_\(tag)_a")
            let first = try await insert(asked)
            check("stored", first.created && first.approval == asked, "the first insert answered \(first)")
            let read = try await store.approval(callID: asked.callID)
            check("read back", read == asked, "read back \(String(describing: read)), stored \(asked)")
            var again = asked
            again.tool = "other_tool"
            let second = try await insert(again)
            check("same call id", !second.created && second.approval == asked, "asking again answered \(second)")
            do {
                _ = try await insert(request(asked.callID, subject: "bob"))
                check("another person's call id", false, "bob reused alice's call id without an error")
            } catch let error as ApprovalError {
                check("another person's call id", error == .duplicateCall(asked.callID), "threw \(error)")
            }
            let gone = try await store.approval(callID: "call_\(tag)_never")
            check("unknown call id", gone == nil, "an unknown call id read \(String(describing: gone))")

            // Decided once, by its person only.
            let later = start.addingTimeInterval(5)
            check("not by another person", try await !decide(asked.callID, subject: "bob", .approved, at: later), "bob decided alice's approval")
            check("decided once", try await decide(asked.callID, .approved, at: later), "a pending approval was not decided")
            check("decided once", try await !decide(asked.callID, .denied, at: later), "a decided approval was decided again")
            let decided = try await store.approval(callID: asked.callID)
            check("a decision is kept", decided?.state == .approved && decided?.decidedBy == "key_alice"
                  && decided?.decidedAt.map { abs($0.timeIntervalSince(later)) < 0.002 } == true, "after approve and deny: \(String(describing: decided))")
            let expiredAfter = try await storage.withTransaction { try store.expire(callID: asked.callID, at: later.addingTimeInterval(1_000), in: $0) }
            check("expiry leaves a decision", expiredAfter == .approved, "expiring an approved one answered \(expiredAfter)")

            // Never after it expired; expiry is kept.
            let short = request("call_\(tag)_b", for: 10)
            _ = try await insert(short)
            check("not after expiry", try await !decide(short.callID, .approved, at: start.addingTimeInterval(10)), "decided at its expiry")
            let expired = try await storage.withTransaction { try store.expire(callID: short.callID, at: start.addingTimeInterval(11), in: $0) }
            check("expiry", expired == .expired, "expiring a pending one answered \(expired)")
            check("expiry", try await store.approval(callID: short.callID)?.state == .expired, "the expiry was not kept")

            // A rolled-back decision leaves it pending.
            let kept = request("call_\(tag)_c", at: start.addingTimeInterval(1))
            _ = try await insert(kept)
            do {
                try await storage.withTransaction { session in
                    _ = try store.decide(callID: kept.callID, subject: "alice", state: .denied, by: "key_alice", at: later, in: session)
                    throw Rollback()
                }
            } catch is Rollback {}
            check("a rolled-back decision", try await store.approval(callID: kept.callID)?.state == .pending, "a decision rolled back stayed")

            // Listing: the person's own, newest first; pending only when asked.
            _ = try await insert(request("call_\(tag)_bob", subject: "bob"))
            let pending = try await store.approvals(subject: "alice", pendingAt: later).map(\.callID)
            check("pending list", pending == [kept.callID], "pending: \(pending)")
            let counted = try await storage.withTransaction { try store.pendingCount(subject: "alice", at: later, in: $0) }
            // `kept` expires 601 s after the start: from then on nothing of alice's is waiting.
            let countedAfter = try await storage.withTransaction { try store.pendingCount(subject: "alice", at: start.addingTimeInterval(601), in: $0) }
            check("pending count", counted == 1 && countedAfter == 0, "alice's pending, unexpired approvals counted \(counted), then \(countedAfter) once expired")
            let all = try await store.approvals(subject: "alice", pendingAt: nil).map(\.callID)
            check("full list", all == [kept.callID, asked.callID, short.callID], "all, newest first: \(all)")

            // Of concurrent decisions, exactly one wins, and the row holds the winner's.
            let raced = request("call_\(tag)_race")
            _ = try await insert(raced)
            let winners = try await withThrowingTaskGroup(of: Approval.State?.self) { group in
                for index in 0..<20 {
                    let state: Approval.State = index % 2 == 0 ? .approved : .denied
                    group.addTask {
                        try await storage.withTransaction { session in
                            try store.decide(callID: raced.callID, subject: "alice", state: state, by: "key_alice", at: later, in: session) ? state : nil
                        }
                    }
                }
                return try await group.reduce(into: [Approval.State]()) { if let state = $1 { $0.append(state) } }
            }
            let final = try await store.approval(callID: raced.callID)?.state
            check("one of concurrent decisions", winners.count == 1 && final == winners.first, "\(winners.count) of 20 won; the row says \(String(describing: final))")

            // Two people racing for one call id: one request, one refusal.
            let contested = "call_\(tag)_contested"
            let outcomes = await withTaskGroup(of: String.self) { group in
                for subject in ["alice", "bob", "carol", "dave"] {
                    group.addTask {
                        do { return try await insert(request(contested, subject: subject)).created ? "created" : "existing" } catch { return "refused" }
                    }
                }
                return await group.reduce(into: [String]()) { $0.append($1) }.sorted()
            }
            check("one of concurrent asks", outcomes == ["created", "refused", "refused", "refused"], "four people asking with one call id: \(outcomes)")

            if let otherNode { try await checkHints(otherNode: otherNode, request: request("call_\(tag)_hint"), at: later, check: check) }
        } catch {
            failures.append(ConformanceFailure(rule: "no errors", detail: "\(engine): \(error)"))
        }
        return failures
    }

    /// A decision taken through the other node's handle reaches this one's hints, naming the call.
    private func checkHints(otherNode: any ApprovalStore, request: Approval, at now: Date,
                            check: (String, Bool, @autoclosure () -> String) -> Void) async throws {
        guard let hints = try await store.otherWriters() else {
            check("hints from other nodes", false, "a store with another node's handle offers no hints")
            return
        }
        defer { hints.stop() }
        _ = try await otherNode.storage.withTransaction { try otherNode.insertIfNew(request, in: $0) }
        _ = try await otherNode.storage.withTransaction {
            try otherNode.decide(callID: request.callID, subject: request.subject, state: .denied, by: "key", at: now, in: $0)
        }
        // Bounded so a silent store fails instead of hanging; hints of earlier rows may come first.
        let heard = await withTaskGroup(of: Bool.self) { group in
            group.addTask {
                for await hint in hints.hints where hint == .changed(callID: request.callID) { return true }
                return false
            }
            group.addTask {
                try? await Task.sleep(for: .seconds(10))
                return false
            }
            let first = await group.next() ?? false
            group.cancelAll()
            hints.stop()
            return first
        }
        check("hints from other nodes", heard, "no hint named \(request.callID) within 10 s of another node deciding it")
    }
}
