/// Callers parked until the answer to one request arrives (an approval's decision, a device command's result).
/// Owned by an actor, which keeps it consistent; each caller is resumed exactly once: with everyone else by
/// `answer`, or alone by `release` (a long poll giving up at its cap).
public struct Waiters<Answer: Sendable>: Sendable {
    private var parked: [String: [(ticket: Int, continuation: CheckedContinuation<Answer, Never>)]] = [:]
    private var lastTicket = 0

    public init() {}

    /// A name for the next caller to park, so a timer made before it parks can `release` it.
    public mutating func ticket() -> Int {
        lastTicket += 1
        return lastTicket
    }

    public mutating func park(_ key: String, ticket: Int, _ continuation: CheckedContinuation<Answer, Never>) {
        parked[key, default: []].append((ticket, continuation))
    }

    /// The keys someone waits on.
    public var keys: [String] { Array(parked.keys) }

    public func isWaiting(_ key: String) -> Bool { parked[key] != nil }

    /// Resumes everyone waiting on `key`.
    public mutating func answer(_ key: String, with answer: Answer) {
        for waiter in parked.removeValue(forKey: key) ?? [] { waiter.continuation.resume(returning: answer) }
    }

    /// Resumes one caller, if it is still waiting.
    public mutating func release(_ key: String, ticket: Int, with answer: Answer) {
        guard let index = parked[key]?.firstIndex(where: { $0.ticket == ticket }) else { return }
        parked[key]?.remove(at: index).continuation.resume(returning: answer)
        if parked[key]?.isEmpty == true { parked[key] = nil }
    }
}
