import Agents
import Approvals
import ChannelAPI
import ChannelDelivery
import Crypto
import Foundation
import GatewayHTTP
import Household
import Memory
import Metrics
import Mobile
import PostgreSQL
import PostgresStores
import RelayCarriage
import SQLite
import SQLiteStores
import Storage

/// Every store of one gateway, on one engine: the composition root picks the engine (SQLite in the data directory,
/// or PostgreSQL at `SOULACY_DATABASE_URL`) and everything else takes these as protocols.
public struct GatewayStores: Sendable {
    /// `sqlite` or `postgresql`.
    public var engine: String { transactions.engine }
    public let transactions: any TransactionalStorage
    public let mobile: MobileStorage
    public let keys: any APIKeyStore
    public let runs: any RunStore
    public let household: any HouseholdStore
    public let memory: any MemoryFactStore
    public let channelOutbox: any ChannelOutbox
    public let endpointStates: any EndpointStateStore
    public let approvals: any ApprovalStore
    public let consoleSessions: any ConsoleSessionStore
    public let triggerCooldowns: any TriggerCooldownStore
    public let idempotency: any IdempotencyStore
    public let channelInbound: any ChannelInboundStore
    public let deviceNodes: any DeviceNodeStore
    public let liveActivityTokens: any LiveActivityTokenStore
    /// The relay carriage's tables, opened only when a relay mailbox is configured.
    let relayCarriage: @Sendable () throws -> any RelayCarriageStore
    /// Where route handlers run: SQLite's own threads (a handler that waits on the write lock or an fsync holds one
    /// of those, never a cooperative thread); nil on an engine whose calls never block the caller.
    let handlerExecutor: (any TaskExecutor)?
    /// Starts hearing other nodes' writes (a no-op where this process is the only writer).
    let followOtherWriters: @Sendable () async throws -> Void
    /// Releases the engine's files or connections once nothing uses them.
    let close: @Sendable () -> Void
    /// The SQLite file and its mobile store, on SQLite (backups, tests and benchmarks reach the file).
    public let sqlite: SQLiteGatewayFile?

    /// The SQLite file and the stores that know it.
    public struct SQLiteGatewayFile: Sendable {
        public let database: DatabasePool
        public let mobileStore: MobileStore
    }

    /// The keys that seal what the database must not hold in the clear, read from the data directory every node
    /// mounts: a send's destination and the phones' relay secrets (`sealing`), console sign-in codes (`consoleCodes`).
    struct Keys: Sendable {
        let sealing: [UInt8]
        let consoleCodes: [UInt8]
    }

    /// The gateway's SQLite file, migrated: every store over it. Runs left running at the last stop are marked
    /// interrupted here, before anything runs.
    static func sqlite(database: DatabasePool, keys: Keys, clock: any WallClock, metrics: MobileMetrics?) throws -> (stores: GatewayStores, interrupted: Int) {
        try GatewaySchema.migrator().migrate(database)
        let mobileStore = try MobileStore(database: database, clock: clock, metrics: metrics)
        let channelOutbox = SQLiteChannelOutbox(database: database, destinationSeal: DestinationSeal(key: keys.sealing))
        let apiKeys = try SQLiteAPIKeyStore(database: database)
        let runStore = try SQLiteRunStore(database: database, channelOutbox: channelOutbox)
        let interrupted = try runStore.markInterruptedAtStart(at: clock.now())
        let stores = GatewayStores(
            transactions: database, mobile: mobileStore.storage, keys: apiKeys, runs: runStore,
            household: SQLiteHouseholdStore(database: database, keys: apiKeys), memory: SQLiteMemoryFactStore(database: database, clock: clock),
            channelOutbox: channelOutbox, endpointStates: SQLiteEndpointStateStore(database: database), approvals: SQLiteApprovalStore(database: database),
            consoleSessions: SQLiteConsoleSessionStore(database: database, codeKey: keys.consoleCodes, now: { clock.now() }),
            triggerCooldowns: SQLiteTriggerCooldownStore(database: database), idempotency: SQLiteIdempotencyStore(database: database),
            channelInbound: SQLiteChannelInboundStore(database: database), deviceNodes: SQLiteDeviceNodeStore(database: database),
            liveActivityTokens: SQLiteLiveActivityTokenStore(database: database),
            relayCarriage: { try SQLiteRelayCarriageStore(database: database, sealingKey: keys.sealing) },
            handlerExecutor: database.executor, followOtherWriters: {}, close: { database.close() },
            sqlite: SQLiteGatewayFile(database: database, mobileStore: mobileStore))
        return (stores, interrupted)
    }

    /// The stores of a gateway on a PostgreSQL database several nodes may share (migrated already). `node` names
    /// this process: its runs are the ones it marks interrupted at start, its leases the ones it holds.
    static func postgres(pool: PostgresPool, listenURL: String?, node: String, keys: Keys, clock: any WallClock, metrics: MobileMetrics?,
                         log: Log) -> GatewayStores {
        let inbox = PostgresInbox(pool: pool, listenURL: listenURL, clock: clock)
        let channelOutbox = PostgresChannelOutbox(pool: pool, destinationSeal: DestinationSeal(key: keys.sealing))
        let apiKeys = PostgresAPIKeyStore(pool: pool)
        let consoleEvents = PostgresConsoleEvents(pool: pool, listenURL: listenURL, node: node, hub: inbox.consoleEvents)
        return GatewayStores(
            transactions: pool, mobile: .postgres(pool: pool, inbox: inbox, clock: clock, fetchDelay: metrics?.fetchDelay, log: log),
            keys: apiKeys, runs: PostgresRunStore(pool: pool, channelOutbox: channelOutbox, node: node),
            household: PostgresHouseholdStore(pool: pool, keys: apiKeys), memory: PostgresMemoryFactStore(pool: pool, clock: clock),
            channelOutbox: channelOutbox, endpointStates: PostgresEndpointStateStore(pool: pool),
            approvals: PostgresApprovalStore(pool: pool, listenURL: listenURL),
            consoleSessions: PostgresConsoleSessionStore(pool: pool, codeKey: keys.consoleCodes, now: { clock.now() }),
            triggerCooldowns: PostgresTriggerCooldownStore(pool: pool), idempotency: PostgresIdempotencyStore(pool: pool),
            channelInbound: PostgresChannelInboundStore(pool: pool), deviceNodes: PostgresDeviceNodeStore(pool: pool),
            liveActivityTokens: PostgresLiveActivityTokenStore(pool: pool),
            relayCarriage: { PostgresRelayCarriageStore(pool: pool, sealingKey: keys.sealing) },
            handlerExecutor: nil,
            followOtherWriters: {
                try await inbox.followOtherWriters()
                consoleEvents.start()
            },
            close: { consoleEvents.stop(); inbox.stopFollowing(); pool.close() }, sqlite: nil)
    }
}

/// What the one-shot commands (`soulacy pair`, `soulacy console-code`) write to: the database the gateway itself
/// uses (PostgreSQL at `SOULACY_DATABASE_URL`, else the data directory's SQLite file), migrated, so a code made here
/// is one every node of the gateway redeems.
public struct CommandStorage: Sendable {
    public let transactions: any TransactionalStorage
    public let household: any HouseholdStore
    public let consoleSessions: any ConsoleSessionStore
    /// Releases the file or the connections.
    public let close: @Sendable () -> Void

    public static func open(dataDirectory: String, environment: [String: String]) async throws -> CommandStorage {
        let settings = try GatewaySettings.fromEnvironment(environment)
        try FileManager.default.createDirectory(atPath: dataDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let codeKey = try SecretFile.key(at: ConsoleSessionPolicy.codeKeyPath(dataDirectory: dataDirectory), variable: "console code key")
        if let url = settings.databaseURL {
            let pool = try await PostgresGatewaySchema.openPool(url: url, size: 2).pool
            return CommandStorage(transactions: pool, household: PostgresHouseholdStore(pool: pool, keys: PostgresAPIKeyStore(pool: pool)),
                                  consoleSessions: PostgresConsoleSessionStore(pool: pool, codeKey: codeKey), close: { pool.close() })
        }
        let database = try DatabasePool(path: dataDirectory + "/soulacy.db", readerCount: 1)
        try GatewaySchema.migrator().migrate(database)
        return CommandStorage(transactions: database, household: SQLiteHouseholdStore(database: database, keys: try SQLiteAPIKeyStore(database: database)),
                              consoleSessions: SQLiteConsoleSessionStore(database: database, codeKey: codeKey), close: { database.close() })
    }
}
