internal import CCurl
internal import CCurlShims
import Foundation
import Synchronization

/// One outgoing request.
public struct ClientRequest: Sendable {
    public var method: String
    public var url: String
    public var headers: [(String, String)]
    public var body: [UInt8]
    public var timeout: Duration
    /// The most body bytes an answer may have, streamed or whole: a server that sends more is cut off, and the
    /// request fails saying so, rather than the process holding whatever it sends for the whole timeout.
    public var maximumResponseBytes: Int

    public init(method: String = "POST", url: String, headers: [(String, String)] = [], body: [UInt8] = [], timeout: Duration = .seconds(15),
                maximumResponseBytes: Int = ClientRequest.defaultMaximumResponseBytes) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.timeout = timeout
        self.maximumResponseBytes = maximumResponseBytes
    }

    /// 32 MiB: far above any answer the services here give (an LLM's whole reply, a Graph API page).
    public static let defaultMaximumResponseBytes = 32 * 1024 * 1024
}

public struct ClientResponse: Sendable {
    public let status: Int
    /// Header names lower-cased.
    public let headers: [String: String]
    public let body: [UInt8]
    /// "2" for HTTP/2.
    public let httpVersion: String
}

/// A request that never got an HTTP answer (connection refused, TLS failure, timeout).
public struct ClientTransportError: Error, Sendable, CustomStringConvertible {
    public let code: Int32
    public let description: String
    /// The request timed out in the queue for a connection to its host: the server never saw it.
    public var neverSent = false

    /// The connection broke or the server closed it without an answer (reset, empty reply, HTTP/2 stream or
    /// framing error): trying again may well work. A refused connection, a name that does not resolve, a TLS
    /// failure or a timeout are not: they say something about the address or the deadline.
    public var isTransient: Bool {
        [CURLE_SEND_ERROR, CURLE_RECV_ERROR, CURLE_GOT_NOTHING, CURLE_HTTP2, CURLE_HTTP2_STREAM, CURLE_PARTIAL_FILE]
            .contains { Int32($0.rawValue) == code }
    }
}

public struct HTTP2ClientConfiguration: Sendable {
    /// PEM bundle trusted instead of the system store (a test stand-in's self-signed certificate).
    public var caFile: String?
    /// Most requests open at once; the rest queue. All share one multiplexed connection per host.
    public var maximumConcurrentStreams: Int
    public var connectTimeout: Duration
    /// Trust only a server whose leaf public key has this SHA-256 (the gateway's pin, as the original Soulacy app
    /// computes it: see `SelfSignedCertificate.publicKeyPin`), no CA at all.
    public var pinnedPublicKeySHA256: [UInt8]?
    /// One for HTTP/2 services that want a single connection (APNs, FCM: everything multiplexes on it). A pool
    /// (`pooledConnectionsPerHost`) for servers that may speak only HTTP/1.1, where each request in flight needs
    /// its own connection; HTTP/2 servers still multiplex on as few of them as they can.
    public var maximumConnectionsPerHost: Int
    /// How long a plain-HTTP request may wait for a free connection to its host before it fails as never sent
    /// (nil: as long as its own timeout). Its `timeout` counts from when it is sent.
    public var maximumConnectionWait: Duration?
    /// A sensible pool for model servers on one host (Ollama, vLLM, llama.cpp answer over HTTP/1.1).
    public static let pooledConnectionsPerHost = 8

    public init(caFile: String? = nil, maximumConcurrentStreams: Int = 256, connectTimeout: Duration = .seconds(10), pinnedPublicKeySHA256: [UInt8]? = nil,
                maximumConnectionsPerHost: Int = 1, maximumConnectionWait: Duration? = nil) {
        self.caFile = caFile
        self.maximumConnectionWait = maximumConnectionWait
        self.maximumConnectionsPerHost = maximumConnectionsPerHost
        self.pinnedPublicKeySHA256 = pinnedPublicKeySHA256
        self.maximumConcurrentStreams = maximumConcurrentStreams
        self.connectTimeout = connectTimeout
    }
}

/// An HTTP/2 client on libcurl's multi interface: one thread drives one multi handle, and every request to
/// a host rides the same TLS connection as a separate stream (what APNs asks of providers).
public final class HTTP2Client: Sendable {
    private let engine: CurlEngine

    public init(configuration: HTTP2ClientConfiguration = HTTP2ClientConfiguration()) {
        engine = CurlEngine(configuration: configuration)
    }

    deinit { engine.shutdown() }

    public func send(_ request: ClientRequest) async throws(ClientTransportError) -> ClientResponse {
        let result: Result<ClientResponse, ClientTransportError> = await withCheckedContinuation { continuation in
            engine.submit(Transfer(request: request, continuation: continuation))
        }
        return try result.get()
    }

    /// Like `send`, but hands each piece of the body to `onBody` as it arrives (server-sent events, NDJSON).
    /// `onBody` runs on the client's I/O thread: it must only hand the bytes on. The returned response keeps
    /// the first 64 KiB of the body, enough for an error answer.
    public func send(_ request: ClientRequest, onBody: @escaping @Sendable ([UInt8]) -> Void) async throws(ClientTransportError) -> ClientResponse {
        let result: Result<ClientResponse, ClientTransportError> = await withCheckedContinuation { continuation in
            engine.submit(Transfer(request: request, continuation: continuation, onBody: onBody))
        }
        return try result.get()
    }

    /// How many connections libcurl opened so far (one per host when multiplexing works).
    public var connectionsOpened: Int { engine.connectionsOpened.load(ordering: .relaxed) }
}

/// One request in flight, owned by the engine thread once submitted.
final class Transfer: @unchecked Sendable {
    let request: ClientRequest
    let continuation: CheckedContinuation<Result<ClientResponse, ClientTransportError>, Never>
    var status = 0
    var headers: [String: String] = [:]
    var body: [UInt8] = []
    /// Body bytes received so far, streamed or kept.
    var received = 0
    /// The answer passed `request.maximumResponseBytes`, and the transfer was cut off.
    var tooLarge = false
    var headerList: UnsafeMutablePointer<curl_slist>?
    var easy: UnsafeMutableRawPointer?
    let onBody: (@Sendable ([UInt8]) -> Void)?
    /// Scheme, host and port: the pool a request waits on.
    let origin: String
    /// Every connection to the origin was busy when this request was handed to libcurl.
    var queuedBehind = 0
    /// Plain HTTP/1.1: one request per connection, so the engine queues it itself until one is free.
    var plain: Bool { origin.hasPrefix("http:") }
    let submitted = ContinuousClock.now
    static let streamedBodyKept = 64 * 1024

    init(request: ClientRequest, continuation: CheckedContinuation<Result<ClientResponse, ClientTransportError>, Never>,
         onBody: (@Sendable ([UInt8]) -> Void)? = nil) {
        self.request = request
        self.continuation = continuation
        self.onBody = onBody
        origin = Transfer.origin(of: request.url)
    }

    static func origin(of url: String) -> String {
        guard let components = URLComponents(string: url), let host = components.host else { return url }
        let scheme = components.scheme ?? "http"
        return "\(scheme)://\(host):\(components.port ?? (scheme == "https" ? 443 : 80))"
    }
}

private let globalInit: Void = { curl_global_init(Int(CURL_GLOBAL_DEFAULT)) }()

final class CurlEngine: @unchecked Sendable {
    let configuration: HTTP2ClientConfiguration
    // The multi handle is touched only by the engine thread; other threads go through `queue` and wakeup.
    private let multi: UnsafeMutableRawPointer
    private let queue = Mutex<(pending: [Transfer], stopping: Bool)>(([], false))
    private var active: [UnsafeMutableRawPointer: Transfer] = [:]
    // Requests in flight per origin, to tell a request that waited for a free connection from one that was sent.
    private var inFlight: [String: Int] = [:]
    // Plain-HTTP requests waiting for a free connection, per origin, oldest first (libcurl's own queue would
    // start their timeout while they wait).
    private var waiting: [String: [Transfer]] = [:]
    // Finished easy handles, reset and reused: making one per request was a fifth of a push's cost.
    private var idle: [UnsafeMutableRawPointer] = []
    private static let idleLimit = 128
    // Lives as long as the engine: libcurl reads it during every pinned handshake.
    private let pin: UnsafeMutablePointer<UInt8>?
    private let finished = DispatchSemaphore(value: 0)
    let connectionsOpened = Atomic<Int>(0)

    init(configuration: HTTP2ClientConfiguration) {
        _ = globalInit
        self.configuration = configuration
        if let fingerprint = configuration.pinnedPublicKeySHA256, fingerprint.count == 32 {
            let buffer = UnsafeMutablePointer<UInt8>.allocate(capacity: 32)
            buffer.initialize(from: fingerprint, count: 32)
            pin = buffer
        } else {
            pin = nil
        }
        multi = curl_multi_init()
        soulacy_curl_multi_setopt_long(multi, CURLMOPT_PIPELINING, CURLPIPE_MULTIPLEX)
        soulacy_curl_multi_setopt_long(multi, CURLMOPT_MAX_HOST_CONNECTIONS, configuration.maximumConnectionsPerHost)
        soulacy_curl_multi_setopt_long(multi, CURLMOPT_MAX_CONCURRENT_STREAMS, configuration.maximumConcurrentStreams)
        let thread = Thread { [self] in run() }
        thread.name = "soulacy-http2"
        thread.start()
    }

    func submit(_ transfer: Transfer) {
        let accepted = queue.withLock { state -> Bool in
            guard !state.stopping else { return false }
            state.pending.append(transfer)
            return true
        }
        if accepted {
            curl_multi_wakeup(multi)
        } else {
            transfer.continuation.resume(returning: .failure(ClientTransportError(code: -1, description: "the HTTP client is shut down")))
        }
    }

    func shutdown() {
        queue.withLock { $0.stopping = true }
        curl_multi_wakeup(multi)
        finished.wait()
    }

    private func run() {
        var running: Int32 = 0
        while true {
            let (incoming, stopping) = queue.withLock { state -> ([Transfer], Bool) in
                defer { state.pending.removeAll() }
                return (state.pending, state.stopping)
            }
            for transfer in incoming { start(transfer) }
            if stopping { break }
            curl_multi_perform(multi, &running)
            var easy: UnsafeMutableRawPointer?
            var code = CURLE_OK
            while soulacy_curl_multi_next_done(multi, &easy, &code) == 1, let handle = easy {
                complete(handle, code: code)
            }
            let nextExpiry = expireWaiting()
            let pollMs = nextExpiry.map { max(1, min(1000, Int(($0 - ContinuousClock.now) / .milliseconds(1)) + 1)) } ?? 1000
            curl_multi_poll(multi, nil, 0, Int32(pollMs), nil)
        }
        for transfer in waiting.values.joined() {
            transfer.continuation.resume(returning: .failure(ClientTransportError(code: -1, description: "the HTTP client is shut down")))
        }
        waiting.removeAll()
        for (handle, _) in active { complete(handle, code: CURLE_ABORTED_BY_CALLBACK) }
        for handle in idle { curl_easy_cleanup(handle) }
        idle.removeAll()
        curl_multi_cleanup(multi)
        finished.signal()
        pin?.deallocate()
    }

    /// How long a queued request may wait for a connection.
    private func connectionWait(_ transfer: Transfer) -> Duration {
        min(transfer.request.timeout, configuration.maximumConnectionWait ?? transfer.request.timeout)
    }

    /// Fails the queued requests whose wait is over; returns when the next one's is.
    private func expireWaiting() -> ContinuousClock.Instant? {
        let now = ContinuousClock.now
        var next: ContinuousClock.Instant?
        for (origin, queue) in waiting {
            var kept: [Transfer] = []
            for transfer in queue {
                let expiry = transfer.submitted + connectionWait(transfer)
                if expiry <= now {
                    let message = "no connection to \(origin) came free within \(connectionWait(transfer)) (all \(configuration.maximumConnectionsPerHost) in use); the request was never sent"
                    transfer.continuation.resume(returning: .failure(ClientTransportError(code: Int32(CURLE_OPERATION_TIMEDOUT.rawValue), description: message, neverSent: true)))
                } else {
                    kept.append(transfer)
                    next = min(next ?? expiry, expiry)
                }
            }
            waiting[origin] = kept.isEmpty ? nil : kept
        }
        return next
    }

    /// A timeout as libcurl's milliseconds, at most a million seconds (longer is "no limit" to anyone waiting), so
    /// no caller's duration can overflow the count.
    static func milliseconds(_ timeout: Duration) -> Int {
        let (seconds, attoseconds) = timeout.components
        guard seconds >= 0 else { return 1 }
        return seconds >= 1_000_000 ? 1_000_000_000 : Int(seconds) * 1000 + Int(attoseconds / 1_000_000_000_000_000)
    }

    private func start(_ transfer: Transfer) {
        if transfer.plain, inFlight[transfer.origin, default: 0] >= configuration.maximumConnectionsPerHost {
            waiting[transfer.origin, default: []].append(transfer)
            return
        }
        guard let easy = idle.popLast() ?? curl_easy_init() else {
            transfer.continuation.resume(returning: .failure(ClientTransportError(code: -1, description: "curl_easy_init failed")))
            return
        }
        let r = transfer.request
        soulacy_curl_setopt_ptr(easy, CURLOPT_URL, r.url)
        if r.url.lowercased().hasPrefix("https:") {
            // ALPN decides: an HTTP/2 server gets every request on one multiplexed connection (what APNs asks);
            // waiting for the first handshake lets the next request learn that instead of opening another.
            soulacy_curl_setopt_long(easy, CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_2TLS)
            soulacy_curl_setopt_long(easy, CURLOPT_PIPEWAIT, 1)
        } else {
            // Plain HTTP is HTTP/1.1 (no h2c): a request never waits on a busy connection to find out it cannot
            // share it; it takes another from the host's pool (Ollama, vLLM, llama.cpp).
            soulacy_curl_setopt_long(easy, CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_1_1)
        }
        soulacy_curl_setopt_long(easy, CURLOPT_NOSIGNAL, 1)
        soulacy_curl_setopt_long(easy, CURLOPT_TIMEOUT_MS, Self.milliseconds(r.timeout))
        soulacy_curl_setopt_long(easy, CURLOPT_CONNECTTIMEOUT_MS, Self.milliseconds(configuration.connectTimeout))
        soulacy_curl_setopt_ptr(easy, CURLOPT_CUSTOMREQUEST, r.method)
        if let ca = configuration.caFile { soulacy_curl_setopt_ptr(easy, CURLOPT_CAINFO, ca) }
        if let pin { soulacy_curl_pin_public_key(easy, pin) }
        if r.method != "GET" || !r.body.isEmpty {
            soulacy_curl_setopt_long(easy, CURLOPT_POST, 1)
            soulacy_curl_setopt_off(easy, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(r.body.count))
            r.body.withUnsafeBytes { _ = soulacy_curl_setopt_ptr(easy, CURLOPT_COPYPOSTFIELDS, $0.baseAddress ?? UnsafeRawPointer(bitPattern: 1)) }
        }
        var list: UnsafeMutablePointer<curl_slist>?
        for (name, value) in r.headers { list = curl_slist_append(list, "\(name): \(value)") }
        // curl adds "Expect: 100-continue" to larger POSTs; HTTP/2 services do not want it.
        list = curl_slist_append(list, "Expect:")
        transfer.headerList = list
        soulacy_curl_setopt_ptr(easy, CURLOPT_HTTPHEADER, list)
        let context = Unmanaged.passUnretained(transfer).toOpaque()
        soulacy_curl_set_callbacks(easy, { data, size, count, user in
            let transfer = Unmanaged<Transfer>.fromOpaque(user!).takeUnretainedValue()
            let n = size * count
            guard let data else { return n }
            transfer.received += n
            if transfer.received > transfer.request.maximumResponseBytes {
                // Returning short of n makes libcurl end the transfer with CURLE_WRITE_ERROR.
                transfer.tooLarge = true
                return 0
            }
            data.withMemoryRebound(to: UInt8.self, capacity: n) { bytes in
                let chunk = UnsafeBufferPointer(start: bytes, count: n)
                if let onBody = transfer.onBody {
                    onBody(Array(chunk))
                    if transfer.body.count < Transfer.streamedBodyKept { transfer.body.append(contentsOf: chunk.prefix(Transfer.streamedBodyKept - transfer.body.count)) }
                } else {
                    transfer.body.append(contentsOf: chunk)
                }
            }
            return n
        }, { data, size, count, user in
            let transfer = Unmanaged<Transfer>.fromOpaque(user!).takeUnretainedValue()
            let n = size * count
            guard let data else { return n }
            // Header lines are ASCII: split and trim by hand (Foundation's trimming was a tenth of a push's cost).
            let bytes = UnsafeRawBufferPointer(start: data, count: n)
            func isSpace(_ b: UInt8) -> Bool { b == 0x20 || b == 0x09 || b == 0x0D || b == 0x0A }
            guard let first = bytes.firstIndex(where: { !isSpace($0) }), let last = bytes.lastIndex(where: { !isSpace($0) }) else { return n }
            let line = bytes[first...last]
            if line.starts(with: "HTTP/".utf8) {
                transfer.headers = [:]
            } else if let colon = line.firstIndex(of: UInt8(ascii: ":")) {
                let name = String(decoding: line[line.startIndex..<colon], as: UTF8.self).lowercased()
                let rest = line[(colon + 1)...]
                let valueStart = rest.firstIndex(where: { !isSpace($0) }) ?? rest.endIndex
                transfer.headers[name] = String(decoding: rest[valueStart...], as: UTF8.self)
            }
            return n
        }, context)
        transfer.easy = easy
        let busy = inFlight[transfer.origin, default: 0]
        if busy >= configuration.maximumConnectionsPerHost { transfer.queuedBehind = busy }
        inFlight[transfer.origin] = busy + 1
        active[easy] = transfer
        curl_multi_add_handle(multi, easy)
    }

    private func complete(_ easy: UnsafeMutableRawPointer, code: CURLcode) {
        guard let transfer = active.removeValue(forKey: easy) else { return }
        var status = 0
        soulacy_curl_getinfo_long(easy, CURLINFO_RESPONSE_CODE, &status)
        var version = 0
        soulacy_curl_getinfo_long(easy, CURLINFO_HTTP_VERSION, &version)
        var connects = 0
        soulacy_curl_getinfo_long(easy, CURLINFO_NUM_CONNECTS, &connects)
        if connects > 0 { connectionsOpened.add(connects, ordering: .relaxed) }
        // 0 when the transfer never had a connection of its own (it waited in libcurl's queue the whole time).
        var localPort = 0
        soulacy_curl_getinfo_long(easy, CURLINFO_LOCAL_PORT, &localPort)
        if let busy = inFlight[transfer.origin] { inFlight[transfer.origin] = busy > 1 ? busy - 1 : nil }
        defer {
            // A connection came free: the oldest request waiting for one goes now (its timeout starts here).
            if var queue = waiting[transfer.origin], !queue.isEmpty {
                let next = queue.removeFirst()
                waiting[transfer.origin] = queue.isEmpty ? nil : queue
                start(next)
            }
        }
        curl_multi_remove_handle(multi, easy)
        curl_slist_free_all(transfer.headerList)
        if idle.count < Self.idleLimit {
            // Back to defaults, keeping its allocations (connections live in the multi handle either way).
            curl_easy_reset(easy)
            idle.append(easy)
        } else {
            curl_easy_cleanup(easy)
        }
        if code == CURLE_OK {
            let versionText = version == CURL_HTTP_VERSION_2_0 ? "2" : (version == CURL_HTTP_VERSION_1_1 ? "1.1" : "\(version)")
            transfer.continuation.resume(returning: .success(ClientResponse(status: status, headers: transfer.headers, body: transfer.body, httpVersion: versionText)))
        } else if code == CURLE_OPERATION_TIMEDOUT, transfer.queuedBehind > 0, localPort == 0 {
            // Never sent: say so, rather than pass a queue's wait off as the server's slowness.
            let message = "no connection to \(transfer.origin) came free within \(transfer.request.timeout) (all \(configuration.maximumConnectionsPerHost) in use); the request was never sent"
            transfer.continuation.resume(returning: .failure(ClientTransportError(code: Int32(code.rawValue), description: message, neverSent: true)))
        } else if transfer.tooLarge {
            let message = "the answer was larger than \(transfer.request.maximumResponseBytes) bytes and was cut off"
            transfer.continuation.resume(returning: .failure(ClientTransportError(code: Int32(code.rawValue), description: message)))
        } else {
            let message = String(cString: curl_easy_strerror(code))
            transfer.continuation.resume(returning: .failure(ClientTransportError(code: Int32(code.rawValue), description: message)))
        }
    }
}
