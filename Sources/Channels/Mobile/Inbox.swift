import ChannelAPI
import Foundation
import JSON
import Crypto
import Storage

/// The inbox aggregate as every engine keeps it: lines, their recipients and per-device read receipts, each line
/// written whole with the outbox rows that wake its devices. Async because an engine is (SQLite works on its own
/// threads, PostgreSQL over the network): no cooperative thread waits on a lock, a socket or an fsync.
/// `SQLiteInbox` (over `MobileStore`) and `PostgresInbox` implement it; `InboxConformance` in the test kit holds both
/// to the same rules.
public protocol Inbox: Sendable {
    /// Which people's pages changed, as this process knows it: bumped after each commit here, and after commits on
    /// other processes of the same database once `followOtherWriters()` runs.
    var inboxGenerations: InboxGenerations { get }
    /// One line, its recipients and wake-ups in one durable transaction (it may share its commit with lines written
    /// at the same moment).
    func insertDelivery(_ output: Output, destination: Destination) async throws -> StoredDelivery
    /// The same inside the caller's transaction on this inbox's engine (an idempotent call's answer commits with it).
    func insertDelivery(_ output: Output, destination: Destination, in session: any StorageSession) throws -> StoredDelivery
    /// A person's lines, newest first, as one device sees them (its own read state) or as the person does.
    func deliveries(subject: String, deviceID: String?, before cursor: Int64?, limit: Int) async throws -> InboxPage
    /// A person's lines after a store sequence, oldest first (the relay carriage's feed). A line committed later never
    /// has a lower sequence than one this has returned for the same person, so a reader that keeps its last `seq`
    /// misses nothing.
    func lines(subject: String, after seq: Int64, limit: Int) async throws -> [Delivery]
    /// One line, if the person (or that device) may see it.
    func delivery(id: String, subject: String, deviceID: String?) async throws -> Delivery?
    /// Marks a line read on one device (the first read time is kept); false when the line or the device is not the person's.
    func markRead(deliveryID: String, deviceID: String, subject: String) async throws -> Bool
    /// The same inside the caller's transaction.
    func markRead(deliveryID: String, deviceID: String, subject: String, in session: any StorageSession) throws -> Bool
    /// The newest line's sequence (0 with none), taken after every line being written now is committed: a feed that
    /// starts after it misses no line written from then on.
    func latestDeliverySeq() async throws -> Int64
    /// A person's lines newest first, as far as `limit`, for the console: optionally one agent's, or those whose id
    /// starts with `idPrefix`, below the store sequence `before`. Visibility is the inbox's own; no read state.
    func consoleLines(subject: String, agentID: String?, idPrefix: String?, before: Int64?, limit: Int) async throws -> [Delivery]
    /// Queues a wake-up for every phone of `subject` that takes pushes; returns how many.
    func queueWakeUps(_ signal: WakeSignal, subject: String) async throws -> Int
    /// The same inside the caller's transaction (an approval's wake-ups commit with the approval).
    func queueWakeUps(_ signal: WakeSignal, subject: String, in session: any StorageSession) throws -> Int
    /// Queues a wake-up for one device if it takes pushes.
    func queueWakeUp(_ signal: WakeSignal, deviceID: String) async throws -> Bool
    /// The same inside the caller's transaction (a phone command's wake-up commits with the command).
    func queueWakeUp(_ signal: WakeSignal, deviceID: String, in session: any StorageSession) throws -> Bool
    /// Starts hearing other processes' writes to the same database, so this process's cached pages go stale when
    /// theirs would (a no-op for an engine only one process writes).
    func followOtherWriters() async throws
    func stopFollowing()
}

extension Inbox {
    public func followOtherWriters() async throws {}
    public func stopFollowing() {}
}

/// One page of a person's inbox.
public struct InboxPage: Sendable {
    public var items: [Delivery]
    /// Lines visible minus lines read, over the whole inbox (not just the page).
    public var unreadCount: Int
    public var hasMore: Bool

    public init(items: [Delivery], unreadCount: Int, hasMore: Bool) {
        self.items = items
        self.unreadCount = unreadCount
        self.hasMore = hasMore
    }
}

/// The devices aggregate as every engine keeps it: registrations, who owns which phone, and removal (a removed
/// phone's read receipts go with it).
public protocol DeviceRegistry: Sendable {
    /// Stores a registration; true when the device is new. A device id owned by someone else is refused
    /// (`DeviceOwnershipError.ownedByAnotherSubject`) and nothing changes.
    func register(_ registration: DeviceRegistration, subject: String, keyID: String?) async throws -> Bool
    /// The same inside the caller's transaction on this registry's engine.
    func register(_ registration: DeviceRegistration, subject: String, keyID: String?, in session: any StorageSession) throws -> Bool
    func device(id: String) async throws -> Device?
    /// The devices of `ids` that exist, by id, in one read where the engine can (the push dispatcher reads a claimed
    /// batch's devices at once rather than one hop per wake-up).
    func devices(ids: Set<String>) async throws -> [String: Device]
    /// A person's devices, oldest registration first.
    func list(subject: String) async throws -> [Device]
    func allDevices() async throws -> [Device]
    /// Removes a device; false when it does not exist or is someone else's.
    func deleteDevice(id: String, subject: String) async throws -> Bool
    func deleteDevice(id: String, subject: String, in session: any StorageSession) throws -> Bool
    /// Unpairs the phones a revoked key registered; returns how many.
    func removeDevices(registeredByKey keyID: String) async throws -> Int
    /// The same inside the caller's transaction (the revocation's own).
    func removeDevices(registeredByKey keyID: String, in session: any StorageSession) throws -> Int
}

extension DeviceRegistry {
    /// One look-up per id.
    public func devices(ids: Set<String>) async throws -> [String: Device] {
        var found: [String: Device] = [:]
        for id in ids { if let device = try await device(id: id) { found[id] = device } }
        return found
    }

    /// The caller's own device named by a request field. A missing id, an unknown one and someone else's are refused
    /// alike, naming the field, so one person cannot learn of another's devices.
    public func ownedDevice(_ id: String?, subject: String, field: String = "device_id") async throws -> Device {
        guard let id, !id.isEmpty else { throw DeviceError.missing(field: field) }
        guard let device = try await device(id: id), device.subject == subject else { throw DeviceError.notYours(id, field: field) }
        return device
    }
}

/// A line's columns, encoded once ahead of the transaction, the same for every engine: where it goes, its parts and
/// metadata as the original app reads them, and the wake-up signal its devices get.
public struct PreparedInboxLine: Sendable {
    public let id: String
    public let output: Output
    public let destination: Destination
    /// `all`, `user` or `device`, and the person or device it names (empty for `all`).
    public let kind: String
    public let value: String
    public let partsJSON: String
    public let metadataJSON: String
    /// The outbox's stored form of the line's wake-up.
    public let signal: String
    /// False for the System agent's lines: kept, never shown and never woken for.
    public let wakes: Bool
    public let now: Date

    public init(_ output: Output, destination: Destination, now: Date) throws {
        id = "dlv_" + TimeOrderedID.hex()
        self.output = output
        self.destination = destination
        (kind, value) = switch destination {
        case .all: ("all", "")
        case .user(let s): ("user", s)
        case .device(let d): ("device", d)
        }
        partsJSON = JSONValue.array(output.parts.map { ["type": "text", "text": .string($0)] }).serialized()
        metadataJSON = JSONValue.object(output.metadata.mapValues(JSONValue.string)).serialized()
        wakes = output.agentID != MobileStore.systemAgentID
        signal = try OutboxText.encode(.delivery(id: id, agentID: output.agentID))
        self.now = now
    }

    /// Whose line it is once stored: the person for `user:`, the device's owner for `device:` (nil: nobody's), nil for `all`.
    public func owner(deviceOwner: String?) -> String? {
        switch destination {
        case .all: nil
        case .user(let subject): subject
        case .device: deviceOwner
        }
    }

    /// Who hears of it on the console.
    public func audience(owner: String?) -> ConsoleAudience {
        switch destination {
        case .all: .everyone
        case .user(let subject): .subject(subject)
        case .device: .subject(owner ?? "")
        }
    }

    /// Why a recipient gets the line but no wake-up (its timeline's `skipped` step).
    public static func skipReason(notificationsOn: Bool) -> String {
        notificationsOn ? "no push token" : "notifications turned off"
    }
}

/// An inbox that can answer a page on the calling thread, without a hop (SQLite's reads are quick and local): the
/// inbox GET, the hottest route, is then answered on the server thread. An engine without it is read async.
public protocol ImmediateInboxReads: Sendable {
    /// `deliveries(subject:deviceID:before:limit:)` on the calling thread.
    func deliveriesNow(subject: String, deviceID: String?, before cursor: Int64?, limit: Int) throws -> InboxPage
    /// Throws `DeviceError.notYours` unless `deviceID` is `subject`'s device, on the calling thread.
    func checkOwnershipNow(of deviceID: String, subject: String) throws
}

/// The mobile channel's stores on one engine, as the routes take them: one value the composition root builds for
/// SQLite (`MobileStore.storage`) or PostgreSQL.
public struct MobileStorage: Sendable {
    public var transactions: any TransactionalStorage
    public var inbox: any Inbox
    public var devices: any DeviceRegistry
    public var outbox: any PushOutbox
    /// Which phone read which line, written off the inbox's hot path.
    public var fetches: DeliveryFetchStore
    /// Each line's path to each phone, as the console reads it.
    public var timelines: any DeliveryTimelineStore
    /// The console's live updates.
    public var consoleEvents: ConsoleEventHub

    public init(transactions: any TransactionalStorage, inbox: any Inbox, devices: any DeviceRegistry, outbox: any PushOutbox, fetches: DeliveryFetchStore,
                timelines: any DeliveryTimelineStore, consoleEvents: ConsoleEventHub) {
        self.transactions = transactions
        self.inbox = inbox
        self.devices = devices
        self.outbox = outbox
        self.fetches = fetches
        self.timelines = timelines
        self.consoleEvents = consoleEvents
    }
}
