import Crypto
import Foundation
import Mobile
import Synchronization

/// Each inbox line's JSON as the list writes it, but for its read state, with a digest of it. A line never changes
/// once written, so a page rendered again (after any write to its person's inbox made their cached pages stale)
/// copies the lines it showed before instead of encoding them again, and its validator is a digest of digests
/// rather than a hash of the whole body. One per gateway: ids are unique within its database. Bounded by bytes,
/// the oldest kept line forgotten first.
public final class InboxLineCache: Sendable {
    public struct Line: Sendable {
        public let head: [UInt8]
        public let tail: [UInt8]
        /// SHA-256 of the head's length, the head and the tail: what the page's validator is made of.
        public let digest: [UInt8]
        public var bytes: Int { head.count + tail.count }
    }

    private struct State {
        var lines: [String: Line] = [:]
        /// Ids in the order kept; `order[oldest...]` are still held.
        var order: [String] = []
        var oldest = 0
        var bytes = 0
    }

    private let state = Mutex(State())
    /// Memory the kept lines may take in all.
    let budgetBytes: Int
    /// A line larger than this is encoded for each page rather than kept.
    let largestKept: Int

    public init(budgetBytes: Int = 8 << 20, largestKept: Int = 64 << 10) {
        self.budgetBytes = budgetBytes
        self.largestKept = min(largestKept, budgetBytes / 4)
    }

    /// The line's fragments, kept from an earlier page or made now.
    public func line(for delivery: Delivery) -> Line {
        if let kept = state.withLock({ $0.lines[delivery.id] }) { return kept }
        let (head, tail) = DeliveryView.listFragments(delivery)
        var hashed = withUnsafeBytes(of: UInt64(head.count).littleEndian) { Array($0) }
        hashed.reserveCapacity(8 + head.count + tail.count)
        hashed += head
        hashed += tail
        let line = Line(head: head, tail: tail, digest: SHA256.hash(hashed))
        guard line.bytes <= largestKept else { return line }
        state.withLock { state in
            guard state.lines.updateValue(line, forKey: delivery.id) == nil else { return }
            state.order.append(delivery.id)
            state.bytes += line.bytes
            while state.bytes > budgetBytes, state.oldest < state.order.count {
                if let gone = state.lines.removeValue(forKey: state.order[state.oldest]) { state.bytes -= gone.bytes }
                state.oldest += 1
            }
            // Compact now and then, so the order list does not grow without end.
            if state.oldest > 1024, state.oldest * 2 > state.order.count {
                state.order.removeFirst(state.oldest)
                state.oldest = 0
            }
        }
        return line
    }

    /// Bytes and lines held now (for tests and diagnostics).
    public var held: (bytes: Int, lines: Int) { state.withLock { ($0.bytes, $0.lines.count) } }
}
