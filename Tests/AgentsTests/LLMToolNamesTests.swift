import Foundation
import Gateway
import GatewayTestSupport
import HTTPClient
import JSON
import LLM
import Testing

/// Tool names as each provider documents them: OpenAI's `function.name` and Anthropic's tool `name` must match
/// `^[a-zA-Z0-9_-]{1,64}$`; Ollama states no rule. The phone tools are called `mobile.invoke` and so on.
@Suite("LLM tool names", .serialized)
struct LLMToolNamesTests {
    /// `^[a-zA-Z0-9_-]{1,64}$`, as both providers' documentation writes it.
    static func accepted(_ name: String) -> Bool {
        let regex = try! Regex("^[a-zA-Z0-9_-]{1,64}$")
        return (try? regex.wholeMatch(in: name)) != nil
    }

    func awaitValue(timeout: Duration = .seconds(10), _ probe: () async throws -> String?) async throws -> String {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if let value = try await probe() { return value }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw TestFailure("nothing appeared within \(timeout)")
    }

    @Test("a phone agent's first turn: the provider accepts every tool name, the model's call reaches the approval under the gateway's name",
          arguments: ["openai", "anthropic", "ollama"])
    func phoneAgent(provider: String) async throws {
        let llm = try await LLMStandIn.start()
        defer { llm.stop() }
        // The model calls the first tool by the name it was offered, as a real one does.
        try await llm.script([
            ["tool_calls": [["name": "{{tool:0}}", "arguments": ["device_id": "phone", "command": "canvas.present", "params": ["title": "Hi"]]]]],
            ["text": "Shown."],
        ])
        let file = LLMRunnerTests.agent("phone", provider: provider, extra: "builtins: [mobile.invoke, mobile.list_nodes, mobile.command_status]\nconfirm_tools: [mobile.invoke]")
        try await withTestGateway(config: file, environment: llm.environment) { (gw) async throws in
            _ = try await gw.request("POST", "/api/v1/mobile/nodes/register", json: ["device_id": "phone", "capabilities": ["canvas.present"]])
            async let answer = gw.request("POST", "/api/v1/chat", json: ["agent_id": "phone", "text": "show me a card"])
            let callID = try await awaitValue { try await gw.request("GET", "/api/v1/approvals").json["approvals"]?[0]?["call_id"]?.stringValue }
            let pending = try await gw.request("GET", "/api/v1/approvals").json["approvals"]?[0]
            #expect(pending?["tool"] == "mobile.invoke", "the approval names the gateway's tool: \(pending ?? .null)")
            #expect(try await gw.request("POST", "/api/v1/approvals/\(callID)/approve").status == 200)
            let reply = try await answer
            #expect(reply.status == 200 && reply.json["reply"] == "Shown.", "\(reply.json)")

            let requests = try await llm.requests()
            #expect(requests.count == 2)
            for request in requests { #expect(request["violations"] == [], "the provider would refuse: \(request["violations"] ?? .null)") }
            let first = try #require(requests.first?["body"])
            let offered = first["tools"]?.arrayValue?.compactMap { $0["function"]?["name"]?.stringValue ?? $0["name"]?.stringValue } ?? []
            #expect(offered.count == 3 && Set(offered).count == 3, "\(offered)")
            if provider == "ollama" {
                #expect(offered == ["mobile.invoke", "mobile.list_nodes", "mobile.command_status"])
            } else {
                #expect(offered.allSatisfy(Self.accepted), "\(offered)")
            }
            // The next turn's history names the call as the provider was told it, the same as in the first request.
            let history = try #require(requests.last?["body"]?["messages"]?.arrayValue)
            let called: String?
            switch provider {
            case "anthropic":
                called = history.compactMap { $0["content"]?.arrayValue?.first { $0["type"] == "tool_use" }?["name"]?.stringValue }.first
            default:
                called = history.compactMap { $0["tool_calls"]?[0]?["function"]?["name"]?.stringValue }.first
            }
            #expect(called == offered.first, "\(history)")
            let secondOffered = requests.last?["body"]?["tools"]?.arrayValue?.compactMap { $0["function"]?["name"]?.stringValue ?? $0["name"]?.stringValue }
            #expect(secondOffered == offered)
            #expect(try await gw.request("GET", "/api/v1/mobile/nodes/phone/commands").json["commands"]?.arrayValue?.count == 1)
        }
    }

    @Test("the stand-in refuses what OpenAI refuses, in OpenAI's error shape")
    func standInRefusesDottedNames() async throws {
        let llm = try await LLMStandIn.start()
        defer { llm.stop() }
        // Straight to the wire, past the mapping: a dotted name is a 400 naming the parameter.
        let body: JSONValue = ["model": "m", "messages": [["role": "user", "content": "hi"]],
                               "tools": [["type": "function", "function": ["name": "mobile.invoke", "description": "d", "parameters": ["type": "object"]]]]]
        let http = HTTP2Client(configuration: .init(caFile: llm.caFile))
        let answer = try await http.send(ClientRequest(url: llm.baseURL + "/v1/chat/completions",
                                                       headers: [("authorization", "Bearer \(LLMStandIn.openAIKey)"), ("content-type", "application/json")],
                                                       body: body.serializedBytes()))
        let json = try JSONValue.parse(answer.body)
        #expect(answer.status == 400)
        #expect(json["error"]?["param"] == "tools[0].function.name" && json["error"]?["type"] == "invalid_request_error", "\(json)")
        #expect(json["error"]?["message"]?.stringValue?.hasPrefix("Invalid 'tools[0].function.name': string does not match pattern") == true)
    }

    @Test("names are mapped one-to-one, the same in every request, and back")
    func mapping() {
        let long = String(repeating: "x", count: 70)
        let names = ["mobile.invoke", "mobile_invoke", "mobile-invoke", "mobile invoke", "mobile.invöke", long + ".a", long + ".b", "web_search"]
        let map = ToolNameMap(pattern: .openAI, names: names)
        let wire = names.map(map.wire)
        #expect(Set(wire).count == names.count, "\(wire)")
        #expect(wire.allSatisfy(Self.accepted), "\(wire)")
        // Names the provider accepts go as they are.
        #expect(map.wire("mobile_invoke") == "mobile_invoke" && map.wire("mobile-invoke") == "mobile-invoke" && map.wire("web_search") == "web_search")
        for name in names { #expect(map.original(map.wire(name)) == name) }
        // Another request of the conversation (fewer tools, say the final tool-less turn) maps each name the same way.
        let later = ToolNameMap(pattern: .openAI, names: ["mobile.invoke"])
        #expect(later.wire("mobile.invoke") == map.wire("mobile.invoke"))
        #expect(ToolNameMap(pattern: .anthropic, names: names).wire("mobile.invoke") == map.wire("mobile.invoke"))
        // A name the model made up comes back as it is, and finds no tool.
        #expect(map.original("made_up") == "made_up")
        // No documented rule (Ollama): every name unchanged.
        let ollama = ToolNameMap(pattern: nil, names: names)
        #expect(names.allSatisfy { ollama.wire($0) == $0 && ollama.original($0) == $0 })
    }
}
