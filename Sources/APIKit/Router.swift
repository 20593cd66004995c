import Foundation
import HTTPServer
import Identity

public typealias RouteHandler = @Sendable (HTTPRequest) async throws -> HTTPResponse
/// A handler that answers at once: a short local read that never waits on a person, a timer or the network.
public typealias ImmediateRouteHandler = @Sendable (HTTPRequest) throws -> HTTPResponse
/// A handler of a route that needs a role: the router has authenticated its caller, who is given, never optional.
public typealias AuthenticatedRouteHandler = @Sendable (HTTPRequest, Principal) async throws -> HTTPResponse
public typealias AuthenticatedImmediateRouteHandler = @Sendable (HTTPRequest, Principal) throws -> HTTPResponse

/// One entry of the route table: method, pattern (`/api/v1/mobile/devices/:id`), who may call it.
public struct Route: Sendable {
    public let method: HTTPMethod
    public let pattern: String
    public let access: Access
    public let summary: String
    let segments: [Segment]
    let work: Work
    /// How specific the pattern is: `/facts/status` (all literal) says more than `/facts/:id`.
    let literalCount: Int

    /// The handler, given the caller the router authenticated (nil on an open route).
    enum Work: Sendable {
        case async(@Sendable (HTTPRequest, Principal?) async throws -> HTTPResponse)
        /// Run on the server's own thread, without suspending the connection or hopping to a task.
        case immediate(@Sendable (HTTPRequest, Principal?) throws -> HTTPResponse)
    }

    enum Segment: Sendable, Equatable {
        case literal(String)
        case parameter(String)
    }

    public init(_ method: HTTPMethod, _ pattern: String, access: Access, summary: String = "", handler: @escaping RouteHandler) {
        self.init(method, pattern, access: access, summary: summary, work: .async({ request, _ in try await handler(request) }))
    }

    /// A route for callers with at least `role`; the handler gets the authenticated caller.
    public init(_ method: HTTPMethod, _ pattern: String, role: Role, summary: String = "", handler: @escaping AuthenticatedRouteHandler) {
        self.init(method, pattern, access: .role(role), summary: summary, work: .async({ request, caller in try await handler(request, try Self.required(caller)) }))
    }

    /// `answeredAtOnce` for callers with at least `role`; the handler gets the authenticated caller.
    public static func answeredAtOnce(_ method: HTTPMethod, _ pattern: String, role: Role, summary: String = "",
                                      handler: @escaping AuthenticatedImmediateRouteHandler) -> Route {
        Route(method, pattern, access: .role(role), summary: summary, work: .immediate({ request, caller in try handler(request, try Self.required(caller)) }))
    }

    /// A route for a quick read, answered on the server thread (the hottest reads: the inbox). A named factory, not
    /// an initialiser: a trailing closure that happens not to await must never pick this by accident.
    public static func answeredAtOnce(_ method: HTTPMethod, _ pattern: String, access: Access, summary: String = "",
                                      handler: @escaping ImmediateRouteHandler) -> Route {
        Route(method, pattern, access: access, summary: summary, work: .immediate({ request, _ in try handler(request) }))
    }

    private init(_ method: HTTPMethod, _ pattern: String, access: Access, summary: String, work: Work) {
        self.method = method
        self.pattern = pattern
        self.access = access
        self.summary = summary
        self.work = work
        segments = pattern.split(separator: "/").map { part in
            part.hasPrefix(":") ? .parameter(String(part.dropFirst())) : .literal(String(part))
        }
        literalCount = segments.filter { if case .literal = $0 { return true } else { return false } }.count
    }

    /// The caller of a route with `Access.role`, which the router always authenticates before the handler runs.
    private static func required(_ caller: Principal?) throws(APIError) -> Principal {
        guard let caller else { throw APIError.unauthorized("an API key is required (Authorization: Bearer <key>)") }
        return caller
    }

    func match(_ pathSegments: [Substring]) -> [String: String]? {
        guard pathSegments.count == segments.count else { return nil }
        var parameters: [String: String] = [:]
        for (segment, part) in zip(segments, pathSegments) {
            switch segment {
            case .literal(let text): if text != part { return nil }
            case .parameter(let name): parameters[name] = String(part)
            }
        }
        return parameters
    }
}

/// Resolves a bearer token to its principal; nil means unknown or revoked.
public typealias Authenticator = @Sendable (String) -> Principal?

/// Routes under one path prefix that share who may call them (a role, overridable per route), in Hummingbird's
/// shape: `var facts = RouteGroup("/api/v1/memory/facts", role: .viewer); facts.get("/status", …) { request, caller in … }`.
public struct RouteGroup: Sendable {
    public let prefix: String
    public let role: Role
    public private(set) var routes: [Route] = []

    public init(_ prefix: String, role: Role) {
        self.prefix = prefix
        self.role = role
    }

    public mutating func on(_ method: HTTPMethod, _ path: String = "", role: Role? = nil, summary: String, handler: @escaping AuthenticatedRouteHandler) {
        routes.append(Route(method, prefix + path, role: role ?? self.role, summary: summary, handler: handler))
    }

    public mutating func get(_ path: String = "", role: Role? = nil, summary: String, handler: @escaping AuthenticatedRouteHandler) {
        on(.GET, path, role: role, summary: summary, handler: handler)
    }

    public mutating func post(_ path: String = "", role: Role? = nil, summary: String, handler: @escaping AuthenticatedRouteHandler) {
        on(.POST, path, role: role, summary: summary, handler: handler)
    }

    public mutating func patch(_ path: String = "", role: Role? = nil, summary: String, handler: @escaping AuthenticatedRouteHandler) {
        on(.PATCH, path, role: role, summary: summary, handler: handler)
    }

    public mutating func delete(_ path: String = "", role: Role? = nil, summary: String, handler: @escaping AuthenticatedRouteHandler) {
        on(.DELETE, path, role: role, summary: summary, handler: handler)
    }
}

/// Matches requests to routes, enforces each route's `Access` (the caller is authenticated here and handed to the
/// route's handler), and turns every failure into the JSON error shape.
public struct Router: Sendable {
    public private(set) var routes: [Route] = []
    public var authenticator: Authenticator
    /// Maps errors that are not `APIError` (storage failures and the like) to a response; logs are the caller's.
    public var errorResponder: @Sendable (any Error, HTTPRequest) -> HTTPResponse

    public init(authenticator: @escaping Authenticator = { _ in nil }) {
        self.authenticator = authenticator
        self.errorResponder = { _, _ in APIError.internal("the gateway could not complete the request").response }
    }

    public mutating func add(_ route: Route) {
        routes.append(route)
    }

    public mutating func add(_ routes: [Route]) {
        self.routes.append(contentsOf: routes)
    }

    public mutating func add(_ method: HTTPMethod, _ pattern: String, access: Access, summary: String = "", handler: @escaping RouteHandler) {
        add(Route(method, pattern, access: access, summary: summary, handler: handler))
    }

    /// Answers a request. `authenticated` is for requests that arrived by another authenticated way (a sealed
    /// command from a phone through the relay): the route's role is still enforced.
    public func handle(_ incoming: HTTPRequest, authenticated: Principal? = nil) async -> HTTPResponse {
        switch resolve(incoming, authenticated: authenticated) {
        case .answered(let response):
            return response
        case .needsTask:
            preconditionFailure("only handleImmediately defers")
        case .ready(let route, let request, let caller):
            switch route.work {
            case .immediate(let handler): return run(incoming, request) { try handler(request, caller) }
            case .async(let handler):
                do {
                    return finish(incoming, try await handler(request, caller))
                } catch {
                    return respond(to: error, request)
                }
            }
        }
    }

    /// The answer when the request can be answered on the calling thread (an immediate route, or no route);
    /// nil when its route needs `handle`, which then checks the caller (once).
    public func handleImmediately(_ incoming: HTTPRequest) -> HTTPResponse? {
        switch resolve(incoming, authenticated: nil, deferringTasks: true) {
        case .answered(let response): return response
        case .needsTask: return nil
        case .ready(let route, let request, let caller):
            guard case .immediate(let handler) = route.work else { return nil }
            return run(incoming, request) { try handler(request, caller) }
        }
    }

    private enum Resolution {
        case answered(HTTPResponse)
        /// The route runs in a task; nothing about the caller was checked yet.
        case needsTask
        /// The route, the request with its path parameters, and the caller (always set for a route with a role).
        case ready(Route, HTTPRequest, caller: Principal?)
    }

    /// Finds the route and checks the caller; every refusal is answered here. With `deferringTasks`, a route
    /// that runs in a task is reported before the caller is checked, so `handle` does not authenticate again.
    private func resolve(_ incoming: HTTPRequest, authenticated: Principal?, deferringTasks: Bool = false) -> Resolution {
        var request = incoming
        let parts = request.path.split(separator: "/", omittingEmptySubsequences: true)
        let method = request.method == "HEAD" ? "GET" : request.method
        var allowed: [(method: String, literals: Int)] = []
        for index in routes.indices {
            // By index: copying every Route out of the table costs more than matching it.
            guard let parameters = routes[index].match(parts) else { continue }
            let route = routes[index]
            guard route.method.rawValue == method else {
                allowed.append((route.method.rawValue, route.literalCount))
                continue
            }
            if deferringTasks, case .async = route.work { return .needsTask }
            request.pathParameters = parameters
            guard case .role(let required) = route.access else { return .ready(route, request, caller: authenticated) }
            do throws(APIError) {
                let caller = if let authenticated { authenticated } else { try authenticate(request) }
                guard caller.role.allows(required) else {
                    throw APIError.insufficientRole(has: caller.role.rawValue, needs: required.rawValue)
                }
                return .ready(route, request, caller: caller)
            } catch {
                return .answered(error.response)
            }
        }
        if let most = allowed.map(\.literals).max() {
            // Only the most specific patterns speak for the path: `/facts/status` is GET only, whatever `/facts/:id` takes.
            let methods = allowed.filter { $0.literals == most }.map(\.method)
            var error = APIError(status: 405, code: "method_not_allowed", message: "\(request.method) is not allowed on \(request.path); use \(methods.joined(separator: ", "))")
            error.extraHeaders["Allow"] = methods.joined(separator: ", ")
            return .answered(error.response)
        }
        return .answered(APIError.notFound("no route for \(request.method) \(request.path)").response)
    }

    private func run(_ incoming: HTTPRequest, _ request: HTTPRequest, _ body: () throws -> HTTPResponse) -> HTTPResponse {
        do {
            return finish(incoming, try body())
        } catch {
            return respond(to: error, request)
        }
    }

    /// HEAD gets the GET's status and headers without the body.
    private func finish(_ incoming: HTTPRequest, _ response: HTTPResponse) -> HTTPResponse {
        var response = response
        if incoming.method == "HEAD" { response.body = [] }
        return response
    }

    private func respond(to error: any Error, _ request: HTTPRequest) -> HTTPResponse {
        APIError(answering: error)?.response ?? errorResponder(error, request)
    }

    /// The caller a bearer token names, if any (for logic that runs before routing, such as idempotency).
    public func principal(of request: HTTPRequest) -> Principal? { try? authenticate(request) }

    private func authenticate(_ request: HTTPRequest) throws(APIError) -> Principal {
        guard request.header("authorization") != nil else {
            var error = APIError.unauthorized("an API key is required (Authorization: Bearer <key>)")
            error.extraHeaders["WWW-Authenticate"] = "Bearer"
            throw error
        }
        guard let token = request.bearerToken else {
            throw APIError.unauthorized("the Authorization header must be 'Bearer <key>'")
        }
        guard let principal = authenticator(token) else {
            var error = APIError.unauthorized("the API key is unknown or has been revoked")
            error.extraHeaders["WWW-Authenticate"] = "Bearer error=\"invalid_token\""
            throw error
        }
        return principal
    }
}
