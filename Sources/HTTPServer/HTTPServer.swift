internal import CMicroHTTPD
internal import CHTTPServerShims
internal import CProcessShims
import Foundation
import Synchronization
import Glibc

public struct HTTPServerConfiguration: Sendable {
    public var host: String
    public var port: UInt16
    public var threadPoolSize: Int
    /// Bodies larger than this are refused with 413 before the handler runs.
    public var maximumBodyBytes: Int
    /// Per-connection memory for headers and buffers; requests whose headers do not fit get 431.
    /// libmicrohttpd clears it after every request, so it is kept to what real headers need.
    public var connectionMemoryBytes: Int
    public var connectionLimit: Int
    public var idleTimeoutSeconds: Int
    /// PEM key and certificate: serve HTTPS instead of HTTP.
    public var tls: (keyPEM: String, certificatePEM: String)?
    /// Connections one client address may hold at once, so a few slow clients cannot take every slot.
    public var perAddressConnectionLimit: Int = 128
    /// The most a client may take to send a whole request (head and body), counted from the connection's start
    /// or the end of its previous request; a connection still sending after that is closed (a slow-loris guard:
    /// the idle timeout alone resets with every byte).
    public var requestReceiveSeconds: Int = 30
    /// With `tls`, the same port serves plain HTTP too, as the original gateway's auto-TLS listener does: a
    /// connection whose first byte opens a TLS handshake gets TLS, any other gets plain HTTP (a reverse proxy in
    /// front keeps working, and a phone on the same network pins the certificate on the very same port).
    public var acceptsPlainHTTP: Bool = false
    /// How long a new connection on a shared port may stay silent before its first byte; then it is closed.
    public var firstByteTimeoutSeconds: Int = 10
    /// Where request handlers run: a storage executor's threads keep blocking database work off Swift's
    /// cooperative pool (nil: the global executor).
    public var handlerExecutor: (any TaskExecutor)?
    /// How the server words the refusals it makes itself, before any handler runs (bad framing, a body over the
    /// limit): the API kit answers them in the API's error shape. Plain text by default.
    public var refusal: @Sendable (HTTPRefusal) -> HTTPResponse = { refusal in
        HTTPResponse(status: refusal.status, headers: [("Content-Type", "text/plain; charset=utf-8")], body: Array((refusal.message + "\n").utf8))
    }

    public init(host: String = "127.0.0.1", port: UInt16 = 8080, threadPoolSize: Int = 4, maximumBodyBytes: Int = 1 << 20,
                connectionMemoryBytes: Int = 32 * 1024, connectionLimit: Int = 1024, idleTimeoutSeconds: Int = 60,
                tls: (keyPEM: String, certificatePEM: String)? = nil) {
        self.host = host
        self.port = port
        self.threadPoolSize = threadPoolSize
        self.maximumBodyBytes = maximumBodyBytes
        self.connectionMemoryBytes = connectionMemoryBytes
        self.connectionLimit = connectionLimit
        self.idleTimeoutSeconds = idleTimeoutSeconds
        self.tls = tls
    }
}

/// A request the server refuses by itself: its status, a short machine code and a sentence for people.
public struct HTTPRefusal: Sendable, Equatable {
    public let status: Int
    public let code: String
    public let message: String
}

public struct HTTPServerError: Error, CustomStringConvertible, Sendable {
    public let description: String
}

/// An HTTP server on libmicrohttpd: MHD's thread pool reads requests, Swift tasks answer them.
/// A connection is suspended while its handler runs, so slow handlers never hold an MHD thread.
/// `immediate` may answer first, on the MHD thread itself: for quick reads this saves the suspend, the task
/// hop and the wake-up of the polling thread, which cost more than the read.
public final class HTTPServer: Sendable {
    /// One per daemon: plain or TLS (both on a shared port), each telling its requests whether they came over TLS.
    private let cores: [ServerCore]
    private let receiveDeadlines: ReceiveDeadlines
    public let configuration: HTTPServerConfiguration
    // The MHD_Daemon pointers as bit patterns (empty: not running); pointers are not Sendable.
    private let daemons = Mutex<[UInt]>([])
    /// On a shared port: the listening socket, the pipe that stops the accept thread, and the thread's end.
    private let sharedPort = Mutex<SharedPortListener?>(nil)

    public init(configuration: HTTPServerConfiguration, immediate: (@Sendable (HTTPRequest) -> HTTPResponse?)? = nil,
                handler: @escaping @Sendable (HTTPRequest) async -> HTTPResponse) {
        self.configuration = configuration
        receiveDeadlines = ReceiveDeadlines(seconds: configuration.requestReceiveSeconds)
        let secureModes = configuration.tls == nil ? [false] : configuration.acceptsPlainHTTP ? [true, false] : [true]
        cores = secureModes.map { [receiveDeadlines] secure in
            ServerCore(handler: handler, immediate: immediate, maximumBodyBytes: configuration.maximumBodyBytes,
                       receiveDeadlines: receiveDeadlines, isSecure: secure, handlerExecutor: configuration.handlerExecutor,
                       refusal: configuration.refusal)
        }
    }

    /// The bound port (the chosen one when configured with port 0).
    public var port: UInt16 {
        if let listener = sharedPort.withLock({ $0 }) { return soulacy_socket_port(listener.fd) }
        return daemons.withLock { d in d.first.map { soulacy_mhd_bound_port(OpaquePointer(bitPattern: $0)) } ?? 0 }
    }

    public func start() throws(HTTPServerError) {
        var storage = sockaddr_storage()
        var isV6 = false
        let isV4 = withUnsafeMutablePointer(to: &storage) { p in
            p.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { sin -> Bool in
                guard inet_pton(AF_INET, configuration.host, &sin.pointee.sin_addr) == 1 else { return false }
                sin.pointee.sin_family = sa_family_t(AF_INET)
                sin.pointee.sin_port = configuration.port.bigEndian
                return true
            }
        }
        if !isV4 {
            storage = sockaddr_storage()
            let ok = withUnsafeMutablePointer(to: &storage) { p in
                p.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { sin6 -> Bool in
                    sin6.pointee.sin6_family = sa_family_t(AF_INET6)
                    sin6.pointee.sin6_port = configuration.port.bigEndian
                    return inet_pton(AF_INET6, configuration.host, &sin6.pointee.sin6_addr) == 1
                }
            }
            guard ok else { throw HTTPServerError(description: "listen address '\(configuration.host)' is not an IPv4 or IPv6 address") }
            isV6 = true
        }
        let shared = cores.count > 1
        var listenFD: Int32 = -1
        if shared {
            let length = socklen_t(isV6 ? MemoryLayout<sockaddr_in6>.size : MemoryLayout<sockaddr_in>.size)
            listenFD = withUnsafePointer(to: &storage) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { soulacy_listen_socket($0, length, 511) } }
            guard listenFD >= 0 else {
                throw HTTPServerError(description: "cannot listen on \(configuration.host):\(configuration.port): \(String(cString: strerror(errno)))")
            }
        }
        var started: [UInt] = []
        for core in cores {
            var flags = UInt32(MHD_USE_INTERNAL_POLLING_THREAD.rawValue | MHD_USE_EPOLL.rawValue | MHD_ALLOW_SUSPEND_RESUME.rawValue)
            if isV6 { flags |= UInt32(MHD_USE_IPv6.rawValue) }
            if core.isSecure { flags |= UInt32(MHD_USE_TLS.rawValue) }
            // On a shared port the accept thread hands each connection to one of the daemons.
            if shared { flags |= UInt32(MHD_USE_NO_LISTEN_SOCKET.rawValue | MHD_USE_ITC.rawValue) }
            let context = Unmanaged.passUnretained(core).toOpaque()
            let tls = core.isSecure ? configuration.tls : nil
            let daemon: OpaquePointer? = withUnsafePointer(to: &storage) { address in
                address.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
                    withOptionalCString(tls?.keyPEM) { key in
                        withOptionalCString(tls?.certificatePEM) { cert in
                            var options = soulacy_mhd_options(
                                thread_pool_size: UInt32(configuration.threadPoolSize),
                                connection_limit: UInt32(configuration.connectionLimit),
                                connection_timeout_seconds: UInt32(configuration.idleTimeoutSeconds),
                                connection_memory_limit: configuration.connectionMemoryBytes,
                                bind_address: shared ? nil : sa, https_key_pem: key, https_cert_pem: cert,
                                per_ip_connection_limit: UInt32(configuration.perAddressConnectionLimit),
                                strict_for_client: 0, notify_connection: connectionNotified, notify_connection_cls: context,
                                accept_policy: acceptPolicy, accept_policy_cls: context)
                            return soulacy_mhd_start(flags, shared ? 0 : configuration.port, accessHandler, context, requestCompleted, context, &options)
                        }
                    }
                }
            }
            guard let daemon else {
                let reason = String(cString: strerror(errno))
                for d in started { MHD_stop_daemon(OpaquePointer(bitPattern: d)) }
                if listenFD >= 0 { close(listenFD) }
                throw HTTPServerError(description: "cannot listen on \(configuration.host):\(configuration.port): \(reason)")
            }
            started.append(UInt(bitPattern: daemon))
        }
        daemons.withLock { $0 = started }
        if shared {
            let listener = SharedPortListener(fd: listenFD, tls: started[0], plain: started[1],
                                              firstByteTimeoutMilliseconds: Int32(configuration.firstByteTimeoutSeconds * 1000),
                                              perAddressLimit: Int32(configuration.perAddressConnectionLimit))
            sharedPort.withLock { $0 = listener }
        }
        receiveDeadlines.startSweeping()
    }

    /// Stops accepting connections, lets running handlers finish (up to `drainTimeout`), then closes.
    public func stop(drainTimeout: Duration = .seconds(10)) async {
        let running = daemons.withLock { $0 }
        guard !running.isEmpty else { return }
        // Not MHD_quiesce_daemon: on an epoll daemon with its own threads it races the workers' own removal of the
        // listening socket and can MHD_PANIC (an open libmicrohttpd defect; seen as an abort in our CI). New
        // connections are closed as they are accepted instead; MHD_stop_daemon closes the socket after the drain.
        for core in cores { core.accepting.store(false, ordering: .releasing) }
        if let listener = sharedPort.withLock({ $0 }) { listener.stopAccepting() }
        let deadline = ContinuousClock.now + drainTimeout
        while cores.contains(where: { $0.inFlight.load(ordering: .acquiring) > 0 }), ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(10))
        }
        stopDaemons()
    }

    private func stopDaemons() {
        sharedPort.withLock { listener in
            listener?.stopAccepting()
            listener = nil
        }
        daemons.withLock { d in
            for daemon in d { MHD_stop_daemon(OpaquePointer(bitPattern: daemon)) }
            d = []
        }
        receiveDeadlines.stopSweeping()
    }

    deinit { stopDaemons() }
}

/// The accept thread of a port that serves TLS and plain HTTP: it peeks at each connection's first byte and hands
/// the connection to the daemon that speaks it.
final class SharedPortListener: Sendable {
    let fd: Int32
    private let stopPipe: (read: Int32, write: Int32)
    private let done = Mutex<Bool>(false)
    private let finished = DispatchSemaphore(value: 0)

    init(fd: Int32, tls: UInt, plain: UInt, firstByteTimeoutMilliseconds: Int32, perAddressLimit: Int32) {
        self.fd = fd
        var fds: [Int32] = [-1, -1]
        _ = soulacy_pipe_cloexec(&fds)
        stopPipe = (fds[0], fds[1])
        let stopRead = fds[0]
        let finished = self.finished
        let thread = Thread {
            soulacy_split_listener_run(fd, stopRead, OpaquePointer(bitPattern: tls), OpaquePointer(bitPattern: plain),
                                       firstByteTimeoutMilliseconds, 1024, perAddressLimit)
            finished.signal()
        }
        thread.name = "soulacy accept"
        thread.start()
    }

    /// Ends the accept thread and closes the listening socket (idempotent); connections already handed over stay.
    func stopAccepting() {
        let first = done.withLock { d -> Bool in defer { d = true }; return !d }
        guard first else { return }
        var byte: UInt8 = 1
        _ = write(stopPipe.write, &byte, 1)
        finished.wait()
        close(fd)
        close(stopPipe.read)
        close(stopPipe.write)
    }
}

private func withOptionalCString<R>(_ s: String?, _ body: (UnsafePointer<CChar>?) -> R) -> R {
    guard let s else { return body(nil) }
    return s.withCString { body($0) }
}

final class ServerCore: Sendable {
    let handler: @Sendable (HTTPRequest) async -> HTTPResponse
    let immediate: (@Sendable (HTTPRequest) -> HTTPResponse?)?
    let maximumBodyBytes: Int
    let inFlight = Atomic<Int>(0)
    /// False once the server is stopping: a connection accepted from then on is closed at once.
    let accepting = Atomic<Bool>(true)
    let receiveDeadlines: ReceiveDeadlines
    let isSecure: Bool
    let handlerExecutor: (any TaskExecutor)?
    let refusal: @Sendable (HTTPRefusal) -> HTTPResponse

    init(handler: @escaping @Sendable (HTTPRequest) async -> HTTPResponse, immediate: (@Sendable (HTTPRequest) -> HTTPResponse?)?, maximumBodyBytes: Int,
         receiveDeadlines: ReceiveDeadlines, isSecure: Bool, handlerExecutor: (any TaskExecutor)?, refusal: @escaping @Sendable (HTTPRefusal) -> HTTPResponse) {
        self.handlerExecutor = handlerExecutor
        self.refusal = refusal
        self.handler = handler
        self.immediate = immediate
        self.maximumBodyBytes = maximumBodyBytes
        self.receiveDeadlines = receiveDeadlines
        self.isSecure = isSecure
    }
}

/// Connections still sending a request, each with the time by which it must have sent it. A sweeper thread shuts
/// down the socket of one that is late; libmicrohttpd then sees the close and cleans the connection up itself.
/// The set changes only when a connection opens or closes (under the lock, so a socket is never shut down after
/// its descriptor was closed and reused); each request just moves its own connection's deadline, an atomic.
final class ReceiveDeadlines: Sendable {
    /// One connection's socket and deadline (nanoseconds on the uptime clock; 0 while none runs).
    final class Entry: Sendable {
        let fd: Int32
        let deadline = Atomic<UInt64>(0)
        init(fd: Int32) { self.fd = fd }
    }

    private let nanoseconds: UInt64
    private let open = Mutex<[UInt: Entry]>([:])
    private let sweeping = Atomic<Bool>(false)

    init(seconds: Int) { nanoseconds = UInt64(max(0, seconds)) * 1_000_000_000 }

    private static func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }

    /// A new connection: kept in the set (its entry also rides in MHD's socket context) with its deadline running.
    func opened(_ connection: UInt, fd: Int32) -> Entry? {
        guard nanoseconds > 0, fd >= 0 else { return nil }
        let entry = Entry(fd: fd)
        arm(entry)
        open.withLock { $0[connection] = entry }
        return entry
    }

    func closed(_ connection: UInt) { _ = open.withLock { $0.removeValue(forKey: connection) } }

    /// The next request on the connection must arrive whole within the limit from now.
    func arm(_ entry: Entry) { entry.deadline.store(Self.now() + nanoseconds, ordering: .relaxed) }

    /// The whole request has arrived.
    func disarm(_ entry: Entry) { entry.deadline.store(0, ordering: .relaxed) }

    func startSweeping() {
        guard nanoseconds > 0, !sweeping.exchange(true, ordering: .acquiringAndReleasing) else { return }
        Thread.detachNewThread { [self] in
            while sweeping.load(ordering: .acquiring) {
                usleep(250_000)
                let now = Self.now()
                open.withLock { entries in
                    for entry in entries.values {
                        let deadline = entry.deadline.load(ordering: .relaxed)
                        if deadline != 0, deadline <= now {
                            entry.deadline.store(0, ordering: .relaxed)
                            Glibc.shutdown(entry.fd, Int32(SHUT_RDWR))
                        }
                    }
                }
            }
        }
    }

    func stopSweeping() { sweeping.store(false, ordering: .releasing) }
}

/// The deadline entry of a connection (nil when deadlines are off), kept in MHD's socket context.
private func deadlineEntry(_ connection: OpaquePointer?) -> ReceiveDeadlines.Entry? {
    soulacy_mhd_socket_context(connection).map { Unmanaged<ReceiveDeadlines.Entry>.fromOpaque($0).takeUnretainedValue() }
}

/// Refuses connections once the server is stopping (the drain then only waits for requests already taken).
private let acceptPolicy: MHD_AcceptPolicyCallback = { cls, _, _ in
    guard let cls else { return MHD_Result.YES }
    return Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue().accepting.load(ordering: .acquiring) ? MHD_Result.YES : MHD_Result.NO
}

private let connectionNotified: MHD_NotifyConnectionCallback = { cls, connection, socketContext, code in
    guard let cls, let connection, let socketContext else { return }
    let core = Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue()
    let key = UInt(bitPattern: connection)
    if code == MHD_ConnectionNotificationCode(rawValue: 0) {  // MHD_CONNECTION_NOTIFY_STARTED
        if let entry = core.receiveDeadlines.opened(key, fd: soulacy_mhd_connection_fd(connection)) {
            socketContext.pointee = Unmanaged.passRetained(entry).toOpaque()
        }
    } else {
        core.receiveDeadlines.closed(key)
        if let held = socketContext.pointee {
            Unmanaged<ReceiveDeadlines.Entry>.fromOpaque(held).release()
            socketContext.pointee = nil
        }
    }
}

/// The names and values of one kind (headers, or query arguments), read with their lengths so a NUL inside one
/// is seen; the first value of a repeated name is kept. `problem` says what makes the request malformed:
/// a header name that is not a token or a value with control bytes; a query name or value that is not UTF-8 or
/// holds a NUL (`%00` arrives as the invalid byte 0xFF, see the unescape callback in CShims).
private final class ValueScan {
    let isHeader: Bool
    var values: [String: String] = [:]
    var contentLengths: [String] = []
    var transferEncodings: [String] = []
    var problem: String?

    init(_ connection: OpaquePointer?, kind: MHD_ValueKind) {
        isHeader = kind == MHD_ValueKind.HEADER_KIND
        soulacy_mhd_values(connection, kind, { cls, key, keySize, value, valueSize in
            let scan = Unmanaged<ValueScan>.fromOpaque(cls!).takeUnretainedValue()
            guard let key else { return 1 }
            let name = UnsafeBufferPointer(start: UnsafeRawPointer(key).assumingMemoryBound(to: UInt8.self), count: keySize)
            let text = value.map { UnsafeBufferPointer(start: UnsafeRawPointer($0).assumingMemoryBound(to: UInt8.self), count: valueSize) }
                ?? UnsafeBufferPointer(start: nil, count: 0)
            return scan.add(name: name, value: text) ? 1 : 0
        }, Unmanaged.passUnretained(self).toOpaque())
    }

    private func add(name: UnsafeBufferPointer<UInt8>, value: UnsafeBufferPointer<UInt8>) -> Bool {
        guard isHeader else {
            // `%00` arrives as 0xFF, which no UTF-8 holds: validating refuses NUL and bad UTF-8 alike.
            guard let key = String(validating: name, as: UTF8.self), let text = String(validating: value, as: UTF8.self) else {
                problem = "the path or query holds a NUL (%00) or is not UTF-8"
                return false
            }
            if values[key] == nil { values[key] = text }
            return true
        }
        // One pass over the name (this runs for every header of every request): token bytes only, and any upper case?
        var isToken = !name.isEmpty
        var hasUpper = false
        Self.isTokenByte.withUnsafeBufferPointer { table in
            for byte in name {
                if !table[Int(byte)] { isToken = false; break }
                if byte >= 0x41 && byte <= 0x5A { hasUpper = true }
            }
        }
        guard isToken else {
            problem = "malformed request: a header name is not a token (spaces, control bytes or NUL)"
            return false
        }
        guard !value.contains(where: { ($0 < 0x20 && $0 != 0x09) || $0 == 0x7F }) else {
            problem = "malformed request: a header value holds a NUL or control byte"
            return false
        }
        // Most clients already send lower-case names (HTTP/2 must); lower-case only the others.
        let raw = String(decoding: name, as: UTF8.self)
        let key = hasUpper ? raw.lowercased() : raw
        let text = String(decoding: value, as: UTF8.self)
        if name.count == 14 || name.count == 17 {
            switch key {
            case "content-length": contentLengths.append(text)
            case "transfer-encoding": transferEncodings.append(text)
            default: break
            }
        }
        if values[key] == nil { values[key] = text }
        return true
    }

    /// RFC 9110 token characters: letters, digits and !#$%&'*+-.^_`|~
    private static let isTokenByte: [Bool] = (0..<256).map { byte in
        let b = UInt8(byte)
        return (b >= 0x30 && b <= 0x39) || (b | 0x20 >= 0x61 && b | 0x20 <= 0x7A) || "!#$%&'*+-.^_`|~".utf8.contains(b)
    }
}

/// What the first look at a request's head finds wrong with its framing (nil: nothing). libmicrohttpd 0.9.75 has
/// no strict discipline for these, so they are checked here before any handler runs.
private func framingProblem(_ head: ValueScan, version: UnsafePointer<CChar>?) -> (status: Int, code: String, message: String)? {
    if let problem = head.problem { return (400, "bad_request", problem) }
    if version.map({ String(cString: $0) }) == "HTTP/1.1", head.values["host"] == nil {
        return (400, "bad_request", "malformed request: HTTP/1.1 needs a Host header")
    }
    if head.contentLengths.count > 1 { return (400, "bad_request", "malformed request: more than one Content-Length header") }
    if let length = head.contentLengths.first {
        let digits = length.trimmingCharacters(in: .whitespaces)
        guard !digits.isEmpty, digits.count <= 18, digits.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else {
            return (400, "bad_request", "malformed request: Content-Length must be a whole number of bytes")
        }
    }
    if !head.transferEncodings.isEmpty {
        let codings = head.transferEncodings.joined(separator: ",").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
        guard codings == ["chunked"] else { return (501, "not_implemented", "Transfer-Encoding: only 'chunked' is supported") }
        if !head.contentLengths.isEmpty { return (400, "bad_request", "malformed request: both Content-Length and Transfer-Encoding") }
    }
    return nil
}

/// A refusal that also ends the connection: after bad framing, nothing more on it can be trusted.
private func refusal(_ status: Int, _ code: String, _ message: String, by core: ServerCore) -> HTTPResponse {
    var response = core.refusal(HTTPRefusal(status: status, code: code, message: message))
    response.headers.append(("Connection", "close"))
    return response
}

/// Per-request state, owned by MHD's con_cls from the first callback until completion.
final class RequestState: @unchecked Sendable {
    enum Phase { case receiving, running, answered(HTTPResponse) }
    // Touched by the connection's MHD thread and, while running, by one task; the lock orders the hand-over.
    let lock = Mutex(())
    var phase: Phase = .receiving
    var body: [UInt8] = []
    /// Read once, on the first call (they do not change after it).
    var headers: [String: String] = [:]
    var bodyTooLarge = false
    /// Counted in `inFlight` from the handler's start until MHD has finished sending the answer.
    var counted = false
}

private func queue(_ response: HTTPResponse, on connection: OpaquePointer?) -> MHD_Result {
    if let stream = response.stream { return queue(response, streaming: stream, on: connection) }
    let mhdResponse = response.body.withUnsafeBytes { buffer in
        MHD_create_response_from_buffer(buffer.count, UnsafeMutableRawPointer(mutating: buffer.baseAddress), MHD_ResponseMemoryMode(rawValue: 2)!)
    }
    guard let mhdResponse else { return MHD_Result.NO }
    for (name, value) in response.headers { MHD_add_response_header(mhdResponse, name, value) }
    let result = MHD_queue_response(connection, UInt32(response.status), mhdResponse)
    MHD_destroy_response(mhdResponse)
    return result
}

/// A streamed answer: chunked, read from the stream on MHD's thread, the stream kept alive until MHD frees it.
private func queue(_ response: HTTPResponse, streaming stream: ResponseStream, on connection: OpaquePointer?) -> MHD_Result {
    stream.attach(connection: connection)
    let context = Unmanaged.passRetained(stream).toOpaque()
    let mhdResponse = MHD_create_response_from_callback(UInt64.max, 4096, { cls, _, buffer, maximum in
        guard let cls, let buffer else { return -2 }
        return Unmanaged<ResponseStream>.fromOpaque(cls).takeUnretainedValue().read(into: buffer, maximum: maximum)
    }, context, { cls in
        guard let cls else { return }
        let stream = Unmanaged<ResponseStream>.fromOpaque(cls)
        stream.takeUnretainedValue().detach()
        stream.release()
    })
    guard let mhdResponse else {
        Unmanaged<ResponseStream>.fromOpaque(context).release()
        stream.detach()
        return MHD_Result.NO
    }
    for (name, value) in response.headers { MHD_add_response_header(mhdResponse, name, value) }
    let result = MHD_queue_response(connection, UInt32(response.status), mhdResponse)
    MHD_destroy_response(mhdResponse)
    return result
}

private let accessHandler: MHD_AccessHandlerCallback = { cls, connection, url, method, version, uploadData, uploadDataSize, conCls in
    guard let cls, let conCls, let uploadDataSize else { return MHD_Result.NO }
    let core = Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue()

    guard let existing = conCls.pointee else {
        // First call: headers only. Refuse bad framing, and an announced oversized body before reading it.
        let state = RequestState()
        conCls.pointee = Unmanaged.passRetained(state).toOpaque()
        let head = ValueScan(connection, kind: MHD_ValueKind.HEADER_KIND)
        if let problem = framingProblem(head, version: version) {
            state.bodyTooLarge = true
            return queue(refusal(problem.status, problem.code, problem.message, by: core), on: connection)
        }
        state.headers = head.values
        if let length = MHD_lookup_connection_value(connection, MHD_ValueKind.HEADER_KIND, "Content-Length").flatMap({ Int(String(cString: $0)) }),
           length > core.maximumBodyBytes {
            state.bodyTooLarge = true
            return queue(tooLarge(core), on: connection)
        }
        return MHD_Result.YES
    }
    let state = Unmanaged<RequestState>.fromOpaque(existing).takeUnretainedValue()

    if uploadDataSize.pointee > 0 {
        let count = uploadDataSize.pointee
        if !state.bodyTooLarge {
            if state.body.count + count > core.maximumBodyBytes {
                state.bodyTooLarge = true
                state.body = []
            } else if let uploadData {
                uploadData.withMemoryRebound(to: UInt8.self, capacity: count) { state.body.append(contentsOf: UnsafeBufferPointer(start: $0, count: count)) }
            }
        }
        uploadDataSize.pointee = 0
        return MHD_Result.YES
    }

    let phase = state.lock.withLock { _ in state.phase }
    switch phase {
    case .answered(let response):
        return queue(response, on: connection)
    case .running:
        return MHD_Result.YES
    case .receiving:
        if state.bodyTooLarge { return queue(tooLarge(core), on: connection) }
        // The whole request is in: its receive deadline is met.
        if let entry = deadlineEntry(connection) { core.receiveDeadlines.disarm(entry) }
        let query = ValueScan(connection, kind: MHD_ValueKind.GET_ARGUMENT_KIND)
        guard let path = url.map({ String(validatingCString: $0) }) ?? "", query.problem == nil else {
            return queue(refusal(400, "bad_request", "the path or query holds a NUL (%00) or is not UTF-8", by: core), on: connection)
        }
        var buffer = [CChar](repeating: 0, count: 64)
        soulacy_mhd_client_address(connection, &buffer, buffer.count)
        var request = HTTPRequest(
            method: method.map { String(cString: $0) } ?? "GET",
            path: path.isEmpty ? "/" : path,
            query: query.values,
            headers: state.headers,
            body: state.body,
            remoteAddress: buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) })
        request.isSecure = core.isSecure
        state.body = []
        if let immediate = core.immediate, let response = immediate(request) {
            return queue(response, on: connection)
        }
        state.lock.withLock { _ in state.phase = .running }
        state.counted = true
        core.inFlight.add(1, ordering: .relaxed)
        MHD_suspend_connection(connection)
        let connectionAddress = UInt(bitPattern: connection)
        Task(executorPreference: core.handlerExecutor) {
            let response = await core.handler(request)
            state.lock.withLock { _ in state.phase = .answered(response) }
            MHD_resume_connection(OpaquePointer(bitPattern: connectionAddress))
        }
        return MHD_Result.YES
    }
}

private func tooLarge(_ core: ServerCore) -> HTTPResponse {
    refusal(413, "body_too_large", "the request body is larger than the limit of \(core.maximumBodyBytes) bytes", by: core)
}

private let requestCompleted: MHD_RequestCompletedCallback = { cls, connection, conCls, code in
    if let cls, code == MHD_RequestTerminationCode(rawValue: 0), let entry = deadlineEntry(connection) {  // MHD_REQUEST_TERMINATED_COMPLETED_OK
        // Kept alive: the next request has the same time to arrive as the first had.
        Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue().receiveDeadlines.arm(entry)
    }
    guard let conCls, let existing = conCls.pointee else { return }
    let state = Unmanaged<RequestState>.fromOpaque(existing)
    // The answer has been sent (or the client went away): only now may a graceful stop close the daemon.
    if state.takeUnretainedValue().counted, let cls {
        Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue().inFlight.subtract(1, ordering: .releasing)
    }
    state.release()
    conCls.pointee = nil
}
