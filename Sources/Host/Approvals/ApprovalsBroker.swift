import Storage
import ChannelAPI
import Crypto
import Foundation
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

    public init(callID: String, subject: String, agentID: String, agentName: String, sessionID: String, tool: String, arguments: String,
                state: State, decidedBy: String? = nil, decidedAt: Date? = nil, createdAt: Date, expiresAt: Date) {
        self.callID = callID
        self.subject = subject
        self.agentID = agentID
        self.agentName = agentName
        self.sessionID = sessionID
        self.tool = tool
        self.arguments = arguments
        self.state = state
        self.decidedBy = decidedBy
        self.decidedAt = decidedAt
        self.createdAt = createdAt
        self.expiresAt = expiresAt
    }
}

public enum ApprovalError: Error, Sendable, Equatable, CustomStringConvertible {
    case notFound(String)
    case duplicateCall(String)
    /// The person already has `ApprovalsBroker.maximumPendingPerPerson` approvals waiting.
    case tooManyPending

    public var description: String {
        switch self {
        case .tooManyPending: return "\(ApprovalsBroker.maximumPendingPerPerson) approvals are already waiting for this person; decide some, or let them expire, first"
        case .notFound: return "call_id not found — it may have already been resolved or timed out"
        case .duplicateCall(let id): return "call_id \(id) was already asked about by another person or run"
        }
    }
}

/// The one place approvals are decided, shared by the web API, phones, the watch and the lock screen.
/// A decision is a conditional update in the store, so of any number of racing answers exactly one wins and
/// every other surface is told the decision already taken. The tool runs at most once. Waiters parked on this
/// process hear of decisions taken by another process on the same database through the store's hints.
public actor ApprovalsBroker {

    nonisolated let store: any ApprovalStore
    /// The engine's transactions: a route that answers with a decision builds its answer in the same transaction.
    public nonisolated var transactions: any TransactionalStorage { store.storage }
    /// How a new request reaches the person's phones (the mobile channel implements it; the broker never imports it).
    nonisolated let alerts: (any DeviceAlerts)?
    nonisolated let clock: any WallClock
    nonisolated let defaultTimeout: TimeInterval
    private var waiters = Waiters<Approval.State>()
    /// Following other processes' decisions (`followOtherWriters`), while it runs.
    private var following: (hints: ApprovalHints, tasks: [Task<Void, Never>])?
    /// Told of every approval asked, decided or expired, once committed (the console's live updates).
    nonisolated let observers = ApprovalObservers()

    public init(store: any ApprovalStore, alerts: (any DeviceAlerts)?, clock: any WallClock, defaultTimeout: TimeInterval = 600) {
        self.store = store
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

    /// Approvals one person may have waiting: each wakes every phone of theirs and holds up to 64 KiB of arguments for
    /// up to an hour, so an unbounded number is a cost any operator key, or a looping agent, could multiply.
    public static let maximumPendingPerPerson = 100

    public static func newCallID() -> String { "call_" + Hex.encode(SecureBytes.random(count: 10)) }

    /// Records a request in the caller's transaction and wakes the person's phones. Asking again with the same call
    /// id returns the first request.
    public nonisolated func open(callID: String?, subject: String, agentID: String, agentName: String, sessionID: String, tool: String,
                                 arguments: String, timeout: TimeInterval?, in session: any StorageSession) throws -> Approval {
        let now = clock.now()
        let id = callID ?? Self.newCallID()
        let expires = now.addingTimeInterval(timeout ?? defaultTimeout)
        // Asking again with a known call id returns it whatever the count; only a new request is refused.
        if try store.pendingCount(subject: subject, at: now, in: session) >= Self.maximumPendingPerPerson,
           try callID.flatMap({ try store.approval(callID: $0, in: session) }) == nil {
            throw ApprovalError.tooManyPending
        }
        let (approval, created) = try store.insertIfNew(Approval(callID: id, subject: subject, agentID: agentID, agentName: agentName,
                                                                sessionID: sessionID, tool: tool, arguments: arguments, state: .pending,
                                                                createdAt: now, expiresAt: expires), in: session)
        if created {
            try alerts?.alert(Self.signal(for: approval), subject: subject, in: session)
            observers.tell(approval, after: store.storage)
        }
        return approval
    }

    /// `open` in a transaction of its own.
    public nonisolated func open(callID: String?, subject: String, agentID: String, agentName: String, sessionID: String, tool: String,
                                 arguments: String, timeout: TimeInterval?) async throws -> Approval {
        try await store.storage.withTransaction { session in
            try open(callID: callID, subject: subject, agentID: agentID, agentName: agentName, sessionID: sessionID, tool: tool,
                     arguments: arguments, timeout: timeout, in: session)
        }
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
        guard let current = try? await store.approval(callID: callID) else { return .expired }
        if current.state != .pending { return current.state }
        let remaining = current.expiresAt.timeIntervalSince(clock.now())
        if remaining <= 0 { return (try? await expire(callID)) ?? .expired }
        let me = waiters.ticket()
        let timer = Task { [clock] in
            try? await clock.sleep(until: current.expiresAt)
            if !Task.isCancelled { await self.expireAndWake(callID) }
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
        return await withCheckedContinuation { continuation in
            waiters.park(callID, ticket: me, continuation)
            // A decision committed while the row above was read would otherwise be missed: read it again, parked.
            Task { await self.recheck(callID) }
        }
    }

    /// A long poll's cap: this caller hears "still pending" and asks again.
    private func release(_ callID: String, ticket: Int) {
        waiters.release(callID, ticket: ticket, with: .pending)
    }

    private func expireAndWake(_ callID: String) async {
        let state = (try? await expire(callID)) ?? .expired
        wake(callID, state)
    }

    private func wake(_ callID: String, _ state: Approval.State) {
        waiters.answer(callID, with: state)
    }

    /// Reads a waited-for row and answers its waiters when it is decided (here or by another process) or gone.
    private func recheck(_ callID: String) async {
        guard waiters.isWaiting(callID) else { return }
        do {
            let state = try await store.approval(callID: callID)?.state ?? .expired
            if state != .pending { wake(callID, state) }
        } catch {
            // The database cannot answer now: the next hint or poll reads again.
        }
    }

    /// Marks a pending approval expired (if it still is) and returns its final state.
    nonisolated func expire(_ callID: String) async throws -> Approval.State {
        try await store.storage.withTransaction { session in try expire(callID, in: session) }
    }

    nonisolated func expire(_ callID: String, in session: any StorageSession) throws -> Approval.State {
        let state = try store.expire(callID: callID, at: clock.now(), in: session)
        if state == .expired, let approval = try store.approval(callID: callID, in: session) { observers.tell(approval, after: store.storage) }
        return state
    }

    public nonisolated func approval(callID: String) async throws -> Approval? {
        try await store.approval(callID: callID)
    }

    /// The person's approvals, newest first; only pending ones unless `all`.
    public nonisolated func approvals(subject: String, all: Bool) async throws -> [Approval] {
        try await store.approvals(subject: subject, pendingAt: all ? nil : clock.now())
    }

    /// Decides once, in the caller's transaction (a route records its answer with the decision). Returns the
    /// approval as decided and whether this call was the one that decided it; whoever waits, on this process or
    /// another, is woken once the decision is committed.
    public nonisolated func decide(callID: String, subject: String, approve: Bool, by keyID: String,
                                   in session: any StorageSession) throws -> (approval: Approval, decidedNow: Bool) {
        let now = clock.now()
        let decided = try store.decide(callID: callID, subject: subject, state: approve ? .approved : .denied, by: keyID, at: now, in: session)
        if !decided, let row = try store.approval(callID: callID, in: session), row.subject == subject, row.state == .pending {
            _ = try expire(callID, in: session)  // it ran out of time before this answer
        }
        guard let result = try store.approval(callID: callID, in: session), result.subject == subject else { throw ApprovalError.notFound(callID) }
        if result.state != .pending {
            let state = result.state
            store.storage.afterCommit { Task { await self.wake(callID, state) } }
            if decided { observers.tell(result, after: store.storage) }
        }
        return (result, decided)
    }

    // MARK: Several processes on one database

    /// Starts hearing of decisions other processes take on the same database (a no-op for a store only this
    /// process writes): each hint re-reads the rows it may concern, and a poll does the same every interval in case
    /// hints are lost. Idempotent; `stopFollowing` ends it.
    public func followOtherWriters() async throws {
        guard following == nil, let hints = try await store.otherWriters() else { return }
        let listen = Task { [weak self] in
            for await hint in hints.hints {
                guard let self else { return }
                switch hint {
                case .changed(let callID): await self.recheck(callID)
                case .resync: await self.recheckAll()
                }
            }
        }
        let poll = Task { [weak self] in
            while !Task.isCancelled {
                try? await Task.sleep(for: hints.pollInterval)
                guard let self else { return }
                await self.recheckAll()
            }
        }
        following = (hints, [listen, poll])
    }

    public func stopFollowing() {
        guard let following else { return }
        following.hints.stop()
        for task in following.tasks { task.cancel() }
        self.following = nil
    }

    private func recheckAll() async {
        for callID in waiters.keys { await recheck(callID) }
    }
}

/// Who hears of approvals' changes (`ApprovalsBroker.observe`).
final class ApprovalObservers: Sendable {
    private let observers = Mutex<[@Sendable (Approval) -> Void]>([])

    func add(_ observer: @escaping @Sendable (Approval) -> Void) { observers.withLock { $0.append(observer) } }

    /// Tells every observer once what is being written is committed (at once outside a transaction).
    func tell(_ approval: Approval, after storage: any TransactionalStorage) {
        let current = observers.withLock { $0 }
        guard !current.isEmpty else { return }
        storage.afterCommit { for observer in current { observer(approval) } }
    }
}
