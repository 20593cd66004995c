import ChannelAPI
import Foundation
import Memory
import Mobile

/// Bookkeeping that would otherwise grow without end: wake-ups settled a week ago, idempotency answers older than a
/// month, phone commands (with results of up to 1 MiB) that expired and settled a month ago, and the changes of
/// memory facts forgotten a month ago (see `MemoryFactStore.compactTombstones`). Inbox lines,
/// approvals, runs and facts are the household's history and are kept.
public struct Housekeeping: Sendable {
    /// How long a settled wake-up stays visible in a line's `wake_ups`.
    public static let settledWakeUpLifetime: TimeInterval = 7 * 86_400
    /// How long a replayed Idempotency-Key still gets the first answer: longer than a phone holds a send.
    public static let idempotencyLifetime: TimeInterval = 30 * 86_400
    /// How long a phone command stays readable after its expiry and its outcome.
    public static let commandLifetime: TimeInterval = 30 * 86_400
    /// How long a forgotten memory fact's changes (its tombstone last) stay in the sync feed: phones that synced
    /// within it hear of the deletion; one that did not starts its copy afresh.
    public static let tombstoneLifetime: TimeInterval = 30 * 86_400
    public static let interval: TimeInterval = 3_600

    let outbox: any PushOutbox
    let idempotency: IdempotencyLog
    let commands: any DeviceNodeStore
    let memory: any MemoryFactStore
    let clock: any WallClock
    let log: Log

    /// One sweep; returns what it removed.
    @discardableResult
    public func sweep() async throws -> (wakeUps: Int, idempotencyAnswers: Int, commands: Int, forgottenFacts: Int) {
        let now = clock.now()
        let wakeUps = try await outbox.removeSettled(before: now.addingTimeInterval(-Self.settledWakeUpLifetime))
        let answers = try await idempotency.forget(before: now.addingTimeInterval(-Self.idempotencyLifetime))
        let commands = try await commands.removeSettled(before: now.addingTimeInterval(-Self.commandLifetime))
        let facts = try await memory.compactTombstones(before: now.addingTimeInterval(-Self.tombstoneLifetime))
        if wakeUps + answers + commands + facts > 0 {
            log.info("housekeeping: removed \(wakeUps) settled wake-up(s), \(answers) old idempotency answer(s), \(commands) old phone command(s) and the changes of \(facts) long-forgotten memory fact(s)")
        }
        return (wakeUps, answers, commands, facts)
    }

    /// Sweeps at start and then every hour, until cancelled. The pause is real time, not the gateway's clock:
    /// how often it sweeps does not matter, and a test's manual clock then only has the sleepers it expects.
    func run() async {
        while !Task.isCancelled {
            do { try await sweep() } catch { log.error("housekeeping: \(error)") }
            try? await Task.sleep(for: .seconds(Self.interval))
        }
    }
}
