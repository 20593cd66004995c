import Foundation
import APIKit
import Identity
import Synchronization
import Testing

/// Records the order it ran in, and refuses paths under /blocked (on the server thread too).
struct Tracing: Middleware {
    let name: String
    let trail: Trail
    func handle(_ request: HTTPRequest, context: RequestContext, next: NextResponder) async throws -> HTTPResponse {
        trail.add("\(name) in")
        if request.path.hasPrefix("/blocked") { return HTTPResponse(status: 403, headers: [], body: Array(name.utf8)) }
        let response = await next(request, context)
        trail.add("\(name) out")
        return response
    }
    func screen(_ request: HTTPRequest, context: inout RequestContext) -> Screening {
        trail.add("\(name) screen")
        return request.path.hasPrefix("/blocked") ? .refuse(HTTPResponse(status: 403, headers: [], body: Array(name.utf8))) : .pass
    }
}

final class Trail: Sendable {
    private let steps = Mutex<[String]>([])
    func add(_ step: String) { steps.withLock { $0.append(step) } }
    var all: [String] { steps.withLock { $0 } }
}

/// Keeps log records, to check that a request's logger names it.
final class KeptLines: LogHandler {
    private let kept = Mutex<[LogRecord]>([])
    func write(_ record: LogRecord) { kept.withLock { $0.append(record) } }
    var records: [LogRecord] { kept.withLock { $0 } }
}

extension HTTPResponse {
    var text: String { String(decoding: body, as: UTF8.self) }
}

/// The API kit in process: a responder answers a request with no socket, through its middleware in order.
@Suite("Middleware and the in-process responder")
struct MiddlewareTests {
    static let good = Principal(keyID: "k", subject: "owner", role: .admin)
    static let bearer = BearerAuthentication { $0 == "good" ? MiddlewareTests.good : nil }

    func responder(_ trail: Trail) -> Responder {
        var router = Router()
        router.add(Route.answeredAtOnce(.GET, "/quick", access: .open, handler: { _ in HTTPResponse(status: 200, headers: [], body: Array("quick".utf8)) }))
        router.add(Route(.POST, "/items/:id", role: .operator, handler: { request, caller in
            await Task.yield()
            trail.add("route \(request.parameter("id"))")
            return HTTPResponse(status: 201, headers: [], body: Array(caller.subject.utf8))
        }))
        return Responder(router: router, middleware: [Tracing(name: "outer", trail: trail), Self.bearer, Tracing(name: "inner", trail: trail)])
    }

    @Test("middleware runs outermost first around the route; authentication is a middleware and the route still enforces its role")
    func order() async throws {
        let trail = Trail()
        let answer = await responder(trail).respond(HTTPRequest(method: "POST", path: "/items/7", headers: ["authorization": "Bearer good"]))
        #expect(answer.status == 201 && answer.text == "owner")
        #expect(trail.all == ["outer in", "inner in", "route 7", "inner out", "outer out"])
        let anonymous = await responder(Trail()).respond(HTTPRequest(method: "POST", path: "/items/7"))
        #expect(anonymous.status == 401 && anonymous.header("www-authenticate") == "Bearer")
        let unknown = await responder(Trail()).respond(HTTPRequest(method: "POST", path: "/items/7", headers: ["authorization": "Bearer bad"]))
        #expect(unknown.status == 401 && unknown.text.contains("unknown or has been revoked"))
        let malformed = await responder(Trail()).respond(HTTPRequest(method: "POST", path: "/items/7", headers: ["authorization": "Basic abc"]))
        #expect(malformed.status == 401 && malformed.text.contains("must be 'Bearer <key>'"))
        // An open route ignores a credential it does not need, good or bad.
        #expect(await responder(Trail()).respond(HTTPRequest(method: "GET", path: "/quick", headers: ["authorization": "Bearer bad"])).status == 200)
    }

    @Test("a refusal stops the chain; on the server thread, screens refuse or pass and quick routes answer there")
    func refusalsAndQuickAnswers() async throws {
        let trail = Trail()
        let refused = await responder(trail).respond(HTTPRequest(method: "GET", path: "/blocked/x"))
        #expect(refused.status == 403 && refused.text == "outer" && trail.all == ["outer in"])
        #expect(responder(Trail()).respondImmediately(HTTPRequest(method: "GET", path: "/blocked/x"))?.status == 403)
        #expect(responder(Trail()).respondImmediately(HTTPRequest(method: "GET", path: "/quick")).map(\.text) == "quick")
        // A route that runs in a task is not answered on the server thread, and no middleware was asked about it.
        let untouched = Trail()
        #expect(responder(untouched).respondImmediately(HTTPRequest(method: "POST", path: "/items/1", headers: ["authorization": "Bearer good"])) == nil)
        #expect(untouched.all.isEmpty)
    }

    /// Admits two requests of a listener, then refuses; remembers what it was told was answered at once.
    final class Gate: Middleware, Sendable {
        let admitted = Atomic<Int>(0)
        let trail: Trail
        init(trail: Trail) { self.trail = trail }
        func admit(_ request: HTTPRequest) -> HTTPResponse? {
            admitted.add(1, ordering: .relaxed).oldValue >= 2 ? HTTPResponse(status: 429) : nil
        }
        func handle(_ request: HTTPRequest, context: RequestContext, next: NextResponder) async throws -> HTTPResponse { await next(request, context) }
        func screen(_ request: HTTPRequest, context: inout RequestContext) -> Screening { .pass }
        func answeredAtOnce(_ request: HTTPRequest, context: RequestContext, with response: HTTPResponse) { trail.add("answered \(response.status)") }
    }

    @Test("a listener admits each request once, before either path; a refusal there is answered at once; in-process answers are not admitted")
    func admission() async throws {
        let trail = Trail()
        let gate = Gate(trail: trail)
        var router = Router()
        router.add(Route(.GET, "/slow", access: .open, handler: { _ in HTTPResponse(status: 200) }))
        let responder = Responder(router: router, middleware: [gate])
        #expect(responder.admission(HTTPRequest(method: "GET", path: "/slow")) == nil)
        #expect(responder.admission(HTTPRequest(method: "GET", path: "/slow")) == nil)
        let refused = responder.admission(HTTPRequest(method: "GET", path: "/slow"))
        #expect(refused?.status == 429 && refused?.header("x-request-id")?.isEmpty == false)
        #expect(trail.all == ["answered 429"])
        // `respond` (a screened request's task, or an answer in process) does not admit again.
        #expect(await responder.respond(HTTPRequest(method: "GET", path: "/slow")).status == 200)
        #expect(gate.admitted.load(ordering: .relaxed) == 3)
    }

    @Test("every answer carries X-Request-Id: the client's when well-formed, else a fresh one; the request's logger and the handler's context name it")
    func requestIDs() async throws {
        let lines = KeptLines()
        let seen = Mutex<[String]>([])
        var router = Router()
        router.add(Route(.GET, "/work", access: .open, handler: { _ in
            let context = try #require(RequestContext.current)
            seen.withLock { $0.append(context.requestID) }
            context.logger.info("working")
            return .noContent
        }))
        router.add(Route.answeredAtOnce(.GET, "/at-once", access: .open, handler: { _ in .noContent }))
        let responder = Responder(router: router, middleware: [RequestLogMiddleware()], log: Log(minimum: .debug, handler: lines))

        let given = await responder.respond(HTTPRequest(method: "GET", path: "/work", headers: ["x-request-id": "trace-1.a_B"]))
        #expect(given.header("x-request-id") == "trace-1.a_B" && seen.withLock { $0 } == ["trace-1.a_B"])
        #expect(lines.records.contains { $0.message == "working" && $0.metadata["request_id"] == "trace-1.a_B" })
        #expect(lines.records.contains { $0.message.hasPrefix("GET /work 204") && $0.metadata["request_id"] == "trace-1.a_B" })

        let longest = String(repeating: "a", count: 128)
        #expect(await responder.respond(HTTPRequest(method: "GET", path: "/work", headers: ["x-request-id": longest])).header("x-request-id") == longest)
        var fresh: Set<String> = []
        for bad in ["", String(repeating: "a", count: 129), "has space", "new\nline", "ümlaut", "semi;colon", "slash/"] {
            let id = try #require(await responder.respond(HTTPRequest(method: "GET", path: "/work", headers: ["x-request-id": bad])).header("x-request-id"))
            #expect(id != bad && id.count == 15 && id.allSatisfy(\.isHexDigit), "\(bad) → \(id)")
            fresh.insert(id)
        }
        #expect(fresh.count == 7, "fresh ids repeat: \(fresh)")
        // At once, refused, unknown: every answer has one.
        #expect(responder.respondImmediately(HTTPRequest(method: "GET", path: "/at-once", headers: ["x-request-id": "q1"]))?.header("x-request-id") == "q1")
        #expect(lines.records.contains { $0.message == "GET /at-once 204 (at once)" && $0.metadata["request_id"] == "q1" })
        #expect(responder.respondImmediately(HTTPRequest(method: "GET", path: "/nowhere"))?.header("x-request-id")?.count == 15)
        #expect(await responder.respond(HTTPRequest(method: "DELETE", path: "/work")).header("x-request-id")?.count == 15)
        // Many fresh ids, no repeats.
        #expect(Set((0..<10_000).map { _ in RequestID.fresh() }).count == 10_000)
    }

    @Test("a line any logger writes while a request is answered names its request id: a store's, a channel's, a task the handler starts; not after")
    func requestIDOnEveryLine() async throws {
        let lines = KeptLines()
        // A part of the gateway with a logger of its own, handed to it at start: it knows nothing of requests.
        let storeLog = Log(minimum: .debug, handler: lines).component("push")
        var router = Router()
        router.add(Route(.POST, "/work", access: .open, handler: { _ in
            storeLog.info("stored a line")
            await Task { storeLog.warning("a task the handler started") }.value
            return .noContent
        }))
        let responder = Responder(router: router, middleware: [], log: Log(minimum: .debug, handler: lines))
        _ = await responder.respond(HTTPRequest(method: "POST", path: "/work", headers: ["x-request-id": "req-77"]))
        storeLog.info("outside any request")
        let byMessage = Dictionary(lines.records.map { ($0.message, $0) }, uniquingKeysWith: { first, _ in first })
        #expect(byMessage["stored a line"]?.metadata["request_id"] == "req-77")
        #expect(byMessage["stored a line"]?.label == "push")
        #expect(byMessage["a task the handler started"]?.metadata["request_id"] == "req-77")
        #expect(byMessage["outside any request"].map { $0.metadata["request_id"] == nil } == true)
        // A logger's own value wins on the same key.
        await Log.$taskMetadata.withValue(["request_id": "outer"]) { storeLog.with("request_id", "own").info("own wins") }
        #expect(lines.records.last?.metadata["request_id"] == "own")
    }

    @Test("literal segments win over parameters whatever the table order; the most specific patterns alone say which methods a path takes")
    func literalBeforeParameter() async throws {
        func answering(_ text: String) -> RouteHandler { { request in HTTPResponse(status: 200, body: Array((text + request.parameter("id") + request.parameter("x") + request.parameter("y")).utf8)) } }
        var router = Router()
        router.add(.GET, "/facts/:id", access: .open, handler: answering("param:"))
        router.add(.PATCH, "/facts/:id", access: .open, handler: answering("patch:"))
        router.add(.GET, "/facts/status", access: .open, handler: answering("status"))
        router.add(.GET, "/a/:x/c", access: .open, handler: answering("x="))
        router.add(.GET, "/a/b/:y", access: .open, handler: answering("y="))
        router.add(.GET, "/dup", access: .open, handler: answering("first"))
        router.add(.GET, "/dup", access: .open, handler: answering("second"))
        router.add(.POST, "/only/literal", access: .open, handler: answering("post"))
        router.add(.GET, "/only/:id", access: .open, handler: answering("only:"))
        let responder = Responder(router: router)
        func call(_ method: String, _ path: String) async -> (Int, String, String?) {
            let answer = await responder.respond(HTTPRequest(method: method, path: path))
            return (answer.status, answer.text, answer.header("allow"))
        }
        #expect(await call("GET", "/facts/status") == (200, "status", nil))
        #expect(await call("GET", "/facts/42") == (200, "param:42", nil))
        // The leftmost literal decides between two partly literal patterns.
        #expect(await call("GET", "/a/b/c") == (200, "y=c", nil))
        #expect(await call("GET", "/a/z/c") == (200, "x=z", nil))
        #expect(await call("GET", "/dup") == (200, "first", nil))
        // A method only a less specific pattern takes is still answered by it.
        #expect(await call("PATCH", "/facts/status") == (200, "patch:status", nil))
        #expect(await call("GET", "/only/literal") == (200, "only:literal", nil))
        let wrong = await call("DELETE", "/facts/status")
        #expect(wrong.0 == 405 && wrong.2 == "GET")
        #expect(await call("DELETE", "/facts/7").2 == "GET, PATCH")
        #expect(await call("GET", "/facts").0 == 404)
        // Empty segments count for nothing, as before; a long path matches nothing and costs no more.
        #expect(await call("GET", "//facts//status/") == (200, "status", nil))
        #expect(await call("GET", "/facts/ü%20x") == (200, "param:ü%20x", nil))
        #expect(await call("GET", "/" + Array(repeating: "a", count: 500).joined(separator: "/")).0 == 404)
        #expect(await call("GET", "/").0 == 404)
        #expect(await call("GET", "").0 == 404)
        // The order routes were added in does not matter.
        var reversed = Router()
        for route in router.routes.reversed() { reversed.add(route) }
        #expect(await Responder(router: reversed).respond(HTTPRequest(method: "GET", path: "/facts/status")).text == "status")
        #expect(await Responder(router: reversed).respond(HTTPRequest(method: "GET", path: "/a/b/c")).text == "y=c")
    }

    /// Sets a header on the answers of the routes it is attached to, and marks the trail.
    struct Stamp: Middleware {
        let trail: Trail
        func handle(_ request: HTTPRequest, context: RequestContext, next: NextResponder) async throws -> HTTPResponse {
            trail.add("stamp saw \(context.principal?.subject ?? "nobody") on \(context.route?.pattern ?? "?")")
            var response = await next(request, context)
            response.headers.append(("X-Stamped", "yes"))
            return response
        }
        func screen(_ request: HTTPRequest, context: inout RequestContext) -> Screening {
            trail.add("stamp screened")
            return request.query["refuse"] == nil ? .pass : .refuse(HTTPResponse(status: 418))
        }
    }

    @Test("a group's middleware runs around its routes only, inside the listener's and before the access check, on both paths; flags reach middleware")
    func groupMiddlewareAndFlags() async throws {
        let trail = Trail()
        var group = RouteGroup("/group", role: .viewer)
        group.get("/slow", summary: "") { _, caller in .json(["who": caller.subject]) }
        group.add(Route.answeredAtOnce(.GET, "/group/quick", role: .viewer, handler: { _, caller in .json(["quick": caller.subject]) }))
        group.add(middleware: Stamp(trail: trail))
        group.flags = RouteFlags(rawValue: 1 << 7)
        var router = Router()
        router.add(group.routes)
        router.add(.GET, "/plain", access: .open) { _ in .noContent }
        #expect(router.routes.filter { $0.flags.contains(RouteFlags(rawValue: 1 << 7)) }.map(\.pattern) == ["/group/slow", "/group/quick"])
        let responder = Responder(router: router, middleware: [Self.bearer])
        let authorized = ["authorization": "Bearer good"]

        let slow = await responder.respond(HTTPRequest(method: "GET", path: "/group/slow", headers: authorized))
        #expect(slow.status == 200 && slow.header("x-stamped") == "yes")
        #expect(trail.all == ["stamp saw owner on /group/slow"])
        let quick = try #require(responder.respondImmediately(HTTPRequest(method: "GET", path: "/group/quick", headers: authorized)))
        #expect(quick.status == 200 && quick.text == #"{"quick":"owner"}"#)
        #expect(trail.all.last == "stamp screened")
        #expect(responder.respondImmediately(HTTPRequest(method: "GET", path: "/group/quick", query: ["refuse": "1"], headers: authorized))?.status == 418)
        // The group's middleware runs before the role check: it sees an anonymous caller, then the route refuses.
        let anonymous = await responder.respond(HTTPRequest(method: "GET", path: "/group/slow"))
        #expect(anonymous.status == 401 && trail.all.last == "stamp saw nobody on /group/slow")
        let before = trail.all.count
        #expect(await responder.respond(HTTPRequest(method: "GET", path: "/plain")).header("x-stamped") == nil)
        #expect(trail.all.count == before)
        // The in-process entry runs a route's own middleware too.
        #expect(await router.handle(HTTPRequest(method: "GET", path: "/group/slow"), authenticated: Self.good).header("x-stamped") == "yes")
    }

    @Test("the session cookie authenticates reads; a state-changing call needs the session's X-CSRF-Token and, when sent, the gateway's own Origin")
    func sessionCookie() async throws {
        let cookie = SessionCookieAuthentication(cookieName: "sid") { value in
            value == "s1" ? .init(principal: Principal(keyID: "c", subject: "priya", role: .operator), csrfToken: "t1") : nil
        }
        var router = Router()
        router.add(Route(.GET, "/me", role: .viewer) { _, caller in .json(["who": caller.subject]) })
        router.add(Route(.POST, "/act", role: .operator) { _, caller in .json(["who": caller.subject]) })
        router.add(Route(.POST, "/open", access: .open) { _ in .noContent })
        let responder = Responder(router: router, middleware: [Self.bearer, cookie])
        func call(_ method: String, _ path: String, _ headers: [String: String], secure: Bool = false) async -> HTTPResponse {
            var request = HTTPRequest(method: method, path: path, headers: ["host": "gw.local:8080"].merging(headers) { $1 })
            request.isSecure = secure
            return await responder.respond(request)
        }
        #expect(await call("GET", "/me", ["cookie": "other=1; sid=s1"]).text == #"{"who":"priya"}"#)
        #expect(await call("GET", "/me", ["cookie": "sid=s2"]).status == 401)
        #expect(await call("POST", "/act", ["cookie": "sid=s1", "x-csrf-token": "t1"]).status == 200)
        #expect(await call("POST", "/act", ["cookie": "sid=s1", "x-csrf-token": "t1", "origin": "http://gw.local:8080"]).status == 200)
        #expect(await call("POST", "/act", ["cookie": "sid=s1", "x-csrf-token": "t1", "origin": "https://gw.local:8080"], secure: true).status == 200)
        for (headers, secure) in [(["cookie": "sid=s1"], false), (["cookie": "sid=s1", "x-csrf-token": "t2"], false),
                                  (["cookie": "sid=s1", "x-csrf-token": "t1", "origin": "https://evil.example"], false),
                                  (["cookie": "sid=s1", "x-csrf-token": "t1", "origin": "http://gw.local:8080"], true),
                                  (["cookie": "sid=s1", "x-csrf-token": "t1", "origin": "null"], false)] {
            let refused = await call("POST", "/act", headers, secure: secure)
            #expect(refused.status == 403 && refused.text.contains("csrf_failed"), "\(headers): \(refused.status) \(refused.text)")
        }
        // A route open to anyone is not refused for a forged cookie request (it gets no caller from it).
        #expect(await call("POST", "/open", ["cookie": "sid=s1"]).status == 204)
        // A key wins: the cookie is not read, so no CSRF token is asked for.
        #expect(await call("POST", "/act", ["cookie": "sid=s1", "authorization": "Bearer good"]).text == #"{"who":"owner"}"#)
        #expect(await call("POST", "/act", ["cookie": "sid=s1", "authorization": "Bearer bad", "x-csrf-token": "t1"]).status == 401)
    }

    @Test("a cookie not known on the server thread is looked up in a task, with the same CSRF rules; a known one is answered at once")
    func sessionCookieLookedUp() async throws {
        let priya = SessionCookieAuthentication.Session(principal: Principal(keyID: "c", subject: "priya", role: .operator), csrfToken: "t1")
        let owner = SessionCookieAuthentication.Session(principal: Principal(keyID: "k", subject: "owner", role: .admin), csrfToken: "t0")
        let cookie = SessionCookieAuthentication(cookieName: "sid", known: { $0 == "here" ? owner : nil }, lookUp: { $0 == "far" ? priya : nil })
        var router = Router()
        router.add(Route.answeredAtOnce(.GET, "/me", role: .viewer, handler: { _, caller in .json(["who": caller.subject]) }))
        router.add(Route(.POST, "/act", role: .operator) { _, caller in .json(["who": caller.subject]) })
        let responder = Responder(router: router, middleware: [cookie])
        func request(_ method: String, _ path: String, _ headers: [String: String]) -> HTTPRequest {
            HTTPRequest(method: method, path: path, headers: ["host": "gw.local:8080"].merging(headers) { $1 })
        }
        #expect(responder.respondImmediately(request("GET", "/me", ["cookie": "sid=here"]))?.text == #"{"who":"owner"}"#)
        #expect(responder.respondImmediately(request("GET", "/me", ["cookie": "sid=far"])) == nil, "an unknown cookie waited on the server thread")
        #expect(await responder.respond(request("GET", "/me", ["cookie": "sid=far"])).text == #"{"who":"priya"}"#)
        #expect(await responder.respond(request("GET", "/me", ["cookie": "sid=nobody"])).status == 401)
        #expect(await responder.respond(request("POST", "/act", ["cookie": "sid=far", "x-csrf-token": "t1"])).status == 200)
        let forged = await responder.respond(request("POST", "/act", ["cookie": "sid=far", "x-csrf-token": "t0"]))
        #expect(forged.status == 403 && forged.text.contains("csrf_failed"))
    }

    @Test("cookies are read from the Cookie header by exact name")
    func cookieParsing() {
        let request = HTTPRequest(method: "GET", path: "/", headers: ["cookie": "a=1;  soulacy_session=abc ; x_soulacy_session=no; q=\"quoted\""])
        #expect(request.cookie("soulacy_session") == "abc")
        #expect(request.cookie("q") == "quoted")
        #expect(request.cookie("session") == nil)
        #expect(HTTPRequest(method: "GET", path: "/").cookie("a") == nil)
    }
}
