import ChannelAPI
import Synchronization

/// A channel that answers each attempt with the next scripted outcome (then `fallback`) and remembers every send:
/// to drive the durable hand-off through retries, refusals and restarts without a service.
public final class ScriptedChannel: OutboundChannel {
    public let name: String
    private let state: Mutex<(script: [ChannelSendOutcome], sends: [ChannelSend])>
    private let fallback: ChannelSendOutcome

    public init(name: String, script: [ChannelSendOutcome] = [], fallback: ChannelSendOutcome = .delivered(remoteID: nil)) {
        self.name = name
        self.fallback = fallback
        state = Mutex((script, []))
    }

    /// Every attempt so far, in order.
    public var sends: [ChannelSend] { state.withLock { $0.sends } }

    /// Appends outcomes to answer with, in order.
    public func enqueue(_ outcomes: ChannelSendOutcome...) { state.withLock { $0.script.append(contentsOf: outcomes) } }

    /// Any non-empty destination without spaces.
    public func validate(destination: String) throws(DestinationError) {
        guard !destination.isEmpty, !destination.contains(" ") else { throw .invalid("\(name) destination must be a name without spaces") }
    }

    public func attempt(_ send: ChannelSend) async -> ChannelSendOutcome {
        state.withLock { s in
            s.sends.append(send)
            return s.script.isEmpty ? fallback : s.script.removeFirst()
        }
    }
}
