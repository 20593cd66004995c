import Foundation
import GatewayTestSupport
import PostgreSQL
import Synchronization

/// A fresh database on the test process's cluster.
func freshDatabase() async throws -> PostgresTestDatabase {
    try await PostgresCluster.shared().makeDatabase()
}

/// A pool on a fresh database.
func freshPool(size: Int = 4) async throws -> (PostgresPool, PostgresTestDatabase) {
    let database = try await freshDatabase()
    return (try PostgresPool(url: database.url, size: size), database)
}

/// A connection used from the tests' own threads (never from two at once: each step waits for the one before).
final class ConnectionBox: @unchecked Sendable {
    let connection: PostgresConnection
    init(_ connection: PostgresConnection) { self.connection = connection }

    /// Opens a connection on a thread of its own (it blocks on the network).
    static func open(_ url: String) async throws -> ConnectionBox {
        try await onOwnThread { ConnectionBox(try PostgresConnection(url: url)) }
    }

    /// Runs one step on a thread of its own.
    func step<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) throws -> T) async throws -> T {
        try await onOwnThread { try body(self.connection) }
    }
}

/// Everything a listener delivers, read by one consumer task (an AsyncStream takes one iterator).
final class EventLog: Sendable {
    private final class Store: Sendable {
        let state = Mutex<(events: [PostgresListener.Event], ended: Bool)>(([], false))
    }

    private let store = Store()
    private let consumer: Task<Void, Never>

    init(_ listener: PostgresListener) {
        let store = self.store
        consumer = Task {
            for await event in listener.events { store.state.withLock { $0.events.append(event) } }
            store.state.withLock { $0.ended = true }
        }
    }

    deinit { consumer.cancel() }

    var all: [PostgresListener.Event] { store.state.withLock { $0.events } }
    var ended: Bool { store.state.withLock { $0.ended } }

    var notifications: [PostgresNotification] {
        all.compactMap { event in
            if case .notification(let notification) = event { notification } else { nil }
        }
    }

    /// Waits until `condition` holds for what arrived, at most `timeout`; false when it ran out.
    func wait(timeout: Duration = .seconds(10), until condition: ([PostgresListener.Event]) -> Bool) async throws -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if condition(all) { return true }
            try await Task.sleep(for: .milliseconds(20))
        }
        return condition(all)
    }

    /// Waits until the listener's stream has ended.
    func waitForEnd(timeout: Duration = .seconds(10)) async throws -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline, !ended { try await Task.sleep(for: .milliseconds(20)) }
        return ended
    }
}
