import APIKit
import Foundation
import Synchronization

/// A local ntfy server, written from ntfy's publishing docs ("Publishing", "Access control", "Limitations") and the
/// error table its server answers with (`{"code", "http", "error", "link"}`). It checks what ntfy checks, in
/// ntfy's order: the route (`PUT`/`POST /<topic>`, topic `[-_A-Za-z0-9]{1,64}`, the web app's names reserved), the
/// visitor's request limit (429, code 42901), the access token (401 unknown, 403 no write access), the priority
/// (400, 40007), and the body (over 4096 bytes or not UTF-8 it would be an attachment, and this server, like a
/// self-hosted default, has no attachment cache: 400, 40014). It records each message it publishes.
final class NtfyStandIn: Sendable {
    /// One published message, as ntfy stores it.
    struct Message: Sendable, Equatable {
        var id: String
        var method: String
        var topic: String
        var message: String
        var title: String?
        /// The title as it came on the wire, before RFC 2047 decoding.
        var rawTitle: String?
        var priority: Int?
        var tags: [String]
        var markdown: Bool
        /// The access token it was published with; nil: anonymous.
        var token: String?
    }

    static let token = "tk_standin7r3nq0x9v2mdb4lw6kp8cz"

    let server: HTTPServer
    private let state: State

    /// `writable`: the topics `token` may publish to; `open`: topics anyone may publish to (ntfy.sh's unreserved ones).
    init(writable: Set<String> = ["alerts"], open: Set<String> = []) throws {
        let state = State(writable: writable, open: open)
        self.state = state
        server = HTTPServer(configuration: HTTPServerConfiguration(host: "127.0.0.1", port: 0)) { request in state.handle(request) }
        try server.start()
    }

    var url: String { "http://127.0.0.1:\(server.port)" }
    var published: [Message] { state.published.withLock { $0 } }
    var requestCount: Int { state.requests.load(ordering: .relaxed) }

    /// Requests the visitor may make before ntfy answers 429 (ntfy's `visitor-request-limit-burst`, 60 by default).
    func limitRequests(to burst: Int, retryAfter: String? = nil) {
        state.burst.store(burst, ordering: .relaxed)
        state.retryAfter.withLock { $0 = retryAfter }
    }

    /// Every request answers 500 (code 50001) until it is over.
    func failing(_ on: Bool) { state.failing.store(on, ordering: .relaxed) }

    func stop() async { await server.stop() }

    final class State: Sendable {
        let writable: Set<String>
        let open: Set<String>
        let published = Mutex<[Message]>([])
        let requests = Atomic<Int>(0)
        let burst = Atomic<Int>(Int.max)
        let retryAfter = Mutex<String?>(nil)
        let failing = Atomic<Bool>(false)

        init(writable: Set<String>, open: Set<String>) {
            self.writable = writable
            self.open = open
        }

        func handle(_ request: HTTPRequest) -> HTTPResponse {
            let count = requests.add(1, ordering: .relaxed).newValue
            let topic = String(request.path.dropFirst())
            guard request.method == "POST" || request.method == "PUT", request.path.hasPrefix("/"),
                  topic.wholeMatch(of: /[-_A-Za-z0-9]{1,64}/) != nil else {
                return error(40401, 404, "page not found")
            }
            guard !["docs", "static", "file", "app", "metrics", "account", "settings", "signup", "login", "v1"].contains(topic) else {
                return error(40010, 400, "invalid request: topic name is disallowed")
            }
            if count > burst.load(ordering: .relaxed) {
                var response = error(42901, 429, "limit reached: too many requests, please be nice", link: "https://ntfy.sh/docs/publish/#limitations")
                if let after = retryAfter.withLock({ $0 }) { response.headers.append(("Retry-After", after)) }
                return response
            }
            if failing.load(ordering: .relaxed) { return error(50001, 500, "internal server error") }
            // Access control as `auth-default-access: deny-all` with one token: an unknown token is 401, a known one
            // without write access 403, and so is no token on a topic that is not open.
            var token: String?
            if request.header("authorization") != nil {
                guard let bearer = request.bearerToken, bearer == NtfyStandIn.token else {
                    return error(40101, 401, "unauthorized", link: "https://ntfy.sh/docs/publish/#authentication")
                }
                token = bearer
            }
            guard open.contains(topic) || (token != nil && writable.contains(topic)) else {
                return error(40301, 403, "forbidden", link: "https://ntfy.sh/docs/publish/#authentication")
            }
            var priority: Int?
            if let text = Self.parameter(request, "x-priority", "priority", "prio", "p") {
                let levels = ["1": 1, "min": 1, "2": 2, "low": 2, "3": 3, "default": 3, "4": 4, "high": 4, "5": 5, "max": 5, "urgent": 5]
                guard let level = levels[text.lowercased()] else {
                    return error(40007, 400, "invalid priority parameter", link: "https://ntfy.sh/docs/publish/#message-priority")
                }
                priority = level
            }
            guard request.body.count <= 4096, let text = String(validating: request.body, as: UTF8.self) else {
                return error(40014, 400, "invalid request: attachments not allowed", link: "https://ntfy.sh/docs/config/#attachments")
            }
            let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
            let tags = Self.parameter(request, "x-tags", "tags", "tag", "ta").map {
                $0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            } ?? []
            let markdown = Self.parameter(request, "x-markdown", "markdown", "md").map { ["1", "yes", "true"].contains($0.lowercased()) } ?? false
            let rawTitle = Self.parameter(request, "x-title", "title", "ti", "t")
            let message = Message(id: Self.messageID(), method: request.method, topic: topic, message: trimmed.isEmpty ? "triggered" : trimmed,
                                  title: rawTitle.map(Self.decodedWords), rawTitle: rawTitle, priority: priority, tags: tags, markdown: markdown, token: token)
            published.withLock { $0.append(message) }
            let now = Int(Date().timeIntervalSince1970)
            var answer: [String: JSONValue] = ["id": .string(message.id), "time": .number(Double(now)), "expires": .number(Double(now + 43_200)),
                                               "event": "message", "topic": .string(topic), "message": .string(message.message)]
            if let title = message.title { answer["title"] = .string(title) }
            if let priority { answer["priority"] = .number(Double(priority)) }
            if !tags.isEmpty { answer["tags"] = .array(tags.map { .string($0) }) }
            return HTTPResponse(status: 200, headers: [("Content-Type", "application/json")], body: Array((JSONValue.object(answer).serialized() + "\n").utf8))
        }

        /// ntfy's error body; `http` repeats the status.
        func error(_ code: Int, _ status: Int, _ message: String, link: String? = nil) -> HTTPResponse {
            var body: [String: JSONValue] = ["code": .number(Double(code)), "http": .number(Double(status)), "error": .string(message)]
            if let link { body["link"] = .string(link) }
            return HTTPResponse(status: status, headers: [("Content-Type", "application/json")], body: Array((JSONValue.object(body).serialized() + "\n").utf8))
        }

        /// The first of a parameter's header names that is set, trimmed (ntfy also reads them from the query).
        static func parameter(_ request: HTTPRequest, _ names: String...) -> String? {
            for name in names {
                if let value = (request.header(name) ?? request.query[name])?.trimmingCharacters(in: .whitespaces), !value.isEmpty { return value }
            }
            return nil
        }

        /// RFC 2047 `=?UTF-8?B?…?=` words decoded, the blanks between adjacent words dropped (as Go's mime package
        /// decodes them for ntfy); anything else as it came.
        static func decodedWords(_ value: String) -> String {
            let word = /=\?[Uu][Tt][Ff]-8\?[Bb]\?([A-Za-z0-9+\/=]*)\?=/
            guard value.contains(word) else { return value }
            var out = ""
            var rest = Substring(value)
            var afterWord = false
            while let match = rest.firstMatch(of: word) {
                let between = rest[rest.startIndex..<match.range.lowerBound]
                if !(afterWord && between.allSatisfy(\.isWhitespace)) { out += between }
                out += Data(base64Encoded: String(match.1)).map { String(decoding: $0, as: UTF8.self) } ?? String(match.0)
                rest = rest[match.range.upperBound...]
                afterWord = true
            }
            return out + rest
        }

        static func messageID() -> String {
            let alphabet = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
            return String((0..<12).map { _ in alphabet.randomElement()! })
        }
    }
}
