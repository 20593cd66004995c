import ChannelAPI
import ChannelDelivery
import Foundation
import Storage

/// What every engine's `ChannelOutbox` must do, whatever keeps its rows: sends recorded in the caller's transaction
/// commit with it and a rolled-back one leaves none; sends recorded in their own transaction are there at once; a
/// run's sends read back in order, with channel, destination, subject and output exactly as queued; only due rows are
/// claimed, at most `limit` at a time; a held lease is not claimed again; concurrent claimers never share a row; a row
/// is settled once, by its holder only, keeping its remote id (and its delivery time when delivered) or its reason; an
/// expired lease is rescued by the next claim, and its old holder (even the same owner under its earlier claim) can no
/// longer settle it; a rescheduled row waits for its time with its reason; the health counts what waits and names
/// each channel's latest finished send; and removing finished rows never touches a pending one. Returns the broken
/// rules (empty: conformant).
///
/// Leases are judged by real time (PostgreSQL's by the database's clock), so every claim whose lease matters passes
/// `Date()`. The rules share one table: each records for a run id of its own and looks only at those rows.
public struct ChannelOutboxConformance: Sendable {
    public let fixture: any StorageEngineFixture
    public let outbox: any ChannelOutbox

    public init(fixture: any StorageEngineFixture, outbox: any ChannelOutbox) {
        self.fixture = fixture
        self.outbox = outbox
    }

    struct Refused: Error {}

    public func run() async -> [ConformanceFailure] {
        var failures: [ConformanceFailure] = []
        func check(_ rule: String, _ holds: Bool, _ detail: @autoclosure () -> String) {
            if !holds { failures.append(ConformanceFailure(rule: rule, detail: "\(fixture.engine): \(detail())")) }
        }
        let outbox = self.outbox
        let storage = fixture.storage
        // A channel of this run only, so the health's last outcomes are this suite's.
        let suite = UUID().uuidString.prefix(8).lowercased()
        var runs: [String] = []
        /// A run id of one rule's own, remembered for the last rule's look at every pending row.
        func newRun() -> String {
            let id = "run_conf_" + UUID().uuidString.lowercased()
            runs.append(id)
            return id
        }
        /// Sends whose ids sort in the order they are made (one time-ordered id, numbered), so "in order" means one
        /// thing; texts with line breaks, quotes, a backslash and non-ASCII, so "exactly" is worth checking.
        func sends(_ count: Int, channel: String? = nil) -> [PendingChannelSend] {
            let base = PendingChannelSend.newID()
            let name = channel ?? "conf_\(suite)"
            return (0..<count).map { i in
                let output = Output(agentID: "agent_conf", agentName: "Conformance ✓", sessionID: "ses_conf", title: "Result \(i)",
                                    parts: ["Line one of \(i)\nline two: \"quoted\", back\\slash, ünïcødé 🚀", "", "tail"],
                                    metadata: ["trigger": "conformance", "n": "\(i)"])
                return PendingChannelSend(id: "\(base)_\(100 + i)", channel: name, destination: "https://hooks.example.com/conf?to=ü&n=\(i)",
                                          output: output, subject: "user_conf")
            }
        }
        /// Records sends in a transaction of their own, due at once.
        func enqueue(_ made: [PendingChannelSend], run: String) async throws {
            try await outbox.enqueue(made, runID: run, now: Date())
        }
        /// Claims every due row as `owner` and keeps this run's: rows of earlier rules may be due too.
        func claim(_ owner: String, of run: String, lease: TimeInterval = 30, now: Date = Date()) async throws -> [ChannelOutboxEntry] {
            try await outbox.claimDue(owner: owner, now: now, lease: lease, limit: 1000).filter { $0.runID == run }
        }
        /// Claims as `owner` until row `id` comes back (its lease ran out), for about 10 s at most.
        func rescue(_ id: String, by owner: String, of run: String) async throws -> ChannelOutboxEntry? {
            for _ in 0..<200 {
                if let entry = try await claim(owner, of: run).first(where: { $0.id == id }) { return entry }
                try await Task.sleep(for: .milliseconds(50))
            }
            return nil
        }
        func describe(_ entry: ChannelOutboxEntry?) -> String {
            entry.map { "\($0.state.rawValue), \($0.attempts) attempts, claim \($0.claim), reason \($0.lastReason ?? "none")" } ?? "no row"
        }
        /// Whether a row reads back what was queued, field by field.
        func same(_ entry: ChannelOutboxEntry?, as send: PendingChannelSend) -> Bool {
            guard let entry else { return false }
            return entry.id == send.id && entry.channel == send.channel && entry.destination == send.destination && entry.subject == send.subject
                && entry.output == send.output
        }

        do {
            do {
                // A rolled-back transaction takes its sends with it; a committed one keeps them, in order.
                let rule = "enqueue commits with its transaction"
                let undone = newRun()
                let dropped = sends(2)
                try? await storage.withTransaction { session -> Void in
                    try outbox.enqueue(dropped, runID: undone, now: Date(), in: session)
                    throw Refused()
                }
                let leftovers = try await outbox.entries(runID: undone)
                let leftover = try await outbox.entry(id: dropped[0].id)
                check(rule, leftovers.isEmpty && leftover == nil, "a rolled-back transaction left \(leftovers.count) rows")

                let committed = newRun()
                let made = sends(3)
                try await storage.withTransaction { session in
                    try outbox.enqueue(made, runID: committed, now: Date(), in: session)
                }
                let rows = try await outbox.entries(runID: committed)
                check(rule, rows.count == 3 && rows.allSatisfy { $0.state == .pending && $0.attempts == 0 && $0.runID == committed },
                      "3 queued sends read \(rows.map { describe($0) })")
                check("entries in order", rows.map(\.id) == made.map(\.id), "queued \(made.map(\.id)), read \(rows.map(\.id))")
                check("reads back exactly", rows.count == made.count && zip(rows, made).allSatisfy { same($0, as: $1) },
                      "queued \(made), read \(rows)")
            }

            do {
                let rule = "enqueue in its own transaction"
                let own = newRun()
                let made = sends(1)
                try await enqueue(made, run: own)
                let read = try await outbox.entry(id: made[0].id)
                check(rule, read?.state == .pending && read?.runID == own, "the send reads \(describe(read)), run \(String(describing: read?.runID))")
                check("reads back exactly", same(read, as: made[0]), "queued \(made[0]), read \(String(describing: read))")
            }

            do {
                let rule = "claims only due"
                let due = newRun()
                try await enqueue(sends(3), run: due)
                let early = try await claim("early", of: due, now: Date().addingTimeInterval(-60))
                check(rule, early.isEmpty, "a claim 60 s before they were due took \(early.count) rows")
                let limited = try await outbox.claimDue(owner: "due", now: Date(), lease: 30, limit: 2)
                check(rule, limited.count <= 2, "a claim of at most 2 took \(limited.count) rows")
                let rest = try await claim("due", of: due)
                let taken = Set((limited.filter { $0.runID == due } + rest).map(\.id))
                check(rule, taken.count == 3, "of 3 due rows \(taken.count) were claimed")
            }

            do {
                let rule = "a held lease is not claimed again"
                let held = newRun()
                try await enqueue(sends(2), run: held)
                let first = try await claim("a", of: held)
                check(rule, first.count == 2, "owner a claimed \(first.count) of 2 due rows")
                let second = try await claim("b", of: held)
                check(rule, second.isEmpty, "owner b took \(second.count) rows owner a holds")
            }

            do {
                // Six claimers at once, each until nothing is left: every row goes to exactly one of them.
                let rule = "concurrent claimers share nothing"
                let shared = newRun()
                try await enqueue(sends(60), run: shared)
                let claimed = try await withThrowingTaskGroup(of: [ChannelOutboxEntry].self, returning: [ChannelOutboxEntry].self) { group in
                    for i in 0..<6 {
                        group.addTask {
                            var mine: [ChannelOutboxEntry] = []
                            // Capped, so a store that hands rows out forever fails the rule instead of hanging.
                            for _ in 0..<1000 {
                                let batch = try await outbox.claimDue(owner: "c\(i)", now: Date(), lease: 30, limit: 7)
                                if batch.isEmpty { break }
                                mine += batch
                            }
                            return mine
                        }
                    }
                    var all: [ChannelOutboxEntry] = []
                    for try await batch in group { all += batch }
                    return all
                }
                let ours = claimed.filter { $0.runID == shared }.map(\.id)
                let queued = try await outbox.entries(runID: shared)
                let expected = Set(queued.map(\.id))
                check(rule, ours.count == Set(ours).count, "\(ours.count - Set(ours).count) claims took a row another claimer held")
                check(rule, expected.count == 60 && Set(ours) == expected, "\(Set(ours).count) of \(expected.count) rows were claimed")
            }

            do {
                let rule = "settle by its holder, once"
                let once = newRun()
                try await enqueue(sends(2), run: once)
                let rows = try await claim("holder", of: once)
                if rows.count == 2 {
                    let (delivered, refused) = (rows[0], rows[1])
                    let at = Date()
                    let intruder = try await outbox.settle(delivered.id, claim: delivered.claim, owner: "intruder", state: .delivered, reason: nil,
                                                           remoteID: "remote_x", at: at)
                    check(rule, !intruder, "an owner that did not hold the row settled it")
                    let settled = try await outbox.settle(delivered.id, claim: delivered.claim, owner: "holder", state: .delivered, reason: nil,
                                                          remoteID: "remote_1", at: at)
                    let read = try await outbox.entry(id: delivered.id)
                    check(rule, settled && read?.state == .delivered && read?.attempts == 1, "settled: \(settled), the row reads \(describe(read))")
                    check(rule, read?.remoteID == "remote_1", "remote id \(String(describing: read?.remoteID)), not remote_1")
                    check(rule, read?.deliveredAt.map { abs($0.timeIntervalSince(at)) < 1 } == true,
                          "delivered at \(String(describing: read?.deliveredAt)), not \(at)")
                    let again = try await outbox.settle(delivered.id, claim: delivered.claim, owner: "holder", state: .failed, reason: "again",
                                                        remoteID: nil, at: Date())
                    let after = try await outbox.entry(id: delivered.id)
                    check(rule, !again && after?.state == .delivered, "a second settle returned \(again), the row reads \(describe(after))")

                    // A refusal keeps its reason and was never delivered.
                    let rejected = try await outbox.settle(refused.id, claim: refused.claim, owner: "holder", state: .rejected, reason: "refused",
                                                           remoteID: nil, at: Date())
                    let refusal = try await outbox.entry(id: refused.id)
                    check(rule, rejected && refusal?.state == .rejected && refusal?.lastReason == "refused", "rejected: \(rejected), the row reads \(describe(refusal))")
                    check(rule, refusal != nil && refusal?.deliveredAt == nil, "a rejected row has delivered at \(String(describing: refusal?.deliveredAt))")
                } else {
                    check(rule, false, "of 2 due rows \(rows.count) were claimed")
                }
            }

            do {
                // Another owner takes the row over once its short lease ran out; the old holder's claim is then dead.
                let rule = "a lost claim never settles"
                let lost = newRun()
                try await enqueue(sends(1), run: lost)
                if let old = try await claim("old", of: lost, lease: 0.3).first {
                    if let new = try await rescue(old.id, by: "new", of: lost) {
                        let stale = try await outbox.settle(old.id, claim: old.claim, owner: "old", state: .delivered, reason: nil, remoteID: "remote_old", at: Date())
                        let staleRetry = try await outbox.reschedule(old.id, claim: old.claim, owner: "old", at: Date().addingTimeInterval(60), reason: "stale")
                        let read = try await outbox.entry(id: old.id)
                        check(rule, !stale && !staleRetry && read?.state == .pending && read?.attempts == 0,
                              "the old holder's settle returned \(stale), its reschedule \(staleRetry); the row reads \(describe(read))")
                        let settled = try await outbox.settle(new.id, claim: new.claim, owner: "new", state: .delivered, reason: nil, remoteID: "remote_new", at: Date())
                        let after = try await outbox.entry(id: new.id)
                        check(rule, settled && after?.remoteID == "remote_new", "the new holder's settle returned \(settled), remote id \(String(describing: after?.remoteID))")
                    } else {
                        check("an expired lease is rescued", false, "a row whose 0.3 s lease ran out was not claimed by another owner within 10 s")
                    }
                } else {
                    check(rule, false, "the due row was not claimed")
                }

                // The same owner claiming again after its own lease ran out: only the newer claim settles.
                let again = newRun()
                try await enqueue(sends(1), run: again)
                if let first = try await claim("same", of: again, lease: 0.3).first {
                    if let second = try await rescue(first.id, by: "same", of: again) {
                        let stale = try await outbox.settle(first.id, claim: first.claim, owner: "same", state: .delivered, reason: nil, remoteID: nil, at: Date())
                        let settled = try await outbox.settle(second.id, claim: second.claim, owner: "same", state: .delivered, reason: nil, remoteID: nil, at: Date())
                        check(rule, first.claim != second.claim && !stale && settled,
                              "claims \(first.claim) then \(second.claim) by one owner: the first settled \(stale), the second \(settled)")
                    } else {
                        check("an expired lease is rescued", false, "a row whose 0.3 s lease ran out was not claimed by its owner again within 10 s")
                    }
                } else {
                    check(rule, false, "the due row was not claimed")
                }
            }

            do {
                let rule = "reschedule"
                let later = newRun()
                try await enqueue(sends(1), run: later)
                if let entry = try await claim("r", of: later).first {
                    let next = Date().addingTimeInterval(3600)
                    let moved = try await outbox.reschedule(entry.id, claim: entry.claim, owner: "r", at: next, reason: "busy, try later")
                    let read = try await outbox.entry(id: entry.id)
                    check(rule, moved && read?.state == .pending && read?.attempts == 1, "rescheduled: \(moved), the row reads \(describe(read))")
                    check(rule, read?.lastReason == "busy, try later", "last reason \(String(describing: read?.lastReason)), not the reschedule's")
                    check(rule, read.map { abs($0.nextAttemptAt.timeIntervalSince(next)) < 1 } == true,
                          "next attempt at \(String(describing: read?.nextAttemptAt)), not \(next)")
                    let early = try await claim("r2", of: later)
                    check(rule, early.isEmpty, "a row rescheduled an hour ahead was claimed now")
                    let nextDue = try await outbox.nextDue()
                    check(rule, nextDue.map { $0 <= next.addingTimeInterval(1) } == true, "nextDue() is \(String(describing: nextDue)) with a row due at \(next)")
                    // The claim's own `now` says when it is; only the lease is judged by real time.
                    let due = try await claim("r3", of: later, now: Date().addingTimeInterval(3601))
                    check(rule, due.map(\.id) == [entry.id], "a claim an hour later took \(due.count) of the 1 rescheduled row")
                } else {
                    check(rule, false, "the due row was not claimed")
                }
            }

            do {
                // Exact differences: the rules run one after another, so nothing else changes the table meanwhile.
                let rule = "health"
                let watched = "conf_health_\(suite)"
                let quiet = "conf_quiet_\(suite)"
                let run = newRun()
                let before = try await outbox.health(channels: [watched, quiet])
                let made = sends(2, channel: watched)
                try await enqueue(made, run: run)
                let waiting = try await outbox.health(channels: [watched, quiet])
                check(rule, waiting.pending == before.pending + 2, "pending went from \(before.pending) to \(waiting.pending) after queueing 2")
                check(rule, waiting.oldestPendingAt != nil, "no oldest pending time with rows waiting")
                check(rule, waiting.lastOutcomes.isEmpty, "channels with nothing finished have last outcomes \(waiting.lastOutcomes)")
                let rows = try await claim("health", of: run).sorted { $0.id < $1.id }
                if rows.count == 2 {
                    // The later send also finishes later, so "latest" is the same by id and by finishing time.
                    let at = Date()
                    let finishedLast = at.addingTimeInterval(1)
                    let first = try await outbox.settle(rows[0].id, claim: rows[0].claim, owner: "health", state: .delivered, reason: nil, remoteID: "remote_h", at: at)
                    let last = try await outbox.settle(rows[1].id, claim: rows[1].claim, owner: "health", state: .rejected, reason: "refused", remoteID: nil,
                                                       at: finishedLast)
                    let after = try await outbox.health(channels: [watched, quiet])
                    let outcome = after.lastOutcomes[watched]
                    check(rule, first && last && after.pending == before.pending, "settled \(first) and \(last); pending went from \(before.pending) to \(after.pending)")
                    check(rule, outcome?.state == "rejected" && outcome?.reason == "refused", "the last outcome of \(watched) is \(String(describing: outcome))")
                    check(rule, outcome.map { abs($0.at.timeIntervalSince(finishedLast)) < 1 } == true,
                          "the last outcome is dated \(String(describing: outcome?.at)), not \(finishedLast)")
                    check(rule, after.lastOutcomes[quiet] == nil, "a channel with nothing finished has the last outcome \(String(describing: after.lastOutcomes[quiet]))")
                } else {
                    check(rule, false, "of 2 due rows \(rows.count) were claimed")
                }
            }

            do {
                let rule = "removeFinished never removes pending"
                let removable = newRun()
                try await enqueue(sends(4), run: removable)
                let rows = try await claim("cleaner", of: removable)
                var finished: Set<String> = []
                for (i, row) in rows.prefix(2).enumerated() {
                    if try await outbox.settle(row.id, claim: row.claim, owner: "cleaner", state: i == 0 ? .delivered : .failed, reason: i == 0 ? nil : "gone",
                                               remoteID: nil, at: Date()) { finished.insert(row.id) }
                }
                // Every pending row of the suite, the two left of this rule's among them.
                var pending: Set<String> = []
                for run in runs {
                    let entries = try await outbox.entries(runID: run)
                    pending.formUnion(entries.filter { $0.state == .pending }.map(\.id))
                }
                let removed = try await outbox.removeFinished(before: Date().addingTimeInterval(60))
                var remaining: Set<String> = []
                for run in runs {
                    let entries = try await outbox.entries(runID: run)
                    remaining.formUnion(entries.map(\.id))
                }
                check(rule, rows.count == 4 && finished.count == 2, "of 4 rows \(rows.count) were claimed and \(finished.count) settled")
                check(rule, removed >= finished.count && finished.isDisjoint(with: remaining),
                      "removed \(removed); \(finished.intersection(remaining).count) rows finished before the cutoff are still there")
                check(rule, pending.count >= 2 && pending.isSubset(of: remaining), "\(pending.subtracting(remaining).count) of \(pending.count) pending rows were removed")
            }
        } catch {
            failures.append(ConformanceFailure(rule: "no error", detail: "\(fixture.engine): \(error)"))
        }
        return failures
    }
}
