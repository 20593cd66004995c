import ChannelAPI
import Foundation
import Synchronization

/// How one piece of a multi-piece message went.
public enum PieceAnswer: Sendable, Equatable {
    /// The service took the piece. `holdNext`: the service said its bucket is empty (Discord's
    /// `X-RateLimit-Remaining: 0`), so the next piece waits that long rather than earning a 429.
    case delivered(remoteID: String?, holdNext: Duration? = nil)
    /// The attempt ends here with this outcome (its reason is about this piece).
    case stop(ChannelSendOutcome)
}

/// Sends a message as pieces, in order, and remembers per send how many went through, so the framework's next
/// attempt of the same send continues from the first undelivered piece instead of repeating the ones the reader
/// already has. The memory is the process's: after a restart a send starts again from its first piece, so each
/// piece is delivered at least once (never lost, possibly twice).
public final class PieceDelivery: Sendable {
    private struct Progress {
        var pieceCount: Int
        var remoteIDs: [String?]
        var touched: ContinuousClock.Instant
    }

    private let progress = Mutex<[String: Progress]>([:])
    /// Sends the framework stopped attempting (it gave up, or the output was deleted) must not pile up.
    private let capacity: Int

    public init(capacity: Int = 10_000) {
        self.capacity = capacity
    }

    /// Sends `pieces` for `send`, starting after the pieces an earlier attempt delivered; `deliver` sends one
    /// piece (its text and 0-based index). Delivered: the pieces' remote ids in order, comma-separated.
    public func send(_ send: ChannelSend, pieces: [String], deliver: (String, Int) async -> PieceAnswer) async -> ChannelSendOutcome {
        guard !pieces.isEmpty else { return .failed(reason: "nothing to send: the output has no text") }
        var remoteIDs = alreadyDelivered(send.id, pieceCount: pieces.count)
        for index in remoteIDs.count..<pieces.count {
            switch await deliver(pieces[index], index) {
            case .delivered(let remoteID, let holdNext):
                remoteIDs.append(remoteID)
                record(send.id, pieceCount: pieces.count, remoteIDs: remoteIDs)
                if let holdNext, index + 1 < pieces.count {
                    return .retry(after: holdNext, reason: "the service's rate limit is used up after piece \(index + 1) of \(pieces.count); "
                                  + "the rest follows from piece \(index + 2)")
                }
            case .stop(let outcome):
                if case .retry = outcome {} else { forget(send.id) }
                return Self.annotate(outcome, piece: index, of: pieces.count)
            }
        }
        forget(send.id)
        let ids = remoteIDs.compactMap { $0 }
        return .delivered(remoteID: ids.isEmpty ? nil : ids.joined(separator: ","))
    }

    /// How many pieces of `sendID` went through so far (for tests and logs).
    public func deliveredCount(_ sendID: String) -> Int {
        progress.withLock { $0[sendID]?.remoteIDs.count ?? 0 }
    }

    private func alreadyDelivered(_ sendID: String, pieceCount: Int) -> [String?] {
        progress.withLock { state in
            // The same output always splits the same way; a different count means it is not the same message.
            guard let known = state[sendID], known.pieceCount == pieceCount, known.remoteIDs.count < pieceCount else { return [] }
            return known.remoteIDs
        }
    }

    private func record(_ sendID: String, pieceCount: Int, remoteIDs: [String?]) {
        let now = ContinuousClock.now
        progress.withLock { state in
            state[sendID] = Progress(pieceCount: pieceCount, remoteIDs: remoteIDs, touched: now)
            if state.count > capacity, let oldest = state.min(by: { $0.value.touched < $1.value.touched })?.key {
                state[oldest] = nil
            }
        }
    }

    private func forget(_ sendID: String) {
        _ = progress.withLock { $0.removeValue(forKey: sendID) }
    }

    /// A one-piece message keeps the service's reason as it is; a longer one says which piece it was about.
    static func annotate(_ outcome: ChannelSendOutcome, piece index: Int, of count: Int) -> ChannelSendOutcome {
        guard count > 1 else { return outcome }
        let before = index == 0 ? "none delivered yet" : "\(index) delivered before it"
        let note = " (piece \(index + 1) of \(count); \(before))"
        switch outcome {
        case .retry(let after, let reason): return .retry(after: after, reason: reason + note)
        case .rejected(let reason): return .rejected(reason: reason + note)
        case .failed(let reason): return .failed(reason: reason + note)
        case .delivered: return outcome
        }
    }
}

extension ChannelSendOutcome {
    /// The same outcome with every occurrence of each secret in its reason replaced, for the rare service or
    /// library message that echoes a token back.
    public func redacting(_ secrets: [String]) -> ChannelSendOutcome {
        func clean(_ text: String) -> String {
            secrets.filter { $0.count >= 4 }.reduce(text) { $0.replacingOccurrences(of: $1, with: "<redacted>") }
        }
        switch self {
        case .delivered: return self
        case .retry(let after, let reason): return .retry(after: after, reason: clean(reason))
        case .rejected(let reason): return .rejected(reason: clean(reason))
        case .failed(let reason): return .failed(reason: clean(reason))
        }
    }
}
