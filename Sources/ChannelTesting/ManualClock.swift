import ChannelAPI
import Foundation
import Synchronization

/// A wall clock that moves only when a test says so; sleepers wake when it passes their deadline.
public final class ManualClock: WallClock {
    private struct State {
        var now: Date
        var sleepers: [(id: Int, deadline: Date, continuation: CheckedContinuation<Void, any Error>)] = []
        var nextID = 0
    }
    private let state: Mutex<State>

    public init(_ start: Date) {
        state = Mutex(State(now: start))
    }

    public func now() -> Date { state.withLock { $0.now } }

    /// How many tasks are sleeping on this clock right now.
    public var sleeperCount: Int { state.withLock { $0.sleepers.count } }

    public func sleep(until deadline: Date) async throws {
        let id = state.withLock { s -> Int in
            s.nextID += 1
            return s.nextID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let resumeNow = state.withLock { s -> Bool in
                    if s.now >= deadline { return true }
                    s.sleepers.append((id, deadline, continuation))
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            let cancelled = state.withLock { s -> CheckedContinuation<Void, any Error>? in
                guard let index = s.sleepers.firstIndex(where: { $0.id == id }) else { return nil }
                return s.sleepers.remove(at: index).continuation
            }
            cancelled?.resume(throwing: CancellationError())
        }
    }

    /// Moves time to `date` (never backwards) and wakes every sleeper whose deadline has come.
    public func advance(to date: Date) {
        let due = state.withLock { s -> [CheckedContinuation<Void, any Error>] in
            if date > s.now { s.now = date }
            let now = s.now
            let ready = s.sleepers.filter { $0.deadline <= now }
            s.sleepers.removeAll { $0.deadline <= now }
            return ready.map(\.continuation)
        }
        due.forEach { $0.resume() }
    }

    public func advance(by duration: Duration) {
        let seconds = Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
        advance(to: now().addingTimeInterval(seconds))
    }
}
