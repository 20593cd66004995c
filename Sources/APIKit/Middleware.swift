import Foundation
import HTTPServer

/// What a middleware says about a request on the server thread, before a quick route answers it there.
public enum Screening: Sendable {
    /// Nothing for this middleware to do: the request may be answered at once.
    case pass
    /// Refused here, with this answer.
    case refuse(HTTPResponse)
    /// This middleware must run around the request: it goes to a task and `handle`.
    case needsTask
}

/// One step around every request of a listener, in Hummingbird 2's shape (one method plus a quick screen):
/// authentication rules of a door, idempotency, logging. Middleware wraps routing; routes never see it.
public protocol Middleware: Sendable {
    /// Called once for each request a listener receives, before `screen` or `handle` and on the server thread: an
    /// answer here refuses the request at once (a rate limit counts requests here, so none is counted twice when a
    /// screened request goes on to a task). Requests answered in process (`respond`, the relay carriage) are not
    /// admitted: they arrived through no listener.
    func admit(_ request: HTTPRequest) -> HTTPResponse?
    func handle(_ request: HTTPRequest, next: @Sendable (HTTPRequest) async -> HTTPResponse) async -> HTTPResponse
    /// Called instead of `handle` when the request could be answered on the server thread.
    func screen(_ request: HTTPRequest) -> Screening
    /// After a request this middleware passed was answered on the server thread (logging, metrics).
    func answeredAtOnce(_ request: HTTPRequest, with response: HTTPResponse)
}

extension Middleware {
    public func admit(_ request: HTTPRequest) -> HTTPResponse? { nil }
    public func screen(_ request: HTTPRequest) -> Screening { .needsTask }
    public func answeredAtOnce(_ request: HTTPRequest, with response: HTTPResponse) {}
}

/// One line per request at debug level: method, path, status and time. Never a header, a query or a body (they
/// carry keys, codes and agent output).
public struct RequestLogMiddleware: Middleware {
    let write: @Sendable (String) -> Void

    public init(write: @escaping @Sendable (String) -> Void) { self.write = write }

    public func handle(_ request: HTTPRequest, next: @Sendable (HTTPRequest) async -> HTTPResponse) async -> HTTPResponse {
        let started = ContinuousClock.now
        let response = await next(request)
        write(Self.line(request, response, ContinuousClock.now - started))
        return response
    }

    public func screen(_ request: HTTPRequest) -> Screening { .pass }

    public func answeredAtOnce(_ request: HTTPRequest, with response: HTTPResponse) {
        write(Self.line(request, response, nil))
    }

    static func line(_ request: HTTPRequest, _ response: HTTPResponse, _ took: Duration?) -> String {
        let time = took.map { " \(Int(($0.components.seconds * 1000) + $0.components.attoseconds / 1_000_000_000_000_000)) ms" } ?? " (at once)"
        return "\(request.method) \(request.path) \(response.status)\(time)"
    }
}

/// A router with middleware around it: what a listener serves. The first middleware is the outermost.
public struct Responder: Sendable {
    public let router: Router
    public let middleware: [any Middleware]

    public init(router: Router, middleware: [any Middleware] = []) {
        self.router = router
        self.middleware = middleware
    }

    /// The answer, through every middleware in order, then the router.
    public func respond(_ request: HTTPRequest) async -> HTTPResponse {
        await Self.run(middleware[...], request, router)
    }

    private static func run(_ chain: ArraySlice<any Middleware>, _ request: HTTPRequest, _ router: Router) async -> HTTPResponse {
        guard let first = chain.first else { return await router.handle(request) }
        let rest = chain.dropFirst()
        return await first.handle(request) { await run(rest, $0, router) }
    }

    /// The answer on the calling thread when every middleware lets the request pass and its route is a quick one;
    /// nil when it needs `respond`.
    public func respondImmediately(_ request: HTTPRequest) -> HTTPResponse? {
        for step in middleware {
            switch step.screen(request) {
            case .pass: continue
            case .refuse(let response): return response
            case .needsTask: return nil
            }
        }
        guard let response = router.handleImmediately(request) else { return nil }
        for step in middleware { step.answeredAtOnce(request, with: response) }
        return response
    }

    /// The first middleware's refusal of a request a listener received (every middleware hears of it as answered at
    /// once, so the request log has it), or nil when each admits it.
    public func admission(_ request: HTTPRequest) -> HTTPResponse? {
        for step in middleware {
            guard let refusal = step.admit(request) else { continue }
            for any in middleware { any.answeredAtOnce(request, with: refusal) }
            return refusal
        }
        return nil
    }

    /// An HTTP server that serves this responder: each request is admitted once, then answered on the server thread
    /// or in a task. The server's own refusals (bad framing, a body over the limit) take the API's error shape.
    public func server(_ configuration: HTTPServerConfiguration) -> HTTPServer {
        let responder = self
        var configuration = configuration
        configuration.refusal = { APIError(status: $0.status, code: $0.code, message: $0.message).response }
        return HTTPServer(configuration: configuration, immediate: { responder.admission($0) ?? responder.respondImmediately($0) }) { await responder.respond($0) }
    }
}
