import Foundation

/// Wall-clock time, injectable so schedules and retries can be tested without waiting.
public protocol WallClock: Sendable {
    func now() -> Date
    /// Returns at or after `deadline`, or throws when the task is cancelled.
    func sleep(until deadline: Date) async throws
}

public struct SystemWallClock: WallClock {
    public init() {}
    public func now() -> Date { Date() }
    public func sleep(until deadline: Date) async throws {
        // Sleep in bounded steps so a wall-clock jump (NTP, suspend) is noticed within a minute.
        while true {
            let remaining = deadline.timeIntervalSinceNow
            if remaining <= 0 { return }
            try await Task.sleep(for: .milliseconds(Int64(min(remaining, 60) * 1000) + 1))
        }
    }
}
