import Foundation
import HTTPServer
import Identity
import Logging

public typealias RouteHandler = @Sendable (HTTPRequest) async throws -> HTTPResponse
/// A handler that answers at once: a short local read that never waits on a person, a timer or the network.
public typealias ImmediateRouteHandler = @Sendable (HTTPRequest) throws -> HTTPResponse
/// A handler of a route that needs a role: the router has checked its caller, who is given, never optional.
public typealias AuthenticatedRouteHandler = @Sendable (HTTPRequest, Principal) async throws -> HTTPResponse
public typealias AuthenticatedImmediateRouteHandler = @Sendable (HTTPRequest, Principal) throws -> HTTPResponse

/// Marks on a route that middleware reads from `context.route` (the same-Wi-Fi door's "no key needed here"), in
/// place of lists of paths kept beside the table. The kit defines none; a module declares its own bits.
public struct RouteFlags: OptionSet, Sendable, Hashable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }
}

/// One entry of the route table: method, pattern (`/api/v1/mobile/devices/:id`), who may call it.
public struct Route: Sendable {
    public let method: HTTPMethod
    public let pattern: String
    public let access: Access
    public let summary: String
    public private(set) var flags: RouteFlags = []
    /// Middleware around this route alone (its group's), inside the listener's and before the access check,
    /// outermost first.
    public private(set) var middleware: [any Middleware] = []
    let segments: [Segment]
    let work: Work
    /// Which segments are literal, the first segment in the highest bit: of two patterns that match one path, the
    /// larger value has a literal where the other has its first parameter, so it is the more specific.
    let literalMask: UInt64

    /// The handler, given the caller the router checked (nil on an open route).
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
        var mask: UInt64 = 0
        for (index, segment) in segments.prefix(64).enumerated() {
            if case .literal = segment { mask |= 1 << (63 - UInt64(index)) }
        }
        literalMask = mask
    }

    /// The same route with these flags too.
    public func flagged(_ more: RouteFlags) -> Route {
        var copy = self
        copy.flags.formUnion(more)
        return copy
    }

    /// The same route inside `outer` (outermost first): a group wraps its routes' own middleware.
    public func wrapped(in outer: [any Middleware]) -> Route {
        var copy = self
        copy.middleware = outer + middleware
        return copy
    }

    /// Whether the handler is answered on the server thread.
    public var isAnsweredAtOnce: Bool {
        if case .immediate = work { return true } else { return false }
    }

    /// The caller of a route with `Access.role`, which the router always checks before the handler runs.
    private static func required(_ caller: Principal?) throws(APIError) -> Principal {
        guard let caller else { throw APIError.credentialRequired }
        return caller
    }

    func matches(_ pathSegments: UnsafeBufferPointer<Substring>) -> Bool {
        guard pathSegments.count == segments.count else { return false }
        for (segment, part) in zip(segments, pathSegments) {
            if case .literal(let text) = segment, text != part { return false }
        }
        return true
    }

    func match(_ pathSegments: UnsafeBufferPointer<Substring>) -> [String: String]? {
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

/// Routes under one path prefix that share who may call them (a role, overridable per route), flags and
/// middleware, in Hummingbird's shape:
/// `var facts = RouteGroup("/api/v1/memory/facts", role: .viewer); facts.get("/status", …) { request, caller in … }`.
/// The group's middleware runs around each of its routes (whenever it was added), inside the listener's.
public struct RouteGroup: Sendable {
    public let prefix: String
    public let role: Role
    /// Run around every route of the group, outermost first, before the route's access check.
    public var middleware: [any Middleware] = []
    /// Set on every route of the group.
    public var flags: RouteFlags = []
    private var entries: [Route] = []

    public init(_ prefix: String, role: Role) {
        self.prefix = prefix
        self.role = role
    }

    public init(_ prefix: String, role: Role, middleware: [any Middleware], flags: RouteFlags = []) {
        self.prefix = prefix
        self.role = role
        self.middleware = middleware
        self.flags = flags
    }

    /// The group's routes, each with the group's flags and inside its middleware.
    public var routes: [Route] {
        entries.map { $0.flagged(flags).wrapped(in: middleware) }
    }

    /// Adds middleware inside the group's present middleware.
    public mutating func add(middleware step: any Middleware) {
        middleware.append(step)
    }

    /// Adds a route built some other way (an open one, one answered at once) under the group's prefix rules:
    /// its pattern is taken as given.
    public mutating func add(_ route: Route) {
        entries.append(route)
    }

    public mutating func on(_ method: HTTPMethod, _ path: String = "", role: Role? = nil, summary: String, handler: @escaping AuthenticatedRouteHandler) {
        entries.append(Route(method, prefix + path, role: role ?? self.role, summary: summary, handler: handler))
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

/// Matches requests to routes and answers them: a route's own middleware, its access rule (the caller comes from
/// the context, where authentication middleware put it) and its handler; every failure in the JSON error shape.
///
/// Of the routes that match a path and method, the one with a literal where the others have a parameter wins
/// (`/facts/status` over `/facts/:id`), whatever order they were added in; the first added wins a true tie.
public struct Router: Sendable {
    public private(set) var routes: [Route] = []
    /// Indices into `routes` by segment count, most specific first, so the first match is the best.
    private var buckets: [[Int]] = []
    /// Maps errors that are not `APIError` (storage failures and the like) to a response; logs are the caller's
    /// (`context.logger` names the request).
    public var errorResponder: @Sendable (any Error, HTTPRequest, RequestContext) -> HTTPResponse
    /// The logger of requests answered through `handle(_:authenticated:)` (a `Responder` has its own).
    public var log: Log

    public init(log: Log = Log()) {
        self.log = log
        self.errorResponder = { _, _, _ in APIError.internal("the gateway could not complete the request").response }
    }

    public mutating func add(_ route: Route) {
        let index = routes.count
        routes.append(route)
        let count = route.segments.count
        while buckets.count <= count { buckets.append([]) }
        // After every route at least as specific: equal masks keep table order.
        let position = buckets[count].firstIndex { routes[$0].literalMask < route.literalMask } ?? buckets[count].count
        buckets[count].insert(index, at: position)
    }

    public mutating func add(_ routes: [Route]) {
        for route in routes { add(route) }
    }

    public mutating func add(_ method: HTTPMethod, _ pattern: String, access: Access, summary: String = "", handler: @escaping RouteHandler) {
        add(Route(method, pattern, access: access, summary: summary, handler: handler))
    }

    /// What routing found for a request.
    enum Found {
        /// The route's index and the path's parameters.
        case route(Int, [String: String])
        /// 404, or 405 with the methods the most specific matching patterns take.
        case refused(APIError)
    }

    /// The most specific route for the request's path and method. HEAD is answered by GET routes.
    func find(_ request: HTTPRequest) -> Found {
        let path = request.path
        var count = 0
        var inSegment = false
        for byte in path.utf8 {
            if byte == 0x2F { inSegment = false } else if !inSegment { inSegment = true; count += 1 }
        }
        guard count < buckets.count else { return .refused(Self.notFound(request)) }
        // The segments on the stack: splitting into an array costs a few allocations on every request.
        return withUnsafeTemporaryAllocation(of: Substring.self, capacity: max(count, 1)) { buffer in
            var filled = 0
            var start: String.Index?
            var index = path.utf8.startIndex
            while index != path.utf8.endIndex {
                if path.utf8[index] == 0x2F {
                    if let first = start {
                        (buffer.baseAddress! + filled).initialize(to: path[first..<index])
                        filled += 1
                        start = nil
                    }
                } else if start == nil {
                    start = index
                }
                index = path.utf8.index(after: index)
            }
            if let first = start {
                (buffer.baseAddress! + filled).initialize(to: path[first...])
                filled += 1
            }
            defer { buffer.baseAddress!.deinitialize(count: filled) }
            return find(request, UnsafeBufferPointer(rebasing: buffer[..<filled]))
        }
    }

    private func find(_ request: HTTPRequest, _ parts: UnsafeBufferPointer<Substring>) -> Found {
        let method = request.method == "HEAD" ? "GET" : request.method
        var allowed: [String] = []
        var allowedMask: UInt64 = 0
        for index in buckets[parts.count] {
            // By index: copying every Route out of the table costs more than matching it.
            if routes[index].method.rawValue == method {
                if let parameters = routes[index].match(parts) { return .route(index, parameters) }
            } else if routes[index].matches(parts) {
                // Only the most specific patterns speak for the path: `/facts/status` is GET only, whatever
                // `/facts/:id` takes. The bucket's order puts them first.
                let mask = routes[index].literalMask
                if allowed.isEmpty { allowedMask = mask }
                if mask == allowedMask { allowed.append(routes[index].method.rawValue) }
            }
        }
        guard !allowed.isEmpty else { return .refused(Self.notFound(request)) }
        let methods = allowed.joined(separator: ", ")
        var error = APIError(status: 405, code: "method_not_allowed", message: "\(request.method) is not allowed on \(request.path); use \(methods)")
        error.extraHeaders["Allow"] = methods
        return .refused(error)
    }

    private static func notFound(_ request: HTTPRequest) -> APIError {
        APIError.notFound("no route for \(request.method) \(request.path)")
    }

    /// Puts what routing found on the request (its path parameters) and on the context (the route).
    func apply(_ found: Found, to request: inout HTTPRequest, _ context: inout RequestContext) {
        guard case .route(let index, let parameters) = found else { return }
        request.pathParameters = parameters
        context.parameters = parameters
        context.route = routes[index]
    }

    /// Answers a request with no listener middleware around it: `authenticated` is the caller when it arrived by
    /// another authenticated way (a sealed command from a phone through the relay); the route's role is still
    /// enforced, and its own middleware still runs.
    public func handle(_ incoming: HTTPRequest, authenticated: Principal? = nil) async -> HTTPResponse {
        var request = incoming
        var context = RequestContext(requestID: RequestID.of(incoming), log: log, principal: authenticated)
        let found = find(incoming)
        apply(found, to: &request, &context)
        var response = await dispatch(found, incoming, request, context)
        response.stamp(context.requestID)
        return response
    }

    /// Answers a request whose context the listener's middleware prepared (`Responder`).
    func dispatch(_ found: Found, _ incoming: HTTPRequest, _ request: HTTPRequest, _ context: RequestContext) async -> HTTPResponse {
        switch found {
        case .refused(let error):
            return error.response
        case .route(let index, _):
            let route = routes[index]
            return await Responder.run(route.middleware[...], request, context, self) { request, context in
                await self.invoke(route, incoming, request, context)
            }
        }
    }

    private func invoke(_ route: Route, _ incoming: HTTPRequest, _ request: HTTPRequest, _ context: RequestContext) async -> HTTPResponse {
        do {
            let caller = try authorize(route, context)
            switch route.work {
            case .immediate(let handler):
                return finish(incoming, try handler(request, caller))
            case .async(let handler):
                let response = try await RequestContext.$current.withValue(context) {
                    try await Log.$taskMetadata.withValue(["request_id": context.requestID]) { try await handler(request, caller) }
                }
                return finish(incoming, response)
            }
        } catch {
            return respond(to: error, request, context)
        }
    }

    /// The answer on the calling thread (the server's) when the route's own middleware lets it pass there and the
    /// route is answered at once; nil when it needs a task.
    func answerAtOnce(_ found: Found, _ incoming: HTTPRequest, _ request: HTTPRequest, _ context: inout RequestContext) -> HTTPResponse? {
        switch found {
        case .refused(let error):
            return error.response
        case .route(let index, _):
            guard case .immediate(let handler) = routes[index].work else { return nil }
            for step in routes[index].middleware {
                switch step.screen(request, context: &context) {
                case .pass: continue
                case .refuse(let response): return response
                case .needsTask: return nil
                }
            }
            do {
                let caller = try authorize(routes[index], context)
                return finish(incoming, try handler(request, caller))
            } catch {
                return respond(to: error, request, context)
            }
        }
    }

    /// The caller a route may be called by: nil on an open route; on a route with a role, the context's
    /// principal, who must hold the role. Without one, the reason authentication gave (or that none was sent).
    private func authorize(_ route: Route, _ context: RequestContext) throws(APIError) -> Principal? {
        guard case .role(let required) = route.access else { return context.principal }
        guard let caller = context.principal else { throw context.authenticationRefusal ?? APIError.credentialRequired }
        guard caller.role.allows(required) else { throw APIError.insufficientRole(has: caller.role.rawValue, needs: required.rawValue) }
        return caller
    }

    /// HEAD gets the GET's status and headers without the body.
    private func finish(_ incoming: HTTPRequest, _ response: HTTPResponse) -> HTTPResponse {
        var response = response
        if incoming.method == "HEAD" { response.body = [] }
        return response
    }

    func respond(to error: any Error, _ request: HTTPRequest, _ context: RequestContext) -> HTTPResponse {
        APIError(answering: error)?.response ?? errorResponder(error, request, context)
    }
}

extension APIError {
    /// A route that needs a role was called with no credential at all.
    public static var credentialRequired: APIError {
        var error = APIError.unauthorized("an API key is required (Authorization: Bearer <key>)")
        error.extraHeaders["WWW-Authenticate"] = "Bearer"
        return error
    }
}
