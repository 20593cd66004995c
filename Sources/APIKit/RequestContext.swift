import HTTPServer
import Identity
import Logging
import Synchronization

/// What one request carries from the listener through its middleware to its route (Hummingbird's `RequestContext`):
/// its id, a logger that names it, the caller once authentication middleware found one, and the route it matched
/// with its path parameters.
public struct RequestContext: Sendable {
    /// The client's `X-Request-Id` when it is 1–128 characters of `A-Z a-z 0-9 . _ -`, else a fresh one. Every
    /// answer carries it back in `X-Request-Id`.
    public let requestID: String
    /// The authenticated caller, set by authentication middleware (a bearer key, a console session).
    public var principal: Principal?
    /// Why the credential the request presented was not accepted (an unknown key, an ended session, a failed
    /// CSRF check): what a route that needs a role answers instead of the generic "an API key is required". A
    /// route open to anyone ignores it.
    public var authenticationRefusal: APIError?
    /// The route the request matched, nil when none did (the router then answers 404 or 405).
    public internal(set) var route: Route?
    /// The values of the route pattern's `:name` segments (also on `HTTPRequest.pathParameters`).
    public internal(set) var parameters: [String: String] = [:]
    let log: Log
    /// When the gateway began answering it (the access log's and the request histogram's clock).
    public let startedAt: ContinuousClock.Instant

    public init(requestID: String, log: Log, principal: Principal? = nil) {
        startedAt = .now
        self.requestID = requestID
        self.log = log
        self.principal = principal
    }

    /// The listener's logger with this request's id on every line. Built when asked for, so a request that logs
    /// nothing pays nothing for it.
    public var logger: Log { log.with("request_id", requestID) }

    /// The context of the request a handler is answering, for handlers that run in a task (the router sets it
    /// around them); nil outside a request and in handlers answered at once on the server thread.
    @TaskLocal public static var current: RequestContext?
}

/// Request ids: the client's when it is well-formed, else a fresh one that fits Swift's inline string storage, so
/// the server-thread path allocates nothing for it.
public enum RequestID {
    public static let header = "X-Request-Id"

    /// The id a request is known by (see `RequestContext.requestID`).
    public static func of(_ request: HTTPRequest) -> String {
        if let given = request.headers["x-request-id"], isWellFormed(given) { return given }
        return fresh()
    }

    /// 1–128 characters, each a letter, digit, dot, underscore or dash: safe to log and to echo in a header.
    public static func isWellFormed(_ text: String) -> Bool {
        let bytes = text.utf8
        guard (1...128).contains(bytes.count) else { return false }
        return bytes.allSatisfy { byte in
            (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A) || byte == 0x2E || byte == 0x5F || byte == 0x2D
        }
    }

    /// 15 lower-case hex digits: a process-wide counter through a bijective mix with a random seed, so ids never
    /// repeat within a process and do not collide across restarts in practice. Not a secret.
    public static func fresh() -> String {
        var value = mix(seed &+ counter.add(1, ordering: .relaxed).newValue)
        return String(unsafeUninitializedCapacity: 15) { buffer in
            let digits: StaticString = "0123456789abcdef"
            for index in 0..<15 {
                buffer[index] = digits.utf8Start[Int(value & 0xF)]
                value >>= 4
            }
            return 15
        }
    }

    private static let seed = UInt64.random(in: .min ... .max)
    private static let counter = Atomic<UInt64>(0)

    /// SplitMix64's finaliser: a bijection of UInt64, so distinct counters give distinct values.
    private static func mix(_ input: UInt64) -> UInt64 {
        var z = input &* 0x9E37_79B9_7F4A_7C15
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

extension HTTPResponse {
    /// The same response carrying the request's id.
    mutating func stamp(_ requestID: String) {
        headers.append((RequestID.header, requestID))
    }
}
