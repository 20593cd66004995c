import Foundation
import Identity

public typealias RouteHandler = @Sendable (HTTPRequest) async throws -> HTTPResponse

/// One entry of the route table: method, pattern (`/api/v1/mobile/devices/:id`), who may call it.
public struct Route: Sendable {
    public let method: HTTPMethod
    public let pattern: String
    public let access: Access
    public let summary: String
    let segments: [Segment]
    let handler: RouteHandler

    enum Segment: Sendable, Equatable {
        case literal(String)
        case parameter(String)
    }

    public init(_ method: HTTPMethod, _ pattern: String, access: Access, summary: String = "", handler: @escaping RouteHandler) {
        self.method = method
        self.pattern = pattern
        self.access = access
        self.summary = summary
        self.handler = handler
        segments = pattern.split(separator: "/").map { part in
            part.hasPrefix(":") ? .parameter(String(part.dropFirst())) : .literal(String(part))
        }
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

/// Matches requests to routes, enforces each route's `Access`, and turns every failure into the JSON error shape.
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
        var request = incoming
        let parts = request.path.split(separator: "/", omittingEmptySubsequences: true)
        var allowed: [String] = []
        for route in routes {
            guard let parameters = route.match(parts) else { continue }
            let method = request.method == "HEAD" ? "GET" : request.method
            guard route.method.rawValue == method else {
                allowed.append(route.method.rawValue)
                continue
            }
            request.pathParameters = parameters
            do {
                if case .role(let required) = route.access {
                    let principal = try authenticated ?? authenticate(request)
                    guard principal.role.allows(required) else {
                        throw APIError.forbidden("this needs the \(required.rawValue) role; this key has \(principal.role.rawValue)")
                    }
                    request.principal = principal
                } else if let authenticated {
                    request.principal = authenticated
                } else if request.header("authorization") != nil {
                    // Open routes still learn who calls when a valid key is sent (pairing as the caller).
                    request.principal = try? authenticate(request)
                }
                var response = try await route.handler(request)
                if incoming.method == "HEAD" { response.body = [] }
                return response
            } catch let error as APIError {
                return error.response
            } catch {
                return errorResponder(error, request)
            }
        }
        if !allowed.isEmpty {
            var error = APIError(status: 405, code: "method_not_allowed", message: "\(request.method) is not allowed on \(request.path); use \(allowed.joined(separator: ", "))")
            error.extraHeaders["Allow"] = allowed.joined(separator: ", ")
            return error.response
        }
        return APIError.notFound("no route for \(request.method) \(request.path)").response
    }

    /// The caller a bearer token names, if any (for logic that runs before routing, such as idempotency).
    public func principal(of request: HTTPRequest) -> Principal? { try? authenticate(request) }

    private func authenticate(_ request: HTTPRequest) throws(APIError) -> Principal {
        guard let header = request.header("authorization") else {
            var error = APIError.unauthorized("an API key is required (Authorization: Bearer <key>)")
            error.extraHeaders["WWW-Authenticate"] = "Bearer"
            throw error
        }
        let prefix = "bearer "
        guard header.count > prefix.count, header.prefix(prefix.count).lowercased() == prefix else {
            throw APIError.unauthorized("the Authorization header must be 'Bearer <key>'")
        }
        let token = header.dropFirst(prefix.count).trimmingCharacters(in: .whitespaces)
        guard let principal = authenticator(token) else {
            var error = APIError.unauthorized("the API key is unknown or has been revoked")
            error.extraHeaders["WWW-Authenticate"] = "Bearer error=\"invalid_token\""
            throw error
        }
        return principal
    }
}
