import ChannelAPI
import Foundation
import Synchronization

/// A transport that accepts everything and remembers what it was asked to send.
public final class RecordingTransport: WakeTransport {
    public struct Sent: Sendable, Equatable {
        public let signal: WakeSignal
        public let target: WakeTarget
    }

    public let name: String
    private let platforms: Set<WakeTarget.Platform>
    private let recorded = Mutex<[Sent]>([])

    public init(name: String = "recording", platforms: Set<WakeTarget.Platform> = [.ios, .android]) {
        self.name = name
        self.platforms = platforms
    }

    public var sent: [Sent] { recorded.withLock { $0 } }

    public func canWake(_ target: WakeTarget) -> Bool { platforms.contains(target.platform) && !target.pushToken.isEmpty }

    public func send(_ signal: WakeSignal, to target: WakeTarget) async -> WakeOutcome {
        recorded.withLock { $0.append(Sent(signal: signal, target: target)) }
        return .delivered
    }
}

/// A transport that answers from a script (then `fallback`), to drive retries, rejections and failures.
public final class ScriptedTransport: WakeTransport {
    public let name: String
    private let platforms: Set<WakeTarget.Platform>
    private let state: Mutex<(script: [WakeOutcome], calls: [RecordingTransport.Sent])>
    private let fallback: WakeOutcome

    public init(name: String = "scripted", platforms: Set<WakeTarget.Platform> = [.ios, .android], script: [WakeOutcome] = [], fallback: WakeOutcome = .delivered) {
        self.name = name
        self.platforms = platforms
        self.fallback = fallback
        state = Mutex((script, []))
    }

    /// Appends outcomes to answer with, in order.
    public func enqueue(_ outcomes: WakeOutcome...) { state.withLock { $0.script.append(contentsOf: outcomes) } }

    public var calls: [RecordingTransport.Sent] { state.withLock { $0.calls } }

    public func canWake(_ target: WakeTarget) -> Bool { platforms.contains(target.platform) && !target.pushToken.isEmpty }

    public func send(_ signal: WakeSignal, to target: WakeTarget) async -> WakeOutcome {
        state.withLock { s in
            s.calls.append(.init(signal: signal, target: target))
            return s.script.isEmpty ? fallback : s.script.removeFirst()
        }
    }
}

/// A transport that remembers every send and holds back the ones `holds` picks (a slow answer from the service)
/// until the test answers them: to make a wake-up's answer arrive at a chosen moment, or many at once.
public final class HoldingTransport: WakeTransport {
    public let name: String
    private let holds: @Sendable (WakeSignal) -> Bool
    private let state = Mutex<(calls: [RecordingTransport.Sent], held: [CheckedContinuation<WakeOutcome, Never>])>(([], []))

    /// Holds every send unless `holds` says otherwise.
    public init(name: String = "holding", holds: @escaping @Sendable (WakeSignal) -> Bool = { _ in true }) {
        self.name = name
        self.holds = holds
    }

    public var calls: [RecordingTransport.Sent] { state.withLock { $0.calls } }
    /// How many sends are waiting for their answer.
    public var heldCount: Int { state.withLock { $0.held.count } }

    public func canWake(_ target: WakeTarget) -> Bool { true }

    public func send(_ signal: WakeSignal, to target: WakeTarget) async -> WakeOutcome {
        let held = holds(signal)
        state.withLock { $0.calls.append(.init(signal: signal, target: target)) }
        guard held else { return .delivered }
        return await withCheckedContinuation { continuation in state.withLock { $0.held.append(continuation) } }
    }

    /// Answers every send held so far with `outcome`.
    public func answerHeld(with outcome: WakeOutcome = .delivered) {
        let waiting = state.withLock { s in
            defer { s.held = [] }
            return s.held
        }
        for continuation in waiting { continuation.resume(returning: outcome) }
    }
}
