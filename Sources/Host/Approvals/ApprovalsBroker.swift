import Storage
import ChannelAPI
import Crypto
import Foundation
import SQLite
import Synchronization

/// A tool call waiting for a person's yes or no.
public struct Approval: Sendable, Equatable {
    public enum State: String, Sendable {
        case pending, approved, denied, expired
    }
    public var callID: String
    public var subject: String
    public var agentID: String
    public var agentName: String
    public var sessionID: String
    public var tool: String
    /// The tool call's arguments as JSON text; fetched from the API, never pushed.
    public var arguments: String
    public var state: State
    public var decidedBy: String?
    public var decidedAt: Date?
    public var createdAt: Date
    public var expiresAt: Date
}

public enum ApprovalError: Error, Sendable, Equatable, CustomStringConvertible {
    case notFound(String)
    case duplicateCall(String)

    public var description: String {
        switch self {
        case .notFound: return "call_id not found — it may have already been resolved or timed out"
        case .duplicateCall(let id): return "call_id \(id) was already asked about by another person or run"
        }
    }
}

/// The one place approvals are decided, shared by the web API, phones, the watch and the lock screen.
/// A decision is a conditional update in SQLite, so of any number of racing answers exactly one wins and
/// every other surface is told the decision already taken. The tool runs at most once.
public actor ApprovalsBroker {

    nonisolated let store: ApprovalStore
    /// The database decisions are written to: a route that answers with a decision builds its answer in the same transaction.
    public nonisolated var database: DatabasePool { store.database }
    /// The engine seam's view of it, for routes.
    public nonisolated var transactions: any TransactionalStorage { store.database }
    /// How a new request reaches the person's phones (the mobile channel implements it; the broker never imports it).
    nonisolated let alerts: (any DeviceAlerts)?
    nonisolated let clock: any WallClock
    nonisolated let defaultTimeout: TimeInterval
    private var waiters = Waiters<Approval.State>()
    /// Told of every approval asked, decided or expired, once committed (the console's live updates).
    nonisolated let observers = ApprovalObservers()

    public init(database: DatabasePool, alerts: (any DeviceAlerts)?, clock: any WallClock, defaultTimeout: TimeInterval = 600) throws {
        store = ApprovalStore(database: database)
        self.alerts = alerts
        self.clock = clock
        self.defaultTimeout = defaultTimeout
    }

    /// The wake-up every phone of the person gets: the agent's and the tool's names, and the ids to fetch the rest.
    static func signal(for approval: Approval) -> WakeSignal {
        WakeSignal(category: .approval, title: "Approval needed", body: "\(approval.agentName) wants to use \(approval.tool)",
                   deepLink: "soulacy://approval/\(approval.callID)", threadID: "approval-\(approval.agentID)", timeSensitive: true,
                   extra: ["call_id": approval.callID, "agent_id": approval.agentID, "session_id": approval.sessionID, "tool": approval.tool],
                   priority: .high, expiresAt: approval.expiresAt, collapseID: approval.callID)
    }

    public static func newCallID() -> String { "call_" + Hex.encode(SecureBytes.random(count: 10)) }

    /// Records a request and wakes the person's phones. Asking again with the same call id returns the first request.
    public nonisolated func open(callID: String?, subject: String, agentID: String, agentName: String, sessionID: String, tool: String,
                                 arguments: String, timeout: TimeInterval?) throws -> Approval {
        let now = clock.now()
        let id = callID ?? Self.newCallID()
        let expires = now.addingTimeInterval(timeout ?? defaultTimeout)
        let (approval, created) = try store.insertIfNew(Approval(callID: id, subject: subject, agentID: agentID, agentName: agentName,
                                                                sessionID: sessionID, tool: tool, arguments: arguments, state: .pending,
                                                                createdAt: now, expiresAt: expires))
        if created {
            try alerts?.alert(Self.signal(for: approval), subject: subject)
            observers.tell(approval, after: store.database)
        }
        return approval
    }

    /// Calls `observer` with each approval that is asked, decided or expires, after its change is committed. It
    /// must return at once (it runs on the deciding caller's thread); the broker knows nothing of who listens.
    public nonisolated func observe(_ observer: @escaping @Sendable (Approval) -> Void) {
        observers.add(observer)
    }

    /// Waits for the decision; an approval nobody answers in time expires, which the run must treat as a denial.
    /// With `atMost`, a long poll: answers `.pending` when nothing was decided by then (the caller asks again),
    /// so no HTTP request waits longer than a proxy would let it.
    public func wait(callID: String, atMost: Duration? = nil) async -> Approval.State {
        guard let current = try? approval(callID: callID) else { return .expired }
        if current.state != .pending { return current.state }
        let remaining = current.expiresAt.timeIntervalSince(clock.now())
        if remaining <= 0 { return (try? expire(callID)) ?? .expired }
        let me = waiters.ticket()
        let timer = Task { [clock] in
            try? await clock.sleep(until: current.expiresAt)
            if !Task.isCancelled { self.expireAndWake(callID) }
        }
        let cap = atMost.map { limit in
            Task {
                try? await Task.sleep(for: limit)
                if !Task.isCancelled { self.release(callID, ticket: me) }
            }
        }
        defer {
            timer.cancel()
            cap?.cancel()
        }
        return await withCheckedContinuation { waiters.park(callID, ticket: me, $0) }
    }

    /// A long poll's cap: this caller hears "still pending" and asks again.
    private func release(_ callID: String, ticket: Int) {
        waiters.release(callID, ticket: ticket, with: .pending)
    }

    private func expireAndWake(_ callID: String) {
        let state = (try? expire(callID)) ?? .expired
        wake(callID, state)
    }

    private func wake(_ callID: String, _ state: Approval.State) {
        waiters.answer(callID, with: state)
    }

    /// Marks a pending approval expired (if it still is) and returns its final state.
    nonisolated func expire(_ callID: String) throws -> Approval.State {
        let state = try store.expire(callID: callID, at: clock.now())
        if state == .expired, let approval = try? approval(callID: callID) { observers.tell(approval, after: store.database) }
        return state
    }

    public nonisolated func approval(callID: String) throws -> Approval? {
        try store.approval(callID: callID)
    }

    /// The person's approvals, newest first; only pending ones unless `all`.
    public nonisolated func approvals(subject: String, all: Bool) throws -> [Approval] {
        try store.approvals(subject: subject, pendingAt: all ? nil : clock.now())
    }

    /// Decides once. Returns the approval as decided and whether this call was the one that decided it. Runs in
    /// the caller's transaction when it has one (a route that records its answer with the decision); whoever waits
    /// is woken once the decision is committed.
    public nonisolated func decide(callID: String, subject: String, approve: Bool, by keyID: String) throws -> (approval: Approval, decidedNow: Bool) {
        let now = clock.now()
        let decided = try store.decide(callID: callID, subject: subject, state: approve ? .approved : .denied, by: keyID, at: now)
        if !decided, let row = try approval(callID: callID), row.subject == subject, row.state == .pending {
            _ = try expire(callID)  // it ran out of time before this answer
        }
        guard let result = try approval(callID: callID), result.subject == subject else { throw ApprovalError.notFound(callID) }
        if result.state != .pending {
            let state = result.state
            store.database.afterCommit { Task { await self.wake(callID, state) } }
            if decided { observers.tell(result, after: store.database) }
        }
        return (result, decided)
    }
}

/// Who hears of approvals' changes (`ApprovalsBroker.observe`).
final class ApprovalObservers: Sendable {
    private let observers = Mutex<[@Sendable (Approval) -> Void]>([])

    func add(_ observer: @escaping @Sendable (Approval) -> Void) { observers.withLock { $0.append(observer) } }

    /// Tells every observer once what is being written is committed (at once outside a transaction).
    func tell(_ approval: Approval, after database: DatabasePool) {
        let current = observers.withLock { $0 }
        guard !current.isEmpty else { return }
        database.afterCommit { for observer in current { observer(approval) } }
    }
}
