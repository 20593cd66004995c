import ChannelAPI
import Crypto
import Foundation
import JSON
import Outbox
import SQLite
import Storage

/// One output on its way to a channel, as the durable hand-off keeps it: written with the run's end, attempted
/// by the dispatcher, finished once.
public struct ChannelOutboxEntry: Sendable, Equatable {
    public enum State: String, Sendable, Codable {
        /// Waiting for its next attempt (or being attempted under a lease).
        case pending
        case delivered
        /// The service refused it for good; `lastReason` says why in its words.
        case rejected
        /// It could not be sent as it was, or it was still failing when it expired.
        case failed
    }
    public var id: String
    public var runID: String?
    public var subject: String
    public var channel: String
    public var destination: String
    public var output: Output
    public var state: State
    public var attempts: Int
    public var nextAttemptAt: Date
    public var expiresAt: Date
    public var lastReason: String?
    public var remoteID: String?
    public var deliveredAt: Date?
    public var createdAt: Date
    /// Which claim of the row this is (the fence a settle names; 0 for a row read outside a claim).
    public var claim: Int64 = 0

    /// How long a send stays worth attempting, whatever engine keeps it; after that it is recorded as failed.
    public static let defaultLifetime: TimeInterval = 24 * 3600

    public init(id: String, runID: String?, subject: String, channel: String, destination: String, output: Output, state: State, attempts: Int,
                nextAttemptAt: Date, expiresAt: Date, lastReason: String?, remoteID: String?, deliveredAt: Date?, createdAt: Date, claim: Int64 = 0) {
        self.id = id
        self.runID = runID
        self.subject = subject
        self.channel = channel
        self.destination = destination
        self.output = output
        self.state = state
        self.attempts = attempts
        self.nextAttemptAt = nextAttemptAt
        self.expiresAt = expiresAt
        self.lastReason = lastReason
        self.remoteID = remoteID
        self.deliveredAt = deliveredAt
        self.createdAt = createdAt
        self.claim = claim
    }
}

/// A send to record with the run that made it (`SQLiteChannelOutbox.enqueue` inside the run's end).
public struct PendingChannelSend: Sendable, Equatable {
    public var id: String
    public var channel: String
    public var destination: String
    public var output: Output
    public var subject: String

    public init(id: String = PendingChannelSend.newID(), channel: String, destination: String, output: Output, subject: String) {
        self.id = id
        self.channel = channel
        self.destination = destination
        self.output = output
        self.subject = subject
    }

    /// Time-ordered, so the outbox's order is the order sends were made.
    public static func newID() -> String { "chs_" + TimeOrderedID.uuidHex() }
}

/// The channel hand-off's tables (the outbox, the disabled endpoints), applied once by the composition root with
/// every module's migrations.
public enum ChannelOutboxSchema {
    public static let migrations: [Migration] = [
        Migration("channels.1-outbox", """
            CREATE TABLE channel_outbox (
                id TEXT PRIMARY KEY,
                run_id TEXT,
                subject TEXT NOT NULL,
                channel TEXT NOT NULL,
                destination TEXT NOT NULL,
                output TEXT NOT NULL,
                state TEXT NOT NULL DEFAULT 'pending',
                attempts INTEGER NOT NULL DEFAULT 0,
                next_attempt_at INTEGER NOT NULL,
                expires_at INTEGER NOT NULL,
                lease_owner TEXT,
                lease_until INTEGER,
                last_reason TEXT,
                remote_id TEXT,
                delivered_at INTEGER,
                finished_at INTEGER,
                created_at INTEGER NOT NULL
            );
            CREATE INDEX channel_outbox_due ON channel_outbox (state, next_attempt_at);
            CREATE INDEX channel_outbox_run ON channel_outbox (run_id);
            """),
        // The endpoints channels disabled (SQLiteEndpointStateStore). In this list because it is the hand-off's
        // own list the composition root applies; `endpoint` is the channel's key, `fingerprint` a hash.
        Migration("channels.3-endpoints", """
            CREATE TABLE channel_endpoints (
                channel TEXT NOT NULL,
                endpoint TEXT NOT NULL,
                fingerprint TEXT NOT NULL,
                display TEXT NOT NULL,
                reason TEXT NOT NULL,
                since INTEGER NOT NULL,
                PRIMARY KEY (channel, endpoint)
            );
            """),
        // How many times each send was claimed: a settle names its claim, so a holder whose lease was taken over
        // never settles the row its successor holds.
        Migration("channels.4-claims", "ALTER TABLE channel_outbox ADD COLUMN claims INTEGER NOT NULL DEFAULT 0"),
        // The claim's order (next_attempt_at, id) from the index itself: without `id` in it, every claim sorted all
        // the due rows to take the first few, so a backlog made each claim slower (O(due) a claim, not O(limit)).
        Migration("channels.5-due-order", """
            DROP INDEX channel_outbox_due;
            CREATE INDEX channel_outbox_due ON channel_outbox (state, next_attempt_at, id);
            """),
    ]
}

/// What the channel lane and the run bookkeeping need of the channel outbox, whatever engine keeps it: sends recorded
/// in the caller's transaction (a run's end), due rows claimed with a lease (one holder at a time), settled once by
/// their holder, and what the console and the metrics read.
public protocol ChannelOutbox: Sendable {
    /// Records sends inside the caller's transaction (the run's end, so the output and the run commit together).
    func enqueue(_ sends: [PendingChannelSend], runID: String?, now: Date, in session: any StorageSession) throws
    /// Records sends in a transaction of their own (a failure notice, a channel test).
    func enqueue(_ sends: [PendingChannelSend], runID: String?, now: Date) async throws
    /// Leases up to `limit` due rows to `owner` (rows whose lease ran out included), each claim counted: the entry's
    /// `claim` is the fence its settle must name.
    func claimDue(owner: String, now: Date, lease: TimeInterval, limit: Int) async throws -> [ChannelOutboxEntry]
    func nextDue() async throws -> Date?
    /// Ends a claimed row; false when its claim was taken over by another holder (who settles it instead).
    @discardableResult
    func settle(_ id: String, claim: Int64, owner: String, state: ChannelOutboxEntry.State, reason: String?, remoteID: String?, at now: Date) async throws -> Bool
    @discardableResult
    func reschedule(_ id: String, claim: Int64, owner: String, at next: Date, reason: String) async throws -> Bool
    /// Leases a previous run of this host left behind, released at start.
    func releaseAbandonedLeases(ownOwner: String) async throws -> Int
    func entries(runID: String) async throws -> [ChannelOutboxEntry]
    func entries() async throws -> [ChannelOutboxEntry]
    func entry(id: String) async throws -> ChannelOutboxEntry?
    func removeFinished(before cutoff: Date) async throws -> Int
    /// What waits, since when, and each channel's latest finished send.
    func health(channels: [String]) async throws -> ChannelOutboxHealth
}

/// The channel outbox in SQLite: rows written with the run's end, claimed with a lease (one holder at a time, so
/// two dispatchers never send one twice), settled once by their holder.
public struct SQLiteChannelOutbox: ChannelOutbox {
    /// How long a send stays worth attempting; after that it is recorded as failed with its last reason.
    public static let defaultLifetime = ChannelOutboxEntry.defaultLifetime

    public let database: DatabasePool
    /// Seals each row's destination (the gateway always passes one); nil keeps destinations in the clear, for tests
    /// of the lane that read rows back.
    public let destinationSeal: DestinationSeal?

    public init(database: DatabasePool, destinationSeal: DestinationSeal? = nil) {
        self.database = database
        self.destinationSeal = destinationSeal
    }

    static func ms(_ d: Date) -> Int64 { d.sqliteMillis }
    static func date(_ v: Int64?) -> Date { Date(sqliteMillis: v ?? 0) }

    /// Records sends inside the caller's transaction (the run's end, so the output and the run commit together).
    func enqueue(_ sends: [PendingChannelSend], runID: String?, now: Date, in db: Connection) throws {
        for send in sends {
            let output = StoredOutput.text(send.output)
            let destination = try destinationSeal?.seal(send.destination) ?? send.destination
            try db.run("""
                INSERT INTO channel_outbox (id, run_id, subject, channel, destination, output, next_attempt_at, expires_at, created_at)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                """, send.id, runID, send.subject, send.channel, destination, output, Self.ms(now), Self.ms(now.addingTimeInterval(Self.defaultLifetime)), Self.ms(now))
        }
    }

    public func enqueue(_ sends: [PendingChannelSend], runID: String?, now: Date, in session: any StorageSession) throws {
        try enqueue(sends, runID: runID, now: now, in: session.sqliteConnection())
    }

    /// Records sends in a transaction of their own (a failure notice, a channel test).
    public func enqueue(_ sends: [PendingChannelSend], runID: String?, now: Date) async throws {
        try await database.asyncTransaction { db in try enqueue(sends, runID: runID, now: now, in: db) }
    }

    /// A row as the lane and the readers see it: its destination opened. A destination that no longer opens (the
    /// key beside the database was replaced) reads as `DestinationSeal.unreadable`, which every channel refuses, so
    /// the send ends rejected rather than going to a channel's default.
    private func entry(_ row: Row) -> ChannelOutboxEntry? {
        guard let id = row.string("id"), let text = row.string("output"), let output = StoredOutput.output(from: text) else { return nil }
        let stored = row.string("destination") ?? ""
        let destination = destinationSeal.map { (try? $0.open(stored)) ?? DestinationSeal.unreadable } ?? stored
        return ChannelOutboxEntry(id: id, runID: row.string("run_id"), subject: row.string("subject") ?? "", channel: row.string("channel") ?? "",
                                  destination: destination, output: output,
                                  state: ChannelOutboxEntry.State(rawValue: row.string("state") ?? "") ?? .pending,
                                  attempts: Int(row.int("attempts") ?? 0), nextAttemptAt: Self.date(row.int("next_attempt_at")),
                                  expiresAt: Self.date(row.int("expires_at")), lastReason: row.string("last_reason"), remoteID: row.string("remote_id"),
                                  deliveredAt: row.int("delivered_at").map { Self.date($0) }, createdAt: Self.date(row.int("created_at")),
                                  claim: row.int("claims") ?? 0)
    }

    public func claimDue(owner: String, now: Date, lease: TimeInterval, limit: Int) async throws -> [ChannelOutboxEntry] {
        try await database.asyncTransaction { db in
            try db.query("""
                UPDATE channel_outbox SET lease_owner = ?, lease_until = ?, claims = claims + 1
                WHERE id IN (SELECT id FROM channel_outbox
                             WHERE state = 'pending' AND next_attempt_at <= ? AND (lease_until IS NULL OR lease_until < ?)
                             ORDER BY next_attempt_at, id LIMIT ?)
                RETURNING *
                """, owner, Self.ms(now.addingTimeInterval(lease)), Self.ms(now), Self.ms(now), limit)
        }.compactMap(entry).sorted { $0.id < $1.id }
    }

    public func nextDue() async throws -> Date? {
        try await database.asyncRead { db in
            try db.query("SELECT MIN(next_attempt_at) AS t FROM channel_outbox WHERE state = 'pending'").first?.int("t").map { Self.date($0) }
        }
    }

    /// Ends a claimed row; false when its lease was taken over (the new holder settles it).
    @discardableResult
    public func settle(_ id: String, claim: Int64, owner: String, state: ChannelOutboxEntry.State, reason: String?, remoteID: String?, at now: Date) async throws -> Bool {
        try await database.groupTransaction { db in
            try db.run("""
                UPDATE channel_outbox SET state = ?, last_reason = COALESCE(?, last_reason), remote_id = ?, attempts = attempts + 1,
                                          delivered_at = ?, finished_at = ?, lease_owner = NULL, lease_until = NULL
                WHERE id = ? AND claims = ? AND lease_owner = ? AND state = 'pending'
                """, state.rawValue, reason, remoteID, state == .delivered ? Self.ms(now) : nil, Self.ms(now), id, claim, owner) > 0
        }
    }

    /// Puts a claimed row back for a later attempt, with the reason this one did not go through.
    @discardableResult
    public func reschedule(_ id: String, claim: Int64, owner: String, at next: Date, reason: String) async throws -> Bool {
        try await database.groupTransaction { db in
            try db.run("""
                UPDATE channel_outbox SET next_attempt_at = ?, last_reason = ?, attempts = attempts + 1, lease_owner = NULL, lease_until = NULL
                WHERE id = ? AND claims = ? AND lease_owner = ? AND state = 'pending'
                """, Self.ms(next), reason, id, claim, owner) > 0
        }
    }

    /// Frees leases held by processes on this host that no longer exist (after a crash or kill -9).
    public func releaseAbandonedLeases(ownOwner: String) async throws -> Int {
        try await database.asyncTransaction { db in
            let owners = try db.query("SELECT DISTINCT lease_owner FROM channel_outbox WHERE state = 'pending' AND lease_owner IS NOT NULL")
                .compactMap { $0.string("lease_owner") }
            return try LeaseOwners.abandoned(among: owners, ownOwner: ownOwner).reduce(0) { released, owner in
                try released + db.run("UPDATE channel_outbox SET lease_owner = NULL, lease_until = NULL WHERE lease_owner = ? AND state = 'pending'", owner)
            }
        }
    }

    /// A run's sends, oldest first.
    public func entries(runID: String) async throws -> [ChannelOutboxEntry] {
        try await database.asyncRead { db in try db.query("SELECT * FROM channel_outbox WHERE run_id = ? ORDER BY id", runID).compactMap(entry) }
    }

    public func entries() async throws -> [ChannelOutboxEntry] {
        try await database.asyncRead { db in try db.query("SELECT * FROM channel_outbox ORDER BY id").compactMap(entry) }
    }

    public func entry(id: String) async throws -> ChannelOutboxEntry? {
        try await database.asyncRead { db in try db.query("SELECT * FROM channel_outbox WHERE id = ?", id).first.flatMap(entry) }
    }

    /// Forgets sends finished before `cutoff`; pending ones are never touched.
    @discardableResult
    public func removeFinished(before cutoff: Date) async throws -> Int {
        try await database.asyncDeleteInBatches(from: "channel_outbox", where: "state <> 'pending' AND finished_at < ?", arguments: [Self.ms(cutoff)])
    }
}

