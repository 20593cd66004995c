import APIKit
import Foundation
import Synchronization

/// Slows down guessing a secret (a pairing code, a console key or code): a few wrong ones per client in a window,
/// and, only for secrets short enough to be found by many clients together, a ceiling over all of them.
///
/// The ceiling is a lock-out anyone can set off, so it guards only what it must: six-digit console codes (10^6
/// values), never pairing codes (80 random bits) or API keys (256), which no number of clients can guess in their
/// lifetime. Clients are keyed by `ClientAddresses.allowanceKey` (an IPv6 client's /64). The table holds at most
/// `capacity` clients, the stalest forgotten first, so a flood of addresses costs bounded memory and time.
public final class GuessingLimiter: Sendable {
    public let perClient: Int
    /// Wrong guesses of all clients together in a window, past which everyone waits; nil for none.
    public let ceiling: Int?
    public let window: TimeInterval
    public let capacity: Int
    private let state = Mutex(State())

    struct State {
        /// Each client's wrong guesses in the window, oldest first, at most `perClient` kept.
        var byClient: [String: [Date]] = [:]
        /// Everyone's, oldest first, at most `ceiling` kept.
        var all: [Date] = []
    }

    public init(perClient: Int = 5, ceiling: Int? = nil, window: TimeInterval = 300, capacity: Int = 16_384) {
        precondition(perClient > 0 && (ceiling ?? 1) > 0 && window > 0 && capacity > 0)
        self.perClient = perClient
        self.ceiling = ceiling
        self.window = window
        self.capacity = capacity
    }

    /// A guess counted before it was checked: `forgive` it once it proved right.
    public struct Guess: Sendable {
        let client: String
        let at: Date
    }

    /// Whole seconds `client` must wait before guessing again, or nil when it may guess now.
    public func retryAfter(client: String, now: Date = Date()) -> Int? {
        state.withLock { state in wait(&state, client: client, now: now) }
    }

    /// Counts a guess of `client` before it is checked, or refuses with 429 `too_many_attempts` and `Retry-After`
    /// while the client (or everyone, past the ceiling) must wait; `what` names the guesses in the message ("wrong
    /// pairing codes"). Counted first, so guesses sent at once cannot all pass while none is known wrong yet.
    public func admit(_ client: String, guessing what: String, now: Date = Date()) throws(APIError) -> Guess {
        let refusal: Int? = state.withLock { state in
            if let wait = wait(&state, client: client, now: now) { return wait }
            record(&state, client: client, now: now)
            return nil
        }
        guard let refusal else { return Guess(client: client, at: now) }
        throw .tooManyRequests("too many \(what); try again in \(refusal) s", code: "too_many_attempts", retryAfter: refusal)
    }

    /// Takes back a guess that was right: it does not count against anyone.
    public func forgive(_ guess: Guess) {
        state.withLock { state in
            if var mine = state.byClient[guess.client], let index = mine.lastIndex(of: guess.at) {
                mine.remove(at: index)
                state.byClient[guess.client] = mine.isEmpty ? nil : mine
            }
            if let index = state.all.lastIndex(of: guess.at) { state.all.remove(at: index) }
        }
    }

    /// Counts a wrong guess that was not admitted first.
    public func recordFailure(client: String, now: Date = Date()) {
        state.withLock { state in record(&state, client: client, now: now) }
    }

    private func wait(_ state: inout State, client: String, now: Date) -> Int? {
        if let mine = state.byClient[client] {
            let recent = mine.filter { now.timeIntervalSince($0) < window }
            if recent.count >= perClient, let oldest = recent.first { return wait(since: oldest, now: now) }
        }
        if let ceiling {
            state.all.removeAll { now.timeIntervalSince($0) >= window }
            if state.all.count >= ceiling, let oldest = state.all.first { return wait(since: oldest, now: now) }
        }
        return nil
    }

    private func record(_ state: inout State, client: String, now: Date) {
        if state.byClient[client] == nil, state.byClient.count >= capacity { forgetStalest(&state, now: now) }
        var mine = state.byClient[client, default: []].filter { now.timeIntervalSince($0) < window }
        mine.append(now)
        state.byClient[client] = Array(mine.suffix(perClient))
        if let ceiling {
            state.all.append(now)
            if state.all.count > ceiling { state.all.removeFirst(state.all.count - ceiling) }
        }
    }

    /// How many clients the table holds now.
    public var trackedClients: Int { state.withLock { $0.byClient.count } }

    private func wait(since oldest: Date, now: Date) -> Int {
        max(1, Int((window - now.timeIntervalSince(oldest)).rounded(.up)))
    }

    /// Drops clients with nothing left in the window, then, if that freed nothing, the older half by last guess:
    /// O(n log n) once per `capacity / 2` new clients at worst.
    private func forgetStalest(_ state: inout State, now: Date) {
        state.byClient = state.byClient.filter { ($0.value.last).map { now.timeIntervalSince($0) < window } ?? false }
        guard state.byClient.count >= capacity else { return }
        let byLastGuess = state.byClient.sorted { ($0.value.last ?? .distantPast) < ($1.value.last ?? .distantPast) }
        for (client, _) in byLastGuess.prefix(state.byClient.count - capacity / 2) { state.byClient[client] = nil }
    }
}
