import APIKit
import Foundation
import Household
import Identity

/// `/api/v1/console/session`: the web console signs in with an API key or a one-time code and gets a server-side
/// session named by an HttpOnly, SameSite=Strict cookie (Secure over TLS); the cookie never holds the key.
/// `authentication` is the middleware that honours the cookie on every route, with the CSRF rules.
public struct ConsoleSessionAPI: Sendable {
    public static let cookieName = "soulacy_session"
    public static let path = "/api/v1/console/session"

    let sessions: any ConsoleSessionStore
    let keys: any APIKeyStore
    /// Wrong API keys, per client only: a 256-bit key is not found by any number of clients.
    let keyGuesses: GuessingLimiter
    /// Wrong one-time codes, per client and all together: six digits could be found by many clients at once, so
    /// past the ceiling code sign-in waits for everyone, while key sign-in and pairing stay open.
    let codeGuesses: GuessingLimiter
    let clients: ClientAddresses

    public init(sessions: any ConsoleSessionStore, keys: any APIKeyStore, clients: ClientAddresses = ClientAddresses(),
                keyGuesses: GuessingLimiter = GuessingLimiter(), codeGuesses: GuessingLimiter = GuessingLimiter(ceiling: 30)) {
        self.sessions = sessions
        self.keys = keys
        self.clients = clients
        self.keyGuesses = keyGuesses
        self.codeGuesses = codeGuesses
    }

    public var routes: [Route] {
        // An answer here carries a CSRF token: never kept by a cache.
        var session = RouteGroup(Self.path, role: .viewer, middleware: [NoStoreMiddleware()])
        session.add(Route(.POST, Self.path, access: .open, summary: "Sign in to the console with an API key or a one-time code", handler: signIn))
        session.get(summary: "The console's current session (the page asks on load)", handler: current)
        session.delete(summary: "Sign out: end the console session", handler: signOut)
        return session.routes
    }

    /// The cookie's authentication for the main listener (after bearer authentication): a session the store knows
    /// without waiting is answered on the server thread, any other cookie is looked up in a task.
    public var authentication: SessionCookieAuthentication {
        let sessions = self.sessions
        return SessionCookieAuthentication(cookieName: Self.cookieName,
                                           known: { token in sessions.knownSession(token: token).map(Self.cookieSession) },
                                           lookUp: { token in await sessions.session(token: token).map(Self.cookieSession) })
    }

    static func cookieSession(_ session: ConsoleSession) -> SessionCookieAuthentication.Session {
        SessionCookieAuthentication.Session(principal: session.principal, csrfToken: session.csrfToken)
    }

    struct SignIn: Decodable {
        var apiKey: String?
        var code: String?

        enum CodingKeys: String, CodingKey {
            case apiKey = "api_key"
            case code
        }
    }

    @Sendable func signIn(_ request: HTTPRequest) async throws -> HTTPResponse {
        // A page of another site must not sign this browser in as someone else (login CSRF).
        if let origin = request.header("origin"), origin.lowercased() != Self.ownOrigin(request) {
            throw APIError.csrfFailed("Origin \(origin.prefix(200)) is not this gateway's own")
        }
        let client = clients.allowanceKey(of: request)
        let body = try request.decode(SignIn.self)
        let issued: IssuedConsoleSession
        switch (try body.apiKey.limited(to: 200, field: "api_key"), try body.code.limited(to: 64, field: "code")) {
        case (nil, nil):
            throw APIError(status: 400, code: "missing_field", message: "api_key or code is required", field: "api_key")
        case (.some, .some):
            throw APIError.invalidField("code", "send api_key or code, not both")
        case (.some(let key), nil):
            let guess = try keyGuesses.admit(client, guessing: "wrong keys")
            guard let principal = await keys.authenticate(key.trimmingCharacters(in: .whitespaces)) else {
                throw APIError.unauthorized("the API key is unknown or has been revoked")
            }
            keyGuesses.forgive(guess)
            issued = try await sessions.signIn(key: principal)
        case (nil, .some(let code)):
            let guess = try codeGuesses.admit(client, guessing: "wrong codes")
            do {
                issued = try await sessions.signIn(code: code)
                codeGuesses.forgive(guess)
            } catch let error as ConsoleCodeError {
                throw APIError(status: 401, code: error.code, message: error.description)
            }
        }
        var answer = HTTPResponse.json(SessionView(issued.session))
        answer.headers.append(("Set-Cookie", Self.cookie(issued.token, request)))
        return answer
    }

    @Sendable func current(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        .json(SessionView(try await session(of: request)))
    }

    @Sendable func signOut(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        guard let token = request.cookie(Self.cookieName), try await sessions.revoke(token: token) else { throw Self.noSession }
        var answer = HTTPResponse.noContent
        answer.headers.append(("Set-Cookie", Self.cookie("", request, clearing: true)))
        return answer
    }

    /// The live session of the request's cookie: a caller signed in with a key alone has none.
    func session(of request: HTTPRequest) async throws(APIError) -> ConsoleSession {
        guard let token = request.cookie(Self.cookieName), let session = await sessions.session(token: token) else { throw Self.noSession }
        return session
    }

    static let noSession = APIError.unauthorized("no console session: sign in with POST \(path)")

    /// `soulacy_session=<id>; Path=/; HttpOnly; SameSite=Strict`, plus `Secure` when the request came over TLS.
    static func cookie(_ value: String, _ request: HTTPRequest, clearing: Bool = false) -> String {
        var cookie = "\(cookieName)=\(value); Path=/; HttpOnly; SameSite=Strict"
        if clearing { cookie += "; Max-Age=0" }
        if request.isSecure { cookie += "; Secure" }
        return cookie
    }

    /// `scheme://host[:port]` of the request's own `Host`.
    static func ownOrigin(_ request: HTTPRequest) -> String {
        (request.isSecure ? "https://" : "http://") + (request.header("host") ?? "").lowercased()
    }

    struct SessionView: Encodable {
        var subject, role, csrfToken: String
        var expiresAt: Timestamp

        init(_ session: ConsoleSession) {
            subject = session.principal.subject
            role = session.principal.role.rawValue
            csrfToken = session.csrfToken
            expiresAt = Timestamp(session.expiresAt)
        }

        enum CodingKeys: String, CodingKey {
            case subject, role
            case csrfToken = "csrf_token", expiresAt = "expires_at"
        }
    }
}

/// `Cache-Control: no-store` on every answer of the routes it is attached to (answers that carry a secret).
public struct NoStoreMiddleware: Middleware {
    public init() {}

    public func handle(_ request: HTTPRequest, context: RequestContext, next: NextResponder) async throws -> HTTPResponse {
        var response = await next(request, context)
        if response.header("cache-control") == nil { response.headers.append(("Cache-Control", "no-store")) }
        return response
    }
}
