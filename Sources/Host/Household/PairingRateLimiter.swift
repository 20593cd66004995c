import Foundation
import Synchronization

/// Slows down guessing of pairing codes: a few wrong codes per address, and a household-wide ceiling.
public final class PairingRateLimiter: Sendable {
    public let perAddress: Int
    public let total: Int
    public let window: TimeInterval
    private let failures = Mutex<[(address: String, at: Date)]>([])

    public init(perAddress: Int = 5, total: Int = 30, window: TimeInterval = 300) {
        self.perAddress = perAddress
        self.total = total
        self.window = window
    }

    /// Seconds to wait before `address` may try again, or nil when it may try now.
    public func retryAfter(address: String, now: Date = Date()) -> Int? {
        failures.withLock { list in
            list.removeAll { now.timeIntervalSince($0.at) > window }
            let mine = list.filter { $0.address == address }
            if mine.count >= perAddress, let oldest = mine.first { return max(1, Int(window - now.timeIntervalSince(oldest.at)) + 1) }
            if list.count >= total, let oldest = list.first { return max(1, Int(window - now.timeIntervalSince(oldest.at)) + 1) }
            return nil
        }
    }

    public func recordFailure(address: String, now: Date = Date()) {
        failures.withLock { $0.append((address, now)) }
    }
}
