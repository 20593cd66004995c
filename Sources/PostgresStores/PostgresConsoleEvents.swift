import Foundation
import JSON
import Mobile
import PostgreSQL
import Synchronization

/// The console's live updates across the gateway processes of one database: what this node publishes goes out as
/// NOTIFY on `soulacy_console`, and what other nodes publish comes in through one listening connection and reaches
/// this node's subscribers, so a console open on any node sees a line written, a wake-up settled or an approval
/// decided on any other.
///
/// An event names what to read again and whose it is (ids, a state, a person), never what a line says. Events wait
/// in a small coalescing queue (the same event once) and go out in as few NOTIFYs as fit PostgreSQL's 8,000-byte
/// payload; a full queue drops the newest, as a subscriber that falls behind does (a console re-reads on reconnect).
/// Live updates are hints: after a lost listening connection nothing is replayed. Without a listening URL (a pooler
/// that breaks LISTEN) nothing is carried, and each node's console hears its own node only.
public final class PostgresConsoleEvents: Sendable {
    public static let channel = "soulacy_console"
    /// Under PostgreSQL's limit of 8,000 bytes per payload.
    static let payloadLimit = 7_500
    static let pendingLimit = 2_000

    /// One event as it travels: kind, id, state, audience (`e` everyone, `s` a person, `a` a person and the
    /// admins) and the person.
    struct Item: Codable, Hashable {
        var k: String
        var i: String?
        var s: String?
        var a: String
        var p: String?
    }

    /// One NOTIFY's payload: the node that sent it and its events.
    struct Batch: Codable {
        var n: String
        var e: [Item]
    }

    private struct Pending {
        var items: [Item] = []
        var queued: Set<Item> = []
        var dropped = 0
    }

    private let pool: PostgresPool
    private let listenURL: String?
    private let node: String
    private let hub: ConsoleEventHub
    private let pending = Mutex(Pending())
    private let running = Mutex<(flusher: Task<Void, Never>?, follower: Task<Void, Never>?, listener: PostgresListener?,
                                 signal: AsyncStream<Void>.Continuation?)>((nil, nil, nil, nil))

    public init(pool: PostgresPool, listenURL: String?, node: String, hub: ConsoleEventHub) {
        self.pool = pool
        self.listenURL = listenURL
        self.node = node
        self.hub = hub
    }

    deinit { stop() }

    /// Events this node could not send because its queue was full (since start).
    public var droppedCount: Int { pending.withLock { $0.dropped } }

    /// Listens for other nodes' events and forwards this node's. A listening connection that cannot be made
    /// throws here.
    public func start() async throws {
        guard let listenURL else { return }
        stop()
        let listener = try await PostgresListener.start(url: listenURL, channels: [Self.channel], applicationName: "soulacy-console")
        let (signals, signal) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        let follower = Task { [hub, node] in
            for await event in listener.events {
                if case .notification(let note) = event { Self.receive(note.payload, ownNode: node, hub: hub) }
            }
        }
        let flusher = Task { [weak self] in
            for await _ in signals {
                // A moment for a burst to gather into one NOTIFY.
                try? await Task.sleep(for: .milliseconds(5))
                await self?.flush()
            }
        }
        running.withLock { $0 = (flusher, follower, listener, signal) }
        hub.forward(to: { [weak self] event, audience in self?.enqueue(event, to: audience) })
    }

    /// Stops carrying events either way.
    public func stop() {
        hub.forward(to: nil)
        let old = running.withLock { state in
            defer { state = (nil, nil, nil, nil) }
            return state
        }
        old.listener?.stop()
        old.signal?.finish()
        old.follower?.cancel()
        old.flusher?.cancel()
    }

    private func enqueue(_ event: ConsoleEvent, to audience: ConsoleAudience) {
        let item = Self.item(event, audience)
        let first = pending.withLock { p -> Bool in
            guard !p.queued.contains(item) else { return false }
            guard p.items.count < Self.pendingLimit else {
                p.dropped += 1
                return false
            }
            p.items.append(item)
            p.queued.insert(item)
            return p.items.count == 1
        }
        if first { _ = running.withLock { $0.signal }?.yield() }
    }

    /// Sends what waits, in order; a NOTIFY that fails is dropped with its events (hints, never retried).
    private func flush() async {
        let items = pending.withLock { p -> [Item] in
            defer { p = Pending(items: [], queued: [], dropped: p.dropped) }
            return p.items
        }
        for payload in Self.payloads(node: node, items: items) {
            try? await pool.notify(channel: Self.channel, payload: payload)
        }
    }

    /// The events in as few payloads as fit the limit; an event that alone does not fit (a person's name of
    /// thousands of bytes) is left out.
    static func payloads(node: String, items: [Item]) -> [String] {
        let encoder = JSONEncoder()
        let head = "{\"n\":" + JSONValue.string(node).serialized() + ",\"e\":["
        var payloads: [String] = []
        var current: [String] = []
        var size = head.utf8.count + 2
        for item in items {
            guard let data = try? encoder.encode(item), let text = String(data: data, encoding: .utf8) else { continue }
            let added = text.utf8.count + (current.isEmpty ? 0 : 1)
            if head.utf8.count + 2 + text.utf8.count > payloadLimit { continue }
            if size + added > payloadLimit {
                payloads.append(head + current.joined(separator: ",") + "]}")
                current = []
                size = head.utf8.count + 2
            }
            size += text.utf8.count + (current.isEmpty ? 0 : 1)
            current.append(text)
        }
        if !current.isEmpty { payloads.append(head + current.joined(separator: ",") + "]}") }
        return payloads
    }

    /// Another node's events to this node's subscribers; this node's own (heard back) and anything unreadable are
    /// ignored.
    static func receive(_ payload: String, ownNode: String, hub: ConsoleEventHub) {
        guard let batch = try? JSONCoding.decode(Batch.self, from: payload, what: "a console event batch"), batch.n != ownNode else { return }
        for item in batch.e {
            guard let audience = audience(item) else { continue }
            hub.publishFromElsewhere(ConsoleEvent(kind: ConsoleEvent.Kind(rawValue: item.k), id: item.i, state: item.s), to: audience)
        }
    }

    static func item(_ event: ConsoleEvent, _ audience: ConsoleAudience) -> Item {
        switch audience {
        case .everyone: Item(k: event.kind.rawValue, i: event.id, s: event.state, a: "e", p: nil)
        case .subject(let person): Item(k: event.kind.rawValue, i: event.id, s: event.state, a: "s", p: person)
        case .subjectAndAdmins(let person): Item(k: event.kind.rawValue, i: event.id, s: event.state, a: "a", p: person)
        }
    }

    static func audience(_ item: Item) -> ConsoleAudience? {
        switch (item.a, item.p) {
        case ("e", _): .everyone
        case ("s", let person?): .subject(person)
        case ("a", let person?): .subjectAndAdmins(person)
        default: nil
        }
    }
}
