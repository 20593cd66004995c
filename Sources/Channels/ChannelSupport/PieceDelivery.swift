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

    /// A piece's outcome as an answer: delivered goes on to the next piece, anything else stops.
    public init(_ outcome: ChannelSendOutcome) {
        if case .delivered(let remoteID) = outcome { self = .delivered(remoteID: remoteID) } else { self = .stop(outcome) }
    }
}

/// Sends a message as pieces, in order, and remembers per send how many went through, so the framework's next
/// attempt of the same send continues from the first undelivered piece instead of repeating the ones the reader
/// already has. The memory is the process's: after a restart a send starts again from its first piece, so each
/// piece is delivered at least once (never lost, possibly twice). Every channel that splits a message uses it
/// (Slack, Discord, WhatsApp, Telegram, Teams, Google Chat); they differ only in `reporting` and `wording`.
public final class PieceDelivery: Sendable {
    /// Which remote ids a delivered send reports, of its pieces' ids in order (pieces without one are skipped).
    public enum RemoteIDs: Sendable {
        /// All of them, comma-separated (Slack, Discord, WhatsApp).
        case all
        /// The first one (Google Chat: the message a reader opens first).
        case first
        /// The last one (Telegram, as the original reported it).
        case last

        func report(_ ids: [String?]) -> String? {
            let known = ids.compactMap { $0 }
            switch self {
            case .all: return known.isEmpty ? nil : known.joined(separator: ",")
            case .first: return known.first
            case .last: return known.last
            }
        }
    }

    /// How a reason about one piece of a longer message names it; a one-piece message keeps the reason as it is.
    public struct Wording: Sendable {
        let annotate: @Sendable (_ reason: String, _ index: Int, _ count: Int) -> String

        public init(_ annotate: @escaping @Sendable (_ reason: String, _ index: Int, _ count: Int) -> String) {
            self.annotate = annotate
        }

        /// "… (piece 2 of 3; 1 delivered before it)": Slack, Discord, WhatsApp.
        public static let trailing = Wording { reason, index, count in
            reason + " (piece \(index + 1) of \(count); \(index == 0 ? "none delivered yet" : "\(index) delivered before it"))"
        }
        /// "piece 2 of 3 (1 delivered): …": Telegram.
        public static let leading = Wording { reason, index, count in "piece \(index + 1) of \(count) (\(index) delivered): " + reason }
        /// "… (message 2 of 3)": Teams and Google Chat, whose pieces are separate messages.
        public static let message = Wording { reason, index, count in reason + " (message \(index + 1) of \(count))" }
    }

    private struct Progress {
        var pieceCount: Int
        var remoteIDs: [String?]
        var touched: ContinuousClock.Instant
    }

    private let progress = Mutex<[String: Progress]>([:])
    /// Sends the framework stopped attempting (it gave up, or the output was deleted) must not pile up.
    private let capacity: Int
    private let reporting: RemoteIDs
    private let wording: Wording

    public init(capacity: Int = 10_000, reporting: RemoteIDs = .all, wording: Wording = .trailing) {
        self.capacity = capacity
        self.reporting = reporting
        self.wording = wording
    }

    /// Sends `pieces` for `send`, starting after the pieces an earlier attempt delivered; `deliver` sends one
    /// piece (and gets its 0-based index). Delivered: the pieces' remote ids as `reporting` says.
    public func send<Piece>(_ send: ChannelSend, pieces: [Piece], deliver: (Piece, Int) async -> PieceAnswer) async -> ChannelSendOutcome {
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
                return annotate(outcome, piece: index, of: pieces.count)
            }
        }
        forget(send.id)
        return .delivered(remoteID: reporting.report(remoteIDs))
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
    func annotate(_ outcome: ChannelSendOutcome, piece index: Int, of count: Int) -> ChannelSendOutcome {
        guard count > 1 else { return outcome }
        return outcome.mappingReason { wording.annotate($0, index, count) }
    }
}

extension ChannelSendOutcome {
    /// The same outcome with every occurrence of each secret in its reason replaced, for the rare service or
    /// library message that echoes a token back.
    public func redacting(_ secrets: [String]) -> ChannelSendOutcome {
        mappingReason { text in secrets.filter { $0.count >= 4 }.reduce(text) { $0.replacingOccurrences(of: $1, with: "<redacted>") } }
    }

    /// The same outcome with `transform` applied to its reason (a delivery has none and stays as it is).
    public func mappingReason(_ transform: (String) -> String) -> ChannelSendOutcome {
        switch self {
        case .delivered: return self
        case .retry(let after, let reason): return .retry(after: after, reason: transform(reason))
        case .rejected(let reason): return .rejected(reason: transform(reason))
        case .failed(let reason): return .failed(reason: transform(reason))
        }
    }
}
