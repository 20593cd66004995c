import Agents
import ChannelDelivery
import Foundation
import Storage

/// What every engine's `RunStore` must do, whatever keeps its rows. Returns the broken rules (empty: conformant).
///
/// - "begin and read back": a begun run reads back running, with its agent, session, trigger, start (to the
///   millisecond) and subject (`owner` when none was given), nothing finished; its session names its subject; an
///   unknown run or session reads nil.
/// - "finish": a finished run reads back its status, end, delivery id and note; a failed one its error.
/// - "a fire begins one run": of 10 concurrent begins of one scheduled fire exactly one returns true and exactly one
///   run is recorded; the fire begun again later (a restart's replay) is refused; the same agent's next fire, and
///   another agent's fire of the same instant, each begin.
/// - "events in order": a run's events read back in the order they were recorded, two of one instant included, with
///   kind, detail and time; another run's events are not among them.
/// - "recent runs newest first, per person": one agent's runs by two people: each person's read only their own,
///   newest first, at most `limit`; another agent's or nobody's read nothing.
/// - "last fire": nil before any; after two fires, the later, to the millisecond; each agent's is its own.
/// - "answer with the run's end": with a `CommitHook` bound, a finish with an answer records it through the hook in
///   the finish's own transaction (the fixture's effect written in that session); a finish without one records none.
/// - "interrupted": `markInterrupted(at:)` turns this rule's running run into interrupted (with its end and an error)
///   and leaves its finished one as it was; it counts at least that one.
///
/// The database may hold other suites' rows: every rule uses agents, runs and sessions of its own (UUIDs) and looks
/// only at them. `markInterrupted` touches every running run, so its rule comes last and counts "at least".
public struct RunStoreConformance: Sendable {
    public let fixture: any StorageEngineFixture
    public let store: any RunStore

    public init(fixture: any StorageEngineFixture, store: any RunStore) {
        self.fixture = fixture
        self.store = store
    }

    public func run() async -> [ConformanceFailure] {
        let store = self.store
        let fixture = self.fixture
        var failures: [ConformanceFailure] = []
        func check(_ rule: String, _ holds: Bool, _ detail: @autoclosure () -> String) {
            if !holds { failures.append(ConformanceFailure(rule: rule, detail: "\(fixture.engine): \(detail())")) }
        }
        func threw(_ rule: String, _ error: any Error) {
            failures.append(ConformanceFailure(rule: rule, detail: "\(fixture.engine): threw \(error)"))
        }
        let suite = UUID().uuidString.prefix(8).lowercased()
        func unique(_ prefix: String) -> String { "\(prefix)_conf_\(suite)_\(UUID().uuidString.prefix(8).lowercased())" }
        /// Whole milliseconds since 1970, as both engines store times: dates are compared this way, never with `==`.
        func ms(_ date: Date?) -> Int64? { date.map { Int64(($0.timeIntervalSince1970 * 1000).rounded()) } }
        func describe(_ run: RunRecord?) -> String {
            run.map { "\($0.id): \($0.status.rawValue), agent \($0.agentID), session \($0.sessionID), trigger \($0.trigger), subject \($0.subject), "
                + "started \(String(describing: ms($0.startedAt))), finished \(String(describing: ms($0.finishedAt))), error \($0.error ?? "none"), "
                + "delivery \($0.deliveryID ?? "none"), note \($0.note ?? "none")" } ?? "no run"
        }
        // A time with milliseconds, so a store that drops them is caught.
        let base = Date(timeIntervalSince1970: 1_780_000_000.123)

        do {
            let rule = "begin and read back"
            let agent = unique("agent")
            let id = unique("run")
            let session = unique("ses")
            let subject = unique("user")
            let begun = try await store.begin(RunRecord(id: id, agentID: agent, sessionID: session, trigger: .webhook, startedAt: base, subject: subject),
                                              fire: nil)
            check(rule, begun, "begin without a fire returned false")
            let read = try await store.run(id: id)
            check(rule, read?.status == .running && read?.agentID == agent && read?.sessionID == session && read?.trigger == .webhook
                  && read?.subject == subject && ms(read?.startedAt) == ms(base), "began \(id) as a running webhook run, read \(describe(read))")
            check(rule, read != nil && read?.finishedAt == nil && read?.error == nil && read?.deliveryID == nil && read?.note == nil,
                  "a run just begun reads \(describe(read))")
            let owner = try await store.subject(ofSession: session)
            check(rule, owner == subject, "the session's subject is \(owner ?? "nil"), not \(subject)")
            // Without a subject, the run is the owner's.
            let ownersRun = unique("run")
            let ownersSession = unique("ses")
            _ = try await store.begin(RunRecord(id: ownersRun, agentID: agent, sessionID: ownersSession, trigger: .cron, startedAt: base), fire: nil)
            let owners = try await store.run(id: ownersRun)
            let ownersSubject = try await store.subject(ofSession: ownersSession)
            check(rule, owners?.subject == "owner" && ownersSubject == "owner", "a run begun without a subject reads \(describe(owners))")
            let missing = try await store.run(id: unique("run"))
            check(rule, missing == nil, "an unknown run reads \(describe(missing))")
            let nobody = try await store.subject(ofSession: unique("ses"))
            check(rule, nobody == nil, "an unknown session has the subject \(nobody ?? "nil")")
        } catch {
            threw("begin and read back", error)
        }

        do {
            let rule = "finish"
            let agent = unique("agent")
            let succeeded = unique("run")
            let end = base.addingTimeInterval(5.25)
            _ = try await store.begin(RunRecord(id: succeeded, agentID: agent, sessionID: unique("ses"), trigger: .api, startedAt: base), fire: nil)
            try await store.finish(id: succeeded, status: .succeeded, error: nil, deliveryID: "dlv_\(suite)", note: "no channel 'telegram' registered",
                                   at: end, answer: nil, sends: [])
            let read = try await store.run(id: succeeded)
            check(rule, read?.status == .succeeded && ms(read?.finishedAt) == ms(end) && read?.deliveryID == "dlv_\(suite)"
                  && read?.note == "no channel 'telegram' registered" && read?.error == nil,
                  "finished succeeded at \(String(describing: ms(end))) with a delivery id and a note, read \(describe(read))")
            check(rule, ms(read?.startedAt) == ms(base) && read?.agentID == agent, "finishing changed the run's start or agent: \(describe(read))")

            let failed = unique("run")
            _ = try await store.begin(RunRecord(id: failed, agentID: agent, sessionID: unique("ses"), trigger: .api, startedAt: base), fire: nil)
            try await store.finish(id: failed, status: .failed, error: "the provider answered 500: \"overloaded\"", deliveryID: nil, at: end)
            let failure = try await store.run(id: failed)
            check(rule, failure?.status == .failed && failure?.error == "the provider answered 500: \"overloaded\"" && failure?.deliveryID == nil
                  && ms(failure?.finishedAt) == ms(end), "finished failed with an error, read \(describe(failure))")
        } catch {
            threw("finish", error)
        }

        do {
            let rule = "a fire begins one run"
            let agent = unique("agent")
            let fire = ScheduledFire(agentID: agent, at: base)
            let ids = (0..<10).map { _ in unique("run") }
            let begun = try await withThrowingTaskGroup(of: Bool.self) { group in
                for id in ids {
                    group.addTask {
                        try await store.begin(RunRecord(id: id, agentID: agent, sessionID: "ses_\(id)", trigger: .cron, startedAt: base), fire: fire)
                    }
                }
                return try await group.reduce(0) { $0 + ($1 ? 1 : 0) }
            }
            check(rule, begun == 1, "\(begun) of 10 concurrent begins of one fire returned true")
            var recorded: [String] = []
            for id in ids {
                if try await store.run(id: id) != nil { recorded.append(id) }
            }
            check(rule, recorded.count == 1, "\(recorded.count) of the 10 runs were recorded")

            // The same fire again (a restart replaying it): refused, and no run.
            let replay = unique("run")
            let replayed = try await store.begin(RunRecord(id: replay, agentID: agent, sessionID: unique("ses"), trigger: .cronMissed, startedAt: base), fire: fire)
            let replayRun = try await store.run(id: replay)
            check(rule, !replayed && replayRun == nil, "a fire begun again returned \(replayed) and recorded \(describe(replayRun))")

            let next = unique("run")
            let nextBegun = try await store.begin(RunRecord(id: next, agentID: agent, sessionID: unique("ses"), trigger: .cron, startedAt: base.addingTimeInterval(60)),
                                                  fire: ScheduledFire(agentID: agent, at: base.addingTimeInterval(60)))
            let nextRun = try await store.run(id: next)
            check(rule, nextBegun && nextRun?.status == .running, "the agent's next fire began \(nextBegun), read \(describe(nextRun))")

            let otherAgent = unique("agent")
            let other = unique("run")
            let otherBegun = try await store.begin(RunRecord(id: other, agentID: otherAgent, sessionID: unique("ses"), trigger: .cron, startedAt: base),
                                                   fire: ScheduledFire(agentID: otherAgent, at: base))
            let otherRun = try await store.run(id: other)
            check(rule, otherBegun && otherRun?.status == .running, "another agent's fire of the same instant began \(otherBegun), read \(describe(otherRun))")
        } catch {
            threw("a fire begins one run", error)
        }

        do {
            let rule = "events in order"
            let id = unique("run")
            _ = try await store.begin(RunRecord(id: id, agentID: unique("agent"), sessionID: unique("ses"), trigger: .api, startedAt: base), fire: nil)
            let later = base.addingTimeInterval(1.5)
            // (`RunEvent` has no public initializer: what is recorded is written down as tuples.)
            let recorded: [(at: Date, kind: String, detail: String)] = [(base, "retry", "attempt 2 of 3: \"rate limited\""),
                                                                         (base, "retry", "attempt 3 of 3, ünïcødé"),
                                                                         (later, "tool", "web_search")]
            for event in recorded { try await store.recordEvent(runID: id, kind: event.kind, detail: event.detail, at: event.at) }
            let read = try await store.events(runID: id)
            check(rule, read.map(\.detail) == recorded.map(\.detail) && read.map(\.kind) == recorded.map(\.kind),
                  "recorded \(recorded.map(\.detail)), read \(read.map(\.detail))")
            check(rule, read.map { ms($0.at) } == recorded.map { ms($0.at) }, "recorded at \(recorded.map { ms($0.at) }), read \(read.map { ms($0.at) })")
            let none = try await store.events(runID: unique("run"))
            check(rule, none.isEmpty, "a run with no events reads \(none.count)")
        } catch {
            threw("events in order", error)
        }

        do {
            let rule = "recent runs newest first, per person"
            let agent = unique("agent")
            let alice = unique("user")
            let bob = unique("user")
            // Alice's runs begun out of order; Bob's started between hers.
            var aliceRuns: [Int: String] = [:]
            for i in [2, 0, 3, 1] {
                let id = unique("run")
                aliceRuns[i] = id
                _ = try await store.begin(RunRecord(id: id, agentID: agent, sessionID: unique("ses"), trigger: .chat, startedAt: base.addingTimeInterval(Double(i) * 10),
                                                    subject: alice), fire: nil)
            }
            var bobRuns: [String] = []
            for i in 0..<2 {
                let id = unique("run")
                bobRuns.append(id)
                _ = try await store.begin(RunRecord(id: id, agentID: agent, sessionID: unique("ses"), trigger: .chat, startedAt: base.addingTimeInterval(Double(i) * 10 + 5),
                                                    subject: bob), fire: nil)
            }
            let newestThree = [3, 2, 1].compactMap { aliceRuns[$0] }
            let limited = try await store.recentRuns(agentID: agent, subject: alice, limit: 3)
            check(rule, limited.map(\.id) == newestThree, "Alice's 3 latest should be \(newestThree), read \(limited.map(\.id))")
            let all = try await store.recentRuns(agentID: agent, subject: alice, limit: 10)
            check(rule, all.map(\.id) == [3, 2, 1, 0].compactMap { aliceRuns[$0] } && all.allSatisfy { $0.subject == alice && $0.agentID == agent },
                  "Alice's runs read \(all.map(describe))")
            let bobs = try await store.recentRuns(agentID: agent, subject: bob, limit: 10)
            check(rule, bobs.map(\.id) == Array(bobRuns.reversed()), "Bob's runs should be \(Array(bobRuns.reversed())), read \(bobs.map(\.id))")
            let nobody = try await store.recentRuns(agentID: agent, subject: unique("user"), limit: 10)
            check(rule, nobody.isEmpty, "a person with no runs reads \(nobody.count)")
            let otherAgent = try await store.recentRuns(agentID: unique("agent"), subject: alice, limit: 10)
            check(rule, otherAgent.isEmpty, "another agent reads \(otherAgent.count) of Alice's runs")
        } catch {
            threw("recent runs newest first, per person", error)
        }

        do {
            let rule = "last fire"
            let agent = unique("agent")
            let before = try await store.lastFire(agentID: agent)
            check(rule, before == nil, "an agent that never fired last fired at \(String(describing: ms(before)))")
            let first = base
            let second = base.addingTimeInterval(90.333)
            try await store.recordFire(agentID: agent, at: first)
            try await store.recordFire(agentID: agent, at: second)
            let last = try await store.lastFire(agentID: agent)
            check(rule, ms(last) == ms(second), "after fires at \(String(describing: ms(first))) and \(String(describing: ms(second))), the last reads \(String(describing: ms(last)))")
            let other = try await store.lastFire(agentID: unique("agent"))
            check(rule, other == nil, "another agent last fired at \(String(describing: ms(other)))")
        } catch {
            threw("last fire", error)
        }

        do {
            let rule = "answer with the run's end"
            let id = unique("run")
            _ = try await store.begin(RunRecord(id: id, agentID: unique("agent"), sessionID: unique("ses"), trigger: .api, startedAt: base), fire: nil)
            let answered = { (effects: [String]) in effects.filter { $0 == "answer:201" }.count }
            let effectsBefore = try await fixture.effects()
            let before = answered(effectsBefore)
            let hook = CommitHook({ _, _ in }, recordAnswer: { answer, session in try fixture.writeEffect("answer:\(answer.status)", in: session) })
            try await CommitHook.$current.withValue(hook) {
                try await store.finish(id: id, status: .succeeded, error: nil, deliveryID: nil, note: nil, at: base.addingTimeInterval(2),
                                       answer: CommitHook.Answer(status: 201, contentType: nil, body: []), sends: [])
            }
            let effectsAfter = try await fixture.effects()
            let after = answered(effectsAfter)
            check(rule, after == before + 1 && hook.answeredWithEffect, "the answer was recorded \(after - before) times with the run's end")
            let read = try await store.run(id: id)
            check(rule, read?.status == .succeeded, "the answered run reads \(describe(read))")

            // Without an answer, the hook records none.
            let unanswered = unique("run")
            _ = try await store.begin(RunRecord(id: unanswered, agentID: unique("agent"), sessionID: unique("ses"), trigger: .api, startedAt: base), fire: nil)
            let silent = CommitHook({ _, _ in }, recordAnswer: { answer, session in try fixture.writeEffect("answer:\(answer.status)", in: session) })
            try await CommitHook.$current.withValue(silent) {
                try await store.finish(id: unanswered, status: .succeeded, error: nil, deliveryID: nil, note: nil, at: base.addingTimeInterval(2),
                                       answer: nil, sends: [])
            }
            let effects = try await fixture.effects()
            check(rule, !silent.answeredWithEffect && answered(effects) == after,
                  "a finish without an answer recorded one: \(effects.filter { $0.hasPrefix("answer:") })")
        } catch {
            threw("answer with the run's end", error)
        }

        // Last: it interrupts every run still running in the database, other rules' too.
        do {
            let rule = "interrupted"
            let agent = unique("agent")
            let running = unique("run")
            let finished = unique("run")
            let end = base.addingTimeInterval(1)
            let stop = base.addingTimeInterval(120)
            _ = try await store.begin(RunRecord(id: running, agentID: agent, sessionID: unique("ses"), trigger: .cron, startedAt: base), fire: nil)
            _ = try await store.begin(RunRecord(id: finished, agentID: agent, sessionID: unique("ses"), trigger: .cron, startedAt: base), fire: nil)
            try await store.finish(id: finished, status: .succeeded, error: nil, deliveryID: "dlv_\(suite)", at: end)
            let count = try await store.markInterrupted(at: stop)
            check(rule, count >= 1, "markInterrupted counted \(count) with a run still running")
            let interrupted = try await store.run(id: running)
            check(rule, interrupted?.status == .interrupted && ms(interrupted?.finishedAt) == ms(stop) && interrupted?.error != nil,
                  "the running run reads \(describe(interrupted))")
            let kept = try await store.run(id: finished)
            check(rule, kept?.status == .succeeded && ms(kept?.finishedAt) == ms(end) && kept?.error == nil && kept?.deliveryID == "dlv_\(suite)",
                  "the finished run reads \(describe(kept))")
            let again = try await store.markInterrupted(at: stop.addingTimeInterval(1))
            let still = try await store.run(id: running)
            check(rule, ms(still?.finishedAt) == ms(stop), "a second markInterrupted (\(again) runs) moved the interrupted run's end: \(describe(still))")
        } catch {
            threw("interrupted", error)
        }

        return failures
    }
}
