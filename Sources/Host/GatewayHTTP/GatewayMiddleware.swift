import Storage
import APIKit
import ChannelAPI
import Foundation
import Identity
import Synchronization

/// Mutating calls with an `Idempotency-Key` are answered from the log when replayed (see `IdempotencyLog`). The
/// log is scoped by the caller authentication middleware (before this one) put on the context.
public struct IdempotencyMiddleware: Middleware {
    let log: IdempotencyLog

    public init(log: IdempotencyLog) {
        self.log = log
    }

    public func handle(_ request: HTTPRequest, context: RequestContext, next: NextResponder) async throws -> HTTPResponse {
        await log.answer(request, principal: context.principal) { await next($0, context) }
    }

    /// Reads pass; a mutating call is never answered on the server thread.
    public func screen(_ request: HTTPRequest, context: inout RequestContext) -> Screening {
        IdempotencyLog.isMutating(request.method) ? .needsTask : .pass
    }
}

extension RouteFlags {
    /// The same-Wi-Fi door lets this route through without a key (redeeming a pairing code, the liveness checks,
    /// the page a pairing QR opens): the route's own access rule still applies.
    public static let keylessOnSameWiFi = RouteFlags(rawValue: 1 << 0)
}

/// The same-Wi-Fi door's rules, in the documented order: a browser (any Origin) is refused (403); a missing,
/// unknown or revoked bearer is 401, except on routes flagged `keylessOnSameWiFi`; a path under `/admin` is 404;
/// a mutating call without an Idempotency-Key is 422, so a retry over another path cannot apply it twice. Runs
/// after bearer authentication (and no cookie authentication: a browser's session never opens this door).
public struct LANDoorMiddleware: Middleware {
    public init() {}

    public func handle(_ request: HTTPRequest, context: RequestContext, next: NextResponder) async throws -> HTTPResponse {
        if let refusal = refusal(request, context) { throw refusal }
        return await next(request, context)
    }

    public func screen(_ request: HTTPRequest, context: inout RequestContext) -> Screening {
        refusal(request, context).map { .refuse($0.response) } ?? .pass
    }

    func refusal(_ request: HTTPRequest, _ context: RequestContext) -> APIError? {
        if request.header("origin") != nil { return APIError.forbidden("browsers may not call this listener") }
        let path = request.path
        let keyless = context.route?.flags.contains(.keylessOnSameWiFi) == true
        if !keyless, context.principal == nil {
            var error = request.header("authorization") == nil
                ? APIError.unauthorized("an API key is required (Authorization: Bearer <key>)")
                : APIError.unauthorized("the API key is unknown or has been revoked")
            error.extraHeaders["WWW-Authenticate"] = "Bearer"
            return error
        }
        // Administration is the main listener's alone, whatever is added under /admin later.
        guard !path.hasPrefix("/admin/"), path != "/admin" else { return APIError.notFound("no route for \(request.method) \(path) on this listener") }
        if IdempotencyLog.isMutating(request.method), request.header(IdempotencyLog.header) == nil, !keyless {
            return APIError(status: 422, code: "idempotency_key_required", message: "Idempotency-Key: every \(request.method) on this listener needs one (one key per intent)", field: "Idempotency-Key")
        }
        return nil
    }
}

/// What the router answers for an error no route mapped (its `errorResponder`): a storage failure becomes a clear
/// status (507 disk full, 503 read-only or busy), anything else a plain 500. The details go to the log, never to
/// the caller.
public struct StorageFailureResponder: Sendable {
    let log: Log

    public init(log: Log) { self.log = log }

    public func respond(_ error: any Error, _ request: HTTPRequest, _ context: RequestContext) -> HTTPResponse {
        log.with("request_id", context.requestID).error("\(request.method) \(request.path): \(error)")
        switch error.asStorageError {
        case .full: return APIError(status: 507, code: "storage_full", message: "the gateway's disk is full; nothing was stored").response
        case .readOnly: return APIError.unavailable("the gateway's database is read-only; nothing was stored", code: "storage_read_only").response
        case .unavailable: return APIError.unavailable("the database is busy; try again", code: "storage_busy").response
        case .conflict: return APIError(status: 409, code: "storage_conflict", message: "another change got there first; try again").response
        case nil: break
        }
        return APIError.internal("the gateway could not complete the request").response
    }
}

/// The original's per-address limit (`SOULACY_RATE_LIMIT_PER_MINUTE`, 600 by default): past it a client address
/// gets 429 `{"error": "rate limit exceeded"}` (with this gateway's `code: rate_limited`) and `Retry-After`, the
/// whole seconds until its next request would pass. Counted once per request a listener receives, loopback
/// included, per `ClientAddresses.allowanceKey` (an IPv6 client's /64); behind a reverse proxy the client is read
/// from `X-Forwarded-For` only when the peer is a trusted proxy.
public struct RateLimitMiddleware: Middleware {
    let limiter: RequestRateLimiter
    let clients: ClientAddresses

    public init(limiter: RequestRateLimiter, clients: ClientAddresses = ClientAddresses()) {
        self.limiter = limiter
        self.clients = clients
    }

    public func admit(_ request: HTTPRequest) -> HTTPResponse? {
        guard case .limited(let retryAfter) = limiter.take(key: clients.allowanceKey(of: request)) else { return nil }
        return APIError.tooManyRequests("rate limit exceeded", code: "rate_limited", retryAfter: retryAfter).response
    }

    public func handle(_ request: HTTPRequest, context: RequestContext, next: NextResponder) async throws -> HTTPResponse {
        await next(request, context)
    }

    public func screen(_ request: HTTPRequest, context: inout RequestContext) -> Screening { .pass }
}

extension RequestRateLimiter {
    /// A limiter on the gateway's clock.
    public convenience init(perMinute: Int, capacity: Int = 16_384, clock: any WallClock) {
        self.init(perMinute: perMinute, capacity: capacity, now: { clock.now() })
    }
}
