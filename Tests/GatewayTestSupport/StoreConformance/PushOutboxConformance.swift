import ChannelAPI
import Foundation
import Mobile
import Storage

/// What every engine's `PushOutbox` must do, whatever keeps its rows: wake-ups commit with the transaction that
/// queues them, one per device, and a rolled-back one leaves none; the signal reads back as queued; only due rows are
/// claimed, at most `limit` at a time; a held lease is not claimed again; concurrent claimers never share a row; a row
/// is settled once, by its holder only; an expired lease is rescued by the next claim, and its old holder (even the
/// same owner under its earlier claim) can no longer settle it; a rescheduled row waits for its time; the counts
/// follow the states; and removing settled rows never touches a pending one. Returns the broken rules (empty:
/// conformant).
///
/// Leases are judged by real time (PostgreSQL's by the database's clock), so every claim whose lease matters passes
/// `Date()`. The rules share one table: each queues for a delivery id of its own and looks only at those rows.
public struct PushOutboxConformance: Sendable {
    public let fixture: any StorageEngineFixture
    public let outbox: any PushOutbox

    public init(fixture: any StorageEngineFixture, outbox: any PushOutbox) {
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
        var deliveries: [String] = []
        /// A delivery id of one rule's own, remembered for the last rule's look at every pending row.
        func newDelivery() -> String {
            let id = "dlv_conf_" + UUID().uuidString.lowercased()
            deliveries.append(id)
            return id
        }
        func wake(_ delivery: String) -> WakeSignal {
            WakeSignal(category: .delivery, title: "Conformance", body: "A wake-up of the conformance suite.", deepLink: "soulacy://delivery/\(delivery)",
                       threadID: "conformance", deliveryID: delivery, collapseID: delivery)
        }
        /// Queues one wake-up per device in a committed transaction of its own, due at once.
        func enqueue(_ delivery: String, devices: [String]) async throws {
            let signal = wake(delivery)
            try await storage.withTransaction { session in
                try outbox.enqueue(signal, deliveryID: delivery, deviceIDs: devices, now: Date(), in: session)
            }
        }
        /// Claims every due row as `owner` and keeps this delivery's: rows of earlier rules may be due too.
        func claim(_ owner: String, of delivery: String, lease: TimeInterval = 30, now: Date = Date()) async throws -> [OutboxEntry] {
            try await outbox.claimDue(owner: owner, now: now, lease: lease, limit: 1000).filter { $0.deliveryID == delivery }
        }
        /// Claims as `owner` until row `id` comes back (its lease ran out), for about 10 s at most.
        func rescue(_ id: Int64, by owner: String, of delivery: String) async throws -> OutboxEntry? {
            for _ in 0..<200 {
                if let entry = try await claim(owner, of: delivery).first(where: { $0.id == id }) { return entry }
                try await Task.sleep(for: .milliseconds(50))
            }
            return nil
        }
        func describe(_ entry: OutboxEntry?) -> String {
            entry.map { "\($0.state.rawValue), \($0.attempts) attempts, claim \($0.claim)" } ?? "no row"
        }

        do {
            do {
                // A rolled-back transaction takes its wake-ups with it; a committed one queues one per device.
                let rule = "enqueue commits with its transaction"
                let undone = newDelivery()
                let signal = wake(undone)
                try? await storage.withTransaction { session -> Void in
                    try outbox.enqueue(signal, deliveryID: undone, deviceIDs: ["dev_1", "dev_2"], now: Date(), in: session)
                    throw Refused()
                }
                let leftovers = try await outbox.entries(deliveryID: undone)
                check(rule, leftovers.isEmpty, "a rolled-back transaction left \(leftovers.count) rows")

                let queued = newDelivery()
                let devices = ["dev_1", "dev_2", "dev_3"]
                try await enqueue(queued, devices: devices)
                let rows = try await outbox.entries(deliveryID: queued)
                check(rule, rows.count == 3 && Set(rows.map(\.deviceID)) == Set(devices), "3 devices queued rows for \(rows.map(\.deviceID))")
                check(rule, rows.allSatisfy { $0.state == .pending && $0.attempts == 0 && $0.deliveryID == queued }, "queued rows read \(rows.map { describe($0) })")
                // The wake id is the row's own (stable across retries), so it is left out of the comparison.
                var read = rows.first?.signal
                read?.wakeID = nil
                check("the signal reads back", read == wake(queued), "queued \(wake(queued)), read \(String(describing: read))")
            }

            do {
                let rule = "claims only due"
                let due = newDelivery()
                try await enqueue(due, devices: ["dev_1", "dev_2", "dev_3"])
                let early = try await claim("early", of: due, now: Date().addingTimeInterval(-60))
                check(rule, early.isEmpty, "a claim 60 s before they were due took \(early.count) rows")
                let limited = try await outbox.claimDue(owner: "due", now: Date(), lease: 30, limit: 2)
                check(rule, limited.count <= 2, "a claim of at most 2 took \(limited.count) rows")
                let rest = try await claim("due", of: due)
                let taken = Set((limited.filter { $0.deliveryID == due } + rest).map(\.id))
                check(rule, taken.count == 3, "of 3 due rows \(taken.count) were claimed")
            }

            do {
                let rule = "a held lease is not claimed again"
                let held = newDelivery()
                try await enqueue(held, devices: ["dev_1", "dev_2"])
                let first = try await claim("a", of: held)
                check(rule, first.count == 2, "owner a claimed \(first.count) of 2 due rows")
                let second = try await claim("b", of: held)
                check(rule, second.isEmpty, "owner b took \(second.count) rows owner a holds")
            }

            do {
                // Six claimers at once, each until nothing is left: every row goes to exactly one of them.
                let rule = "concurrent claimers share nothing"
                let shared = newDelivery()
                try await enqueue(shared, devices: (0..<60).map { "dev_\($0)" })
                let claimed = try await withThrowingTaskGroup(of: [OutboxEntry].self, returning: [OutboxEntry].self) { group in
                    for i in 0..<6 {
                        group.addTask {
                            var mine: [OutboxEntry] = []
                            // Capped, so a store that hands rows out forever fails the rule instead of hanging.
                            for _ in 0..<1000 {
                                let batch = try await outbox.claimDue(owner: "c\(i)", now: Date(), lease: 30, limit: 7)
                                if batch.isEmpty { break }
                                mine += batch
                            }
                            return mine
                        }
                    }
                    var all: [OutboxEntry] = []
                    for try await batch in group { all += batch }
                    return all
                }
                let ours = claimed.filter { $0.deliveryID == shared }.map(\.id)
                let queued = try await outbox.entries(deliveryID: shared)
                let expected = Set(queued.map(\.id))
                check(rule, ours.count == Set(ours).count, "\(ours.count - Set(ours).count) claims took a row another claimer held")
                check(rule, expected.count == 60 && Set(ours) == expected, "\(Set(ours).count) of \(expected.count) rows were claimed")
            }

            do {
                let rule = "settle by its holder, once"
                let once = newDelivery()
                try await enqueue(once, devices: ["dev_1"])
                if let entry = try await claim("holder", of: once).first {
                    let intruder = try await outbox.settle(entry.id, claim: entry.claim, owner: "intruder", state: .sent, transport: "conformance",
                                                           outcome: "sent", at: Date(), events: [])
                    check(rule, !intruder, "an owner that did not hold the row settled it")
                    let settled = try await outbox.settle(entry.id, claim: entry.claim, owner: "holder", state: .sent, transport: "conformance",
                                                          outcome: "sent", at: Date(), events: [])
                    let read = try await outbox.entries(deliveryID: once).first
                    check(rule, settled && read?.state == .sent && read?.attempts == 1, "settled: \(settled), the row reads \(describe(read))")
                    check(rule, read?.transport == "conformance" && read?.outcome == "sent",
                          "transport \(String(describing: read?.transport)), outcome \(String(describing: read?.outcome))")
                    let again = try await outbox.settle(entry.id, claim: entry.claim, owner: "holder", state: .failed, transport: "conformance",
                                                        outcome: "again", at: Date(), events: [])
                    let after = try await outbox.entries(deliveryID: once).first
                    check(rule, !again && after?.state == .sent, "a second settle returned \(again), the row reads \(describe(after))")
                } else {
                    check(rule, false, "the due row was not claimed")
                }
            }

            do {
                // Another owner takes the row over once its short lease ran out; the old holder's claim is then dead.
                let rule = "a lost claim never settles"
                let lost = newDelivery()
                try await enqueue(lost, devices: ["dev_1"])
                if let old = try await claim("old", of: lost, lease: 0.3).first {
                    if let new = try await rescue(old.id, by: "new", of: lost) {
                        let stale = try await outbox.settle(old.id, claim: old.claim, owner: "old", state: .sent, transport: "conformance",
                                                            outcome: "sent", at: Date(), events: [])
                        let staleRetry = try await outbox.reschedule(old.id, claim: old.claim, owner: "old", at: Date().addingTimeInterval(60),
                                                                     transport: "conformance", outcome: "retry", events: [])
                        let read = try await outbox.entries(deliveryID: lost).first
                        check(rule, !stale && !staleRetry && read?.state == .pending && read?.attempts == 0,
                              "the old holder's settle returned \(stale), its reschedule \(staleRetry); the row reads \(describe(read))")
                        let settled = try await outbox.settle(new.id, claim: new.claim, owner: "new", state: .sent, transport: "conformance",
                                                              outcome: "sent", at: Date(), events: [])
                        check(rule, settled, "the new holder could not settle the row")
                    } else {
                        check("an expired lease is rescued", false, "a row whose 0.3 s lease ran out was not claimed by another owner within 10 s")
                    }
                } else {
                    check(rule, false, "the due row was not claimed")
                }

                // The same owner claiming again after its own lease ran out: only the newer claim settles.
                let again = newDelivery()
                try await enqueue(again, devices: ["dev_1"])
                if let first = try await claim("same", of: again, lease: 0.3).first {
                    if let second = try await rescue(first.id, by: "same", of: again) {
                        let stale = try await outbox.settle(first.id, claim: first.claim, owner: "same", state: .sent, transport: "conformance",
                                                            outcome: "sent", at: Date(), events: [])
                        let settled = try await outbox.settle(second.id, claim: second.claim, owner: "same", state: .sent, transport: "conformance",
                                                              outcome: "sent", at: Date(), events: [])
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
                let later = newDelivery()
                try await enqueue(later, devices: ["dev_1"])
                if let entry = try await claim("r", of: later).first {
                    let next = Date().addingTimeInterval(3600)
                    let moved = try await outbox.reschedule(entry.id, claim: entry.claim, owner: "r", at: next, transport: "conformance",
                                                            outcome: "retry", events: [])
                    let read = try await outbox.entries(deliveryID: later).first
                    check(rule, moved && read?.state == .pending && read?.attempts == 1, "rescheduled: \(moved), the row reads \(describe(read))")
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
                let rule = "counts"
                let counted = newDelivery()
                let before = try await outbox.counts()
                try await enqueue(counted, devices: ["dev_1", "dev_2", "dev_3"])
                let queued = try await outbox.counts()
                check(rule, queued[.pending, default: 0] == before[.pending, default: 0] + 3,
                      "pending went from \(before[.pending, default: 0]) to \(queued[.pending, default: 0]) after queueing 3")
                let rows = try await claim("counter", of: counted)
                var settled = 0
                for (i, row) in rows.enumerated() {
                    if try await outbox.settle(row.id, claim: row.claim, owner: "counter", state: i == 0 ? .failed : .sent, transport: "conformance",
                                               outcome: "counted", at: Date(), events: []) { settled += 1 }
                }
                let after = try await outbox.counts()
                check(rule, rows.count == 3 && settled == 3, "of 3 rows \(rows.count) were claimed and \(settled) settled")
                let grown = { (state: OutboxEntry.State) -> Int in after[state, default: 0] - before[state, default: 0] }
                check(rule, grown(.pending) == 0 && grown(.sent) == 2 && grown(.failed) == 1, "before \(before), after \(after), 2 sent and 1 failed between")
            }

            do {
                let rule = "removeSettled never removes pending"
                let removable = newDelivery()
                try await enqueue(removable, devices: ["dev_1", "dev_2", "dev_3", "dev_4"])
                let rows = try await claim("cleaner", of: removable)
                var finished: Set<Int64> = []
                for (i, row) in rows.prefix(2).enumerated() {
                    if try await outbox.settle(row.id, claim: row.claim, owner: "cleaner", state: i == 0 ? .sent : .skipped, transport: "conformance",
                                               outcome: "done", at: Date(), events: []) { finished.insert(row.id) }
                }
                // Every pending row of the suite, the two left of this rule's among them.
                var pending: Set<Int64> = []
                for delivery in deliveries {
                    let entries = try await outbox.entries(deliveryID: delivery)
                    pending.formUnion(entries.filter { $0.state == .pending }.map(\.id))
                }
                let removed = try await outbox.removeSettled(before: Date().addingTimeInterval(60))
                var remaining: Set<Int64> = []
                for delivery in deliveries {
                    let entries = try await outbox.entries(deliveryID: delivery)
                    remaining.formUnion(entries.map(\.id))
                }
                check(rule, rows.count == 4 && finished.count == 2, "of 4 rows \(rows.count) were claimed and \(finished.count) settled")
                check(rule, removed >= finished.count && finished.isDisjoint(with: remaining),
                      "removed \(removed); \(finished.intersection(remaining).count) rows settled before the cutoff are still there")
                check(rule, pending.count >= 2 && pending.isSubset(of: remaining), "\(pending.subtracting(remaining).count) of \(pending.count) pending rows were removed")
            }
        } catch {
            failures.append(ConformanceFailure(rule: "no error", detail: "\(fixture.engine): \(error)"))
        }
        return failures
    }
}
