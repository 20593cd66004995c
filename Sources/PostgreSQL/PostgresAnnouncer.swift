import Synchronization

/// Sends a channel's NOTIFYs after the writes they announce have committed, a batch of them in one statement.
///
/// Why not in the writing transaction: a transaction that NOTIFYs holds PostgreSQL's database-wide notification
/// lock from just before its commit until the commit is on disk, so writers that each notify commit one at a time
/// (measured: 100 people's deliveries through pgbench, a third fewer per second with a NOTIFY each). Announced here
/// instead, writers commit in parallel, and while one batch is being sent the next gathers: a burst costs one
/// NOTIFY transaction per batch, not one per write.
///
/// A NOTIFY is a hint, never the truth: one queued by a process that dies before sending it is lost, so a listener
/// must also treat another process's lost connection as "anything may have changed" (`PostgresInbox` does).
public final class PostgresAnnouncer: Sendable {
    public let channel: String
    /// The most payloads one statement carries; more wait for the next.
    static let batchLimit = 1_000

    private let pool: PostgresPool
    private let retryDelay: Duration
    private let state = Mutex<State>(State())

    private struct State {
        var pending: [String] = []
        var queued: Set<String> = []
        var sending = false
        var stopped = false
    }

    /// `channel` as LISTEN names it (1 to 63 bytes; with any other name nothing is ever sent); `retryDelay`: the
    /// wait after a failed send before the same payloads are sent again.
    public init(pool: PostgresPool, channel: String, retryDelay: Duration = .milliseconds(100)) {
        self.pool = pool
        self.channel = channel
        self.retryDelay = retryDelay
    }

    /// Queues `payload` (at most 8,000 bytes, as PostgreSQL allows) to be sent as soon as the batch before it is
    /// out; the same payload queued twice before it goes is sent once. Never waits.
    public func announce(_ payload: String) {
        let start = state.withLock { state -> Bool in
            guard !state.stopped else { return false }
            if state.queued.insert(payload).inserted { state.pending.append(payload) }
            guard !state.sending else { return false }
            state.sending = true
            return true
        }
        if start { Task { await self.sendPending() } }
    }

    /// Payloads queued and not yet sent (tests wait for zero).
    public var unsent: Int { state.withLock { $0.pending.count } }

    /// Drops what is queued and sends nothing more.
    public func stop() {
        state.withLock { state in
            state.stopped = true
            state.pending = []
            state.queued = []
        }
    }

    private func sendPending() async {
        while true {
            let usable = (try? PostgresListener.validate(channel: channel)) != nil && !pool.isClosed
            let batch = state.withLock { state -> [String]? in
                if !usable { state.stopped = true }
                guard !state.stopped, !state.pending.isEmpty else {
                    state.sending = false
                    return nil
                }
                let batch = Array(state.pending.prefix(Self.batchLimit))
                state.pending.removeFirst(batch.count)
                for payload in batch { state.queued.remove(payload) }
                return batch
            }
            guard let batch else { return }
            do {
                try await send(batch)
            } catch {
                // Kept, in front of what came since, and tried again: the hint is late, not lost, while this
                // process lives.
                state.withLock { state in
                    let again = batch.filter { state.queued.insert($0).inserted }
                    state.pending.insert(contentsOf: again, at: 0)
                }
                try? await Task.sleep(for: retryDelay)
            }
        }
    }

    /// One statement, committed on its own: a payload with a line break (the separator), or an empty one, goes by
    /// itself.
    private func send(_ batch: [String]) async throws {
        let goesAlone = { (payload: String) in payload.isEmpty || payload.contains("\n") }
        let joined = batch.filter { !goesAlone($0) }, alone = batch.filter(goesAlone)
        let channel = channel
        try await pool.withConnection { db in
            if !joined.isEmpty {
                _ = try db.query("SELECT pg_notify($1, payload) FROM unnest(string_to_array($2, E'\\n')) AS payload",
                                 channel, joined.joined(separator: "\n"))
            }
            for payload in alone { try db.notify(channel: channel, payload: payload) }
        }
    }
}
