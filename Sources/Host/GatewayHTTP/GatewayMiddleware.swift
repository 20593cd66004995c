import APIKit
import ChannelAPI
import Identity
import SQLite

/// Mutating calls with an `Idempotency-Key` are answered from the log when replayed (see `IdempotencyLog`).
public struct IdempotencyMiddleware: Middleware {
    let log: IdempotencyLog
    let router: Router

    public init(log: IdempotencyLog, router: Router) {
        self.log = log
        self.router = router
    }

    public func handle(_ request: HTTPRequest, next: @Sendable (HTTPRequest) async -> HTTPResponse) async -> HTTPResponse {
        await log.answer(request, principal: router.principal(of: request), handle: next)
    }

    /// Reads pass; a mutating call is never answered on the server thread.
    public func screen(_ request: HTTPRequest) -> Screening {
        IdempotencyLog.isMutating(request.method) ? .needsTask : .pass
    }
}

/// The same-Wi-Fi door's rules, in the documented order: a browser (any Origin) is refused (403); a missing,
/// unknown or revoked bearer is 401 (pairing and health need none); a path outside what a phone may call is 404;
/// a mutating call without an Idempotency-Key is 422, so a retry over another path cannot apply it twice.
public struct LANDoorMiddleware: Middleware {
    /// What the door lets through without a key: redeeming a pairing code and the liveness checks.
    static let openPaths: Set<String> = ["/api/v1/pairing/redeem", "/pairing/redeem", "/health", "/api/v1/health", "/ping", "/mobile"]

    let router: Router

    public init(router: Router) {
        self.router = router
    }

    public func handle(_ request: HTTPRequest, next: @Sendable (HTTPRequest) async -> HTTPResponse) async -> HTTPResponse {
        if let refusal = refusal(request) { return refusal.response }
        return await next(request)
    }

    public func screen(_ request: HTTPRequest) -> Screening {
        refusal(request).map { .refuse($0.response) } ?? .pass
    }

    func refusal(_ request: HTTPRequest) -> APIError? {
        if request.header("origin") != nil { return APIError.forbidden("browsers may not call this listener") }
        let path = request.path
        let open = Self.openPaths.contains(path)
        if !open, router.principal(of: request) == nil {
            var error = request.header("authorization") == nil
                ? APIError.unauthorized("an API key is required (Authorization: Bearer <key>)")
                : APIError.unauthorized("the API key is unknown or has been revoked")
            error.extraHeaders["WWW-Authenticate"] = "Bearer"
            return error
        }
        guard !path.hasPrefix("/admin/"), path != "/admin" else { return APIError.notFound("no route for \(request.method) \(path) on this listener") }
        if IdempotencyLog.isMutating(request.method), request.header(IdempotencyLog.header) == nil, !open {
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

    public func respond(_ error: any Error, _ request: HTTPRequest) -> HTTPResponse {
        log.error("\(request.method) \(request.path): \(error)")
        if let sqlite = error as? SQLiteError {
            if sqlite.isDiskFull { return APIError(status: 507, code: "storage_full", message: "the gateway's disk is full; nothing was stored").response }
            if sqlite.isReadOnly { return APIError.unavailable("the gateway's database is read-only; nothing was stored", code: "storage_read_only").response }
            if sqlite.isBusy { return APIError.unavailable("the database is busy; try again", code: "storage_busy").response }
        }
        return APIError.internal("the gateway could not complete the request").response
    }
}
