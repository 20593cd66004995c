import Foundation
import GatewayHTTP

/// What every engine's `TriggerCooldownStore` must do: the first fire of an (agent, phone) pair passes and starts
/// its cooldown; a fire within it is refused with the whole seconds left, rounded up; the pair's cooldown is its own;
/// a released fire passes again; and of concurrent fires of one pair exactly one passes (several gateways on one
/// database fire one trigger once). Returns the broken rules (empty: conformant).
public struct TriggerCooldownStoreConformance: Sendable {
    public let engine: String
    public let store: any TriggerCooldownStore

    public init(engine: String, store: any TriggerCooldownStore) {
        self.engine = engine
        self.store = store
    }

    public func run() async -> [ConformanceFailure] {
        var failures: [ConformanceFailure] = []
        func check(_ rule: String, _ holds: Bool, _ detail: @autoclosure () -> String) {
            if !holds { failures.append(ConformanceFailure(rule: rule, detail: "\(engine): \(detail())")) }
        }
        do {
            let agent = "agent_\(UUID().uuidString.prefix(8))"
            let start = Date(timeIntervalSince1970: 1_780_000_000)
            let minute = Duration.seconds(60)
            let first = try await store.claim(agentID: agent, deviceID: "phone", cooldown: minute, now: start)
            check("first fire passes", first == nil, "the first fire was refused with \(String(describing: first)) s left")
            let soon = try await store.claim(agentID: agent, deviceID: "phone", cooldown: minute, now: start.addingTimeInterval(10))
            check("within the cooldown", soon == 50, "10 s later: \(String(describing: soon)) s left, not 50")
            let almost = try await store.claim(agentID: agent, deviceID: "phone", cooldown: minute, now: start.addingTimeInterval(59.5))
            check("rounded up", almost == 1, "59.5 s later: \(String(describing: almost)) s left, not 1")
            let other = try await store.claim(agentID: agent, deviceID: "tablet", cooldown: minute, now: start.addingTimeInterval(10))
            check("per pair", other == nil, "another phone of the same agent was refused")
            let otherAgent = try await store.claim(agentID: agent + "-2", deviceID: "phone", cooldown: minute, now: start.addingTimeInterval(10))
            check("per pair", otherAgent == nil, "another agent on the same phone was refused")
            let after = try await store.claim(agentID: agent, deviceID: "phone", cooldown: minute, now: start.addingTimeInterval(60))
            check("after the cooldown", after == nil, "60 s later: refused with \(String(describing: after)) s left")
            // That fire started a new cooldown; giving it back lets the next one through at once.
            try await store.release(agentID: agent, deviceID: "phone")
            let released = try await store.claim(agentID: agent, deviceID: "phone", cooldown: minute, now: start.addingTimeInterval(61))
            check("release", released == nil, "after a release: refused with \(String(describing: released)) s left")

            // Twenty fires of one pair at once: exactly one passes.
            let raced = "agent_\(UUID().uuidString.prefix(8))"
            let store = self.store
            let passed = try await withThrowingTaskGroup(of: Bool.self) { group in
                for _ in 0..<20 { group.addTask { try await store.claim(agentID: raced, deviceID: "phone", cooldown: minute, now: start) == nil } }
                return try await group.reduce(0) { $0 + ($1 ? 1 : 0) }
            }
            check("one of concurrent fires", passed == 1, "\(passed) of 20 concurrent fires passed")
        } catch {
            failures.append(ConformanceFailure(rule: "no errors", detail: "\(engine): \(error)"))
        }
        return failures
    }
}
