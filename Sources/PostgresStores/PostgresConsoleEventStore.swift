import Foundation
import Mobile
import PostgreSQL
import Synchronization

/// The console's live updates across the gateway processes of one database: a console open on any node hears a
/// line written, a wake-up settled or an approval decided on any other.
///
/// Nothing is carried while no console is open on another node, so a gateway nobody watches pays nothing: a node
/// with console subscribers keeps one connection LISTENing on `soulacy_console` (named `soulacy-console` in
/// `pg_stat_activity`), and every node looks every `checkInterval` whether another node has one, and forwards its
/// own events only then. What it forwards goes out through a `PostgresAnnouncer` (after the writes committed, many
/// in one statement), one small payload an event: kind, id, state and audience, never what a line says. An event
/// whose payload would pass PostgreSQL's 8,000 bytes is not carried. Events are hints: one published in the moment
/// before the other node is seen (up to `checkInterval` after its console opened) or while a listening connection
/// is down is not replayed, and a console reads afresh when it reconnects. With no listening URL (a pooler that
/// breaks LISTEN) nothing is carried and each node's console hears its own node only.
public final class PostgresConsoleEvents: Sendable {
    public static let channel = "soulacy_console"
    /// `application_name` of the listening connection: how nodes see each other's open consoles.
    static let listenerName = "soulacy-console"
    static let payloadLimit = 7_900

    /// One event as it travels: the node that published it, the event, and its audience (`e` everyone, `s` a person,
    /// `a` a person and the admins; `p` the person).
    struct Item: Codable, Equatable {
        var n: String
        var k: String
        var i: String?
        var s: String?
        var a: String
        var p: String?
    }

    private let pool: PostgresPool
    private let listenURL: String?
    private let node: String
    private let hub: ConsoleEventHub
    private let announcer: PostgresAnnouncer
    private let checkInterval: Duration
    private let running = Mutex<(watcher: Task<Void, Never>?, listener: PostgresListener?, follower: Task<Void, Never>?, stopped: Bool)>((nil, nil, nil, false))

    public init(pool: PostgresPool, listenURL: String?, node: String, hub: ConsoleEventHub, checkInterval: Duration = .milliseconds(500)) {
        self.pool = pool
        self.listenURL = listenURL
        self.node = node
        self.hub = hub
        self.checkInterval = checkInterval
        announcer = PostgresAnnouncer(pool: pool, channel: Self.channel)
    }

    deinit { stop() }

    /// Starts watching for consoles: this node's (to listen) and other nodes' (to forward to).
    public func start() {
        guard listenURL != nil else { return }
        stop()
        let watcher = Task { [weak self] in
            while !Task.isCancelled {
                await self?.check()
                try? await Task.sleep(for: self?.checkInterval ?? .seconds(1))
            }
        }
        running.withLock { state in
            state.watcher = watcher
            state.stopped = false
        }
    }

    /// Stops listening and forwarding.
    public func stop() {
        hub.forward(to: nil)
        let old = running.withLock { state in
            defer { state = (nil, nil, nil, true) }
            return state
        }
        old.watcher?.cancel()
        old.listener?.stop()
        old.follower?.cancel()
    }

    /// One look: listen while this node has a console open; forward while another node listens.
    func check() async {
        guard let listenURL else { return }
        let local = hub.subscriberCount > 0
        let listening = running.withLock { $0.listener }
        if local, listening == nil {
            if let listener = try? await PostgresListener.start(url: listenURL, channels: [Self.channel], applicationName: Self.listenerName) {
                let hub = hub, node = node
                let follower = Task {
                    for await event in listener.events {
                        if case .notification(let note) = event { Self.receive(note.payload, ownNode: node, hub: hub) }
                    }
                }
                // A stop that came while the listener was connecting wins: nothing is left running after it.
                let kept = running.withLock { state -> Bool in
                    guard !state.stopped else { return false }
                    state.listener = listener
                    state.follower = follower
                    return true
                }
                if !kept {
                    listener.stop()
                    follower.cancel()
                    return
                }
            }
        } else if !local, let listening {
            running.withLock { state in
                state.listener = nil
                state.follower = nil
            }
            listening.stop()
        }
        let own = running.withLock { $0.listener?.backendPID } ?? 0
        guard let others = try? await pool.withConnection({ db in
            try db.query("SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1 AND pid <> $2",
                         Self.listenerName, Int64(own)).first?.int("n") ?? 0
        }) else { return }
        guard !running.withLock({ $0.stopped }) else { return }
        if others > 0, !hub.isForwarding {
            let announcer = announcer, node = node
            hub.forward(to: { event, audience in
                if let payload = Self.payload(event, audience, node: node) { announcer.announce(payload) }
            })
        } else if others == 0, hub.isForwarding {
            hub.forward(to: nil)
        }
    }

    static func payload(_ event: ConsoleEvent, _ audience: ConsoleAudience, node: String) -> String? {
        let (scope, person): (String, String?) = switch audience {
        case .everyone: ("e", nil)
        case .subject(let person): ("s", person)
        case .subjectAndAdmins(let person): ("a", person)
        }
        let item = Item(n: node, k: event.kind.rawValue, i: event.id, s: event.state, a: scope, p: person)
        guard let data = try? JSONEncoder().encode(item), data.count <= payloadLimit else { return nil }
        return String(decoding: data, as: UTF8.self)
    }

    /// Another node's event to this node's subscribers; this node's own (heard back) and anything unreadable are
    /// ignored.
    static func receive(_ payload: String, ownNode: String, hub: ConsoleEventHub) {
        guard let item = try? JSONDecoder().decode(Item.self, from: Data(payload.utf8)), item.n != ownNode else { return }
        let audience: ConsoleAudience? = switch (item.a, item.p) {
        case ("e", _): .everyone
        case ("s", let person?): .subject(person)
        case ("a", let person?): .subjectAndAdmins(person)
        default: nil
        }
        guard let audience else { return }
        hub.publishFromElsewhere(ConsoleEvent(kind: ConsoleEvent.Kind(rawValue: item.k), id: item.i, state: item.s), to: audience)
    }
}
