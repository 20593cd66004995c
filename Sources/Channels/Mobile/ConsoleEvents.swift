import ChannelAPI
import Foundation
import JSON
import Synchronization

/// Something the console shows changed: it names what to read again, never what it now says (`delivery` with the
/// line's id, `device` with the device's, `approval` with its id and state, `agents` when they reloaded or a run ended).
public struct ConsoleEvent: Sendable, Hashable {
    /// An open set: a new kind breaks no subscriber.
    public struct Kind: RawRepresentable, Sendable, Hashable {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public static let delivery = Kind(rawValue: "delivery")
        public static let device = Kind(rawValue: "device")
        public static let approval = Kind(rawValue: "approval")
        public static let agents = Kind(rawValue: "agents")
    }

    public var kind: Kind
    public var id: String?
    public var state: String?

    public init(kind: Kind, id: String? = nil, state: String? = nil) {
        self.kind = kind
        self.id = id
        self.state = state
    }

    public static func delivery(_ id: String) -> ConsoleEvent { ConsoleEvent(kind: .delivery, id: id) }
    public static func device(_ id: String) -> ConsoleEvent { ConsoleEvent(kind: .device, id: id) }
    public static func approval(_ id: String, state: String) -> ConsoleEvent { ConsoleEvent(kind: .approval, id: id, state: state) }
    public static let agents = ConsoleEvent(kind: .agents)

    /// The event's `data:` object: `{"id"}`, `{"id", "state"}` or `{}`.
    public var json: String {
        var fields: [String: JSONValue] = [:]
        if let id { fields["id"] = .string(id) }
        if let state { fields["state"] = .string(state) }
        return JSONValue.object(fields).serialized()
    }

    /// The server-sent event frame (`event:` and one `data:` line; JSON never holds a raw newline).
    public var frame: String { "event: \(kind.rawValue)\ndata: \(json)\n\n" }
}

/// Whose data an event is about: only those subscribers hear it.
public enum ConsoleAudience: Sendable, Hashable {
    /// Everyone's (a line to `all`, the agents).
    case everyone
    /// One person's (their line, their approval).
    case subject(String)
    /// One person's, and every admin's (a device: admins see every device).
    case subjectAndAdmins(String)

    func includes(subject: String, isAdmin: Bool) -> Bool {
        switch self {
        case .everyone: true
        case .subject(let owner): owner == subject
        case .subjectAndAdmins(let owner): owner == subject || isAdmin
        }
    }
}

/// The console's live updates in this process: stores and brokers publish what changed, each open event stream
/// subscribes for its caller. Publishing never waits: each subscriber has a bounded queue where an event already
/// waiting is not queued twice, and a subscriber whose queue is full (a browser that stopped reading) is ended, so
/// it reconnects and reads afresh instead of holding memory or a writer. Where several gateway processes share one
/// database, a forwarder (`forward(to:)`) carries what this process publishes to the others, and what they publish
/// arrives through `publishFromElsewhere`.
public final class ConsoleEventHub: Sendable {
    public static let defaultCapacity = 256
    /// Takes this process's events to the other nodes; it must never wait.
    public typealias Forwarder = @Sendable (ConsoleEvent, ConsoleAudience) -> Void

    private let state = Mutex<(subscribers: [Int: ConsoleSubscription], nextID: Int, closed: Bool)>(([:], 0, false))
    /// Read without the lock: a write path with nobody listening pays one atomic load.
    private let count = Atomic<Int>(0)
    /// The closure is kept in a box: a bare closure read through `Mutex.withLock`'s `inout` is reabstracted and
    /// written back, gaining two thunks each time, until a call through it overflows the stack.
    private final class ForwarderBox: Sendable {
        let forward: Forwarder
        init(_ forward: @escaping Forwarder) { self.forward = forward }
    }

    private let forwarder = Mutex<ForwarderBox?>(nil)
    private let forwarding = Atomic<Bool>(false)

    public init() {}

    public var subscriberCount: Int { count.load(ordering: .acquiring) }

    /// Whether anyone may hear an event published now: a subscriber in this process, or other nodes. Write paths
    /// check it before building an event.
    public var isHeard: Bool { forwarding.load(ordering: .acquiring) || count.load(ordering: .acquiring) > 0 }

    /// Whether a forwarder takes this process's events to other nodes now.
    public var isForwarding: Bool { forwarding.load(ordering: .acquiring) }

    /// Sends every event published from now on to `forwarder` as well (nil stops it).
    public func forward(to forwarder: Forwarder?) {
        let box = forwarder.map(ForwarderBox.init)
        self.forwarder.withLock { $0 = box }
        forwarding.store(forwarder != nil, ordering: .releasing)
    }

    /// A subscription for one caller; it ends when cancelled, when it overflows, or when the hub closes.
    public func subscribe(subject: String, isAdmin: Bool, capacity: Int = ConsoleEventHub.defaultCapacity) -> ConsoleSubscription {
        let id = state.withLock { s in defer { s.nextID += 1 }; return s.nextID }
        let subscription = ConsoleSubscription(subject: subject, isAdmin: isAdmin, capacity: max(1, capacity)) { [weak self] in self?.remove(id) }
        let open = state.withLock { s -> Bool in
            guard !s.closed else { return false }
            s.subscribers[id] = subscription
            count.add(1, ordering: .releasing)
            return true
        }
        if !open { subscription.end(overflowed: false) }
        return subscription
    }

    /// Tells every subscriber in `audience` (never blocks; see the type's note).
    public func publish(_ event: ConsoleEvent, to audience: ConsoleAudience) {
        if forwarding.load(ordering: .acquiring), let box = forwarder.withLock({ $0 }) { box.forward(event, audience) }
        publishFromElsewhere(event, to: audience)
    }

    /// Tells this process's subscribers only: an event another node published and forwarded here.
    public func publishFromElsewhere(_ event: ConsoleEvent, to audience: ConsoleAudience) {
        guard count.load(ordering: .acquiring) > 0 else { return }
        let targets = state.withLock { $0.subscribers.values.filter { audience.includes(subject: $0.subject, isAdmin: $0.isAdmin) } }
        for subscription in targets { subscription.offer(event) }
    }

    /// Ends every subscription and refuses new ones (the gateway stops): open streams finish so the listener can drain.
    public func close() {
        forward(to: nil)
        let all = state.withLock { s -> [ConsoleSubscription] in
            s.closed = true
            defer { s.subscribers = [:] }
            count.store(0, ordering: .releasing)
            return Array(s.subscribers.values)
        }
        for subscription in all { subscription.end(overflowed: false) }
    }

    private func remove(_ id: Int) {
        state.withLock { s in
            if s.subscribers.removeValue(forKey: id) != nil { count.subtract(1, ordering: .releasing) }
        }
    }
}

/// One caller's events, in order, read one at a time by its stream's writer.
public final class ConsoleSubscription: Sendable {
    struct State {
        var queue: [ConsoleEvent] = []
        var queued: Set<ConsoleEvent> = []
        var waiter: CheckedContinuation<ConsoleEvent?, Never>?
        var ended = false
        var overflowed = false
    }

    public let subject: String
    public let isAdmin: Bool
    let capacity: Int
    private let state = Mutex(State())
    private let onEnd: @Sendable () -> Void

    init(subject: String, isAdmin: Bool, capacity: Int, onEnd: @escaping @Sendable () -> Void) {
        self.subject = subject
        self.isAdmin = isAdmin
        self.capacity = capacity
        self.onEnd = onEnd
    }

    /// Whether it ended because its reader fell too far behind.
    public var overflowed: Bool { state.withLock { $0.overflowed } }
    public var isEnded: Bool { state.withLock { $0.ended } }
    /// Events waiting to be read (at most `capacity`).
    public var queuedCount: Int { state.withLock { $0.queue.count } }

    func offer(_ event: ConsoleEvent) {
        enum Step { case none, hand(CheckedContinuation<ConsoleEvent?, Never>), overflow }
        let step: Step = state.withLock { s in
            if s.ended { return .none }
            if let waiter = s.waiter {
                s.waiter = nil
                return .hand(waiter)
            }
            // The same news already waiting says it all: the reader re-reads what it names once.
            if s.queued.contains(event) { return .none }
            if s.queue.count >= capacity { return .overflow }
            s.queue.append(event)
            s.queued.insert(event)
            return .none
        }
        switch step {
        case .none: break
        case .hand(let waiter): waiter.resume(returning: event)
        case .overflow: end(overflowed: true)
        }
    }

    /// The next event, waiting for one; nil once the subscription has ended (or the waiting task is cancelled).
    public func next() async -> ConsoleEvent? {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<ConsoleEvent?, Never>) in
                let ready: ConsoleEvent?? = state.withLock { s in
                    if !s.queue.isEmpty {
                        let event = s.queue.removeFirst()
                        s.queued.remove(event)
                        return .some(event)
                    }
                    if s.ended { return .some(nil) }
                    s.waiter = continuation
                    return nil
                }
                if let ready { continuation.resume(returning: ready) }
            }
        } onCancel: {
            cancel()
        }
    }

    /// Stops it: the reader's `next()` answers nil, and the hub forgets it.
    public func cancel() { end(overflowed: false) }

    func end(overflowed: Bool) {
        let (first, waiter): (Bool, CheckedContinuation<ConsoleEvent?, Never>?) = state.withLock { s in
            guard !s.ended else { return (false, nil) }
            s.ended = true
            s.overflowed = overflowed
            // What was waiting is dropped with it: a reader that reconnects reads everything afresh.
            s.queue = []
            s.queued = []
            defer { s.waiter = nil }
            return (true, s.waiter)
        }
        guard first else { return }
        waiter?.resume(returning: nil)
        onEnd()
    }
}

/// Run progress as the console hears it: every run's end is an `agents` event; everything else goes on to the
/// observer the runs already had (the Live Activities).
public struct ConsoleRunProgress: RunProgressObserver {
    let inner: (any RunProgressObserver)?
    let events: ConsoleEventHub

    public init(_ inner: (any RunProgressObserver)?, events: ConsoleEventHub) {
        self.inner = inner
        self.events = events
    }

    public func runStarted(_ run: ActivityRun) async { await inner?.runStarted(run) }
    public func toolCalled(sessionID: String, tool: String) async { await inner?.toolCalled(sessionID: sessionID, tool: tool) }
    public func waitingForApproval(_ run: ActivityRun, callID: String, tool: String) async {
        await inner?.waitingForApproval(run, callID: callID, tool: tool)
    }
    public func approvalAnswered(sessionID: String, approved: Bool) async { await inner?.approvalAnswered(sessionID: sessionID, approved: approved) }
    public func finished(sessionID: String, succeeded: Bool) async {
        await inner?.finished(sessionID: sessionID, succeeded: succeeded)
        events.publish(.agents, to: .everyone)
    }
}
