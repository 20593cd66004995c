internal import CMicroHTTPD
internal import CShims
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

public struct HTTPServerError: Error, CustomStringConvertible, Sendable {
    public let description: String
}

/// An HTTP server on libmicrohttpd: MHD's thread pool reads requests, Swift tasks answer them.
/// A connection is suspended while its handler runs, so slow handlers never hold an MHD thread.
/// `immediate` may answer first, on the MHD thread itself: for quick reads this saves the suspend, the task
/// hop and the wake-up of the polling thread, which cost more than the read.
public final class HTTPServer: Sendable {
    private let core: ServerCore
    public let configuration: HTTPServerConfiguration
    // The MHD_Daemon pointer as its bit pattern (0: not running); pointers are not Sendable.
    private let daemon = Mutex<UInt>(0)

    public init(configuration: HTTPServerConfiguration, immediate: (@Sendable (HTTPRequest) -> HTTPResponse?)? = nil,
                handler: @escaping @Sendable (HTTPRequest) async -> HTTPResponse) {
        self.configuration = configuration
        core = ServerCore(handler: handler, immediate: immediate, maximumBodyBytes: configuration.maximumBodyBytes)
    }

    /// The bound port (the chosen one when configured with port 0).
    public var port: UInt16 {
        daemon.withLock { d in d == 0 ? 0 : soulacy_mhd_bound_port(OpaquePointer(bitPattern: d)) }
    }

    public func start() throws(HTTPServerError) {
        var storage = sockaddr_storage()
        var isV6 = false
        if inet_pton(AF_INET, configuration.host, &withUnsafeMutableBytes(of: &storage) { $0 }.baseAddress!.assumingMemoryBound(to: sockaddr_in.self).pointee.sin_addr) == 1 {
            withUnsafeMutablePointer(to: &storage) { p in
                p.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { sin in
                    sin.pointee.sin_family = sa_family_t(AF_INET)
                    sin.pointee.sin_port = configuration.port.bigEndian
                }
            }
        } else {
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
        var flags = UInt32(MHD_USE_INTERNAL_POLLING_THREAD.rawValue | MHD_USE_EPOLL.rawValue | MHD_ALLOW_SUSPEND_RESUME.rawValue)
        if isV6 { flags |= UInt32(MHD_USE_IPv6.rawValue) }
        if configuration.tls != nil { flags |= UInt32(MHD_USE_TLS.rawValue) }
        let context = Unmanaged.passUnretained(core).toOpaque()
        let started: OpaquePointer? = withUnsafePointer(to: &storage) { address in
            address.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
                withOptionalCString(configuration.tls?.keyPEM) { key in
                    withOptionalCString(configuration.tls?.certificatePEM) { cert in
                        var options = soulacy_mhd_options(
                            thread_pool_size: UInt32(configuration.threadPoolSize),
                            connection_limit: UInt32(configuration.connectionLimit),
                            connection_timeout_seconds: UInt32(configuration.idleTimeoutSeconds),
                            connection_memory_limit: configuration.connectionMemoryBytes,
                            bind_address: sa, https_key_pem: key, https_cert_pem: cert)
                        return soulacy_mhd_start(flags, configuration.port, accessHandler, context, requestCompleted, context, &options)
                    }
                }
            }
        }
        guard let started else {
            throw HTTPServerError(description: "cannot listen on \(configuration.host):\(configuration.port): \(String(cString: strerror(errno)))")
        }
        daemon.withLock { $0 = UInt(bitPattern: started) }
    }

    /// Stops accepting connections, lets running handlers finish (up to `drainTimeout`), then closes.
    public func stop(drainTimeout: Duration = .seconds(10)) async {
        let d = daemon.withLock { $0 }
        guard d != 0 else { return }
        _ = MHD_quiesce_daemon(OpaquePointer(bitPattern: d))
        let deadline = ContinuousClock.now + drainTimeout
        while core.inFlight.load(ordering: .acquiring) > 0, ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(10))
        }
        daemon.withLock { d in
            if d != 0 { MHD_stop_daemon(OpaquePointer(bitPattern: d)) }
            d = 0
        }
    }

    deinit {
        daemon.withLock { d in
            if d != 0 { MHD_stop_daemon(OpaquePointer(bitPattern: d)) }
        }
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

    init(handler: @escaping @Sendable (HTTPRequest) async -> HTTPResponse, immediate: (@Sendable (HTTPRequest) -> HTTPResponse?)?, maximumBodyBytes: Int) {
        self.handler = handler
        self.immediate = immediate
        self.maximumBodyBytes = maximumBodyBytes
    }
}

/// Per-request state, owned by MHD's con_cls from the first callback until completion.
final class RequestState: @unchecked Sendable {
    enum Phase { case receiving, running, answered(HTTPResponse) }
    // Touched by the connection's MHD thread and, while running, by one task; the lock orders the hand-over.
    let lock = Mutex(())
    var phase: Phase = .receiving
    var body: [UInt8] = []
    var bodyTooLarge = false
    /// Counted in `inFlight` from the handler's start until MHD has finished sending the answer.
    var counted = false
}

private func queue(_ response: HTTPResponse, on connection: OpaquePointer?) -> MHD_Result {
    let mhdResponse = response.body.withUnsafeBytes { buffer in
        MHD_create_response_from_buffer(buffer.count, UnsafeMutableRawPointer(mutating: buffer.baseAddress), MHD_ResponseMemoryMode(rawValue: 2)!)
    }
    guard let mhdResponse else { return MHD_Result.NO }
    for (name, value) in response.headers { MHD_add_response_header(mhdResponse, name, value) }
    let result = MHD_queue_response(connection, UInt32(response.status), mhdResponse)
    MHD_destroy_response(mhdResponse)
    return result
}

private func collectValues(_ connection: OpaquePointer?, kind: MHD_ValueKind, lowercaseKeys: Bool) -> [String: String] {
    final class Box { var values: [String: String] = [:]; let lower: Bool; init(_ lower: Bool) { self.lower = lower } }
    let box = Box(lowercaseKeys)
    let opaque = Unmanaged.passUnretained(box).toOpaque()
    MHD_get_connection_values(connection, kind, { cls, _, key, value in
        guard let cls, let key else { return MHD_Result.YES }
        let box = Unmanaged<Box>.fromOpaque(cls).takeUnretainedValue()
        let name = String(cString: key)
        // Most clients already send lower-case names (HTTP/2 must); lower-case only the others.
        let k = box.lower && name.utf8.contains(where: { $0 >= 0x41 && $0 <= 0x5A }) ? name.lowercased() : name
        if box.values[k] == nil { box.values[k] = value.map { String(cString: $0) } ?? "" }
        return MHD_Result.YES
    }, opaque)
    return withExtendedLifetime(box) { box.values }
}

private let accessHandler: MHD_AccessHandlerCallback = { cls, connection, url, method, _, uploadData, uploadDataSize, conCls in
    guard let cls, let conCls, let uploadDataSize else { return MHD_Result.NO }
    let core = Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue()

    guard let existing = conCls.pointee else {
        // First call: headers only. Refuse an announced oversized body before reading it.
        let state = RequestState()
        conCls.pointee = Unmanaged.passRetained(state).toOpaque()
        if let length = MHD_lookup_connection_value(connection, MHD_ValueKind.HEADER_KIND, "Content-Length").flatMap({ Int(String(cString: $0)) }),
           length > core.maximumBodyBytes {
            state.bodyTooLarge = true
            return queue(tooLarge(core.maximumBodyBytes), on: connection)
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
        if state.bodyTooLarge { return queue(tooLarge(core.maximumBodyBytes), on: connection) }
        var buffer = [CChar](repeating: 0, count: 64)
        soulacy_mhd_client_address(connection, &buffer, buffer.count)
        let request = HTTPRequest(
            method: method.map { String(cString: $0) } ?? "GET",
            path: url.map { String(cString: $0) } ?? "/",
            query: collectValues(connection, kind: MHD_ValueKind.GET_ARGUMENT_KIND, lowercaseKeys: false),
            headers: collectValues(connection, kind: MHD_ValueKind.HEADER_KIND, lowercaseKeys: true),
            body: state.body,
            remoteAddress: buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) })
        state.body = []
        if let immediate = core.immediate, let response = immediate(request) {
            return queue(response, on: connection)
        }
        state.lock.withLock { _ in state.phase = .running }
        state.counted = true
        core.inFlight.add(1, ordering: .relaxed)
        MHD_suspend_connection(connection)
        let connectionAddress = UInt(bitPattern: connection)
        Task {
            let response = await core.handler(request)
            state.lock.withLock { _ in state.phase = .answered(response) }
            MHD_resume_connection(OpaquePointer(bitPattern: connectionAddress))
        }
        return MHD_Result.YES
    }
}

private func tooLarge(_ limit: Int) -> HTTPResponse {
    var response = APIError(status: 413, code: "body_too_large", message: "the request body is larger than the limit of \(limit) bytes").response
    response.headers.append(("Connection", "close"))
    return response
}

private let requestCompleted: MHD_RequestCompletedCallback = { cls, _, conCls, _ in
    guard let conCls, let existing = conCls.pointee else { return }
    let state = Unmanaged<RequestState>.fromOpaque(existing)
    // The answer has been sent (or the client went away): only now may a graceful stop close the daemon.
    if state.takeUnretainedValue().counted, let cls {
        Unmanaged<ServerCore>.fromOpaque(cls).takeUnretainedValue().inFlight.subtract(1, ordering: .releasing)
    }
    state.release()
    conCls.pointee = nil
}
