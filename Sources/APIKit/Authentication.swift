import HTTPServer
import Identity

/// `Authorization: Bearer <key>`: sets the context's caller when the key is known. A missing header leaves the
/// request anonymous; a malformed header or an unknown key is remembered as the refusal a route with a role gives
/// (open routes never see it). Runs first: a caller already set (a sealed relay command) is kept.
///
/// On the server thread only what the gateway holds in memory is consulted (`known`); a key it does not hold there
/// sends the request to a task, where `lookUp` may ask the database without holding a thread that must never wait.
public struct BearerAuthentication: Middleware {
    let known: Authenticator
    /// Nil: `known` is the whole answer, and a token it does not know is refused on the server thread.
    let lookUp: (@Sendable (String) async -> Principal?)?

    /// `known`: the callers held in memory (nil: not known here); `lookUp`: the store's answer for the rest.
    public init(known: @escaping Authenticator, lookUp: @escaping @Sendable (String) async -> Principal?) {
        self.known = known
        self.lookUp = lookUp
    }

    /// One answer for every token, without waiting (tests, and a gateway whose keys all live in memory).
    public init(_ authenticate: @escaping Authenticator) {
        self.known = authenticate
        self.lookUp = nil
    }

    public func handle(_ request: HTTPRequest, context: RequestContext, next: NextResponder) async throws -> HTTPResponse {
        var context = context
        if context.principal == nil, request.headers["authorization"] != nil {
            if let token = request.bearerToken {
                var principal = known(token)
                if principal == nil, let lookUp { principal = await lookUp(token) }
                Self.apply(principal, to: &context)
            } else {
                context.authenticationRefusal = Self.malformed
            }
        }
        return await next(request, context)
    }

    public func screen(_ request: HTTPRequest, context: inout RequestContext) -> Screening {
        guard context.principal == nil, request.headers["authorization"] != nil else { return .pass }
        guard let token = request.bearerToken else {
            context.authenticationRefusal = Self.malformed
            return .pass
        }
        let principal = known(token)
        if principal == nil, lookUp != nil { return .needsTask }
        Self.apply(principal, to: &context)
        return .pass
    }

    static let malformed = APIError.unauthorized("the Authorization header must be 'Bearer <key>'")

    private static func apply(_ principal: Principal?, to context: inout RequestContext) {
        guard let principal else {
            var error = APIError.unauthorized("the API key is unknown or has been revoked")
            error.extraHeaders["WWW-Authenticate"] = "Bearer error=\"invalid_token\""
            context.authenticationRefusal = error
            return
        }
        context.principal = principal
        context.authenticationRefusal = nil
    }
}

/// A browser's session cookie: the caller of the session it names, when the request is not a cross-site forgery.
///
/// Only asked when no `Authorization` header came (a key always wins, and the cookie is then not read). A request
/// that is not GET or HEAD must carry `X-CSRF-Token` equal to the session's token and, when it sends `Origin`, an
/// Origin equal to the gateway's own (`scheme://` + its `Host`); otherwise the request gets no caller and a route
/// with a role answers 403 `csrf_failed`. An unknown or ended session is a 401 there.
///
/// As with bearer keys, the server thread consults only what the gateway can answer without waiting (`known`); a
/// cookie it does not know there sends the request to a task, where `lookUp` may ask the database.
public struct SessionCookieAuthentication: Middleware {
    /// What a session cookie resolves to.
    public struct Session: Sendable {
        public let principal: Principal
        public let csrfToken: String

        public init(principal: Principal, csrfToken: String) {
            self.principal = principal
            self.csrfToken = csrfToken
        }
    }

    public static let csrfHeader = "X-CSRF-Token"

    public let cookieName: String
    let known: @Sendable (String) -> Session?
    /// Nil: `known` is the whole answer, and a cookie it does not know is refused on the server thread.
    let lookUp: (@Sendable (String) async -> Session?)?

    /// `resolve` looks the cookie's value up (and keeps the session alive) without waiting; nil for unknown,
    /// expired or revoked.
    public init(cookieName: String, resolve: @escaping @Sendable (String) -> Session?) {
        self.cookieName = cookieName
        self.known = resolve
        self.lookUp = nil
    }

    /// `known`: the sessions answered without waiting (nil: not known here); `lookUp`: the store's answer for the rest.
    public init(cookieName: String, known: @escaping @Sendable (String) -> Session?, lookUp: @escaping @Sendable (String) async -> Session?) {
        self.cookieName = cookieName
        self.known = known
        self.lookUp = lookUp
    }

    public func handle(_ request: HTTPRequest, context: RequestContext, next: NextResponder) async throws -> HTTPResponse {
        var context = context
        if let value = cookie(of: request, context) {
            var session = known(value)
            if session == nil, let lookUp { session = await lookUp(value) }
            apply(session, request, to: &context)
        }
        return await next(request, context)
    }

    public func screen(_ request: HTTPRequest, context: inout RequestContext) -> Screening {
        guard let value = cookie(of: request, context) else { return .pass }
        let session = known(value)
        if session == nil, lookUp != nil { return .needsTask }
        apply(session, request, to: &context)
        return .pass
    }

    /// The cookie's value when this middleware has a caller to find (none yet, and no key sent).
    private func cookie(of request: HTTPRequest, _ context: RequestContext) -> String? {
        guard context.principal == nil, request.headers["authorization"] == nil else { return nil }
        return request.cookie(cookieName)
    }

    private func apply(_ session: Session?, _ request: HTTPRequest, to context: inout RequestContext) {
        guard let session else {
            context.authenticationRefusal = APIError.unauthorized("the console session is unknown or has ended; sign in again")
            return
        }
        if request.method != "GET", request.method != "HEAD" {
            if let refusal = Self.forgeryRefusal(request, csrfToken: session.csrfToken) {
                context.authenticationRefusal = refusal
                return
            }
        }
        context.principal = session.principal
        context.authenticationRefusal = nil
    }

    /// Why a state-changing cookie request may have come from another site, or nil when it did not.
    static func forgeryRefusal(_ request: HTTPRequest, csrfToken: String) -> APIError? {
        guard let presented = request.headers["x-csrf-token"], !presented.isEmpty else {
            return .csrfFailed("\(csrfHeader) is required on every \(request.method) signed in by the session cookie")
        }
        guard constantTimeEqual(presented, csrfToken) else { return .csrfFailed("\(csrfHeader) is not this session's token") }
        if let origin = request.headers["origin"] {
            guard let host = request.headers["host"], origin.lowercased() == ((request.isSecure ? "https://" : "http://") + host.lowercased()) else {
                return .csrfFailed("Origin \(origin.prefix(200)) is not this gateway's own")
            }
        }
        return nil
    }

    private static func constantTimeEqual(_ a: String, _ b: String) -> Bool {
        let (x, y) = (Array(a.utf8), Array(b.utf8))
        guard x.count == y.count else { return false }
        var difference: UInt8 = 0
        for index in x.indices { difference |= x[index] ^ y[index] }
        return difference == 0
    }
}

extension APIError {
    /// A cookie request that may be a cross-site forgery.
    public static func csrfFailed(_ message: String) -> APIError {
        APIError(status: 403, code: "csrf_failed", message: message)
    }
}

extension HTTPRequest {
    /// The value of the cookie called `name` in the `Cookie` header, nil when it was not sent.
    public func cookie(_ name: String) -> String? {
        guard let header = headers["cookie"] else { return nil }
        for pair in header.split(separator: ";") {
            let trimmed = pair.drop { $0 == " " || $0 == "\t" }
            guard let equals = trimmed.firstIndex(of: "="), trimmed[..<equals] == name else { continue }
            var value = trimmed[trimmed.index(after: equals)...]
            while value.last == " " || value.last == "\t" { value = value.dropLast() }
            if value.count >= 2, value.first == "\"", value.last == "\"" { value = value.dropFirst().dropLast() }
            return String(value)
        }
        return nil
    }
}
