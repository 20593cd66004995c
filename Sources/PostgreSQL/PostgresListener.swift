import Foundation
import Glibc
import Synchronization

/// One dedicated connection that LISTENs on a few channels and hands what arrives to an `AsyncStream`. NOTIFY is a
/// hint, the table is the truth: after a lost connection the listener reconnects with backoff, LISTENs again and
/// yields `.reconnected`, and a consumer then re-reads its table for whatever was sent while nobody listened.
///
/// The connection lives on a thread of the listener's own, which waits in `poll` on the socket; no task blocks.
public final class PostgresListener: Sendable {
    public enum Event: Sendable, Equatable {
        case notification(PostgresNotification)
        /// The connection was lost and is back: notifications in between are gone, re-read the table.
        case reconnected
    }

    /// How long to wait before reconnecting: doubling from `initial` up to `maximum`.
    public struct Backoff: Sendable {
        public var initial: Duration
        public var maximum: Duration
        public init(initial: Duration = .milliseconds(100), maximum: Duration = .seconds(5)) {
            self.initial = initial
            self.maximum = maximum
        }
    }

    /// What arrives, in order. It ends when the listener stops; a consumer that ends its iteration stops it.
    public let events: AsyncStream<Event>
    public let channels: [String]
    private let loop: ListenerLoop

    /// Connects, LISTENs on `channels` and starts delivering. A connection that cannot be made now throws here (a
    /// wrong URL is a startup error); after that, breaks are retried for as long as the listener runs.
    /// `probeInterval`: after that long without traffic the connection is checked with a `SELECT 1`, so a silently
    /// dead peer is noticed. `bufferLimit`: a consumer that falls this far behind loses the oldest hints.
    public static func start(url: String, channels: [String], backoff: Backoff = Backoff(), probeInterval: Duration = .seconds(15),
                             bufferLimit: Int = 10_000, applicationName: String = "soulacy-listener") async throws -> PostgresListener {
        try PostgresConnection.validate(url)
        for channel in channels { try validate(channel: channel) }
        let (events, continuation) = AsyncStream.makeStream(of: Event.self, bufferingPolicy: .bufferingNewest(max(1, bufferLimit)))
        let loop = try ListenerLoop(url: url, applicationName: applicationName, channels: channels, backoff: backoff,
                                    probeInterval: probeInterval, continuation: continuation)
        try await loop.start()
        return PostgresListener(events: events, channels: channels, loop: loop)
    }

    private init(events: AsyncStream<Event>, channels: [String], loop: ListenerLoop) {
        self.events = events
        self.channels = channels
        self.loop = loop
    }

    deinit { loop.stop() }

    /// Closes the connection and ends `events`.
    public func stop() { loop.stop() }

    /// The server process of the listening connection (0 while reconnecting): tests terminate it to cut the line.
    public var backendPID: Int32 { loop.backendPID.load(ordering: .acquiring) }

    /// PostgreSQL channel names are identifiers: at most 63 bytes (longer ones are cut by LISTEN and refused by
    /// `pg_notify`, so the two would never meet).
    static func validate(channel: String) throws(PostgresError) {
        guard !channel.isEmpty, channel.utf8.count <= 63, !channel.utf8.contains(0) else {
            throw PostgresError(kind: .other, message: "the channel name '\(channel.prefix(80))' must be 1 to 63 bytes without NUL")
        }
    }
}

/// The listener's thread: waits on the socket and a wake-up pipe, reads notifications, reconnects after a break.
final class ListenerLoop: @unchecked Sendable {
    private let url: String
    private let applicationName: String
    private let channels: [String]
    private let backoff: PostgresListener.Backoff
    private let probeInterval: Duration
    private let continuation: AsyncStream<PostgresListener.Event>.Continuation
    /// Written to by `stop()`, so a thread waiting in poll (for traffic or through a backoff) wakes at once.
    private let wakeRead: Int32
    private let wakeWrite: Int32
    private let stopped = Atomic<Bool>(false)
    let backendPID = Atomic<Int32>(0)
    /// Touched only on the thread.
    private var connection: PostgresConnection?

    init(url: String, applicationName: String, channels: [String], backoff: PostgresListener.Backoff, probeInterval: Duration,
         continuation: AsyncStream<PostgresListener.Event>.Continuation) throws(PostgresError) {
        self.url = url
        self.applicationName = applicationName
        self.channels = channels
        self.backoff = backoff
        self.probeInterval = probeInterval
        self.continuation = continuation
        var descriptors: [Int32] = [0, 0]
        guard pipe(&descriptors) == 0 else {
            throw PostgresError(kind: .other, message: "cannot create the listener's wake-up pipe: \(String(cString: strerror(errno)))")
        }
        wakeRead = descriptors[0]
        wakeWrite = descriptors[1]
        // Not inherited by child processes; a write never blocks (one byte is all `stop` needs).
        for descriptor in descriptors {
            _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC)
            _ = fcntl(descriptor, F_SETFL, fcntl(descriptor, F_GETFL) | O_NONBLOCK)
        }
    }

    deinit {
        Glibc.close(wakeRead)
        Glibc.close(wakeWrite)
    }

    /// Starts the thread; returns once the first connection listens, or throws why it could not.
    func start() async throws {
        try await withCheckedThrowingContinuation { (started: CheckedContinuation<Void, any Error>) in
            let thread = Thread { [self] in
                Thread.current.name = "postgres-listener"
                do {
                    try connect()
                } catch {
                    started.resume(throwing: error)
                    continuation.finish()
                    return
                }
                started.resume()
                run()
            }
            thread.stackSize = 1 << 20
            thread.start()
        }
        continuation.onTermination = { [weak self] _ in self?.stop() }
    }

    func stop() {
        guard !stopped.exchange(true, ordering: .acquiringAndReleasing) else { return }
        var byte: UInt8 = 1
        _ = write(wakeWrite, &byte, 1)
    }

    private var isStopped: Bool { stopped.load(ordering: .acquiring) }

    /// Opens (or reopens) the connection and LISTENs on every channel.
    private func connect() throws {
        let connection: PostgresConnection
        if let existing = self.connection {
            try existing.reconnect()
            connection = existing
        } else {
            connection = try PostgresConnection(url: url, applicationName: applicationName)
            self.connection = connection
        }
        for channel in channels {
            let quoted = try connection.quoteIdentifier(channel)
            try connection.execute("LISTEN \(quoted)")
        }
        backendPID.store(connection.backendPID, ordering: .releasing)
    }

    private func run() {
        defer {
            connection?.close()
            connection = nil
            backendPID.store(0, ordering: .releasing)
            continuation.finish()
        }
        while !isStopped {
            guard let connection else { return }
            switch wait(on: connection.socket, for: probeInterval) {
            case .woken:
                return
            case .readable:
                if connection.consumeInput() {
                    deliver(connection.drainNotifications())
                    continue
                }
            case .timedOut:
                // Quiet for a while: ask, so a peer that vanished without a FIN is noticed.
                if (try? connection.execute("SELECT 1")) != nil, !connection.isBroken {
                    deliver(connection.drainNotifications())
                    continue
                }
            }
            // The connection broke: what arrived before the break still counts.
            deliver(connection.drainNotifications())
            backendPID.store(0, ordering: .releasing)
            guard reconnectWithBackoff() else { return }
            continuation.yield(.reconnected)
        }
    }

    private func deliver(_ notifications: [PostgresNotification]) {
        for notification in notifications { continuation.yield(.notification(notification)) }
    }

    /// Tries until it listens again (true) or the listener is stopped (false).
    private func reconnectWithBackoff() -> Bool {
        var delay = backoff.initial
        while !isStopped {
            if case .woken = wait(on: -1, for: delay) { return false }
            if (try? connect()) != nil { return true }
            delay = min(delay * 2, backoff.maximum)
        }
        return false
    }

    private enum Wake { case readable, timedOut, woken }

    /// Waits until `socket` is readable (-1: no socket, only the timeout), `stop()` is called, or `timeout` passes.
    private func wait(on socket: Int32, for timeout: Duration) -> Wake {
        var descriptors = [pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0)]
        if socket >= 0 { descriptors.append(pollfd(fd: socket, events: Int16(POLLIN), revents: 0)) }
        let deadline = ContinuousClock.now + timeout
        while true {
            let remaining = deadline - ContinuousClock.now
            let milliseconds = remaining <= .zero ? 0 : Int32(clamping: remaining.components.seconds * 1000 + remaining.components.attoseconds / 1_000_000_000_000_000 + 1)
            let ready = poll(&descriptors, nfds_t(descriptors.count), milliseconds)
            if ready < 0, errno == EINTR { continue }
            if isStopped || descriptors[0].revents != 0 { return .woken }
            // An error on the socket (POLLERR, POLLHUP) counts as readable: reading it tells what broke.
            if ready != 0 { return socket >= 0 ? .readable : .timedOut }
            return .timedOut
        }
    }
}
