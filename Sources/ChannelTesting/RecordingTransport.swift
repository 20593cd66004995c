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
