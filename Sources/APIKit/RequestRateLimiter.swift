import Foundation
import Synchronization

/// Requests per key (a client address, a relay mailbox) as a token bucket (GCRA): `perMinute` may come at once, then one every
/// `60 / perMinute` seconds, so a client that keeps sending gets `perMinute` a minute. O(1) per request under one lock; the table keeps at most `capacity`
/// addresses, least recently seen first out, and drops addresses whose allowance is whole again as it goes, so a
/// flood of addresses costs bounded memory (past `capacity` busy addresses, the stalest is forgotten).
public final class RequestRateLimiter: Sendable {
    public enum Verdict: Sendable, Equatable {
        case allowed
        /// Refused; a request passes again in this many whole seconds.
        case limited(retryAfter: Int)
    }

    public let perMinute: Int
    public let capacity: Int
    private let now: @Sendable () -> Date
    private let table: Mutex<AddressTable>

    /// `now`: the clock the allowance is counted on (the system's by default).
    public init(perMinute: Int, capacity: Int = 16_384, now: @escaping @Sendable () -> Date = { Date() }) {
        precondition(perMinute > 0 && capacity > 0)
        self.perMinute = perMinute
        self.capacity = capacity
        self.now = now
        table = Mutex(AddressTable())
    }

    /// Takes one request's place for `key`, or says how long it must wait.
    public func take(key: String) -> Verdict {
        // Whole nanoseconds: sums of a Double interval drift at today's magnitudes and would refuse the last place.
        let now = Int64((self.now().timeIntervalSinceReferenceDate * 1e9).rounded(.down))
        let minute: Int64 = 60_000_000_000
        let interval = minute / Int64(perMinute)
        return table.withLock { table in
            let index = table.touch(key, capacity: capacity, now: now)
            // The theoretical arrival time: when the bucket would be whole again. Never more than a minute ahead,
            // even after the wall clock stepped back.
            let due = min(max(table.entries[index].due, now), now + minute)
            let verdict: Verdict
            if due + interval - now <= minute {
                table.entries[index].due = due + interval
                verdict = .allowed
            } else {
                table.entries[index].due = due
                let wait = due + interval - minute - now
                verdict = .limited(retryAfter: Int(max(1, (wait + 999_999_999) / 1_000_000_000)))
            }
            table.dropWhole(now: now, atMost: 2)
            return verdict
        }
    }

    /// How many keys the table holds now.
    public var trackedKeys: Int { table.withLock { $0.slots.count } }

    /// Addresses in a doubly linked list by last use, over arrays, so touching, evicting and reusing are O(1).
    struct AddressTable {
        struct Entry {
            var address: String
            /// Nanoseconds since the reference date.
            var due: Int64
            var older = -1
            var newer = -1
        }

        var slots: [String: Int] = [:]
        var entries: [Entry] = []
        var free: [Int] = []
        var newest = -1
        var oldest = -1

        /// The entry of `address`, now the newest; a new one (the stalest dropped when full) if it had none.
        mutating func touch(_ address: String, capacity: Int, now: Int64) -> Int {
            if let index = slots[address] {
                unlink(index)
                link(index)
                return index
            }
            if slots.count >= capacity, oldest >= 0 { drop(oldest) }
            let index: Int
            if let reused = free.popLast() {
                index = reused
                entries[index] = Entry(address: address, due: now)
            } else {
                index = entries.count
                entries.append(Entry(address: address, due: now))
            }
            slots[address] = index
            link(index)
            return index
        }

        /// Forgets up to `atMost` of the stalest addresses whose allowance is whole again (as if never seen).
        mutating func dropWhole(now: Int64, atMost: Int) {
            var dropped = 0
            while dropped < atMost, oldest >= 0, entries[oldest].due <= now {
                drop(oldest)
                dropped += 1
            }
        }

        mutating func drop(_ index: Int) {
            slots.removeValue(forKey: entries[index].address)
            unlink(index)
            entries[index].address = ""
            free.append(index)
        }

        private mutating func link(_ index: Int) {
            entries[index].older = newest
            entries[index].newer = -1
            if newest >= 0 { entries[newest].newer = index }
            newest = index
            if oldest < 0 { oldest = index }
        }

        private mutating func unlink(_ index: Int) {
            let (older, newer) = (entries[index].older, entries[index].newer)
            if older >= 0 { entries[older].newer = newer } else { oldest = newer }
            if newer >= 0 { entries[newer].older = older } else { newest = older }
            entries[index].older = -1
            entries[index].newer = -1
        }
    }
}
