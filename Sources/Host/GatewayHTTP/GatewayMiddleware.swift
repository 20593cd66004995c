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
        guard case .limited(let retryAfter) = limiter.take(address: clients.allowanceKey(of: request)) else { return nil }
        var refusal = APIError(status: 429, code: "rate_limited", message: "rate limit exceeded")
        refusal.extraHeaders["Retry-After"] = String(retryAfter)
        return refusal.response
    }

    public func handle(_ request: HTTPRequest, context: RequestContext, next: NextResponder) async throws -> HTTPResponse {
        await next(request, context)
    }

    public func screen(_ request: HTTPRequest, context: inout RequestContext) -> Screening { .pass }
}

/// Requests per client address as a token bucket (GCRA): `perMinute` may come at once, then one every
/// `60 / perMinute` seconds, so a client that keeps sending gets `perMinute` a minute. O(1) per request under one lock; the table keeps at most `capacity`
/// addresses, least recently seen first out, and drops addresses whose allowance is whole again as it goes, so a
/// flood of addresses costs bounded memory (past `capacity` busy addresses, the stalest is forgotten).
public final class RequestRateLimiter: Sendable {
    public enum Verdict: Sendable, Equatable {
        case allowed
        /// Refused; a request passes again in this many whole seconds.
        case limited(retryAfter: Int)
    }

    public let perMinute: Int
    public let capacity: Int
    private let clock: any WallClock
    private let table: Mutex<AddressTable>

    public init(perMinute: Int, capacity: Int = 16_384, clock: any WallClock = SystemWallClock()) {
        precondition(perMinute > 0 && capacity > 0)
        self.perMinute = perMinute
        self.capacity = capacity
        self.clock = clock
        table = Mutex(AddressTable())
    }

    /// Takes one request's place for `address`, or says how long it must wait.
    public func take(address: String) -> Verdict {
        // Whole nanoseconds: sums of a Double interval drift at today's magnitudes and would refuse the last place.
        let now = Int64((clock.now().timeIntervalSinceReferenceDate * 1e9).rounded(.down))
        let minute: Int64 = 60_000_000_000
        let interval = minute / Int64(perMinute)
        return table.withLock { table in
            let index = table.touch(address, capacity: capacity, now: now)
            // The theoretical arrival time: when the bucket would be whole again. Never more than a minute ahead,
            // even after the wall clock stepped back.
            let due = min(max(table.entries[index].due, now), now + minute)
            let verdict: Verdict
            if due + interval - now <= minute {
                table.entries[index].due = due + interval
                verdict = .allowed
            } else {
                table.entries[index].due = due
                let wait = due + interval - minute - now
                verdict = .limited(retryAfter: Int(max(1, (wait + 999_999_999) / 1_000_000_000)))
            }
            table.dropWhole(now: now, atMost: 2)
            return verdict
        }
    }

    /// How many addresses the table holds now.
    public var trackedAddresses: Int { table.withLock { $0.slots.count } }

    /// Addresses in a doubly linked list by last use, over arrays, so touching, evicting and reusing are O(1).
    struct AddressTable {
        struct Entry {
            var address: String
            /// Nanoseconds since the reference date.
            var due: Int64
            var older = -1
            var newer = -1
        }

        var slots: [String: Int] = [:]
        var entries: [Entry] = []
        var free: [Int] = []
        var newest = -1
        var oldest = -1

        /// The entry of `address`, now the newest; a new one (the stalest dropped when full) if it had none.
        mutating func touch(_ address: String, capacity: Int, now: Int64) -> Int {
            if let index = slots[address] {
                unlink(index)
                link(index)
                return index
            }
            if slots.count >= capacity, oldest >= 0 { drop(oldest) }
            let index: Int
            if let reused = free.popLast() {
                index = reused
                entries[index] = Entry(address: address, due: now)
            } else {
                index = entries.count
                entries.append(Entry(address: address, due: now))
            }
            slots[address] = index
            link(index)
            return index
        }

        /// Forgets up to `atMost` of the stalest addresses whose allowance is whole again (as if never seen).
        mutating func dropWhole(now: Int64, atMost: Int) {
            var dropped = 0
            while dropped < atMost, oldest >= 0, entries[oldest].due <= now {
                drop(oldest)
                dropped += 1
            }
        }

        mutating func drop(_ index: Int) {
            slots.removeValue(forKey: entries[index].address)
            unlink(index)
            entries[index].address = ""
            free.append(index)
        }

        private mutating func link(_ index: Int) {
            entries[index].older = newest
            entries[index].newer = -1
            if newest >= 0 { entries[newest].newer = index }
            newest = index
            if oldest < 0 { oldest = index }
        }

        private mutating func unlink(_ index: Int) {
            let (older, newer) = (entries[index].older, entries[index].newer)
            if older >= 0 { entries[older].newer = newer } else { oldest = newer }
            if newer >= 0 { entries[newer].older = older } else { newest = older }
            entries[index].older = -1
            entries[index].newer = -1
        }
    }
}
