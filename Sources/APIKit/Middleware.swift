import Foundation
import HTTPServer
import Logging

/// What a middleware says about a request on the server thread, before a quick route answers it there.
public enum Screening: Sendable {
    /// Nothing for this middleware to do: the request may be answered at once.
    case pass
    /// Refused here, with this answer.
    case refuse(HTTPResponse)
    /// This middleware must run around the request: it goes to a task and `handle`.
    case needsTask
}

/// The rest of the chain, as a middleware calls it: the next middleware, or the route.
public typealias NextResponder = @Sendable (HTTPRequest, RequestContext) async -> HTTPResponse

/// One step around the requests of a listener or of a route group, in Hummingbird 2's shape (one method plus a
/// quick screen): authentication, the rules of a door, idempotency, logging. It sees the request's context (the
/// route it matched, the caller once authentication set one) and may change the context it passes on.
public protocol Middleware: Sendable {
    /// Called once for each request a listener receives, before `screen` or `handle` and on the server thread: an
    /// answer here refuses the request at once (a rate limit counts requests here, so none is counted twice when a
    /// screened request goes on to a task). Requests answered in process (`respond`, the relay carriage) are not
    /// admitted: they arrived through no listener. Route-group middleware is never asked.
    func admit(_ request: HTTPRequest) -> HTTPResponse?
    /// Runs around the rest of the chain. A thrown error is answered as a route's would be.
    func handle(_ request: HTTPRequest, context: RequestContext, next: NextResponder) async throws -> HTTPResponse
    /// Called instead of `handle` when the request could be answered on the server thread; may set what `handle`
    /// would have set on the context (the caller).
    func screen(_ request: HTTPRequest, context: inout RequestContext) -> Screening
    /// After a request this middleware saw was answered on the server thread (logging, metrics).
    func answeredAtOnce(_ request: HTTPRequest, context: RequestContext, with response: HTTPResponse)
}

extension Middleware {
    public func admit(_ request: HTTPRequest) -> HTTPResponse? { nil }
    public func screen(_ request: HTTPRequest, context: inout RequestContext) -> Screening { .needsTask }
    public func answeredAtOnce(_ request: HTTPRequest, context: RequestContext, with response: HTTPResponse) {}
}

/// Middleware that only prepares the context, the same way on the server thread and in a task (authentication
/// sets the caller): `prepare` is its whole job; a thrown error refuses the request.
public protocol ContextMiddleware: Middleware {
    func prepare(_ request: HTTPRequest, context: inout RequestContext) throws
}

extension ContextMiddleware {
    public func handle(_ request: HTTPRequest, context: RequestContext, next: NextResponder) async throws -> HTTPResponse {
        var context = context
        try prepare(request, context: &context)
        return await next(request, context)
    }

    public func screen(_ request: HTTPRequest, context: inout RequestContext) -> Screening {
        do {
            try prepare(request, context: &context)
            return .pass
        } catch {
            return .refuse(APIError(answering: error)?.response ?? APIError.internal("the gateway could not complete the request").response)
        }
    }
}

/// One line per request at debug level, through the request's logger (so with its id): method, path, status and
/// time. Never a header, a query or a body (they carry keys, codes and agent output).
public struct RequestLogMiddleware: Middleware {
    public init() {}

    public func handle(_ request: HTTPRequest, context: RequestContext, next: NextResponder) async throws -> HTTPResponse {
        let started = ContinuousClock.now
        let response = await next(request, context)
        context.logger.debug(Self.line(request, response, ContinuousClock.now - started))
        return response
    }

    public func screen(_ request: HTTPRequest, context: inout RequestContext) -> Screening { .pass }

    public func answeredAtOnce(_ request: HTTPRequest, context: RequestContext, with response: HTTPResponse) {
        context.logger.debug(Self.line(request, response, nil))
    }

    static func line(_ request: HTTPRequest, _ response: HTTPResponse, _ took: Duration?) -> String {
        let time = took.map { " \(Int(($0.components.seconds * 1000) + $0.components.attoseconds / 1_000_000_000_000_000)) ms" } ?? " (at once)"
        return "\(request.method) \(request.path) \(response.status)\(time)"
    }
}

/// A router with middleware around it: what a listener serves. The first middleware is the outermost. Each request
/// gets its context here (its id, the route it matched), and each answer carries `X-Request-Id`.
public struct Responder: Sendable {
    public let router: Router
    public let middleware: [any Middleware]
    /// The logger each request's context carries (the router's unless given).
    public let log: Log

    public init(router: Router, middleware: [any Middleware] = [], log: Log? = nil) {
        self.router = router
        self.middleware = middleware
        self.log = log ?? router.log
    }

    /// The answer, through every middleware in order, then the route's own middleware and the route.
    public func respond(_ incoming: HTTPRequest) async -> HTTPResponse {
        var request = incoming
        var context = RequestContext(requestID: RequestID.of(incoming), log: log)
        let found = router.find(incoming)
        router.apply(found, to: &request, &context)
        let router = self.router
        var response = await Self.run(middleware[...], request, context, router) { request, context in
            // A middleware that rewrote the request is routed again.
            if request.path == incoming.path, request.method == incoming.method {
                return await router.dispatch(found, incoming, request, context)
            }
            var rerouted = request
            var context = context
            let again = router.find(request)
            router.apply(again, to: &rerouted, &context)
            return await router.dispatch(again, request, rerouted, context)
        }
        response.stamp(context.requestID)
        return response
    }

    static func run(_ chain: ArraySlice<any Middleware>, _ request: HTTPRequest, _ context: RequestContext, _ router: Router,
                    _ last: @escaping NextResponder) async -> HTTPResponse {
        guard let first = chain.first else { return await last(request, context) }
        let rest = chain.dropFirst()
        do {
            return try await first.handle(request, context: context) { await run(rest, $0, $1, router, last) }
        } catch {
            return router.respond(to: error, request, context)
        }
    }

    /// The answer on the calling thread when every middleware lets the request pass and its route is a quick one;
    /// nil when it needs `respond`. A route that runs in a task is told apart before anything else is done (no
    /// caller is checked twice).
    public func respondImmediately(_ incoming: HTTPRequest) -> HTTPResponse? {
        let found = router.find(incoming)
        if case .route(let index, _) = found, !router.routes[index].isAnsweredAtOnce { return nil }
        var request = incoming
        var context = RequestContext(requestID: RequestID.of(incoming), log: log)
        router.apply(found, to: &request, &context)
        var answer: HTTPResponse?
        for step in middleware {
            switch step.screen(request, context: &context) {
            case .pass: continue
            case .refuse(let response): answer = response
            case .needsTask: return nil
            }
            break
        }
        if answer == nil {
            guard let response = router.answerAtOnce(found, incoming, request, &context) else { return nil }
            answer = response
        }
        guard var response = answer else { return nil }
        response.stamp(context.requestID)
        for step in middleware { step.answeredAtOnce(incoming, context: context, with: response) }
        return response
    }

    /// The first middleware's refusal of a request a listener received (every middleware hears of it as answered at
    /// once, so the request log has it), or nil when each admits it.
    public func admission(_ request: HTTPRequest) -> HTTPResponse? {
        for step in middleware {
            guard var refusal = step.admit(request) else { continue }
            let context = RequestContext(requestID: RequestID.of(request), log: log)
            refusal.stamp(context.requestID)
            for any in middleware { any.answeredAtOnce(request, context: context, with: refusal) }
            return refusal
        }
        return nil
    }

    /// An HTTP server that serves this responder: each request is admitted once, then answered on the server thread
    /// or in a task. The server's own refusals (bad framing, a body over the limit) take the API's error shape.
    public func server(_ configuration: HTTPServerConfiguration) -> HTTPServer {
        let responder = self
        var configuration = configuration
        configuration.refusal = { refusal in
            var response = APIError(status: refusal.status, code: refusal.code, message: refusal.message).response
            response.stamp(RequestID.fresh())
            return response
        }
        return HTTPServer(configuration: configuration, immediate: { responder.admission($0) ?? responder.respondImmediately($0) }) { await responder.respond($0) }
    }
}
