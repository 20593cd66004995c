import Foundation
import GatewayHTTP
import GatewayTestSupport
import Agents
import Approvals
import ChannelAPI
import ChannelDelivery
import Crypto
import Household
import Memory
import Identity
import ChannelTesting
import Synchronization
import Mobile
import Storage
import PostgreSQL
import PostgresStores
import SQLite
import RelayCarriage
import RelayMailbox
import RelayMailboxStores
import SQLiteStores
import Testing

/// Each store protocol's conformance suite (in the test kit), run against every engine the gateway can use.
@Suite("Store conformance")
struct StoreConformanceTests {
    /// The engines under test; each case makes a fresh database.
    enum Engine: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case sqlite, postgresql
        var testDescription: String { rawValue }

        /// A fresh database with every migration the suites' stores need.
        func fixture() async throws -> any StorageEngineFixture {
            switch self {
            case .sqlite: try SQLiteEngineFixture()
            case .postgresql: try await PostgresEngineFixture.make(migrations: PostgresGatewaySchema.migrations)
            }
        }

        func idempotencyStore(_ fixture: any StorageEngineFixture) throws -> any IdempotencyStore {
            switch self {
            case .sqlite: SQLiteIdempotencyStore(database: try #require(fixture as? SQLiteEngineFixture).database)
            case .postgresql: PostgresIdempotencyStore(pool: try #require(fixture as? PostgresEngineFixture).pool)
            }
        }

        func pushOutbox(_ fixture: any StorageEngineFixture) throws -> any PushOutbox {
            switch self {
            case .sqlite: SQLitePushOutbox(database: try #require(fixture as? SQLiteEngineFixture).database)
            case .postgresql: PostgresPushOutbox(pool: try #require(fixture as? PostgresEngineFixture).pool)
            }
        }

        func channelOutbox(_ fixture: any StorageEngineFixture) throws -> any ChannelOutbox {
            switch self {
            case .sqlite: SQLiteChannelOutbox(database: try #require(fixture as? SQLiteEngineFixture).database)
            case .postgresql: PostgresChannelOutbox(pool: try #require(fixture as? PostgresEngineFixture).pool)
            }
        }

        func runStore(_ fixture: any StorageEngineFixture) throws -> any RunStore {
            switch self {
            case .sqlite: return try SQLiteRunStore(database: try #require(fixture as? SQLiteEngineFixture).database)
            case .postgresql:
                let pool = try #require(fixture as? PostgresEngineFixture).pool
                return PostgresRunStore(pool: pool, channelOutbox: PostgresChannelOutbox(pool: pool), node: "conformance-node")
            }
        }

        func apiKeyStore(_ fixture: any StorageEngineFixture) throws -> any APIKeyStore {
            switch self {
            case .sqlite: try SQLiteAPIKeyStore(database: try #require(fixture as? SQLiteEngineFixture).database)
            case .postgresql: PostgresAPIKeyStore(pool: try #require(fixture as? PostgresEngineFixture).pool)
            }
        }

        func endpointStateStore(_ fixture: any StorageEngineFixture) throws -> any EndpointStateStore {
            switch self {
            case .sqlite: SQLiteEndpointStateStore(database: try #require(fixture as? SQLiteEngineFixture).database)
            case .postgresql: PostgresEndpointStateStore(pool: try #require(fixture as? PostgresEngineFixture).pool)
            }
        }

        /// The store, and for PostgreSQL a second handle on the same database as another gateway process holds it.
        func approvalStores(_ fixture: any StorageEngineFixture) throws -> (store: any ApprovalStore, otherNode: (any ApprovalStore)?) {
            switch self {
            case .sqlite: return (SQLiteApprovalStore(database: try #require(fixture as? SQLiteEngineFixture).database), nil)
            case .postgresql:
                let fixture = try #require(fixture as? PostgresEngineFixture)
                let other = try PostgresPool(url: fixture.database.url, size: 2)
                return (PostgresApprovalStore(pool: fixture.pool, listenURL: fixture.database.url),
                        PostgresApprovalStore(pool: other, listenURL: fixture.database.url))
            }
        }

        /// The store, and for PostgreSQL three more handles on the same database as other gateway processes hold them.
        func relayCarriageStores(_ fixture: any StorageEngineFixture, key: [UInt8]) throws -> (store: any RelayCarriageStore, otherNodes: [any RelayCarriageStore]?) {
            switch self {
            case .sqlite: return (try SQLiteRelayCarriageStore(database: try #require(fixture as? SQLiteEngineFixture).database, sealingKey: key), nil)
            case .postgresql:
                let fixture = try #require(fixture as? PostgresEngineFixture)
                let others: [any RelayCarriageStore] = try (0..<3).map { _ in
                    PostgresRelayCarriageStore(pool: try PostgresPool(url: fixture.database.url, size: 1), sealingKey: key)
                }
                return (PostgresRelayCarriageStore(pool: fixture.pool, sealingKey: key), others)
            }
        }

        func memoryFactStore(_ fixture: any StorageEngineFixture) throws -> any MemoryFactStore {
            switch self {
            case .sqlite: SQLiteMemoryFactStore(database: try #require(fixture as? SQLiteEngineFixture).database)
            case .postgresql: PostgresMemoryFactStore(pool: try #require(fixture as? PostgresEngineFixture).pool)
            }
        }

        /// Console sessions telling time by `clock`, with the key store whose keys sign in.
        func consoleSessionStores(_ fixture: any StorageEngineFixture, clock: ManualClock) throws -> (store: any ConsoleSessionStore, keys: any APIKeyStore) {
            let codeKey = SecureBytes.random(count: 32)
            switch self {
            case .sqlite:
                let database = try #require(fixture as? SQLiteEngineFixture).database
                return (SQLiteConsoleSessionStore(database: database, codeKey: codeKey, now: { clock.now() }), try SQLiteAPIKeyStore(database: database))
            case .postgresql:
                let pool = try #require(fixture as? PostgresEngineFixture).pool
                return (PostgresConsoleSessionStore(pool: pool, codeKey: codeKey, now: { clock.now() }), PostgresAPIKeyStore(pool: pool))
            }
        }

        /// The household's store, with the key store it mints through.
        func householdStores(_ fixture: any StorageEngineFixture) throws -> (store: any HouseholdStore, keys: any APIKeyStore) {
            switch self {
            case .sqlite:
                let database = try #require(fixture as? SQLiteEngineFixture).database
                let keys = try SQLiteAPIKeyStore(database: database)
                return (SQLiteHouseholdStore(database: database, keys: keys), keys)
            case .postgresql:
                let pool = try #require(fixture as? PostgresEngineFixture).pool
                let keys = PostgresAPIKeyStore(pool: pool)
                return (PostgresHouseholdStore(pool: pool, keys: keys), keys)
            }
        }

        /// The inbox and devices aggregates with their outbox, and for PostgreSQL another gateway process's inbox on the
        /// same database.
        func inboxes(_ fixture: any StorageEngineFixture) throws -> (inbox: any Inbox, devices: any DeviceRegistry, outbox: any PushOutbox, otherNode: (any Inbox)?) {
            switch self {
            case .sqlite:
                let store = try MobileStore(database: try #require(fixture as? SQLiteEngineFixture).database)
                return (store.inbox, store.devices.registry, store.outbox, nil)
            case .postgresql:
                let fixture = try #require(fixture as? PostgresEngineFixture)
                let inbox = PostgresInbox(pool: fixture.pool, listenURL: fixture.database.url)
                let other = PostgresInbox(pool: try PostgresPool(url: fixture.database.url, size: 4), listenURL: fixture.database.url)
                return (inbox, inbox, PostgresPushOutbox(pool: fixture.pool), other)
            }
        }

        /// Live Activity tokens with the devices registry of the same engine (the targets join the devices).
        func liveActivityTokens(_ fixture: any StorageEngineFixture) throws -> (tokens: any LiveActivityTokenStore, devices: any DeviceRegistry) {
            switch self {
            case .sqlite:
                let store = try MobileStore(database: try #require(fixture as? SQLiteEngineFixture).database)
                return (SQLiteLiveActivityTokenStore(database: store.database), store.devices.registry)
            case .postgresql:
                let fixture = try #require(fixture as? PostgresEngineFixture)
                return (PostgresLiveActivityTokenStore(pool: fixture.pool), PostgresInbox(pool: fixture.pool, listenURL: nil))
            }
        }

        /// The inbound store with the run store of the same database, and for PostgreSQL two more handles as other
        /// gateway processes hold them.
        func channelInboundStores(_ fixture: any StorageEngineFixture) throws -> (store: any ChannelInboundStore, runs: any RunStore,
                                                                                   otherNodes: [any ChannelInboundStore]) {
            switch self {
            case .sqlite:
                let database = try #require(fixture as? SQLiteEngineFixture).database
                return (SQLiteChannelInboundStore(database: database), try SQLiteRunStore(database: database), [])
            case .postgresql:
                let fixture = try #require(fixture as? PostgresEngineFixture)
                let others: [any ChannelInboundStore] = try (0..<2).map { _ in PostgresChannelInboundStore(pool: try PostgresPool(url: fixture.database.url, size: 1)) }
                return (PostgresChannelInboundStore(pool: fixture.pool), try runStore(fixture), others)
            }
        }

        func triggerCooldownStore(_ fixture: any StorageEngineFixture) throws -> any TriggerCooldownStore {
            switch self {
            case .sqlite: SQLiteTriggerCooldownStore(database: try #require(fixture as? SQLiteEngineFixture).database)
            case .postgresql: PostgresTriggerCooldownStore(pool: try #require(fixture as? PostgresEngineFixture).pool)
            }
        }
    }

    @Test("the relay's mailboxes, with three relay processes on PostgreSQL", arguments: Engine.allCases)
    func relayMailboxes(engine: Engine) async throws {
        switch engine {
        case .sqlite:
            let fixture = try SQLiteEngineFixture()
            let failures = await MailboxStoreConformance(fixture: fixture, store: try SQLiteMailboxStore(database: fixture.database)).run()
            #expect(failures.isEmpty, "\(failures)")
        case .postgresql:
            let fixture = try await PostgresEngineFixture.make(migrations: PostgresMailboxStore.migrations)
            let others: [any MailboxStore] = try (0..<2).map { _ in PostgresMailboxStore(pool: try PostgresPool(url: fixture.database.url, size: 2)) }
            defer { for other in others { other.close() } }
            let failures = await MailboxStoreConformance(fixture: fixture, store: PostgresMailboxStore(pool: fixture.pool), otherNodes: others).run()
            #expect(failures.isEmpty, "\(failures)")
        }
    }

    @Test("a relay file from before numbers on past the newest item it holds, and past a cursor beyond it")
    func relayFileFromBefore() async throws {
        let path = TestGateway.makeTemporaryDirectory() + "/relay.db"
        let old = try DatabasePool(path: path)
        try old.migrate(Array(SQLiteMailboxStore.migrations.prefix(2)))
        try old.write { db in
            try db.run("INSERT INTO mailbox_devices (mailbox_id, device_id, secret_sha256, cursor) VALUES ('mbx_a', 'held', x'00', 3), ('mbx_a', 'acked', x'00', 40)")
            try db.run("INSERT INTO mailbox_items (mailbox_id, device_id, n, ciphertext) VALUES ('mbx_a', 'held', 7, 'c'), ('mbx_a', 'acked', 12, 'c')")
        }
        old.close()
        let store = try SQLiteMailboxStore(path: path)
        defer { store.close() }
        #expect(try await store.appendItem(mailbox: "mbx_a", device: "held", NewMailboxItem(ciphertext: "next")) == 8)
        #expect(try await store.appendItem(mailbox: "mbx_a", device: "acked", NewMailboxItem(ciphertext: "next")) == 41)
    }

    @Test("location triggers' cooldowns", arguments: Engine.allCases)
    func triggerCooldowns(engine: Engine) async throws {
        let fixture = try await engine.fixture()
        let failures = await TriggerCooldownStoreConformance(engine: engine.rawValue, store: try engine.triggerCooldownStore(fixture)).run()
        #expect(failures.isEmpty, "\(failures)")
    }

    @Test("channel inbound: cursors, a message taken once on any node, whole text, unstarted until its run is recorded, one poller per channel", arguments: Engine.allCases)
    func channelInbound(engine: Engine) async throws {
        let fixture = try await engine.fixture()
        let (store, runs, others) = try engine.channelInboundStores(fixture)
        let failures = await ChannelInboundConformance(engine: engine.rawValue, store: store, runs: runs, otherNodes: others).run()
        #expect(failures.isEmpty, "\(failures)")
    }

    @Test("the inbound suite itself catches a store that takes a message again, forgets its cursor and lets every node poll")
    func catchesACarelessInboundStore() async throws {
        /// Takes every message it is given and never stores a cursor.
        struct Forgetful: ChannelInboundStore {
            let real: any ChannelInboundStore
            func cursor(channel: String) async throws -> String? { nil }
            func take(_ messages: [TakenMessage], channel: String, cursor: String?, now: Date) async throws -> [TakenMessage] {
                _ = try await real.take(messages, channel: channel, cursor: nil, now: now)
                return messages
            }
            func unstarted(channel: String) async throws -> [TakenMessage] { try await real.unstarted(channel: channel) }
            /// Lets every node poll every channel.
            func holdPoll(channel: String, node: String, lease: Duration) async throws -> Bool { true }
        }
        let fixture = try await Engine.postgresql.fixture()
        let (store, runs, others) = try Engine.postgresql.channelInboundStores(fixture)
        let failures = await ChannelInboundConformance(engine: "postgresql", store: Forgetful(real: store), runs: runs,
                                                       otherNodes: others.map { Forgetful(real: $0) }).run()
        let rules = Set(failures.map(\.rule))
        #expect(rules.isSuperset(of: ["taken once", "cursors", "one of concurrent takes", "one poller"]), "\(failures)")
    }

    @Test("the cooldown suite itself catches a store that lets every fire through")
    func catchesALenientCooldownStore() async throws {
        struct Lenient: TriggerCooldownStore {
            func claim(agentID: String, deviceID: String, cooldown: Duration, now: Date) async throws -> Int? { nil }
            func release(agentID: String, deviceID: String) async throws {}
        }
        let rules = Set(await TriggerCooldownStoreConformance(engine: "lenient", store: Lenient()).run().map(\.rule))
        #expect(rules == ["within the cooldown", "rounded up", "one of concurrent fires"], "\(rules)")
    }

    @Test("approvals: decided once, by their person, before they expire; other nodes' decisions heard", arguments: Engine.allCases)
    func approvals(engine: Engine) async throws {
        let fixture = try await engine.fixture()
        let (store, otherNode) = try engine.approvalStores(fixture)
        let failures = await ApprovalStoreConformance(fixture: fixture, store: store, otherNode: otherNode).run()
        #expect(failures.isEmpty, "\(failures)")
    }

    @Test("the approvals suite itself catches a store that lets every decision through and hears nothing")
    func catchesALenientApprovalStore() async throws {
        /// Says every decision won without looking at the state, the person or the clock, and offers no hints.
        struct Lenient: ApprovalStore {
            let real: any ApprovalStore
            var storage: any TransactionalStorage { real.storage }
            func insertIfNew(_ approval: Approval, in session: any StorageSession) throws -> (approval: Approval, created: Bool) {
                try real.insertIfNew(approval, in: session)
            }
            func decide(callID: String, subject: String, state: Approval.State, by keyID: String, at now: Date, in session: any StorageSession) throws -> Bool {
                true
            }
            func expire(callID: String, at now: Date, in session: any StorageSession) throws -> Approval.State { try real.expire(callID: callID, at: now, in: session) }
            func approval(callID: String, in session: any StorageSession) throws -> Approval? { try real.approval(callID: callID, in: session) }
            func approval(callID: String) async throws -> Approval? { try await real.approval(callID: callID) }
            func approvals(subject: String, pendingAt: Date?) async throws -> [Approval] { try await real.approvals(subject: subject, pendingAt: pendingAt) }
            func pendingCount(subject: String, at now: Date, in session: any StorageSession) throws -> Int { try real.pendingCount(subject: subject, at: now, in: session) }
            func otherWriters() async throws -> ApprovalHints? { nil }
        }
        let fixture = try await Engine.sqlite.fixture()
        let real = try Engine.sqlite.approvalStores(fixture).store
        let rules = Set(await ApprovalStoreConformance(fixture: fixture, store: Lenient(real: real), otherNode: real).run().map(\.rule))
        #expect(rules.isSuperset(of: ["not by another person", "decided once", "not after expiry", "one of concurrent decisions", "hints from other nodes"]), "\(rules)")
    }

    @Test("the relay carriage: one mailbox, secrets sealed at rest, one carrier at a time", arguments: Engine.allCases)
    func relayCarriage(engine: Engine) async throws {
        let fixture = try await engine.fixture()
        let (store, otherNodes) = try engine.relayCarriageStores(fixture, key: SecureBytes.random(count: 32))
        let failures = await RelayCarriageStoreConformance(fixture: fixture, store: store, otherNodes: otherNodes).run()
        #expect(failures.isEmpty, "\(failures)")
    }

    @Test("the relay carriage suite itself catches a store that keeps secrets in the clear and lets every node carry")
    func catchesALeakyCarriageStore() async throws {
        /// Keeps what it is given as is (the "sealing key" seals nothing) and answers every node that it carries.
        struct Leaky: RelayCarriageStore {
            let real: any RelayCarriageStore
            func mailbox(url: String) async throws -> RelayMailboxAccess? { try await real.mailbox(url: url) }
            func saveMailbox(url: String, _ mailbox: RelayMailboxAccess) async throws -> RelayMailboxAccess { mailbox }
            func enroll(deviceID: String, subject: String, secret: [UInt8], after: Int64) async throws {
                try await real.enroll(deviceID: deviceID, subject: subject, secret: secret, after: after)
            }
            func markRegistered(_ deviceID: String) async throws { try await real.markRegistered(deviceID) }
            func markRevoked(_ deviceID: String) async throws { try await real.markRevoked(deviceID) }
            func forgetRevoked(_ deviceID: String) async throws { try await real.forgetRevoked(deviceID) }
            func phones() async throws -> [RelayPhone] { try await real.phones() }
            func secret(deviceID: String) async throws -> [UInt8]? { try await real.secret(deviceID: deviceID) }
            func advance(_ deviceID: String, to seq: Int64) async throws { try await real.advance(deviceID, to: seq) }
            func holdCarriage(node: String, lease: Duration) async throws -> Bool { true }
        }
        let fixture = try await Engine.sqlite.fixture()
        let real = try Engine.sqlite.relayCarriageStores(fixture, key: SecureBytes.random(count: 32)).store
        // Stands in for a store that writes the bearer in the clear: the suite must find it at rest.
        struct ClearBearer: RelayCarriageStore {
            let real: any RelayCarriageStore
            let fixture: SQLiteEngineFixture
            func mailbox(url: String) async throws -> RelayMailboxAccess? { try await real.mailbox(url: url) }
            func saveMailbox(url: String, _ mailbox: RelayMailboxAccess) async throws -> RelayMailboxAccess {
                try fixture.database.write { db in try fixture.writeEffect(mailbox.bearer, in: db) }
                return try await real.saveMailbox(url: url, mailbox)
            }
            func enroll(deviceID: String, subject: String, secret: [UInt8], after: Int64) async throws {
                try await real.enroll(deviceID: deviceID, subject: subject, secret: secret, after: after)
            }
            func markRegistered(_ deviceID: String) async throws { try await real.markRegistered(deviceID) }
            func markRevoked(_ deviceID: String) async throws { try await real.markRevoked(deviceID) }
            func forgetRevoked(_ deviceID: String) async throws { try await real.forgetRevoked(deviceID) }
            func phones() async throws -> [RelayPhone] { try await real.phones() }
            func secret(deviceID: String) async throws -> [UInt8]? { try await real.secret(deviceID: deviceID) }
            func advance(_ deviceID: String, to seq: Int64) async throws { try await real.advance(deviceID, to: seq) }
            func holdCarriage(node: String, lease: Duration) async throws -> Bool { true }
        }
        let sqlite = try #require(fixture as? SQLiteEngineFixture)
        let leaky = Set(await RelayCarriageStoreConformance(fixture: fixture, store: ClearBearer(real: Leaky(real: real), fixture: sqlite),
                                                            otherNodes: [Leaky(real: real), Leaky(real: real)]).run().map(\.rule))
        #expect(leaky.isSuperset(of: ["one mailbox per relay", "sealed at rest", "one carrier", "taken over after the lease", "the old carrier stands by"]), "\(leaky)")
    }

    @Test("memory facts: per person, a change feed with tombstones and cursors, writes in the caller's transaction", arguments: Engine.allCases)
    func memoryFacts(engine: Engine) async throws {
        let fixture = try await engine.fixture()
        let failures = await MemoryFactStoreConformance(fixture: fixture, store: try engine.memoryFactStore(fixture)).run()
        #expect(failures.isEmpty, "\(failures)")
    }

    @Test("the memory facts suite itself catches a feed without tombstones and counts without every status")
    func catchesABrokenMemoryFactStore() async throws {
        /// Drops the feed's tombstones (a phone would keep forgotten facts for ever) and counts only the statuses it has.
        struct Tombstoneless: MemoryFactStore {
            let real: any MemoryFactStore
            var transactions: any TransactionalStorage { real.transactions }
            func add(_ content: String, subject: String, source: String, category: String, agentID: String, expiresAt: Date?,
                     in session: any StorageSession) throws -> MemoryFact {
                try real.add(content, subject: subject, source: source, category: category, agentID: agentID, expiresAt: expiresAt, in: session)
            }
            func update(id: String, subject: String, _ edit: MemoryFactEdit, actor: String?, in session: any StorageSession) throws -> MemoryFact? {
                try real.update(id: id, subject: subject, edit, actor: actor, in: session)
            }
            func delete(id: String, subject: String, actor: String?, in session: any StorageSession) throws -> Bool {
                try real.delete(id: id, subject: subject, actor: actor, in: session)
            }
            func purge(subject: String, agentID: String?, in session: any StorageSession) throws -> Int {
                try real.purge(subject: subject, agentID: agentID, in: session)
            }
            func fact(id: String, subject: String) async throws -> MemoryFact? { try await real.fact(id: id, subject: subject) }
            func facts(subject: String, status: String, agentID: String?, limit: Int) async throws -> [MemoryFact] {
                try await real.facts(subject: subject, status: status, agentID: agentID, limit: limit)
            }
            func changes(subject: String, since: Int64, limit: Int, agentID: String?) async throws -> MemoryFactChanges {
                var page = try await real.changes(subject: subject, since: since, limit: limit, agentID: agentID)
                page.changes.removeAll { $0.fact == nil }
                return page
            }
            func counts(subject: String) async throws -> [String: Int] { try await real.counts(subject: subject).filter { $0.value > 0 } }
            func history(id: String, subject: String) async throws -> [MemoryFactHistoryEvent] { try await real.history(id: id, subject: subject) }
            func compactTombstones(before: Date) async throws -> Int { try await real.compactTombstones(before: before) }
        }
        let fixture = try await Engine.sqlite.fixture()
        let failures = await MemoryFactStoreConformance(fixture: fixture, store: Tombstoneless(real: try Engine.sqlite.memoryFactStore(fixture))).run()
        let rules = Set(failures.map(\.rule))
        #expect(rules.isSuperset(of: ["delete leaves a tombstone", "purge leaves tombstones", "counts"]), "\(failures)")
        #expect(!rules.contains("no errors"), "\(failures)")
    }

    @Test("the inbox and devices: who sees a line, receipts, whole text, writers on every node and a feed that misses nothing", arguments: Engine.allCases)
    func inbox(engine: Engine) async throws {
        let fixture = try await engine.fixture()
        let (inbox, devices, outbox, otherNode) = try engine.inboxes(fixture)
        let failures = await InboxConformance(fixture: fixture, inbox: inbox, devices: devices, outbox: outbox, otherNode: otherNode).run()
        #expect(failures.isEmpty, "\(failures)")
    }

    @Test("the inbox suite itself catches a store that shows another device's lines and a feed that skips")
    func catchesACarelessInbox() async throws {
        /// Shows a device every line its person sees, counts nothing unread, and drops the first of every feed page.
        struct Careless: Inbox {
            let real: any Inbox
            var inboxGenerations: InboxGenerations { real.inboxGenerations }
            func insertDelivery(_ output: Output, destination: Destination) async throws -> StoredDelivery {
                try await real.insertDelivery(output, destination: destination)
            }
            func insertDelivery(_ output: Output, destination: Destination, in session: any StorageSession) throws -> StoredDelivery {
                try real.insertDelivery(output, destination: destination, in: session)
            }
            func deliveries(subject: String, deviceID: String?, before cursor: Int64?, limit: Int) async throws -> InboxPage {
                var page = try await real.deliveries(subject: subject, deviceID: nil, before: cursor, limit: limit)
                page.unreadCount = 0
                return page
            }
            func lines(subject: String, after seq: Int64, limit: Int) async throws -> [Delivery] {
                Array(try await real.lines(subject: subject, after: seq, limit: limit).dropFirst())
            }
            func delivery(id: String, subject: String, deviceID: String?) async throws -> Delivery? {
                try await real.delivery(id: id, subject: subject, deviceID: deviceID)
            }
            func markRead(deliveryID: String, deviceID: String, subject: String) async throws -> Bool {
                try await real.markRead(deliveryID: deliveryID, deviceID: deviceID, subject: subject)
            }
            func markRead(deliveryID: String, deviceID: String, subject: String, in session: any StorageSession) throws -> Bool {
                try real.markRead(deliveryID: deliveryID, deviceID: deviceID, subject: subject, in: session)
            }
            func latestDeliverySeq() async throws -> Int64 { try await real.latestDeliverySeq() }
            func queueWakeUps(_ signal: WakeSignal, subject: String) async throws -> Int { try await real.queueWakeUps(signal, subject: subject) }
            func queueWakeUp(_ signal: WakeSignal, deviceID: String) async throws -> Bool { try await real.queueWakeUp(signal, deviceID: deviceID) }
            func queueWakeUp(_ signal: WakeSignal, deviceID: String, in session: any StorageSession) throws -> Bool {
                try real.queueWakeUp(signal, deviceID: deviceID, in: session)
            }
            func queueWakeUps(_ signal: WakeSignal, subject: String, in session: any StorageSession) throws -> Int {
                try real.queueWakeUps(signal, subject: subject, in: session)
            }
            /// Ignores the agent filter.
            func consoleLines(subject: String, agentID: String?, idPrefix: String?, before: Int64?, limit: Int) async throws -> [Delivery] {
                try await real.consoleLines(subject: subject, agentID: nil, idPrefix: idPrefix, before: before, limit: limit)
            }
        }
        let fixture = try await Engine.sqlite.fixture()
        let (inbox, devices, outbox, _) = try Engine.sqlite.inboxes(fixture)
        let failures = await InboxConformance(fixture: fixture, inbox: Careless(real: inbox), devices: devices, outbox: outbox).run()
        let rules = Set(failures.map(\.rule))
        #expect(rules.isSuperset(of: ["a device's view", "unread", "a feed misses nothing", "console filters"]), "\(failures)")
    }

    @Test("Live Activity tokens: a session's token reaches its person's iOS device, replaced by a later one, with the caller's transaction, never after the device is gone", arguments: Engine.allCases)
    func liveActivityTokens(engine: Engine) async throws {
        let fixture = try await engine.fixture()
        let (tokens, devices) = try engine.liveActivityTokens(fixture)
        let failures = await LiveActivityTokenStoreConformance(fixture: fixture, tokens: tokens, devices: devices).run()
        #expect(failures.isEmpty, "\(failures)")
    }

    @Test("phones as nodes: registration, one holder per id, the queue and its limit, one claim wins, outcomes once, across gateways", arguments: Engine.allCases)
    func deviceNodes(engine: Engine) async throws {
        let fixture = try await engine.fixture()
        let (inbox, devices, outbox, _) = try engine.inboxes(fixture)
        let (store, other): (any DeviceNodeStore, (any DeviceNodeStore)?) = switch engine {
        case .sqlite: (SQLiteDeviceNodeStore(database: try #require(fixture as? SQLiteEngineFixture).database), nil)
        case .postgresql: (PostgresDeviceNodeStore(pool: try #require(fixture as? PostgresEngineFixture).pool),
                           PostgresDeviceNodeStore(pool: try PostgresPool(url: try #require(fixture as? PostgresEngineFixture).database.url, size: 4)))
        }
        let failures = await DeviceNodeStoreConformance(fixture: fixture, store: store, inbox: inbox, devices: devices, outbox: outbox, otherNode: other).run()
        #expect(failures.isEmpty, "\(failures)")
    }

    @Test("the node suite itself catches a store whose claims all win and whose outcomes overwrite")
    func catchesACarelessNodeStore() async throws {
        /// Claims and settles whatever the command's status.
        struct Careless: DeviceNodeStore {
            let real: SQLiteDeviceNodeStore
            var transactions: any TransactionalStorage { real.transactions }
            func register(_ node: DeviceNodes.Node, in session: any StorageSession) throws { try real.register(node, in: session) }
            func node(deviceID: String, subject: String, in session: any StorageSession) throws -> DeviceNodes.Node? {
                try real.node(deviceID: deviceID, subject: subject, in: session)
            }
            func node(deviceID: String, subject: String) async throws -> DeviceNodes.Node? { try await real.node(deviceID: deviceID, subject: subject) }
            func nodes(subject: String, limit: Int) async throws -> [DeviceNodes.Node] { try await real.nodes(subject: subject, limit: limit) }
            func insert(_ command: DeviceNodes.Command, queueLimit: Int, now: Date, in session: any StorageSession) throws -> (command: DeviceNodes.Command, created: Bool) {
                try real.insert(command, queueLimit: queueLimit, now: now, in: session)
            }
            func command(id: String, deviceID: String, subject: String, in session: any StorageSession) throws -> DeviceNodes.Command? {
                try real.command(id: id, deviceID: deviceID, subject: subject, in: session)
            }
            func command(id: String, deviceID: String, subject: String) async throws -> DeviceNodes.Command? {
                try await real.command(id: id, deviceID: deviceID, subject: subject)
            }
            func pending(deviceID: String, now: Date, limit: Int) async throws -> [DeviceNodes.Command] { try await real.pending(deviceID: deviceID, now: now, limit: limit) }
            func claim(id: String, deviceID: String, now: Date, in session: any StorageSession) throws -> Bool {
                try session.sqliteConnection().run("UPDATE mobile_node_commands SET status = 'running' WHERE device_id = ? AND id = ?", deviceID, id) == 1
            }
            func finish(id: String, deviceID: String, status: DeviceNodes.CommandStatus, resultJSON: String?, error: String?, at: Date,
                        in session: any StorageSession) throws -> Bool {
                try session.sqliteConnection().run("UPDATE mobile_node_commands SET status = ?, result = ?, error = ?, completed_at = ? WHERE device_id = ? AND id = ?",
                                                   status.rawValue, resultJSON, error, at.sqliteMillis, deviceID, id) == 1
            }
            func expire(id: String, deviceID: String, at: Date) async throws { try await real.expire(id: id, deviceID: deviceID, at: at) }
            func removeSettled(before: Date) async throws -> Int { try await real.removeSettled(before: before) }
        }
        let fixture = try await Engine.sqlite.fixture()
        let (inbox, devices, outbox, _) = try Engine.sqlite.inboxes(fixture)
        let careless = Careless(real: SQLiteDeviceNodeStore(database: try #require(fixture as? SQLiteEngineFixture).database))
        let rules = Set(await DeviceNodeStoreConformance(fixture: fixture, store: careless, inbox: inbox, devices: devices, outbox: outbox).run().map(\.rule))
        #expect(rules.isSuperset(of: ["one claim wins", "an expired command cannot be claimed", "an outcome settles once"]), "\(rules)")
    }

    @Test("delivery timelines: recipients, skipped and queued steps, a settle's path, receipts, a device's latest wake-up, test pushes", arguments: Engine.allCases)
    func deliveryTimelines(engine: Engine) async throws {
        let fixture = try await engine.fixture()
        let (inbox, devices, outbox, _) = try engine.inboxes(fixture)
        let (tokens, _) = try engine.liveActivityTokens(fixture)
        let timeline: any DeliveryTimelineStore = switch engine {
        case .sqlite: SQLiteDeliveryTimelineStore(events: DeliveryEventStore(database: try #require(fixture as? SQLiteEngineFixture).database))
        case .postgresql: PostgresDeliveryTimelineStore(pool: try #require(fixture as? PostgresEngineFixture).pool)
        }
        let failures = await DeliveryTimelineStoreConformance(fixture: fixture, timeline: timeline, inbox: inbox, devices: devices, outbox: outbox,
                                                              tokens: tokens).run()
        #expect(failures.isEmpty, "\(failures)")
    }

    @Test("the timeline suite itself catches a store that loses the order of steps and files one line's steps under another")
    func catchesACarelessTimeline() async throws {
        /// Newest step first, and every step under the first id asked for.
        struct Careless: DeliveryTimelineStore {
            let real: any DeliveryTimelineStore
            func events(deliveryIDs: [String]) async throws -> [String: [DeliveryEvent]] {
                let all = try await real.events(deliveryIDs: deliveryIDs).values.flatMap { $0 }.sorted { $0.at > $1.at }
                return deliveryIDs.first.map { [$0: all] } ?? [:]
            }
            func waitingWakeUps(deliveryIDs: [String]) async throws -> [String: [DeliveryEvent]] { try await real.waitingWakeUps(deliveryIDs: deliveryIDs) }
            func recipients(deliveryIDs: [String]) async throws -> [String: [String]] { try await real.recipients(deliveryIDs: deliveryIDs) }
            func receipts(deliveryIDs: [String]) async throws -> [String: [String: Date]] { try await real.receipts(deliveryIDs: deliveryIDs) }
            func wakeSummary(deviceID: String) async throws -> DeviceWakeSummary { try await real.wakeSummary(deviceID: deviceID) }
            func recordTestPush(_ attempt: WakeAttempt, deviceID: String, token: String, transport: String, at now: Date) async throws {
                try await real.recordTestPush(attempt, deviceID: deviceID, token: token, transport: transport, at: now)
            }
            func liveActivityTokenCount(deviceID: String) async throws -> Int { try await real.liveActivityTokenCount(deviceID: deviceID) }
        }
        let fixture = try await Engine.sqlite.fixture()
        let (inbox, devices, outbox, _) = try Engine.sqlite.inboxes(fixture)
        let (tokens, _) = try Engine.sqlite.liveActivityTokens(fixture)
        let real = SQLiteDeliveryTimelineStore(events: DeliveryEventStore(database: try #require(fixture as? SQLiteEngineFixture).database))
        let failures = await DeliveryTimelineStoreConformance(fixture: fixture, timeline: Careless(real: real), inbox: inbox, devices: devices,
                                                              outbox: outbox, tokens: tokens).run()
        let rules = Set(failures.map(\.rule))
        #expect(rules.isSuperset(of: ["a settle's path in order", "lines kept apart"]), "\(failures)")
        #expect(!rules.contains("no errors"), "\(failures)")
    }

    @Test("the Live Activity suite itself catches a store that targets any person's devices, Android ones included")
    func catchesACarelessLiveActivityStore() async throws {
        /// Looks up a session's tokens as if every device were the caller's iPhone.
        struct Careless: LiveActivityTokenStore {
            let real: any LiveActivityTokenStore
            let database: DatabasePool
            var transactions: any TransactionalStorage { real.transactions }
            func register(deviceID: String, sessionID: String, agentID: String, token: String, environment: WakeTarget.Environment, now: Date,
                          in session: any StorageSession) throws {
                try real.register(deviceID: deviceID, sessionID: sessionID, agentID: agentID, token: token, environment: environment, now: now, in: session)
            }
            func targets(sessionID: String, subject: String) async throws -> [WakeTarget] {
                try await database.asyncRead { db in
                    try db.query("SELECT device_id, token FROM mobile_live_activities WHERE session_id = ? ORDER BY device_id", sessionID).map {
                        WakeTarget(deviceID: $0.string("device_id") ?? "", platform: .ios, pushToken: $0.string("token") ?? "", environment: .production,
                                   bundleID: Device.iosBundleID)
                    }
                }
            }
            func startTargets(subject: String) async throws -> [WakeTarget] { try await real.startTargets(subject: subject) }
        }
        let fixture = try await Engine.sqlite.fixture()
        let (tokens, devices) = try Engine.sqlite.liveActivityTokens(fixture)
        let database = try #require(fixture as? SQLiteEngineFixture).database
        let failures = await LiveActivityTokenStoreConformance(fixture: fixture, tokens: Careless(real: tokens, database: database), devices: devices).run()
        let rules = Set(failures.map(\.rule))
        #expect(rules.isSuperset(of: ["only the device's person", "never an Android device", "a removed device gets nothing"]), "\(failures)")
        #expect(!rules.contains("no errors"), "\(failures)")
    }

    @Test("the push outbox: claims shared by nobody, settles fenced by their claim", arguments: Engine.allCases)
    func pushOutbox(engine: Engine) async throws {
        let fixture = try await engine.fixture()
        let failures = await PushOutboxConformance(fixture: fixture, outbox: try engine.pushOutbox(fixture)).run()
        #expect(failures.isEmpty, "\(failures)")
    }

    @Test("the channel outbox: claims shared by nobody, settles fenced by their claim", arguments: Engine.allCases)
    func channelOutbox(engine: Engine) async throws {
        let fixture = try await engine.fixture()
        let failures = await ChannelOutboxConformance(fixture: fixture, outbox: try engine.channelOutbox(fixture)).run()
        #expect(failures.isEmpty, "\(failures)")
    }

    @Test("the push outbox suite itself catches leases that hold nothing and settles that name no claim")
    func catchesABrokenPushOutbox() async throws {
        /// Claims with a lease that is over at once, and settles under whatever claim the row has now: two claimers
        /// share rows, and an old holder settles what its successor holds.
        struct Unfenced: PushOutbox {
            let real: any PushOutbox
            func enqueue(_ signal: WakeSignal, deliveryID: String?, deviceIDs: [String], now: Date, in session: any StorageSession) throws {
                try real.enqueue(signal, deliveryID: deliveryID, deviceIDs: deviceIDs, now: now, in: session)
            }
            func claimDue(owner: String, now: Date, lease: TimeInterval, limit: Int) async throws -> [OutboxEntry] {
                try await real.claimDue(owner: owner, now: now, lease: -1, limit: limit)
            }
            func currentClaim(_ id: Int64) async throws -> Int64 { try await real.entries().first { $0.id == id }?.claim ?? 0 }
            func nextDue() async throws -> Date? { try await real.nextDue() }
            func settle(_ id: Int64, claim: Int64, owner: String, state: OutboxEntry.State, transport: String?, outcome: String, at now: Date,
                        events: [DeliveryEvent]) async throws -> Bool {
                try await real.settle(id, claim: currentClaim(id), owner: owner, state: state, transport: transport, outcome: outcome, at: now, events: events)
            }
            func reschedule(_ id: Int64, claim: Int64, owner: String, at next: Date, transport: String, outcome: String, events: [DeliveryEvent]) async throws -> Bool {
                try await real.reschedule(id, claim: currentClaim(id), owner: owner, at: next, transport: transport, outcome: outcome, events: events)
            }
            func rejectToken(_ id: Int64, claim: Int64, owner: String, deviceID: String, token: String, transport: String, outcome: String, at now: Date,
                             events: [DeliveryEvent]) async throws {
                try await real.rejectToken(id, claim: currentClaim(id), owner: owner, deviceID: deviceID, token: token, transport: transport, outcome: outcome,
                                           at: now, events: events)
            }
            func removeSettled(before cutoff: Date) async throws -> Int { try await real.removeSettled(before: cutoff) }
            func releaseAbandonedLeases(ownOwner: String) async throws -> Int { try await real.releaseAbandonedLeases(ownOwner: ownOwner) }
            func entries(deliveryID: String?) async throws -> [OutboxEntry] { try await real.entries(deliveryID: deliveryID) }
            func counts() async throws -> [OutboxEntry.State: Int] { try await real.counts() }
            func health(transports: [String]) async throws -> PushOutboxHealth { try await real.health(transports: transports) }
        }
        let fixture = try await Engine.sqlite.fixture()
        let failures = await PushOutboxConformance(fixture: fixture, outbox: Unfenced(real: try Engine.sqlite.pushOutbox(fixture))).run()
        let rules = Set(failures.map(\.rule))
        #expect(rules.isSuperset(of: ["a held lease is not claimed again", "concurrent claimers share nothing", "a lost claim never settles"]), "\(failures)")
    }

    @Test("the run store: a fire begins one run, a run's end carries its answer", arguments: Engine.allCases)
    func runStore(engine: Engine) async throws {
        let fixture = try await engine.fixture()
        let failures = await RunStoreConformance(fixture: fixture, store: try engine.runStore(fixture)).run()
        #expect(failures.isEmpty, "\(failures)")
    }

    @Test("on a database several gateways share, a restarting node marks only its own runs interrupted")
    func interruptedOnlyOwnRuns() async throws {
        let fixture = try #require(try await Engine.postgresql.fixture() as? PostgresEngineFixture)
        let outbox = PostgresChannelOutbox(pool: fixture.pool)
        let nodeA = PostgresRunStore(pool: fixture.pool, channelOutbox: outbox, node: "node-a")
        let nodeB = PostgresRunStore(pool: fixture.pool, channelOutbox: outbox, node: "node-b")
        #expect(try await nodeA.begin(RunRecord(id: "run_a", agentID: "brief", sessionID: "ses_a", trigger: .api, startedAt: Date()), fire: nil))
        #expect(try await nodeB.begin(RunRecord(id: "run_b", agentID: "digest", sessionID: "ses_b", trigger: .api, startedAt: Date()), fire: nil))
        #expect(try await nodeA.markInterrupted(at: Date()) == 1)
        #expect(try await nodeA.run(id: "run_a")?.status == .interrupted)
        #expect(try await nodeA.run(id: "run_b")?.status == .running)
    }

    @Test("on a database several gateways share, a memory feed reader never skips a change that commits late")
    func memoryFeedSkipsNoLateCommit() async throws {
        let fixture = try #require(try await Engine.postgresql.fixture() as? PostgresEngineFixture)
        let pool = fixture.pool
        let store = PostgresMemoryFactStore(pool: pool)
        let subject = "late-\(UUID().uuidString.prefix(8).lowercased())"
        // A slow writer adds a fact and keeps its transaction open until released.
        let (added, addedSignal) = AsyncStream<Void>.makeStream()
        let release = DispatchSemaphore(value: 0)
        // Whatever fails below, the slow writer's thread is let go.
        defer { release.signal() }
        let slow = Task {
            defer { addedSignal.finish() }
            return try await pool.withTransaction { session in
                let fact = try store.add("slow", subject: subject, source: "manual", category: "preference", agentID: "", expiresAt: nil, in: session)
                addedSignal.yield()
                release.wait()
                return fact
            }
        }
        for await _ in added { break }
        // A second writer (another gateway) adds a fact for the same person: it either commits now or waits for the first.
        let fast = Task { try await store.add("fast", subject: subject, source: "manual") }
        var settled = false
        for _ in 0..<2000 where !settled {
            settled = try await pool.withConnection { db in
                let committed = try db.query("SELECT count(*) AS n FROM memory_fact_changes WHERE subject = $1", subject).first?.int("n") ?? 0
                let waiting = try db.query("SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'")
                    .first?.int("n") ?? 0
                return committed > 0 || waiting > 0
            }
            if !settled { try await Task.sleep(for: .milliseconds(10)) }
        }
        #expect(settled, "the second writer neither committed nor waited")
        // A phone syncs now, then again from where it stopped once both writers are done.
        let first = try await store.changes(subject: subject, since: 0, limit: 100, agentID: nil)
        release.signal()
        let slowFact = try await slow.value
        let fastFact = try await fast.value
        let second = try await store.changes(subject: subject, since: first.nextCursor, limit: 100, agentID: nil)
        let synced = Set((first.changes + second.changes).map(\.factID))
        #expect(synced == [slowFact.id, fastFact.id], "the phone synced \(synced.sorted()): first \(first.changes), then \(second.changes)")
    }

    @Test("API keys: one first owner key across gateways, only hashes kept, revocation at once", arguments: Engine.allCases)
    func apiKeys(engine: Engine) async throws {
        let fixture = try await engine.fixture()
        let failures = await APIKeyStoreConformance(fixture: fixture, store: try engine.apiKeyStore(fixture)).run()
        #expect(failures.isEmpty, "\(failures)")
    }

    @Test("console sessions: open with their token only, nothing in the clear, expiry, revocation, codes used once", arguments: Engine.allCases)
    func consoleSessions(engine: Engine) async throws {
        let fixture = try await engine.fixture()
        let clock = ManualClock(Date())
        let (store, keys) = try engine.consoleSessionStores(fixture, clock: clock)
        let failures = await ConsoleSessionStoreConformance(fixture: fixture, keys: keys, store: store, clock: clock).run()
        #expect(failures.isEmpty, "\(failures)")
    }

    @Test("the console sessions suite itself catches a store that forgets nothing, ends nothing and leaks its cookies")
    func catchesABrokenConsoleSessionStore() async throws {
        /// Answers every cookie it ever issued (ignoring expiry and sign-out), signs in again with a used code, ends
        /// no key's sessions, and writes each cookie where anyone reading the database finds it.
        final class Careless: ConsoleSessionStore {
            let real: any ConsoleSessionStore
            let fixture: any StorageEngineFixture
            let issued = Mutex<(sessions: [String: ConsoleSession], codes: [String: Principal])>(([:], [:]))

            init(real: any ConsoleSessionStore, fixture: any StorageEngineFixture) {
                self.real = real
                self.fixture = fixture
            }

            func remember(_ session: IssuedConsoleSession) async throws -> IssuedConsoleSession {
                issued.withLock { $0.sessions[session.token] = session.session }
                try await fixture.storage.withTransaction { try fixture.writeEffect(session.token, in: $0) }
                return session
            }
            func createCode(subject: String, role: Role) async throws -> ConsoleCode {
                let code = try await real.createCode(subject: subject, role: role)
                issued.withLock { $0.codes[code.code] = Principal(keyID: "console:again", subject: subject, role: role) }
                return code
            }
            func signIn(code: String) async throws -> IssuedConsoleSession {
                do {
                    return try await remember(real.signIn(code: code))
                } catch ConsoleCodeError.used {
                    guard let again = issued.withLock({ $0.codes[code.filter(\.isNumber)] }) else { throw ConsoleCodeError.used }
                    return try await remember(real.signIn(key: again))
                }
            }
            func signIn(key principal: Principal) async throws -> IssuedConsoleSession { try await remember(real.signIn(key: principal)) }
            func knownSession(token: String) -> ConsoleSession? { nil }
            func session(token: String) async -> ConsoleSession? {
                if let live = await real.session(token: token) { return live }
                return issued.withLock { $0.sessions[token] }
            }
            func revoke(token: String) async throws -> Bool { try await real.revoke(token: token) }
            func revoke(signedInWithKey keyID: String, in session: any StorageSession) throws -> Int { 0 }
        }
        let fixture = try await Engine.sqlite.fixture()
        let clock = ManualClock(Date())
        let (real, keys) = try Engine.sqlite.consoleSessionStores(fixture, clock: clock)
        let failures = await ConsoleSessionStoreConformance(fixture: fixture, keys: keys, store: Careless(real: real, fixture: fixture), clock: clock).run()
        let rules = Set(failures.map(\.rule))
        #expect(rules.isSuperset(of: ["nothing in the clear", "a code signs in once", "one of concurrent redemptions", "revoke by session", "revoke by key",
                                      "idle expiry", "absolute expiry"]), "\(failures)")
    }

    @Test("the household: members per household, codes once (20 concurrent redemptions, one key), code errors, nothing in the clear, rollback", arguments: Engine.allCases)
    func household(engine: Engine) async throws {
        let fixture = try await engine.fixture()
        let (store, keys) = try engine.householdStores(fixture)
        let failures = await HouseholdStoreConformance(fixture: fixture, keys: keys, store: store).run()
        #expect(failures.isEmpty, "\(failures)")
    }

    @Test("the household suite itself catches a store that pairs a code twice, ignores expiry and leaks its codes")
    func catchesABrokenHouseholdStore() async throws {
        /// Pairs again with any code it ever issued (used or expired), and writes each code where anyone reading the
        /// database finds it.
        final class Careless: HouseholdStore {
            let real: any HouseholdStore
            let keys: any APIKeyStore
            let fixture: any StorageEngineFixture
            let offers = Mutex<[String: PairingOffer]>([:])
            var transactions: any TransactionalStorage { real.transactions }

            init(real: any HouseholdStore, keys: any APIKeyStore, fixture: any StorageEngineFixture) {
                self.real = real
                self.keys = keys
                self.fixture = fixture
            }

            func subject(forName name: String, in session: any StorageSession) throws -> String { try real.subject(forName: name, in: session) }
            func createOffer(subject: String, name: String, role: Role, createdBy keyID: String?, madeBy maker: String?, now: Date,
                             in session: any StorageSession) throws -> PairingOffer {
                let offer = try real.createOffer(subject: subject, name: name, role: role, createdBy: keyID, madeBy: maker, now: now, in: session)
                offers.withLock { $0[offer.code] = offer }
                try fixture.writeEffect(offer.code, in: session)
                return offer
            }
            func redeem(code: String, deviceName: String, now: Date, in session: any StorageSession) throws -> MintedKey {
                do {
                    return try real.redeem(code: code, deviceName: deviceName, now: now, in: session)
                } catch PairingError.alreadyUsed, PairingError.expired {
                    guard let offer = offers.withLock({ $0[PairingCodes.normalize(code)] }) else { throw PairingError.unknownCode }
                    return try keys.mint(name: deviceName, subject: offer.subject, role: offer.role, kind: .managed, mintedBy: nil, in: session)
                }
            }
            func displayName(subject: String, in session: any StorageSession) throws -> String? { try real.displayName(subject: subject, in: session) }
            func displayName(subject: String) async throws -> String? { try await real.displayName(subject: subject) }
        }
        let fixture = try await Engine.sqlite.fixture()
        let (real, keys) = try Engine.sqlite.householdStores(fixture)
        let failures = await HouseholdStoreConformance(fixture: fixture, keys: keys, store: Careless(real: real, keys: keys, fixture: fixture)).run()
        let rules = Set(failures.map(\.rule))
        #expect(rules.isSuperset(of: ["nothing in the clear", "codes once", "code errors", "one of concurrent redemptions"]), "\(failures)")
    }

    @Test("the endpoints channels disabled", arguments: Engine.allCases)
    func endpointStates(engine: Engine) async throws {
        let fixture = try await engine.fixture()
        let failures = await EndpointStateStoreConformance(engine: engine.rawValue, store: try engine.endpointStateStore(fixture)).run()
        #expect(failures.isEmpty, "\(failures)")
    }

    @Test("the endpoints channels disabled, through the snapshot channel attempts read", arguments: Engine.allCases)
    func endpointStatesThroughSnapshot(engine: Engine) async throws {
        let fixture = try await engine.fixture()
        let snapshot = EndpointStateSnapshot(try engine.endpointStateStore(fixture))
        let failures = await EndpointStateStoreConformance(engine: engine.rawValue, store: snapshot).run()
        #expect(failures.isEmpty, "\(failures)")
    }

    @Test("the idempotency log", arguments: Engine.allCases)
    func idempotency(engine: Engine) async throws {
        let fixture = try await engine.fixture()
        let failures = await IdempotencyStoreConformance(fixture: fixture, store: try engine.idempotencyStore(fixture),
                                                         holdsOutliveTheProcess: engine == .postgresql).run()
        #expect(failures.isEmpty, "\(failures)")
    }

    @Test("the conformance suite itself catches a store that forgets its lines")
    func catchesABrokenStore() async throws {
        /// Keeps nothing: every rule about reading back must fail.
        struct ForgetfulStore: IdempotencyStore {
            let real: any IdempotencyStore
            func line(scope: String, key: String) async throws -> IdempotencyLine? { nil }
            func record(_ line: IdempotencyLine, scope: String, key: String, at now: Date) async throws {}
            func appliedHook(scope: String, key: String, method: String, path: String, at now: Date,
                             line: @escaping @Sendable (CommitHook.Answer) -> IdempotencyLine) -> CommitHook {
                real.appliedHook(scope: scope, key: key, method: method, path: path, at: now, line: line)
            }
            func forget(before cutoff: Date) async throws -> Int { 0 }
            /// Forgets holds too: every call holds every key.
            func hold(scope: String, key: String, holder: String, lease: Duration) async throws -> Bool { true }
            func release(scope: String, key: String, holder: String) async throws {}
        }
        let fixture = try await Engine.sqlite.fixture()
        let failures = await IdempotencyStoreConformance(fixture: fixture, store: ForgetfulStore(real: try Engine.sqlite.idempotencyStore(fixture))).run()
        let rules = Set(failures.map(\.rule))
        #expect(rules.isSuperset(of: ["round-trip", "applied with effect", "answer with effect", "forget", "one holder", "one of concurrent holders"]), "\(failures)")
    }
}
