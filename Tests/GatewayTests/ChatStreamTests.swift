import Foundation
import Gateway
import GatewayTestSupport
import Glibc
import APIKit
import Testing

/// Carries a reader to the thread that blocks on it; only that thread touches it until it resumes the test.
struct UncheckedBox<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}

/// `/api/v1/chat/stream` as the original's clients read it: server-sent events, pieces as they come.
@Suite("Chat streaming", .serialized)
struct ChatStreamTests {
    /// A raw HTTP/1.1 client that reads a response as it arrives (no library buffers it).
    final class StreamReader {
        let fd: Int32
        var received = ""

        init(port: UInt16, request: String) throws {
            guard let fd = RawHTTP.connect(port: port, timeout: 10) else { throw TestFailure("cannot connect") }
            self.fd = fd
            let bytes = Array(request.utf8)
            _ = bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        }

        deinit { close(fd) }

        /// Reads until `condition` holds for what arrived, or the server closes, or 10 s pass. The blocking reads
        /// run on a thread of their own: on the cooperative pool they would starve the gateway in this process.
        @discardableResult
        func read(until condition: @escaping @Sendable (String) -> Bool) async -> Bool {
            let reader = UncheckedBox(self)
            return await onOwnThread { reader.value.readBlocking(until: condition) }
        }

        private func readBlocking(until condition: (String) -> Bool) -> Bool {
            var buffer = [UInt8](repeating: 0, count: 65536)
            while !condition(received) {
                let n = recv(fd, &buffer, buffer.count, 0)
                if n <= 0 { return condition(received) }
                received += String(decoding: buffer[0..<n], as: UTF8.self)
            }
            return true
        }

        /// The `data:` lines of the events so far, in order, with their event names.
        var events: [(event: String?, data: String)] {
            var result: [(String?, String)] = []
            var event: String?
            // By scalars: "\r\n" is one Character in Swift, and chunked framing puts one before many lines.
            let text = String(String.UnicodeScalarView(received.unicodeScalars.filter { $0 != "\r" }))
            for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
                if line.hasPrefix("event: ") { event = String(line.dropFirst(7)) }
                if line.hasPrefix("data: ") {
                    result.append((event, String(line.dropFirst(6))))
                    event = nil
                }
            }
            return result
        }
    }

    static func post(_ gw: TestGateway, _ body: JSONValue) -> String {
        let json = body.serialized()
        return "POST /api/v1/chat/stream HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(gw.adminKey)\r\nContent-Type: application/json\r\n" +
            "Content-Length: \(json.utf8.count)\r\nConnection: close\r\n\r\n\(json)"
    }

    @Test("pieces arrive while the model is still answering; run first, [DONE] last; the whole adds up to the reply")
    func streams() async throws {
        let llm = try await LLMStandIn.start()
        defer { llm.stop() }
        let text = "Hello from a streaming model, piece by piece."
        try await llm.script([["text": .string(text), "hold_after": 3]])
        let file = "id: talker\nenabled: true\ntrigger: channel\nllm: {provider: openai, model: m}\n"
        try await withTestGateway(config: file, environment: llm.environment) { (gw) async throws in
            let reader = try StreamReader(port: gw.gateway.port, request: Self.post(gw, ["agent_id": "talker", "text": "hi"]))
            // Held by the model after three frames: the first pieces are here, the end is not.
            #expect(await reader.read { $0.components(separatedBy: "data: ").count > 3 })
            #expect(reader.received.hasPrefix("HTTP/1.1 200"))
            #expect(reader.received.lowercased().contains("content-type: text/event-stream"))
            #expect(!reader.received.contains("[DONE]"))
            #expect(reader.events.first?.event == "run" && reader.events.first?.data.contains("\"run_id\"") == true)
            try await llm.control("POST", "/control/release")
            #expect(await reader.read { $0.contains("data: [DONE]") })
            let pieces = reader.events.dropFirst().filter { $0.event == nil && $0.data != "[DONE]" }.map(\.data)
            #expect(pieces.count > 3 && pieces.joined() == text, "\(pieces)")
            #expect(reader.events.last?.data == "[DONE]")
        }
    }

    @Test("an agent that does not stream sends its reply whole; a failure is event: error; newlines travel as \\n")
    func wholeAndErrors() async throws {
        let config = """
            agents:
              - id: echo
                runner: {command: ["/bin/cat"]}
              - id: broken
                runner: {command: ["/bin/sh", "-c", "exit 2"]}
            """
        try await withTestGateway(config: config) { (gw) async throws in
            let reader = try StreamReader(port: gw.gateway.port, request: Self.post(gw, ["agent_id": "echo", "text": "line one\nline two"]))
            #expect(await reader.read { $0.contains("[DONE]") })
            #expect(reader.events.map(\.data).dropFirst().first == "line one\\nline two", "\(reader.events.map(\.data))")
            let failing = try StreamReader(port: gw.gateway.port, request: Self.post(gw, ["agent_id": "broken", "text": "x"]))
            #expect(await failing.read { $0.contains("event: error") })
            #expect(failing.events.last?.event == "error" && failing.events.last?.data.contains("status 2") == true)
            // Bad requests are refused before any stream starts, in the error shape.
            let bad = try await gw.request("POST", "/api/v1/chat/stream", json: ["agent_id": "echo"])
            #expect(bad.status == 400 && bad.errorField == "text")
        }
    }

    @Test("a tool waiting for approval shows as event: tool_confirm; /chat/confirm decides it on the shared broker")
    func toolConfirm() async throws {
        let llm = try await LLMStandIn.start()
        defer { llm.stop() }
        try await llm.script([
            ["tool_calls": [["name": "mobile.list_nodes", "arguments": [:]]]],
            ["text": "You have no phones."],
        ])
        let file = "id: asker\nenabled: true\ntrigger: channel\nllm: {provider: ollama, model: m}\nbuiltins: [mobile.list_nodes]\nconfirm_tools: [mobile.list_nodes]\n"
        try await withTestGateway(config: file, environment: llm.environment) { (gw) async throws in
            let reader = try StreamReader(port: gw.gateway.port, request: Self.post(gw, ["agent_id": "asker", "text": "my phones?"]))
            #expect(await reader.read { $0.contains("event: tool_confirm") })
            let confirm = try JSONValue.parse(Array((reader.events.first { $0.event == "tool_confirm" }?.data ?? "").utf8))
            #expect(confirm["tool"] == "mobile.list_nodes")
            let callID = try #require(confirm["call_id"]?.stringValue)
            // The same call is on the approvals list a phone reads.
            #expect(try await gw.request("GET", "/api/v1/approvals").json["approvals"]?[0]?["call_id"] == .string(callID))
            let decided = try await gw.request("POST", "/api/v1/chat/confirm", json: ["call_id": .string(callID), "approved": true])
            #expect(decided.json["ok"] == true)
            #expect(await reader.read { $0.contains("[DONE]") })
            #expect(reader.events.contains { $0.data == "You have no phones." })
            #expect(try await gw.request("POST", "/api/v1/chat/confirm", json: ["call_id": "nope", "approved": true]).status == 404)
        }
    }

    @Test("a command agent that asks through POST /api/v1/approvals during a streamed chat: the stream shows tool_confirm and the decision lets it go on")
    func commandAgentApprovalOnTheStream() async throws {
        let config = """
            agents:
              - id: careful
                name: Careful
                enabled: true
                trigger: channel
                channels: [http]
                runner:
                  command: ["/bin/sh", "-c", "answer=$(curl -s -X POST -H \\"Authorization: Bearer $SOULACY_RUN_TOKEN\\" -d '{\\"agent_id\\":\\"careful\\",\\"tool\\":\\"delete_files\\",\\"arguments\\":{\\"path\\":\\"/tmp/x\\"}}' $SOULACY_API_URL/api/v1/approvals); case $answer in *'\\"approved\\":true'*) echo deleted;; *) echo refused;; esac"]
                  timeout: 30s
            """
        try await withTestGateway(config: config) { (gw) async throws in
            let reader = try StreamReader(port: gw.gateway.port, request: Self.post(gw, ["agent_id": "careful", "text": "clean up"]))
            #expect(await reader.read { $0.contains("event: tool_confirm") })
            let confirm = try JSONValue.parse(Array((reader.events.first { $0.event == "tool_confirm" }?.data ?? "").utf8))
            #expect(confirm["tool"] == "delete_files")
            #expect(confirm["args"]?["path"] == "/tmp/x")
            let callID = try #require(confirm["call_id"]?.stringValue)
            #expect(try await gw.request("POST", "/api/v1/chat/confirm", json: ["call_id": .string(callID), "approved": true]).json["ok"] == true)
            #expect(await reader.read { $0.contains("[DONE]") })
            #expect(reader.events.contains { $0.data == "deleted" }, "\(reader.received)")
        }
    }

    @Test("/chat/cancel stops a chat by its session id; the caller gets the refusal, nobody gets a failure notice; unknown or someone else's is 404")
    func cancel() async throws {
        let config = """
            agents:
              - id: slow
                runner: {command: ["/bin/sh", "-c", "sleep 30; echo late"]}
                notify_on_failure: {channel: mobile, to: all}
            """
        try await withTestGateway(config: config) { (gw) async throws in
            try await gw.registerDevice(id: "phone", key: nil)
            async let answer = gw.request("POST", "/api/v1/chat", json: ["agent_id": "slow", "text": "x", "session_id": "s-cancel"])
            let priya = try await gw.mintKey(subject: "priya", role: "operator")
            #expect(await eventually { await gw.gateway.runs.activityRun(sessionID: "s-cancel") != nil })
            #expect(try await gw.request("POST", "/api/v1/chat/cancel", json: ["run_id": "s-cancel"], key: .some(priya)).status == 404, "not hers")
            let deadline = ContinuousClock.now + .seconds(10)
            var cancelled: JSONValue = .null
            while ContinuousClock.now < deadline, cancelled["ok"] != true {
                cancelled = try await gw.request("POST", "/api/v1/chat/cancel", json: ["run_id": "s-cancel"]).json
                if cancelled["ok"] != true { try await Task.sleep(for: .milliseconds(50)) }
            }
            #expect(cancelled["ok"] == true && cancelled["cancelled"]?.stringValue?.hasPrefix("run_") == true, "\(cancelled)")
            let refused = try await answer
            #expect(refused.status == 502 && refused.errorMessage?.contains("the run was cancelled") == true, "\(refused.json)")
            #expect(try await gw.request("POST", "/api/v1/chat/cancel", json: ["run_id": "s-cancel"]).status == 404, "already finished")
            #expect(try await gw.request("GET", "/api/v1/mobile/deliveries?device_id=phone").json["deliveries"] == [], "no failure notice for a cancel")
        }
    }
}
