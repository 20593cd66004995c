import ChannelAPI
import ChannelTesting
import Foundation
import Gateway
import GatewayTestSupport
import APIKit
import LLM
import Synchronization
import Testing

/// Soulacy agents that are prompts, run against a stand-in that speaks OpenAI's, Ollama's and Anthropic's wire
/// formats and checks every request against their documentation.
@Suite("LLM runner", .serialized)
struct LLMRunnerTests {
    static func date(_ iso: String) -> Date { try! Date(iso, strategy: .iso8601) }

    func chat(_ gw: TestGateway, _ agent: String, _ text: String) async throws -> TestResponse {
        try await gw.request("POST", "/api/v1/chat", json: ["agent_id": .string(agent), "text": .string(text)])
    }

    /// Polls until `probe` finds something (an approval's call id, a command id) and returns it.
    func awaitValue(timeout: Duration = .seconds(10), _ probe: () async throws -> String?) async throws -> String {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if let value = try await probe() { return value }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw TestFailure("nothing appeared within \(timeout)")
    }

    func lastRequest(_ llm: LLMStandIn) async throws -> JSONValue {
        let all = try await llm.requests()
        for request in all { #expect(request["violations"] == [], "the provider would refuse: \(request["violations"] ?? .null)") }
        return try #require(all.last)
    }

    static func agent(_ id: String, provider: String, model: String = "test-model", extra: String = "") -> String {
        """
        id: \(id)
        name: \(id.capitalized)
        enabled: true
        trigger: channel
        channels: [http]
        system_prompt: You answer briefly.
        identity:
          role: a test assistant
        non_negotiables:
          must: [answer in English]
        llm:
          provider: \(provider)
          model: \(model)
          temperature: 0.3
          max_tokens: 256
        \(extra)
        """
    }

    @Test("each provider gets its documented request (auth, model, messages, options) and its reply becomes the answer",
          arguments: ["openai", "ollama", "anthropic"])
    func providers(provider: String) async throws {
        let llm = try await LLMStandIn.start()
        defer { llm.stop() }
        try await llm.script([["text": .string("Hello from \(provider)")]])
        try await withTestGateway(config: Self.agent("helper", provider: provider), environment: llm.environment) { (gw) async throws in
            _ = try await gw.request("POST", "/api/v1/memory/facts", json: ["text": "I start work at 9"])
            let answer = try await chat(gw, "helper", "When do I start?")
            #expect(answer.status == 200, "\(answer.json)")
            #expect(answer.json["reply"] == .string("Hello from \(provider)"))
            let request = try await lastRequest(llm)
            let body = try #require(request["body"])
            #expect(body["model"] == "test-model")
            let system: String
            switch provider {
            case "openai":
                #expect(request["headers"]?["authorization"] == .string("Bearer \(LLMStandIn.openAIKey)"))
                #expect(body["temperature"] == 0.3 && body["max_tokens"] == 256 && body["stream"] == false)
                system = body["messages"]?[0]?["content"]?.stringValue ?? ""
                #expect(body["messages"]?[1] == ["role": "user", "content": "When do I start?"])
            case "ollama":
                #expect(body["options"]?["temperature"] == 0.3 && body["options"]?["num_predict"] == 256 && body["stream"] == false)
                system = body["messages"]?[0]?["content"]?.stringValue ?? ""
            default:
                #expect(request["headers"]?["x-api-key"] == .string(LLMStandIn.anthropicKey) && request["headers"]?["anthropic-version"] == "2023-06-01")
                #expect(body["max_tokens"] == 256 && body["temperature"] == 0.3)
                system = body["system"]?.stringValue ?? ""
                #expect(body["messages"] == [["role": "user", "content": "When do I start?"]])
            }
            // Persona first, then the prompt, then the person's facts.
            #expect(system.hasPrefix("## Identity\nYou are a test assistant."), "\(system)")
            #expect(system.contains("- MUST: answer in English") && system.contains("---\n\nYou answer briefly."))
            #expect(system.hasSuffix("### 🧠 MEMORY & PREFERENCES\n- I start work at 9"), "\(system)")
        }
    }

    @Test("the tool loop: only the builtins the file names are offered; results go back in each provider's shape",
          arguments: ["openai", "ollama", "anthropic"])
    func toolLoop(provider: String) async throws {
        let llm = try await LLMStandIn.start()
        defer { llm.stop() }
        try await llm.script([["tool_calls": [["name": "{{tool:0}}", "arguments": [:]]]], ["text": "You have one phone."]])
        let file = Self.agent("nodes", provider: provider, extra: "builtins: [mobile.list_nodes, web_search]")
        try await withTestGateway(config: file, environment: llm.environment) { (gw) async throws in
            _ = try await gw.request("POST", "/api/v1/mobile/nodes/register", json: ["device_id": "phone", "name": "Ana's iPhone", "platform": "ios",
                                                                                  "model": "iPhone16,1", "capabilities": ["canvas.present", "focus.status"]])
            let answer = try await chat(gw, "nodes", "Which phones do I have?")
            #expect(answer.json["reply"] == "You have one phone.", "\(answer.json)")
            let requests = try await llm.requests()
            #expect(requests.count == 2 && requests.allSatisfy { $0["violations"] == [] }, "\(requests.map { $0["violations"] ?? .null })")
            let first = try #require(requests.first?["body"])
            let offered = first["tools"]?.arrayValue?.compactMap { $0["function"]?["name"]?.stringValue ?? $0["name"]?.stringValue } ?? []
            // web_search is not run here, so it is not offered; OpenAI and Anthropic get a name their pattern allows.
            if provider == "ollama" {
                #expect(offered == ["mobile.list_nodes"])
            } else {
                #expect(offered.count == 1 && offered[0] != "mobile.list_nodes" && LLMToolNamesTests.accepted(offered[0]), "\(offered)")
            }
            let second = try #require(requests.last?["body"]?["messages"]?.arrayValue)
            let resultText: String?
            switch provider {
            case "anthropic": resultText = second.last?["content"]?[0]?["content"]?.stringValue
            default: resultText = second.last?["content"]?.stringValue
            }
            let nodes = try JSONValue.parse(Array((resultText ?? "").utf8))
            #expect(nodes[0]?["device_id"] == "phone" && nodes[0]?["capabilities"] == ["canvas.present", "focus.status"] && nodes[0]?["platform"] == "ios")
            #expect(nodes[0]?["foreground_only"] == true && nodes[0]?["model"] == "iPhone16,1")
        }
    }

    @Test("provider failures, timeouts, missing providers and refusals end the run with a clear error; keys stay out")
    func failures() async throws {
        let llm = try await LLMStandIn.start()
        defer { llm.stop() }
        let files = [
            Self.agent("flaky", provider: "openai", extra: "notify_on_failure: {channel: mobile, to: all}"),
            Self.agent("slow", provider: "ollama", extra: "run_timeout: 1s"),
            Self.agent("nokey", provider: "groq"),
        ]
        let dir = TestGateway.makeTemporaryDirectory() + "/agents"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        for (i, file) in files.enumerated() { try file.write(toFile: "\(dir)/\(i).yaml", atomically: true, encoding: .utf8) }
        try await withTestGateway(agents: dir, environment: llm.environment) { (gw) async throws in
            try await gw.registerDevice(id: "phone", key: nil)
            // A 500 is tried again (4 attempts in all); the last one's answer is the run's error.
            try await llm.script([["status": 500, "error": "the model is overloaded", "retry_after_ms": 10, "repeat": 4]])
            let flaky = try await gw.runAgent("flaky", input: "hi")
            #expect(flaky["status"] == "failed" && flaky["error"] == "openai answered 500: the model is overloaded (after 4 attempts)", "\(flaky)")
            let notice = try await gw.request("GET", "/api/v1/mobile/deliveries?device_id=phone").json["deliveries"]?[0]?["body"]?.stringValue ?? ""
            #expect(notice.contains("Soulacy agent flaky failed at") && notice.contains("openai answered 500"))

            try await llm.script([["text": "too late", "delay_ms": 3000]])
            let slow = try await gw.runAgent("slow", input: "hi")
            #expect(slow["status"] == "failed" && slow["error"]?.stringValue?.contains("timeout of 1s") == true, "\(slow)")

            try await llm.script([["refusal": "I can't help with that."]])
            let refused = try await gw.runAgent("flaky", input: "something forbidden")
            #expect(refused["status"] == "failed" && refused["error"] == "openai refused: I can't help with that.", "\(refused)")

            let nokey = try await gw.runAgent("nokey", input: "hi")
            #expect(nokey["error"]?.stringValue?.hasPrefix("no LLM provider 'groq' is configured on this gateway; set SOULACY_LLM_GROQ_BASE_URL") == true, "\(nokey)")
            for run in [flaky, slow, refused, nokey] {
                #expect(!run.serialized().contains(LLMStandIn.openAIKey) && !run.serialized().contains(LLMStandIn.anthropicKey))
            }
        }
        // allowed_providers is checked when the file loads: the agent is parked with the reason.
        var loader = SoulConfigLoader(file: "guard.yaml", destinations: Gateway.destinationValidators, environment: [:])
        let parked = loader.parse(text: "id: guard\nenabled: true\nllm: {provider: anthropic, allowed_providers: [ollama]}\n")?.first
        #expect(parked?.isOn == false && parked?.disabledReason?.contains("not in allowed_providers (ollama)") == true)
    }

    @Test("end to end: a real-shaped Soulacy file fires on the clock, asks the phone for approval, presents a card, waits for the form, and delivers the reply")
    func endToEnd() async throws {
        let llm = try await LLMStandIn.start()
        defer { llm.stop() }
        let card: JSONValue = ["title": "Check-in", "components": [["type": "form", "id": "mood", "fields": [["name": "feeling", "label": "How are you?", "kind": "text"]], "submit": "Send"]]]
        try await llm.script([
            ["tool_calls": [["name": "{{tool:1}}", "arguments": ["device_id": "phone", "command": "canvas.present", "params": card, "expires_in_seconds": 300]]]],
            ["tool_calls": [["name": "{{tool:2}}", "arguments": ["device_id": "phone", "command_id": "{{result:id}}", "wait_seconds": 20]]]],
            ["text": "Noted: you feel rested."],
        ])
        let file = """
            id: checkin
            name: Evening check-in
            enabled: true
            trigger: cron
            schedule:
              cron: "0 20 * * *"
              timezone: UTC
              output: {channel: mobile, to: all}
            system_prompt: Ask how the day went with a card, then summarise.
            llm: {provider: openai, model: gpt-test}
            builtins: [mobile.list_nodes, mobile.invoke, mobile.command_status]
            confirm_tools: [mobile.invoke]
            max_turns: 5
            """
        let clock = ManualClock(Self.date("2026-03-10T19:59:30Z"))
        let recorder = RecordingTransport()
        try await withTestGateway(config: file, clock: clock, environment: llm.environment, transports: [recorder]) { (gw) async throws in
            _ = try await gw.request("POST", "/api/v1/mobile/devices", json: ["id": "phone", "platform": "ios", "push_token": .string(String(repeating: "ab", count: 32)), "notifications_enabled": true])
            _ = try await gw.request("POST", "/api/v1/mobile/nodes/register", json: ["device_id": "phone", "platform": "ios", "capabilities": ["canvas.present"]])
            #expect(try await gw.request("GET", "/api/v1/mobile/devices").status == 200)
            #expect(await eventually { clock.sleeperCount > 0 })
            clock.advance(to: Self.date("2026-03-10T20:00:00Z"))
            // The run pauses on the approvals broker before mobile.invoke runs; the phone is woken to decide.
            let callID = try await awaitValue { try await gw.request("GET", "/api/v1/approvals").json["approvals"]?[0]?["call_id"]?.stringValue }
            let pending = try await gw.request("GET", "/api/v1/approvals").json["approvals"]?[0]
            #expect(pending?["tool"] == "mobile.invoke" && pending?["agent_id"] == "checkin")
            let before = try await gw.request("GET", "/api/v1/mobile/nodes/phone/commands")
            #expect(before.json["commands"] == [], "nothing is sent before the yes: \(before.status) \(before.json)")
            #expect(try await gw.request("POST", "/api/v1/approvals/\(callID)/approve").status == 200)
            // The card reaches the phone; the person answers the form. The phone, as the original app does: poll, claim, answer.
            let commandID = try await awaitValue { try await gw.request("GET", "/api/v1/mobile/nodes/phone/commands").json["commands"]?[0]?["id"]?.stringValue }
            #expect(try await gw.request("POST", "/api/v1/mobile/nodes/phone/commands/\(commandID)/claim").json["status"] == "running")
            let answered = try await gw.request("POST", "/api/v1/mobile/nodes/phone/commands/\(commandID)/result",
                                                json: ["status": "completed", "result": ["presented": true, "submitted": true, "form_id": "mood", "answers": ["feeling": "rested"]]])
            #expect(answered.status == 200 && answered.json["status"] == "completed")
            #expect(try await eventually(timeout: .seconds(15)) {
                try await gw.request("GET", "/api/v1/mobile/deliveries?device_id=phone").json["deliveries"]?.arrayValue?.count == 1
            })
            let line = try await gw.request("GET", "/api/v1/mobile/deliveries?device_id=phone").json["deliveries"]?[0]
            #expect(line?["body"] == "Noted: you feel rested." && line?["metadata"]?["trigger"] == "cron")
            // The model saw the phone's answer; every request was well-formed.
            let requests = try await llm.requests()
            #expect(requests.count == 3 && requests.allSatisfy { $0["violations"] == [] })
            #expect(requests[0]["body"]?["messages"]?[1]?["content"] == "__trigger:cron__")
            let status = try JSONValue.parse(Array((requests[2]["body"]?["messages"]?.arrayValue?.last?["content"]?.stringValue ?? "").utf8))
            #expect(status["status"] == "completed" && status["result"]?["answers"] == ["feeling": "rested"], "\(status)")
            // Wake-ups: the approval, the command, the reply; none carries the reply's text. The reply's goes out
            // after its line is stored (the dispatcher is told at the commit), so it may come just after the read.
            #expect(await eventually { recorder.sent.count >= 3 }, "wake-ups sent: \(recorder.sent.count)")
            #expect(!recorder.sent.contains { "\($0.signal)".contains("rested") })
        }
    }

    @Test("a denied tool call goes back to the model as the original's error, and the run carries on")
    func denied() async throws {
        let llm = try await LLMStandIn.start()
        defer { llm.stop() }
        try await llm.script([
            ["tool_calls": [["name": "mobile.invoke", "arguments": ["device_id": "phone", "command": "canvas.present", "params": ["title": "x"]]]]],
            ["text": "Understood, I will not show it."],
        ])
        let file = Self.agent("asker", provider: "ollama", extra: "builtins: [mobile.invoke]\nconfirm_tools: [mobile.invoke]")
        try await withTestGateway(config: file, environment: llm.environment) { (gw) async throws in
            _ = try await gw.request("POST", "/api/v1/mobile/nodes/register", json: ["device_id": "phone", "capabilities": ["canvas.present"]])
            async let answer = chat(gw, "asker", "show me a card")
            let callID = try await awaitValue { try await gw.request("GET", "/api/v1/approvals").json["approvals"]?[0]?["call_id"]?.stringValue }
            #expect(try await gw.request("POST", "/api/v1/approvals/\(callID)/deny").status == 200)
            #expect(try await answer.json["reply"] == "Understood, I will not show it.")
            let last = try await llm.requests().last?["body"]?["messages"]?.arrayValue?.last
            #expect(last?["role"] == "tool" && last?["content"] == "error: tool \"mobile.invoke\" was denied by the user" && last?["tool_name"] == "mobile.invoke")
            #expect(try await gw.request("GET", "/api/v1/mobile/nodes/phone/commands").json["commands"] == [])
        }
    }

    @Test("a model's wait_seconds of 1e300 is clamped to the tool's 25 s, not a trap; the tool answers and the run goes on")
    func hugeToolNumber() async throws {
        let llm = try await LLMStandIn.start()
        defer { llm.stop() }
        try await llm.script([
            ["tool_calls": [["name": "mobile.command_status", "arguments": ["device_id": "phone", "command_id": "cmd_none", "wait_seconds": 1e300]]]],
            ["text": "No such command."],
        ])
        let file = Self.agent("status", provider: "ollama", extra: "builtins: [mobile.command_status]")
        try await withTestGateway(config: file, environment: llm.environment) { (gw) async throws in
            #expect(try await chat(gw, "status", "is it done?").json["reply"] == "No such command.")
            let last = try await llm.requests().last?["body"]?["messages"]?.arrayValue?.last
            #expect(last?["role"] == "tool" && last?["content"]?.stringValue?.hasPrefix("error:") == true, "\(String(describing: last))")
        }
    }

    @Test("streaming: each provider's stream arrives piece by piece and adds up to the reply", arguments: ["openai", "ollama", "anthropic"])
    func streaming(provider: String) async throws {
        let llm = try await LLMStandIn.start()
        defer { llm.stop() }
        let text = "Streaming works across many small pieces."
        try await llm.script([["text": .string(text)]])
        var loader = SoulConfigLoader(file: "s.yaml", destinations: Gateway.destinationValidators, environment: [:])
        let agent = try #require(loader.parse(text: Self.agent("streamer", provider: provider))?.first)
        let runner = LLMRunner(agent: agent, providers: LLMProviders(environment: llm.environment))
        let pieces = Mutex<[String]>([])
        var request = RunRequest(agentID: agent.id, runID: "run_1", sessionID: "ses_1", input: "hi", trigger: .chat, timeout: .seconds(10))
        request.onText = { piece in pieces.withLock { $0.append(piece) } }
        let result = try await runner.run(request)
        let received = pieces.withLock { $0 }
        #expect(result.reply == text)
        #expect(received.count > 5 && received.joined() == text, "\(received)")
        let sent = try await lastRequest(llm)
        #expect(sent["body"]?["stream"] == true)
    }

    @Test("real Soulacy files run unchanged against the stand-in: a cron briefing, a persona chat agent, the phone brief with its three tools")
    func realFiles() async throws {
        let llm = try await LLMStandIn.start()
        defer { llm.stop() }
        let samples = RepositoryPaths.root + "/Tests/Fixtures/soulacy-agents"
        try await withTestGateway(agents: samples, environment: llm.environment) { (gw) async throws in
            // daily-briefing: cron, Ollama, Python tools that are not run here and so not offered.
            try await llm.script([["text": "Sunny, 25 minutes to work."]])
            let briefing = try await gw.runAgent("daily-briefing", input: "")
            #expect(briefing["status"] == "succeeded", "\(briefing)")
            var request = try await lastRequest(llm)
            #expect(request["api"] == "ollama" && request["body"]?["model"] == "gemma4:latest" && request["body"]?["tools"] == nil)
            #expect(request["body"]?["options"]?["num_predict"] == 8152 && request["body"]?["messages"]?[1]?["content"] == "__trigger:manual__")

            // persona-demo: the persona blocks come first in the system message.
            try await llm.script([["text": "Hello."]])
            #expect(try await chat(gw, "persona-demo", "hi").json["reply"] == "Hello.")
            request = try await lastRequest(llm)
            let system = request["body"]?["messages"]?[0]?["content"]?.stringValue ?? ""
            #expect(system.hasPrefix("## Identity\n") && system.contains("## Hard rules (non-negotiable)"), "\(system.prefix(300))")

            // phone-brief: exactly the three phone tools, under the default provider.
            try await llm.script([["text": "No phone yet."]])
            #expect(try await chat(gw, "phone-brief-template", "brief me").json["reply"] == "No phone yet.")
            request = try await lastRequest(llm)
            let tools = request["body"]?["tools"]?.arrayValue?.compactMap { $0["function"]?["name"]?.stringValue } ?? []
            #expect(tools == ["mobile.list_nodes", "mobile.invoke", "mobile.command_status"] && request["api"] == "ollama")

            // A disabled template is listed as such and refuses to run.
            let refused = try await gw.request("POST", "/api/v1/agents/stock-screener-template/run", json: [:])
            #expect(refused.status == 409)
        }
    }
}
