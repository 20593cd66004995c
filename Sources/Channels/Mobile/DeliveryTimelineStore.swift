import ChannelAPI
import Foundation

/// A device's latest wake-up attempt (for any line or none) and its latest token rejection.
public struct DeviceWakeSummary: Sendable, Equatable {
    public var lastAttempt: DeliveryEvent?
    public var lastRejection: DeliveryEvent?

    public init(lastAttempt: DeliveryEvent?, lastRejection: DeliveryEvent?) {
        self.lastAttempt = lastAttempt
        self.lastRejection = lastRejection
    }
}

/// What the console reads of each line's path to each phone: the steps the outbox and the inbox wrote
/// (`mobile_delivery_events`), the wake-ups still waiting for their first try, who a line was written for and who read
/// it, and a device's latest wake-up. A protocol: each engine reads its own rows (`SQLiteDeliveryTimelineStore`,
/// `PostgresDeliveryTimelineStore`), so a timeline is whole whichever node wrote its steps. Reads see what is committed.
public protocol DeliveryTimelineStore: Sendable {
    /// The stored steps of these lines, by line, each line's in the order they were written.
    func events(deliveryIDs: [String]) async throws -> [String: [DeliveryEvent]]
    /// `queued` steps of wake-ups not tried yet, read from their outbox rows (the first settle records them), by line.
    func waitingWakeUps(deliveryIDs: [String]) async throws -> [String: [DeliveryEvent]]
    /// Who each of these lines was written for (fixed when it was stored), by line, devices sorted.
    func recipients(deliveryIDs: [String]) async throws -> [String: [String]]
    /// When each device read each of these lines, by line and device.
    func receipts(deliveryIDs: [String]) async throws -> [String: [String: Date]]
    /// The device's latest wake-up attempt and latest token rejection.
    func wakeSummary(deviceID: String) async throws -> DeviceWakeSummary
    /// Records a test push's attempt and, when the service rejected the token, the rejection and the cleared token (unless
    /// the app registered another since), in one transaction.
    func recordTestPush(_ attempt: WakeAttempt, deviceID: String, token: String, transport: String, at now: Date) async throws
    /// How many Live Activity tokens the gateway holds for the device: one per reported activity, and its push-to-start token.
    func liveActivityTokenCount(deviceID: String) async throws -> Int
}
