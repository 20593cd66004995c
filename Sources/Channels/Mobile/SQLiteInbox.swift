import ChannelAPI
import Foundation
import SQLite
import Storage

/// The SQLite inbox (`MobileStore`) behind the engine seam: each call runs on SQLite's own threads, and a line shares
/// its commit with the lines written at the same moment.
public struct SQLiteInbox: Inbox {
    public let store: MobileStore

    public init(store: MobileStore) {
        self.store = store
    }

    public var inboxGenerations: InboxGenerations { store.inboxGenerations }

    public func insertDelivery(_ output: Output, destination: Destination) async throws -> StoredDelivery {
        try await store.insertDeliveryGrouped(output, destination: destination)
    }

    /// SQLite's transactions nest on the thread that holds one: the store's own transaction joins the session's.
    public func insertDelivery(_ output: Output, destination: Destination, in session: any StorageSession) throws -> StoredDelivery {
        _ = try session.sqliteConnection()
        return try store.insertDelivery(output, destination: destination)
    }

    public func deliveries(subject: String, deviceID: String?, before cursor: Int64?, limit: Int) async throws -> InboxPage {
        let page = try await store.database.onStorageThreads { try store.deliveries(subject: subject, deviceID: deviceID, before: cursor, limit: limit) }
        return InboxPage(items: page.items, unreadCount: page.unreadCount, hasMore: page.hasMore)
    }

    public func lines(subject: String, after seq: Int64, limit: Int) async throws -> [Delivery] {
        try await store.database.onStorageThreads { try store.lines(subject: subject, after: seq, limit: limit) }
    }

    public func delivery(id: String, subject: String, deviceID: String?) async throws -> Delivery? {
        try await store.database.onStorageThreads { try store.delivery(id: id, subject: subject, deviceID: deviceID) }
    }

    public func markRead(deliveryID: String, deviceID: String, subject: String) async throws -> Bool {
        try await store.database.onStorageThreads { try store.markRead(deliveryID: deliveryID, deviceID: deviceID, subject: subject) }
    }

    public func markRead(deliveryID: String, deviceID: String, subject: String, in session: any StorageSession) throws -> Bool {
        _ = try session.sqliteConnection()
        return try store.markRead(deliveryID: deliveryID, deviceID: deviceID, subject: subject)
    }

    /// SQLite has one writer at a time and commits in sequence order, so the newest committed line is the answer.
    public func latestDeliverySeq() async throws -> Int64 {
        try await store.database.onStorageThreads { try store.latestDeliverySeq() }
    }

    public func queueWakeUps(_ signal: WakeSignal, subject: String) async throws -> Int {
        try await store.database.onStorageThreads { try store.queueWakeUps(signal, subject: subject) }
    }

    public func consoleLines(subject: String, agentID: String?, idPrefix: String?, before: Int64?, limit: Int) async throws -> [Delivery] {
        try await store.database.onStorageThreads {
            try store.consoleLines(subject: subject, agentID: agentID, idPrefix: idPrefix, before: before, limit: limit)
        }
    }

    public func queueWakeUps(_ signal: WakeSignal, subject: String, in session: any StorageSession) throws -> Int {
        _ = try session.sqliteConnection()
        return try store.queueWakeUps(signal, subject: subject)
    }

    public func queueWakeUp(_ signal: WakeSignal, deviceID: String) async throws -> Bool {
        try await store.database.onStorageThreads { try store.queueWakeUp(signal, deviceID: deviceID) }
    }

    public func queueWakeUp(_ signal: WakeSignal, deviceID: String, in session: any StorageSession) throws -> Bool {
        _ = try session.sqliteConnection()
        return try store.queueWakeUp(signal, deviceID: deviceID)
    }
}

/// The SQLite devices aggregate (`DeviceStore`) behind the engine seam, on SQLite's own threads.
public struct SQLiteDeviceRegistry: DeviceRegistry {
    public let devices: DeviceStore

    public init(devices: DeviceStore) {
        self.devices = devices
    }

    public func register(_ registration: DeviceRegistration, subject: String, keyID: String?) async throws -> Bool {
        try await devices.database.onStorageThreads { try devices.register(registration, subject: subject, keyID: keyID) }
    }

    public func register(_ registration: DeviceRegistration, subject: String, keyID: String?, in session: any StorageSession) throws -> Bool {
        _ = try session.sqliteConnection()
        return try devices.register(registration, subject: subject, keyID: keyID)
    }

    public func device(id: String) async throws -> Device? {
        try await devices.database.onStorageThreads { try devices.device(id: id) }
    }

    /// Every id read in one visit to SQLite's threads.
    public func devices(ids: Set<String>) async throws -> [String: Device] {
        try await devices.database.onStorageThreads {
            var found: [String: Device] = [:]
            for id in ids { if let device = try devices.device(id: id) { found[id] = device } }
            return found
        }
    }

    public func list(subject: String) async throws -> [Device] {
        try await devices.database.onStorageThreads { try devices.list(subject: subject) }
    }

    public func allDevices() async throws -> [Device] {
        try await devices.database.onStorageThreads { try devices.allDevices() }
    }

    public func deleteDevice(id: String, subject: String) async throws -> Bool {
        try await devices.database.onStorageThreads { try devices.deleteDevice(id: id, subject: subject) }
    }

    public func deleteDevice(id: String, subject: String, in session: any StorageSession) throws -> Bool {
        _ = try session.sqliteConnection()
        return try devices.deleteDevice(id: id, subject: subject)
    }

    public func removeDevices(registeredByKey keyID: String) async throws -> Int {
        try await devices.database.onStorageThreads { try devices.removeDevices(registeredByKey: keyID) }
    }

    public func removeDevices(registeredByKey keyID: String, in session: any StorageSession) throws -> Int {
        _ = try session.sqliteConnection()
        return try devices.removeDevices(registeredByKey: keyID)
    }
}

extension MobileStore {
    /// This store behind the engine seam.
    public var inbox: SQLiteInbox { SQLiteInbox(store: self) }
    /// Every mobile store of this database, as the routes take them.
    public var storage: MobileStorage {
        MobileStorage(transactions: transactions, inbox: inbox, devices: devices.registry, outbox: outbox, fetches: fetches,
                      timelines: SQLiteDeliveryTimelineStore(events: events), consoleEvents: consoleEvents)
    }
}

extension SQLiteInbox: ImmediateInboxReads {
    public func deliveriesNow(subject: String, deviceID: String?, before cursor: Int64?, limit: Int) throws -> InboxPage {
        let page = try store.deliveries(subject: subject, deviceID: deviceID, before: cursor, limit: limit)
        return InboxPage(items: page.items, unreadCount: page.unreadCount, hasMore: page.hasMore)
    }

    public func checkOwnershipNow(of deviceID: String, subject: String) throws {
        try store.devices.checkOwnership(of: deviceID, subject: subject)
    }
}

extension DeviceStore {
    /// This store behind the engine seam.
    public var registry: SQLiteDeviceRegistry { SQLiteDeviceRegistry(devices: self) }
}
