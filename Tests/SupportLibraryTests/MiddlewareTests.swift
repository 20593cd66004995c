import Foundation
import APIKit
import Identity
import Synchronization
import Testing

/// Records the order it ran in, and refuses paths under /blocked (on the server thread too).
struct Tracing: Middleware {
    let name: String
    let trail: Trail
    func handle(_ request: HTTPRequest, next: @Sendable (HTTPRequest) async -> HTTPResponse) async -> HTTPResponse {
        trail.add("\(name) in")
        if request.path.hasPrefix("/blocked") { return HTTPResponse(status: 403, headers: [], body: Array(name.utf8)) }
        let response = await next(request)
        trail.add("\(name) out")
        return response
    }
    func screen(_ request: HTTPRequest) -> Screening {
        request.path.hasPrefix("/blocked") ? .refuse(HTTPResponse(status: 403, headers: [], body: Array(name.utf8))) : .pass
    }
}

final class Trail: Sendable {
    private let steps = Mutex<[String]>([])
    func add(_ step: String) { steps.withLock { $0.append(step) } }
    var all: [String] { steps.withLock { $0 } }
}

/// The API kit in process: a responder answers a request with no socket, through its middleware in order.
@Suite("Middleware and the in-process responder")
struct MiddlewareTests {
    func responder(_ trail: Trail) -> Responder {
        var router = Router(authenticator: { $0 == "good" ? Principal(keyID: "k", subject: "owner", role: .admin) : nil })
        router.add(Route.answeredAtOnce(.GET, "/quick", access: .open, handler: { _ in HTTPResponse(status: 200, headers: [], body: Array("quick".utf8)) }))
        router.add(Route(.POST, "/items/:id", role: .operator, handler: { request, caller in
            await Task.yield()
            trail.add("route \(request.parameter("id"))")
            return HTTPResponse(status: 201, headers: [], body: Array(caller.subject.utf8))
        }))
        return Responder(router: router, middleware: [Tracing(name: "outer", trail: trail), Tracing(name: "inner", trail: trail)])
    }

    @Test("middleware runs outermost first around the route; the route still enforces its role")
    func order() async throws {
        let trail = Trail()
        let answer = await responder(trail).respond(HTTPRequest(method: "POST", path: "/items/7", headers: ["authorization": "Bearer good"]))
        #expect(answer.status == 201 && String(decoding: answer.body, as: UTF8.self) == "owner")
        #expect(trail.all == ["outer in", "inner in", "route 7", "inner out", "outer out"])
        let anonymous = await responder(Trail()).respond(HTTPRequest(method: "POST", path: "/items/7"))
        #expect(anonymous.status == 401)
    }

    @Test("a refusal stops the chain; on the server thread, screens refuse or pass and quick routes answer there")
    func refusalsAndQuickAnswers() async throws {
        let trail = Trail()
        let refused = await responder(trail).respond(HTTPRequest(method: "GET", path: "/blocked/x"))
        #expect(refused.status == 403 && String(decoding: refused.body, as: UTF8.self) == "outer" && trail.all == ["outer in"])
        #expect(responder(Trail()).respondImmediately(HTTPRequest(method: "GET", path: "/blocked/x"))?.status == 403)
        #expect(responder(Trail()).respondImmediately(HTTPRequest(method: "GET", path: "/quick")).map { String(decoding: $0.body, as: UTF8.self) } == "quick")
        // A route that runs in a task is not answered on the server thread.
        #expect(responder(Trail()).respondImmediately(HTTPRequest(method: "POST", path: "/items/1", headers: ["authorization": "Bearer good"])) == nil)
    }

    /// Admits two requests of a listener, then refuses; remembers what it was told was answered at once.
    final class Gate: Middleware, Sendable {
        let admitted = Atomic<Int>(0)
        let trail: Trail
        init(trail: Trail) { self.trail = trail }
        func admit(_ request: HTTPRequest) -> HTTPResponse? {
            admitted.add(1, ordering: .relaxed).oldValue >= 2 ? HTTPResponse(status: 429) : nil
        }
        func handle(_ request: HTTPRequest, next: @Sendable (HTTPRequest) async -> HTTPResponse) async -> HTTPResponse { await next(request) }
        func screen(_ request: HTTPRequest) -> Screening { .pass }
        func answeredAtOnce(_ request: HTTPRequest, with response: HTTPResponse) { trail.add("answered \(response.status)") }
    }

    @Test("a listener admits each request once, before either path; a refusal there is answered at once; in-process answers are not admitted")
    func admission() async throws {
        let trail = Trail()
        let gate = Gate(trail: trail)
        var router = Router(authenticator: { _ in nil })
        router.add(Route(.GET, "/slow", access: .open, handler: { _ in HTTPResponse(status: 200) }))
        let responder = Responder(router: router, middleware: [gate])
        #expect(responder.admission(HTTPRequest(method: "GET", path: "/slow")) == nil)
        #expect(responder.admission(HTTPRequest(method: "GET", path: "/slow")) == nil)
        #expect(responder.admission(HTTPRequest(method: "GET", path: "/slow"))?.status == 429)
        #expect(trail.all == ["answered 429"])
        // `respond` (a screened request's task, or an answer in process) does not admit again.
        #expect(await responder.respond(HTTPRequest(method: "GET", path: "/slow")).status == 200)
        #expect(gate.admitted.load(ordering: .relaxed) == 3)
    }
}
