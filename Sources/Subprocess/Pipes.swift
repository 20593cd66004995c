internal import CProcessShims
import Foundation
import Glibc
import Synchronization

/// Waits for a non-blocking descriptor to become readable or writable: a one-shot registration with the process's
/// `ReadinessMonitor`, armed only while someone waits. Not a dispatch source: libdispatch's epoll bookkeeping on
/// Linux breaks under sources armed and torn down from many threads (a clean-clone CI run crashed the test process
/// with "Source finalized twice" in `_dispatch_source_refs_finalize_unregistration`; swift-corelibs-libdispatch
/// #949, and swift-subprocess moved to its own epoll for the same reason).
final class DescriptorReadiness: @unchecked Sendable {
    // @unchecked: `state` guards everything that changes; `fd` and `token` never do.
    private struct State {
        var registered = false  // known to the monitor's epoll (one-shot: disarmed after each event)
        var cancelled = false
        var waiter: CheckedContinuation<Void, Never>?
    }
    private let fd: Int32
    private let events: UInt32
    private let token: UInt64
    private let onCancel: @Sendable () -> Void
    private let state = Mutex(State())

    init(fd: Int32, writing: Bool, onCancel: @escaping @Sendable () -> Void) {
        self.fd = fd
        events = (writing ? EPOLLOUT.rawValue : EPOLLIN.rawValue) | EPOLLONESHOT.rawValue
        token = ReadinessMonitor.shared.newToken()
        self.onCancel = onCancel
    }

    /// The monitor saw the descriptor ready (or hung up, or in error): the waiter, if any, tries again.
    fileprivate func fired() {
        let waiter = state.withLock { s -> CheckedContinuation<Void, Never>? in
            defer { s.waiter = nil }
            return s.waiter
        }
        waiter?.resume()
    }

    /// Returns when the descriptor is ready, the task is cancelled, or `cancel()` was called.
    func wait() async {
        var unarmed = false
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let now = state.withLock { s -> Bool in
                    if s.cancelled || Task.isCancelled { return true }
                    s.waiter = continuation
                    // Armed under the lock, so `cancel()` never closes the descriptor between the check and the arming.
                    guard ReadinessMonitor.shared.arm(self, fd: fd, events: events, token: token, registered: s.registered) else {
                        s.waiter = nil
                        unarmed = true
                        return true
                    }
                    s.registered = true
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            let waiter = state.withLock { s -> CheckedContinuation<Void, Never>? in
                defer { s.waiter = nil }
                return s.waiter
            }
            waiter?.resume()
        }
        // epoll refused the descriptor (none left to make the monitor's, say): the caller polls every 10 ms
        // rather than spinning.
        if unarmed { try? await Task.sleep(for: .milliseconds(10)) }
    }

    /// Stops for good: the descriptor leaves the monitor, then `onCancel` (which closes it) runs, once.
    func cancel() {
        let waiter = state.withLock { s -> CheckedContinuation<Void, Never>? in
            guard !s.cancelled else { return nil }
            s.cancelled = true
            ReadinessMonitor.shared.forget(fd: fd, token: token, registered: s.registered)
            s.registered = false
            onCancel()
            defer { s.waiter = nil }
            return s.waiter
        }
        waiter?.resume()
    }

    deinit {
        // An owner that never cancelled: the descriptor still leaves the monitor before it can be reused.
        cancel()
    }
}

/// One epoll instance and one thread for the process's pipes. Each wait arms its descriptor once
/// (`EPOLLONESHOT`) with a token that is never reused, so an event that arrives after its descriptor was forgotten
/// (and the number reused) finds no one and is dropped.
final class ReadinessMonitor: Sendable {
    static let shared = ReadinessMonitor()

    private let epoll: Int32
    private let nextToken = Atomic<UInt64>(1)
    // The readiness objects armed now, by token: held until their event or their cancel.
    private let armed = Mutex<[UInt64: DescriptorReadiness]>([:])

    private init() {
        epoll = epoll_create1(Int32(EPOLL_CLOEXEC))
        let thread = Thread { [self] in run() }
        thread.name = "soulacy-pipes"
        thread.start()
    }

    func newToken() -> UInt64 { nextToken.add(1, ordering: .relaxed).oldValue }

    /// Arms `fd` for one event; false if epoll refuses it (a descriptor that cannot be polled).
    func arm(_ readiness: DescriptorReadiness, fd: Int32, events: UInt32, token: UInt64, registered: Bool) -> Bool {
        armed.withLock { $0[token] = readiness }
        var event = epoll_event()
        event.events = events
        event.data.u64 = token
        var result = epoll_ctl(epoll, registered ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &event)
        if result != 0 && errno == EEXIST { result = epoll_ctl(epoll, EPOLL_CTL_MOD, fd, &event) }
        if result != 0 { armed.withLock { _ = $0.removeValue(forKey: token) } }
        return result == 0
    }

    /// Takes `fd` out of the epoll set (before it is closed) and drops its token.
    func forget(fd: Int32, token: UInt64, registered: Bool) {
        if registered {
            var event = epoll_event()
            _ = epoll_ctl(epoll, EPOLL_CTL_DEL, fd, &event)
        }
        armed.withLock { _ = $0.removeValue(forKey: token) }
    }

    private func run() {
        var events = [epoll_event](repeating: epoll_event(), count: 64)
        while true {
            let count = epoll_wait(epoll, &events, Int32(events.count), -1)
            if count < 0 {
                if errno == EINTR { continue }
                return  // no epoll (its creation failed): every arm fails too, and waiters poll
            }
            for index in 0..<Int(count) {
                let token = events[index].data.u64
                armed.withLock { $0.removeValue(forKey: token) }?.fired()
            }
        }
    }
}

private func setNonBlocking(_ fd: Int32) {
    let flags = fcntl(fd, F_GETFL)
    _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK)
}

/// The gateway's end of a child's stdout or stderr. Reads never block a thread: they wait on a dispatch source.
/// One reader at a time.
public final class PipeReader: Sendable {
    private let fd: Int32
    private let readiness: DescriptorReadiness
    /// Guards the descriptor: a read never runs on it once it is closed (its number may be reused).
    private let closed = Mutex(false)

    init(fd: Int32) {
        self.fd = fd
        setNonBlocking(fd)
        readiness = DescriptorReadiness(fd: fd, writing: false, onCancel: { _ = Glibc.close(fd) })
    }

    deinit { close() }

    private enum Step { case bytes([UInt8]), end, again, wait }

    /// The next bytes (at most `limit`), or nil at end of file, after `close()`, or when the task is cancelled.
    public func read(upTo limit: Int = 65536) async -> [UInt8]? {
        while true {
            let step = closed.withLock { isClosed -> Step in
                if isClosed { return .end }
                var buffer = [UInt8](repeating: 0, count: limit)
                let n = Glibc.read(fd, &buffer, limit)
                if n > 0 { return .bytes(Array(buffer[0..<n])) }
                if n == 0 { return .end }
                if errno == EINTR { return .again }
                if errno == EAGAIN || errno == EWOULDBLOCK { return .wait }
                return .end
            }
            switch step {
            case .bytes(let bytes): return bytes
            case .end: return nil
            case .again: continue
            case .wait:
                if Task.isCancelled { return nil }
                await readiness.wait()
            }
        }
    }

    /// Everything up to end of file (or the task's cancellation), keeping at most `limit` bytes. Past the limit
    /// it returns at once with `overflowed` when `stopAtLimit`, else it keeps reading and drops the rest.
    public func readAll(limit: Int, stopAtLimit: Bool) async -> (bytes: [UInt8], overflowed: Bool) {
        var bytes: [UInt8] = []
        var overflowed = false
        while let chunk = await read() {
            if bytes.count + chunk.count > limit {
                overflowed = true
                if stopAtLimit { break }
            } else if !overflowed {
                bytes += chunk
            }
        }
        return (bytes, overflowed)
    }

    public func close() {
        closed.withLock { isClosed in
            guard !isClosed else { return }
            isClosed = true
            readiness.cancel()
        }
    }
}

public enum PipeWriteError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The pipe was closed by us.
    case closed
    /// The child closed its end or the write failed (EPIPE after it died).
    case broken(String)
    /// The writer gave up waiting (its task was cancelled). `inFlight`: part of the bytes are out and the rest
    /// still follow, so the stream stays whole; otherwise nothing of them was written.
    case cancelled(inFlight: Bool)

    public var description: String {
        switch self {
        case .closed: return "the pipe is closed"
        case .broken(let reason): return "the pipe is broken: \(reason)"
        case .cancelled(let inFlight): return inFlight ? "gave up waiting; the bytes are on their way" : "gave up before writing"
        }
    }
}

/// The gateway's end of a child's stdin. Writes are queued and written whole, one after another, so two
/// callers never interleave their bytes; they never block a thread.
public final class PipeWriter: Sendable {
    private struct Pending {
        var ticket: Int
        var bytes: [UInt8]
        var offset = 0
        var continuation: CheckedContinuation<Result<Void, PipeWriteError>, Never>?
    }
    private struct State {
        var queue: [Pending] = []
        var draining = false
        var closed = false
        var failure: PipeWriteError?
        var nextTicket = 0
    }
    private let fd: Int32
    private let readiness: DescriptorReadiness
    private let state = Mutex(State())

    init(fd: Int32) {
        self.fd = fd
        setNonBlocking(fd)
        readiness = DescriptorReadiness(fd: fd, writing: true, onCancel: { _ = Glibc.close(fd) })
    }

    deinit { close() }

    private enum Action { case none, drain, fail(PipeWriteError) }

    /// Writes all of `bytes` after every earlier write. Returns when they are in the pipe.
    public func write(_ bytes: [UInt8]) async throws(PipeWriteError) {
        let ticket = state.withLock { s -> Int in
            s.nextTicket += 1
            return s.nextTicket
        }
        let result = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Result<Void, PipeWriteError>, Never>) in
                let action = state.withLock { s -> Action in
                    if s.closed { return .fail(s.failure ?? .closed) }
                    if Task.isCancelled { return .fail(.cancelled(inFlight: false)) }
                    s.queue.append(Pending(ticket: ticket, bytes: bytes, continuation: continuation))
                    if s.draining { return .none }
                    s.draining = true
                    return .drain
                }
                switch action {
                case .none: break
                case .drain: Task.detached { await self.drain() }
                case .fail(let error): continuation.resume(returning: .failure(error))
                }
            }
        } onCancel: {
            let waiter = state.withLock { s -> (CheckedContinuation<Result<Void, PipeWriteError>, Never>, Bool)? in
                guard let index = s.queue.firstIndex(where: { $0.ticket == ticket }), let continuation = s.queue[index].continuation else { return nil }
                if s.queue[index].offset == 0 {
                    s.queue.remove(at: index)
                    return (continuation, false)
                }
                s.queue[index].continuation = nil
                return (continuation, s.queue[index].offset > 0)
            }
            if let (continuation, inFlight) = waiter { continuation.resume(returning: .failure(.cancelled(inFlight: inFlight))) }
        }
        try result.get()
    }

    private enum Step {
        case progress, wait, stop
        case finished(CheckedContinuation<Result<Void, PipeWriteError>, Never>?)
        case failed([CheckedContinuation<Result<Void, PipeWriteError>, Never>], PipeWriteError)
    }

    private func drain() async {
        while true {
            let step = state.withLock { s -> Step in
                guard !s.closed, !s.queue.isEmpty else {
                    s.draining = false
                    return .stop
                }
                let head = s.queue[0]
                if head.offset == head.bytes.count { return .finished(s.queue.removeFirst().continuation) }
                let n = head.bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + head.offset, $0.count - head.offset) }
                if n > 0 {
                    s.queue[0].offset += n
                    return .progress
                }
                if n < 0 && errno == EINTR { return .progress }
                if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { return .wait }
                let error = PipeWriteError.broken(String(cString: strerror(errno)))
                s.closed = true
                s.failure = error
                s.draining = false
                let waiting = s.queue.compactMap(\.continuation)
                s.queue = []
                readiness.cancel()
                return .failed(waiting, error)
            }
            switch step {
            case .progress: continue
            case .wait: await readiness.wait()
            case .stop: return
            case .finished(let continuation): continuation?.resume(returning: .success(()))
            case .failed(let waiting, let error):
                waiting.forEach { $0.resume(returning: .failure(error)) }
                return
            }
        }
    }

    /// Whether a write is queued or on its way (a child that stopped reading its stdin keeps one here).
    public var hasBacklog: Bool { state.withLock { !$0.queue.isEmpty } }

    /// Closes our end (the child reads end of file); queued writes fail with `.closed`.
    public func close() {
        let waiting = state.withLock { s -> [CheckedContinuation<Result<Void, PipeWriteError>, Never>] in
            guard !s.closed else { return [] }
            s.closed = true
            s.failure = .closed
            let waiting = s.queue.compactMap(\.continuation)
            s.queue = []
            readiness.cancel()
            return waiting
        }
        waiting.forEach { $0.resume(returning: .failure(.closed)) }
    }
}

/// Splits a pipe into lines of at most `limit` bytes. A longer line is skipped to its end and reported by size,
/// so one bad line neither ends the stream nor fills the memory.
public struct LineReader: Sendable {
    public enum Item: Sendable, Equatable {
        /// A line without its `\n` (and without a `\r` before it).
        case line([UInt8])
        /// A line longer than the limit, skipped; `byteCount` is how long it was (at least).
        case tooLong(byteCount: Int)
    }

    public let reader: PipeReader
    public let limit: Int
    private var buffer: [UInt8] = []
    private var start = 0
    private var scanned = 0
    private var skipping: Int?
    private var finished = false

    public init(_ reader: PipeReader, limit: Int) {
        self.reader = reader
        self.limit = limit
    }

    /// The next line, or nil at end of file (a last line without `\n` counts).
    public mutating func next() async -> Item? {
        while true {
            if let newline = buffer[scanned...].firstIndex(of: UInt8(ascii: "\n")) {
                let length = newline - start
                let line = Array(buffer[start..<newline])
                start = newline + 1
                scanned = start
                compact()
                if let skipped = skipping {
                    skipping = nil
                    return .tooLong(byteCount: skipped + length)
                }
                if length > limit { return .tooLong(byteCount: length) }
                return .line(line.last == UInt8(ascii: "\r") ? Array(line.dropLast()) : line)
            }
            scanned = buffer.count
            if let skipped = skipping {
                skipping = skipped + (buffer.count - start)
                buffer = []; start = 0; scanned = 0
            } else if buffer.count - start > limit {
                skipping = buffer.count - start
                buffer = []; start = 0; scanned = 0
            }
            if finished { return nil }
            guard let chunk = await reader.read() else {
                finished = true
                if let skipped = skipping {
                    skipping = nil
                    return .tooLong(byteCount: skipped)
                }
                if start < buffer.count {
                    let line = Array(buffer[start...])
                    buffer = []; start = 0; scanned = 0
                    return line.count > limit ? .tooLong(byteCount: line.count) : .line(line)
                }
                return nil
            }
            buffer += chunk
        }
    }

    private mutating func compact() {
        if start == buffer.count {
            buffer.removeAll(keepingCapacity: true)
            start = 0
            scanned = 0
        } else if start > 65536 && start * 2 > buffer.count {
            buffer.removeFirst(start)
            scanned -= start
            start = 0
        }
    }
}
