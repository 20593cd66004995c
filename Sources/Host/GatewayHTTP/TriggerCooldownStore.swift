import Foundation

/// When each location trigger last fired for each device, so cooldowns survive restarts and concurrent fires
/// start one run (the check and the claim are one transaction). A protocol: each engine keeps these rows
/// (`SQLiteTriggerCooldownStore` in the data directory's file).
public protocol TriggerCooldownStore: Sendable {
    /// Claims a fire: nil when allowed (and recorded), else the seconds left of the cooldown.
    func claim(agentID: String, deviceID: String, cooldown: Duration, now: Date) async throws -> Int?
    /// Gives a claimed fire back (the run could not start).
    func release(agentID: String, deviceID: String) async throws
}
