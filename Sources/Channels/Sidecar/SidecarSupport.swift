import ChannelAPI
import Foundation
import Synchronization

/// The original supervisor's restart delays: 1 s doubling per crash up to 60 s, each ±10 %.
public enum SidecarBackoff {
    /// The delay before restart number `restart` (1 for the first): d = minimum·2^(restart−1) capped at `maximum`,
    /// then d − d/10 + unit·d/5 for `unit` in [0, 1), so within [0.9 d, 1.1 d].
    public static func delay(restart: Int, minimum: Duration = .seconds(1), maximum: Duration = .seconds(60), unit: Double) -> Duration {
        let base = seconds(minimum) * pow(2, Double(max(0, min(restart - 1, 40))))
        let capped = min(base, seconds(maximum))
        let jittered = capped - capped / 10 + min(max(unit, 0), 1) * capped / 5
        return .milliseconds(Int64((jittered * 1000).rounded()))
    }

    /// A duration in seconds.
    public static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    /// A duration as Go prints one rounded to the millisecond (`1.043s`, `850ms`, `1m5.5s`), as the original's
    /// status text shows it.
    public static func text(_ duration: Duration) -> String {
        let ms = Int64((seconds(duration) * 1000).rounded())
        if ms == 0 { return "0s" }
        if ms < 1000 { return "\(ms)ms" }
        let minutes = ms / 60_000
        let rest = ms % 60_000
        var secondsText = String(rest / 1000)
        if rest % 1000 != 0 {
            var fraction = String(format: "%03d", Int(rest % 1000))
            while fraction.hasSuffix("0") { fraction.removeLast() }
            secondsText += "." + fraction
        }
        return (minutes > 0 ? "\(minutes)m" : "") + secondsText + "s"
    }
}

/// Inbound messages from a sidecar, for the framework to start runs with: an async sequence with one consumer
/// and a bounded buffer. When the consumer falls behind, the sidecar's reader waits (and so does the sidecar,
/// on its full stdout) instead of dropping messages or filling the memory.
public final class InboundMessageStream: AsyncSequence, Sendable {
    public typealias Element = InboundMessage

    private struct State {
        var buffer: [InboundMessage] = []
        var finished = false
        var consumer: CheckedContinuation<InboundMessage?, Never>?
        var producers: [CheckedContinuation<Void, Never>] = []
    }
    private let state = Mutex(State())
    public let capacity: Int

    public init(capacity: Int = 256) { self.capacity = Swift.max(1, capacity) }

    /// Adds one, waiting while the buffer is full; dropped once the stream is finished.
    func push(_ message: InboundMessage) async {
        while true {
            enum Step { case done, wait }
            let full = state.withLock { s -> Bool in s.buffer.count >= capacity && !s.finished }
            if full {
                await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                    let resumeNow = state.withLock { s -> Bool in
                        if s.buffer.count < capacity || s.finished { return true }
                        s.producers.append(continuation)
                        return false
                    }
                    if resumeNow { continuation.resume() }
                }
                continue
            }
            let consumer = state.withLock { s -> CheckedContinuation<InboundMessage?, Never>? in
                if s.finished { return nil }
                if let consumer = s.consumer {
                    s.consumer = nil
                    return consumer
                }
                s.buffer.append(message)
                return nil
            }
            consumer?.resume(returning: message)
            return
        }
    }

    /// Ends the sequence (the channel stopped); what is buffered is still read first.
    func finish() {
        let (consumer, producers) = state.withLock { s -> (CheckedContinuation<InboundMessage?, Never>?, [CheckedContinuation<Void, Never>]) in
            s.finished = true
            defer { s.consumer = nil; s.producers = [] }
            return (s.buffer.isEmpty ? s.consumer : nil, s.producers)
        }
        consumer?.resume(returning: nil)
        producers.forEach { $0.resume() }
    }

    func next() async -> InboundMessage? {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<InboundMessage?, Never>) in
                enum Now { case message(InboundMessage, CheckedContinuation<Void, Never>?), end, park }
                let now = state.withLock { s -> Now in
                    if !s.buffer.isEmpty {
                        let message = s.buffer.removeFirst()
                        return .message(message, s.producers.isEmpty ? nil : s.producers.removeFirst())
                    }
                    if s.finished || Task.isCancelled { return .end }
                    s.consumer = continuation
                    return .park
                }
                switch now {
                case .message(let message, let producer):
                    producer?.resume()
                    continuation.resume(returning: message)
                case .end: continuation.resume(returning: nil)
                case .park: break
                }
            }
        } onCancel: {
            let consumer = state.withLock { s -> CheckedContinuation<InboundMessage?, Never>? in
                defer { s.consumer = nil }
                return s.consumer
            }
            consumer?.resume(returning: nil)
        }
    }

    /// The next message, waiting at most `limit`; nil when none came in time or the stream ended. A message handed
    /// over just as the wait ran out is still returned, never lost between the two.
    func next(within limit: Duration) async -> InboundMessage? {
        await withTaskGroup(of: InboundMessage?.self) { group in
            group.addTask { await self.next() }
            group.addTask {
                try? await Task.sleep(for: limit)
                return nil
            }
            var found = await group.next() ?? nil
            group.cancelAll()
            while let other = await group.next() {
                if found == nil { found = other }
            }
            return found
        }
    }

    /// A message already buffered, without waiting; nil when there is none.
    func nextBuffered() -> InboundMessage? {
        let (message, producer) = state.withLock { s -> (InboundMessage?, CheckedContinuation<Void, Never>?) in
            guard !s.buffer.isEmpty else { return (nil, nil) }
            return (s.buffer.removeFirst(), s.producers.isEmpty ? nil : s.producers.removeFirst())
        }
        producer?.resume()
        return message
    }

    /// Ended and read to its end: no message will come any more.
    var isDrained: Bool { state.withLock { $0.finished && $0.buffer.isEmpty } }

    public struct AsyncIterator: AsyncIteratorProtocol {
        let stream: InboundMessageStream
        public mutating func next() async -> InboundMessage? { await stream.next() }
    }

    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(stream: self) }
}

/// Whether `task` ends within `limit` (it is not cancelled either way): a handshake, a writer's flush, a grace.
func finished(_ task: Task<Void, Never>, within limit: Duration) async -> Bool {
    await withTaskGroup(of: Bool.self) { group in
        group.addTask { await task.value; return true }
        group.addTask { try? await Task.sleep(for: limit); return false }
        let first = await group.next() ?? false
        group.cancelAll()
        return first
    }
}
