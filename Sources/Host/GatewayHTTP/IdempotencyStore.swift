import Storage
import Foundation
import Synchronization

/// One line of the idempotency log: the answer a (caller's key, Idempotency-Key) got, sealed when it can be.
/// `status` 0 (`IdempotencyLog.appliedWithoutAnswer`) is "applied, answer not recorded".
public struct IdempotencyLine: Sendable, Equatable {
    public var method: String
    public var path: String
    public var status: Int
    public var contentType: String?
    public var body: [UInt8]
    public var sealed: Bool
    /// For a line applied without an answer: what the call waited for (`AnswerResumer`'s reference).
    public var resume: String? = nil

    public init(method: String, path: String, status: Int, contentType: String?, body: [UInt8], sealed: Bool, resume: String? = nil) {
        self.method = method
        self.path = path
        self.status = status
        self.contentType = contentType
        self.body = body
        self.sealed = sealed
        self.resume = resume
    }
}

/// The idempotency log's rows. A protocol because a second engine (PostgreSQL, for several gateways) will keep
/// them too; the engine's own part is `appliedHook`, which writes "applied" (and the answer, when the handler
/// built it there) inside the transaction that makes the effect.
public protocol IdempotencyStore: Sendable {
    func line(scope: String, key: String) async throws -> IdempotencyLine?
    /// The answer, over the applied line if there is one, in a transaction of its own (off the cooperative pool).
    func record(_ line: IdempotencyLine, scope: String, key: String, at now: Date) async throws
    /// The hook a call's effects run before their commit: the applied line (with what the call waits for, if
    /// it said) and, when the handler built its answer in the effect's transaction, that answer.
    func appliedHook(scope: String, key: String, method: String, path: String, at now: Date,
                     line: @escaping @Sendable (CommitHook.Answer) -> IdempotencyLine) -> CommitHook
    func forget(before cutoff: Date) async throws -> Int
    /// Holds a key for one call while it runs, across every process writing this log: false while another call
    /// holds it (that duplicate waits, then replays the answer). `holder` names the call; a hold its process never
    /// released (it died) lapses after `lease`. A log only one process writes holds keys in that process.
    func hold(scope: String, key: String, holder: String, lease: Duration) async throws -> Bool
    /// Lets the next call with the key through (to read the line this one left).
    func release(scope: String, key: String, holder: String) async throws
}

/// Keys held by calls running in this process (`IdempotencyStore.hold` for a log no other process writes).
public final class InProcessKeyHolds: Sendable {
    private let held = Mutex<[String: String]>([:])

    public init() {}

    public func hold(_ slot: String, holder: String) -> Bool {
        held.withLock { held in
            guard held[slot] == nil || held[slot] == holder else { return false }
            held[slot] = holder
            return true
        }
    }

    public func release(_ slot: String, holder: String) {
        held.withLock { held in if held[slot] == holder { held[slot] = nil } }
    }
}
