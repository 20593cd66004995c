import Storage

/// Wakes a person's phones with a generic signal that is not an inbox line: an approval to decide, a location run
/// that failed. The host's modules (agents, approvals) notify through this seam and never import the mobile
/// channel that implements it.
public protocol DeviceAlerts: Sendable {
    /// Queues `signal` for one device, if it takes pushes; false when it takes none. Durable when it returns.
    @discardableResult
    func alert(_ signal: WakeSignal, deviceID: String) async throws -> Bool

    /// Queues `signal` for every phone of `subject` that takes pushes, in the caller's transaction (an approval's
    /// wake-ups commit with the approval, or not at all); returns how many.
    @discardableResult
    func alert(_ signal: WakeSignal, subject: String, in session: any StorageSession) throws -> Int
}
