import Storage
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import APIKit
import GatewayTestSupport
import Identity
import SQLite
import Synchronization
import Testing

@Suite("HTTP server on libmicrohttpd")
struct HTTPServerTests {
    func get(_ port: UInt16, _ path: String, method: String = "GET", body: Data? = nil) async throws -> (Int, String, HTTPURLResponse) {
        var request = URLRequest(url: URL(string: "http://127.0.0.1:\(port)\(path)")!)
        request.httpMethod = method
        request.httpBody = body
        let (data, response) = try await URLSession.shared.data(for: request)
        let http = response as! HTTPURLResponse
        return (http.statusCode, String(decoding: data, as: UTF8.self), http)
    }

    @Test("slow handlers do not block others: connections are suspended while handlers run")
    func concurrency() async throws {
        let gauge = InFlightGauge()
        var router = Router()
        router.add(.GET, "/slow", access: .open) { _ in
            gauge.enter()
            defer { gauge.leave() }
            try await Task.sleep(for: .milliseconds(300))
            return .json(["slow": true])
        }
        router.add(.POST, "/echo/:name", access: .open) { request in
            .json(["name": .string(request.parameter("name")), "q": .string(request.query["q"] ?? ""), "bytes": .number(Double(request.body.count))])
        }
        let frozen = router
        let server = HTTPServer(configuration: HTTPServerConfiguration(host: "127.0.0.1", port: 0, threadPoolSize: 2)) { await frozen.handle($0) }
        try server.start()
        let port = server.port
        #expect(port > 0)

        try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<20 { group.addTask { try await get(port, "/slow").0 } }
            for try await status in group { #expect(status == 200) }
        }
        // Twenty slow handlers behind two MHD threads ran side by side, not two at a time.
        #expect(gauge.peak > 2, "at most \(gauge.peak) handlers ran at once")

        let (status, text, _) = try await get(port, "/echo/bob?q=a%20b", method: "POST", body: Data(repeating: 7, count: 1000))
        #expect(status == 200)
        #expect(text == #"{"bytes":1000,"name":"bob","q":"a b"}"#)
        let head = try await get(port, "/slow", method: "HEAD")
        #expect(head.0 == 200 && head.1.isEmpty)
        await server.stop()
    }

    @Test("stop drains handlers in flight before closing; a connection made during the drain gets no answer, and after it the port refuses")
    func gracefulStop() async throws {
        let started = StartFlag(), released = StartFlag()
        var router = Router()
        router.add(.GET, "/fast", access: .open) { _ in .json(["fast": true]) }
        router.add(.GET, "/slow", access: .open) { _ in
            started.set()
            while !released.isSet { try await Task.sleep(for: .milliseconds(5)) }
            return .json(["done": true])
        }
        let frozen = router
        // A pool of threads, as the gateway runs it: stopping must not race the workers (MHD_quiesce_daemon did, and
        // libmicrohttpd aborted the process now and then).
        var configuration = HTTPServerConfiguration(host: "127.0.0.1", port: 0)
        configuration.threadPoolSize = 4
        let server = HTTPServer(configuration: configuration) { await frozen.handle($0) }
        try server.start()
        let port = server.port
        let pending = Task { try await get(port, "/slow") }
        while !started.isSet { try await Task.sleep(for: .milliseconds(5)) }
        let stopping = Task { await server.stop() }
        // Once the drain has begun (the task may not have started yet: answered until then), a new connection is
        // closed as it is accepted, while the slow request is still in flight.
        var late = "not tried"
        for _ in 0..<600 {
            late = await RawHTTP.exchange(port: port, Array("GET /fast HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".utf8), halfClose: false)
            if late.isEmpty { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(late.isEmpty, "a connection during the drain was answered: \(late.prefix(40))")
        released.set()
        await stopping.value
        let (status, text, _) = try await pending.value
        #expect(status == 200)
        #expect(text == #"{"done":true}"#)
        #expect(RawHTTP.connect(port: port, timeout: 1) == nil, "stopped: the port refuses")
        // Stops in a row, over and over, with pools of workers: none aborts the process.
        for _ in 0..<20 {
            let again = HTTPServer(configuration: configuration) { _ in .json(["ok": true]) }
            try again.start()
            _ = await RawHTTP.exchange(port: again.port, Array("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".utf8), halfClose: false)
            await again.stop()
        }
    }

    @Test("handlers run on the given executor's threads, before and after they suspend (a database's own threads, not the cooperative pool)")
    func handlerExecutor() async throws {
        let storage = StorageExecutor(threads: 2)
        defer { storage.stop() }
        let seen = Mutex<[Bool]>([])
        let server = HTTPServer(configuration: {
            var configuration = HTTPServerConfiguration(host: "127.0.0.1", port: 0)
            configuration.handlerExecutor = storage
            return configuration
        }()) { _ in
            seen.withLock { $0.append(storage.isCurrent) }
            try? await Task.sleep(for: .milliseconds(5))
            seen.withLock { $0.append(storage.isCurrent) }
            return .json(["ok": true])
        }
        try server.start()
        let (status, _, _) = try await get(server.port, "/anything")
        await server.stop()
        #expect(status == 200)
        #expect(seen.withLock { $0 } == [true, true])
    }

    @Test("immediate routes are answered on the server thread; the others still reach their tasks")
    func immediateLane() async throws {
        let asyncCalls = InFlightGauge()
        let keyChecks = Atomic<Int>(0)
        var router = Router()
        router.add(Route.answeredAtOnce(.GET, "/quick/:name", role: .viewer, handler: { request, caller in
            .json(["name": .string(request.parameter("name")), "who": .string(caller.subject)])
        }))
        router.add(Route.answeredAtOnce(.GET, "/admin-only", access: .role(.admin), handler: { _ in .noContent }))
        router.add(.POST, "/quick/:name", access: .open) { _ in
            asyncCalls.enter()
            asyncCalls.leave()
            return .json(["async": true])
        }
        router.add(Route(.GET, "/slow-read", role: .viewer) { _, caller in .json(["who": .string(caller.subject)]) })
        let frozen = router
        let responder = Responder(router: router, middleware: [BearerAuthentication { token in
            keyChecks.add(1, ordering: .relaxed)
            return token == "good" ? Principal(keyID: "k", subject: "owner", role: .viewer) : nil
        }])
        let server = HTTPServer(configuration: HTTPServerConfiguration(host: "127.0.0.1", port: 0, threadPoolSize: 2),
                                immediate: { responder.respondImmediately($0) }) { request in
            asyncCalls.enter()
            defer { asyncCalls.leave() }
            return await responder.respond(request)
        }
        try server.start()
        let port = server.port
        func call(_ method: String, _ path: String, token: String?) async throws -> (Int, String) {
            var request = URLRequest(url: URL(string: "http://127.0.0.1:\(port)\(path)")!)
            request.httpMethod = method
            if let token { request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization") }
            let (data, response) = try await URLSession.shared.data(for: request)
            return ((response as! HTTPURLResponse).statusCode, String(decoding: data, as: UTF8.self))
        }
        #expect(try await call("GET", "/quick/ann", token: "good") == (200, #"{"name":"ann","who":"owner"}"#))
        // Refusals are answered at once too, in the usual JSON shape.
        #expect(try await call("GET", "/quick/ann", token: "bad").0 == 401)
        #expect(try await call("GET", "/admin-only", token: "  good ").0 == 403)
        #expect(try await call("GET", "/nowhere", token: nil).0 == 404)
        #expect(asyncCalls.peak == 0, "an immediate answer went through a task")
        // A route that needs a task gets one; HEAD of an immediate route has no body.
        #expect(try await call("POST", "/quick/ann", token: nil) == (200, #"{"async":true}"#))
        #expect(asyncCalls.peak >= 1)
        #expect(try await call("HEAD", "/quick/ann", token: "good") == (200, ""))
        // A GET whose route runs in a task is passed on before the key is checked: the key is checked once.
        let checksBefore = keyChecks.load(ordering: .relaxed)
        #expect(try await call("GET", "/slow-read", token: "good") == (200, #"{"who":"owner"}"#))
        #expect(keyChecks.load(ordering: .relaxed) - checksBefore == 1)
        #expect(try await call("GET", "/slow-read", token: "bad").0 == 401)
        // The async entry (sealed relay commands use it) runs immediate routes as well.
        let viaTask = await frozen.handle(HTTPRequest(method: "GET", path: "/quick/bo"), authenticated: Principal(keyID: "k2", subject: "priya", role: .viewer))
        #expect(viaTask.status == 200 && String(decoding: viaTask.body, as: UTF8.self) == #"{"name":"bo","who":"priya"}"#)
        await server.stop()
    }

    @Test("the server's own refusals are plain text from the bare wrapper and the API's error shape through the kit")
    func ownRefusals() async throws {
        var configuration = HTTPServerConfiguration(host: "127.0.0.1", port: 0)
        configuration.maximumBodyBytes = 16
        let bare = HTTPServer(configuration: configuration) { _ in .noContent }
        try bare.start()
        let plain = try await get(bare.port, "/x", method: "POST", body: Data(repeating: 1, count: 64))
        #expect(plain.0 == 413)
        #expect(plain.1 == "the request body is larger than the limit of 16 bytes\n")
        #expect(plain.2.value(forHTTPHeaderField: "Content-Type")?.hasPrefix("text/plain") == true)
        await bare.stop()

        var router = Router()
        router.add(.POST, "/x", access: .open) { _ in .noContent }
        let kit = Responder(router: router).server(configuration)
        try kit.start()
        let shaped = try await get(kit.port, "/x", method: "POST", body: Data(repeating: 1, count: 64))
        #expect(shaped.0 == 413)
        let body = try JSONSerialization.jsonObject(with: Data(shaped.1.utf8)) as? [String: String]
        #expect(body == ["error": "the request body is larger than the limit of 16 bytes", "code": "body_too_large"])
        await kit.stop()
    }

    @Test("refuses to start on a bad address, with a message naming it")
    func badAddress() {
        let server = HTTPServer(configuration: HTTPServerConfiguration(host: "not-an-ip", port: 0)) { _ in .noContent }
        #expect(throws: HTTPServerError.self) { try server.start() }
    }
}

final class InFlightGauge: @unchecked Sendable {
    private let lock = NSLock()
    private var now = 0
    private var highest = 0
    func enter() { lock.withLock { now += 1; highest = max(highest, now) } }
    func leave() { lock.withLock { now -= 1 } }
    var peak: Int { lock.withLock { highest } }
}

final class StartFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var value = false
    func set() { lock.withLock { value = true } }
    var isSet: Bool { lock.withLock { value } }
}

@Suite("JSON serialization")
struct JSONSerializationTests {
    @Test("the hand-written serializer round-trips through Foundation's parser, escapes included")
    func roundTrip() throws {
        let value: JSONValue = ["text": "quote \" backslash \\ newline \n tab \t bell \u{07} é 😀 </script>", "n": 42, "x": 1.5, "neg": -7,
                                "flags": [true, false, nil], "nested": ["b": 2, "a": 1], "empty": [:], "none": []]
        let text = value.serialized()
        #expect(text.hasPrefix(#"{"empty":{},"flags":[true,false,null],"n":42,"neg":-7,"nested":{"a":1,"b":2},"none":[],"text":"#))
        let reparsed = try JSONValue.parse(Array(text.utf8))
        #expect(reparsed == value)
        #expect(try JSONSerialization.jsonObject(with: Data(text.utf8)) is [String: Any])
    }
}

@Suite("JSON writer")
struct JSONWriterTests {
    @Test("writes the same bytes as JSONValue for the same document")
    func sameBytes() {
        var out = JSONWriter()
        out.beginObject()
        out.key("a"); out.beginArray(); out.number(1); out.string("x\"y"); out.bool(false); out.null(); out.endArray()
        out.key("b"); out.beginObject(); out.key("c"); out.value(["d": 2]); out.endObject()
        out.endObject()
        let value: JSONValue = ["a": [1, "x\"y", false, nil], "b": ["c": ["d": 2]]]
        #expect(String(decoding: out.bytes, as: UTF8.self) == value.serialized())
    }

    @Test("strings are escaped where JSON needs it and copied whole elsewhere; timestamps match JSONValue's and typed answers'")
    func escapesAndTimestamps() throws {
        let tricky = ["", "plain", "\"", "a\\b", "line\nnext\r\ttab", "\u{01}\u{1F}end", "ünïcødé 名前 🚀", "\"start and end\"", "x\u{0}y"]
        let date = Date(timeIntervalSince1970: 1_796_218_334.25)
        var out = JSONWriter()
        out.beginObject()
        out.key("at"); out.timestamp(date)
        out.key("s"); out.beginArray(); for text in tricky { out.string(text) }; out.endArray()
        out.endObject()
        let written = String(decoding: out.bytes, as: UTF8.self)
        let value: JSONValue = ["at": .string(JSONValue.iso8601(date)), "s": .array(tricky.map(JSONValue.string))]
        #expect(written == value.serialized())
        // Typed answers write the same moment through the one encoder.
        #expect(String(decoding: try JSONCoding.encoder.encode(["at": Timestamp(date)]), as: UTF8.self) == #"{"at":"2026-12-02T13:32:14.250Z"}"#)
        #expect(written.contains(#""line\nnext\r\ttab""#) && written.contains(#""\u0001\u001fend""#) && written.contains(#""x\u0000y""#))
        // Foundation reads back exactly what went in.
        let decoded = try JSONSerialization.jsonObject(with: Data(out.bytes)) as? [String: Any]
        #expect(decoded?["s"] as? [String] == tricky)
        #expect(decoded?["at"] as? String == "2026-12-02T13:32:14.250Z")
    }
}

@Suite("Timestamps")
struct TimestampTests {
    @Test("ISO 8601 in UTC with milliseconds, as Foundation formats it")
    func iso8601() {
        // Values with an exact binary fraction; for others Foundation and we may differ in the last millisecond's rounding.
        for seconds in [0.0, 1.5, 1_796_218_334.25, 951_782_400.125, 4_102_444_799.5] {
            let date = Date(timeIntervalSince1970: seconds)
            let foundation = date.formatted(.iso8601.year().month().day().time(includingFractionalSeconds: true).timeZone(separator: .omitted))
            #expect(JSONValue.iso8601(date) == foundation, "\(seconds)")
        }
        #expect(JSONValue.iso8601(Date(timeIntervalSince1970: 951_782_400)) == "2000-02-29T00:00:00.000Z")
    }
}
