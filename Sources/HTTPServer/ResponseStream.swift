internal import CMicroHTTPD
import Synchronization

/// A response body written while it is being sent. The handler returns at once with the stream and writes into it
/// from its own task; libmicrohttpd reads it on its thread, and the connection is suspended while nothing is waiting
/// (never a busy loop), then resumed by the next write.
public final class ResponseStream: Sendable {
    struct State {
        var buffer: [UInt8] = []
        var finished = false
        /// The connection is parked in MHD until a write resumes it.
        var suspended = false
        /// The client is gone (or the answer was sent): writes are dropped.
        var closed = false
        var connection: UInt = 0
        /// A reader that is not MHD (`readToEnd`) waits here.
        var waiter: CheckedContinuation<Void, Never>?
    }

    private let state = Mutex(State())

    public init() {}

    /// Whether nobody reads any more: the producer can stop.
    public var isClosed: Bool { state.withLock { $0.closed } }

    /// Bytes written and not yet taken by the connection: a producer that must not outrun a slow client waits
    /// while this is high (the stream itself never refuses a write).
    public var bufferedByteCount: Int { state.withLock { $0.buffer.count } }

    public func write(_ bytes: [UInt8]) {
        guard !bytes.isEmpty else { return }
        change { $0.buffer.append(contentsOf: bytes) }
    }

    public func write(_ text: String) { write(Array(text.utf8)) }

    /// Ends the body once what was written has been sent.
    public func finish() { change { $0.finished = true } }

    /// Applies a change and wakes the reader; MHD is resumed outside the lock (it takes its own).
    private func change(_ apply: (inout State) -> Void) {
        let (resume, waiter): (UInt, CheckedContinuation<Void, Never>?) = state.withLock { s in
            guard !s.closed else { return (0, nil) }
            apply(&s)
            var resume: UInt = 0
            if s.suspended {
                s.suspended = false
                resume = s.connection
            }
            let waiter = s.waiter
            s.waiter = nil
            return (resume, waiter)
        }
        if resume != 0 { MHD_resume_connection(OpaquePointer(bitPattern: resume)) }
        waiter?.resume()
    }

    /// Everything written, once finished (the relay carries whole answers).
    func readToEnd() async -> [UInt8] {
        while true {
            let done: [UInt8]? = state.withLock { $0.finished ? $0.buffer : nil }
            if let done { return done }
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let ready = state.withLock { s -> Bool in
                    if s.finished { return true }
                    s.waiter = continuation
                    return false
                }
                if ready { continuation.resume() }
            }
        }
    }

    /// MHD's content reader: copies what is there, ends the stream, or suspends the connection until a write.
    func read(into destination: UnsafeMutablePointer<CChar>, maximum: Int) -> Int {
        state.withLock { s in
            if !s.buffer.isEmpty {
                let count = min(maximum, s.buffer.count)
                s.buffer.withUnsafeBytes { source in
                    UnsafeMutableRawPointer(destination).copyMemory(from: source.baseAddress!, byteCount: count)
                }
                s.buffer.removeFirst(count)
                return count
            }
            if s.finished { return -1 }  // MHD_CONTENT_READER_END_OF_STREAM
            s.suspended = true
            MHD_suspend_connection(OpaquePointer(bitPattern: s.connection))
            return 0
        }
    }

    func attach(connection: OpaquePointer?) {
        state.withLock { $0.connection = UInt(bitPattern: connection) }
    }

    /// MHD is done with the response: the connection may be gone, so it is never resumed again.
    func detach() {
        let waiter = state.withLock { s -> CheckedContinuation<Void, Never>? in
            s.closed = true
            s.finished = true
            s.connection = 0
            defer { s.waiter = nil }
            return s.waiter
        }
        waiter?.resume()
    }
}
