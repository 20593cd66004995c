import ChannelAPI
import Foundation
import SQLite

/// The SQLite timeline reads (`DeliveryEventStore`) behind the engine seam, on SQLite's own threads.
public struct SQLiteDeliveryTimelineStore: DeliveryTimelineStore {
    public let events: DeliveryEventStore

    public init(events: DeliveryEventStore) {
        self.events = events
    }

    public func events(deliveryIDs: [String]) async throws -> [String: [DeliveryEvent]] {
        try await events.database.onStorageThreads { try events.events(deliveryIDs: deliveryIDs) }
    }

    public func waitingWakeUps(deliveryIDs: [String]) async throws -> [String: [DeliveryEvent]] {
        try await events.database.onStorageThreads { try events.waitingWakeUps(deliveryIDs: deliveryIDs) }
    }

    public func recipients(deliveryIDs: [String]) async throws -> [String: [String]] {
        try await events.database.onStorageThreads { try events.recipients(deliveryIDs: deliveryIDs) }
    }

    public func receipts(deliveryIDs: [String]) async throws -> [String: [String: Date]] {
        try await events.database.onStorageThreads { try events.receipts(deliveryIDs: deliveryIDs) }
    }

    public func wakeSummary(deviceID: String) async throws -> DeviceWakeSummary {
        try await events.database.onStorageThreads {
            let (attempt, rejection) = try events.wakeSummary(deviceID: deviceID)
            return DeviceWakeSummary(lastAttempt: attempt, lastRejection: rejection)
        }
    }

    public func recordTestPush(_ attempt: WakeAttempt, deviceID: String, token: String, transport: String, at now: Date) async throws {
        try await events.database.onStorageThreads { try events.recordTestPush(attempt, deviceID: deviceID, token: token, transport: transport, at: now) }
    }

    public func liveActivityTokenCount(deviceID: String) async throws -> Int {
        try await events.database.onStorageThreads { try events.liveActivityTokenCount(deviceID: deviceID) }
    }
}
