import Foundation
import HTTPClient
import JSON

/// Sends one JSON request and reads the JSON answer; provider errors become `LLMError` with the provider's own message.
struct JSONPost: Sendable {
    let client: ProviderConnection
    let providerID: String

    func send(url: String, headers: [(String, String)], body: JSONValue, timeout: Duration) async throws(LLMError) -> JSONValue {
        let response = try await post(url: url, headers: headers, body: body, timeout: timeout, onBody: nil)
        guard let json = parseJSON(response.body) else { throw LLMError(.malformed, "\(providerID) answered with something that is not JSON") }
        return json
    }

    /// One POST with a JSON body: a transport failure or a non-2xx answer becomes the `LLMError` a run reports,
    /// with the provider's own message. `onBody`, when given, gets the body as it arrives (streaming).
    func post(url: String, headers: [(String, String)], body: JSONValue, timeout: Duration,
              onBody: (@Sendable ([UInt8]) -> Void)?) async throws(LLMError) -> ClientResponse {
        let request = ClientRequest(method: "POST", url: url, headers: headers + [("content-type", "application/json")],
                                    body: body.serializedBytes(), timeout: timeout)
        let response: ClientResponse
        do {
            if let onBody { response = try await client.http.send(request, onBody: onBody) } else { response = try await client.http.send(request) }
        } catch {
            if error.description.lowercased().contains("timeout") || error.description.lowercased().contains("timed out") {
                throw LLMError(.timedOut, "\(providerID) did not answer within \(timeout)")
            }
            throw LLMError(.unreachable, "could not reach \(providerID) at \(Self.origin(url)): \(error.description)")
        }
        guard (200..<300).contains(response.status) else {
            let detail = parseJSON(response.body).flatMap(Self.errorMessage) ?? String(decoding: response.body.prefix(300), as: UTF8.self)
            throw LLMError(.rejected, "\(providerID) answered \(response.status): \(detail)")
        }
        return response
    }

    /// `{error: {message}}` (OpenAI, Anthropic) or `{error: "…"}` (Ollama).
    static func errorMessage(_ json: JSONValue) -> String? {
        if let text = json["error"]?.stringValue { return text }
        return json["error"]?["message"]?.stringValue
    }

    /// Scheme, host and port only: a URL can carry credentials and paths nobody needs in an error.
    static func origin(_ url: String) -> String {
        guard let components = URLComponents(string: url), let host = components.host else { return "the configured address" }
        return "\(components.scheme ?? "http")://\(host)\(components.port.map { ":\($0)" } ?? "")"
    }
}

/// Arguments as providers send them: OpenAI a JSON string, Ollama and Anthropic an object.
func argumentsObject(_ value: JSONValue?) -> JSONValue {
    switch value {
    case .string(let text): return parseJSON(text) ?? .object([:])
    case .object: return value!
    default: return .object([:])
    }
}

/// Any OpenAI-compatible chat-completions endpoint: OpenAI, vLLM, llama.cpp, LM Studio, Groq, OpenRouter, …
public struct OpenAICompatibleProvider: ChatProvider {
    public let id: String
    public let baseURL: String
    public let defaultModel: String
    let apiKey: String?
    let post: JSONPost

    public init(id: String, baseURL: String, apiKey: String?, defaultModel: String, client: ProviderConnection) {
        self.id = id
        self.baseURL = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
        self.apiKey = apiKey
        self.defaultModel = defaultModel
        post = JSONPost(client: client, providerID: id)
    }

    public func body(_ request: ChatRequest) -> JSONValue {
        var messages: [JSONValue] = []
        for m in request.messages {
            var message: [String: JSONValue] = ["role": .string(m.role.rawValue), "content": .string(m.content)]
            if !m.toolCalls.isEmpty {
                message["tool_calls"] = .array(m.toolCalls.map { call in
                    ["id": .string(call.id), "type": "function",
                     "function": ["name": .string(call.name), "arguments": .string(call.arguments.serialized())]]
                })
            }
            if m.role == .tool {
                message["tool_call_id"] = .string(m.toolCallID ?? "")
                message["name"] = .string(m.toolName ?? "")
            }
            messages.append(.object(message))
        }
        var body: [String: JSONValue] = ["model": .string(request.model), "messages": .array(messages), "stream": false,
                                         "temperature": .number(request.temperature ?? 0)]
        if let topP = request.topP { body["top_p"] = .number(topP) }
        if request.maxTokens > 0 { body["max_tokens"] = .number(Double(request.maxTokens)) }
        if !request.tools.isEmpty {
            body["tools"] = .array(request.tools.map { tool in
                ["type": "function", "function": ["name": .string(tool.name), "description": .string(tool.description), "parameters": tool.parameters]]
            })
            if let choice = request.toolChoice {
                body["tool_choice"] = ["auto", "none", "required"].contains(choice) ? .string(choice) : ["type": "function", "function": ["name": .string(choice)]]
            }
        }
        return .object(body)
    }

    public func complete(_ request: ChatRequest) async throws(LLMError) -> ChatReply {
        var headers: [(String, String)] = []
        if let apiKey, !apiKey.isEmpty { headers.append(("authorization", "Bearer \(apiKey)")) }
        let json = try await post.send(url: baseURL + "/chat/completions", headers: headers, body: body(request), timeout: request.timeout)
        guard let choice = json["choices"]?.arrayValue?.first, let message = choice["message"] else {
            throw LLMError(.malformed, "\(id) answered without choices[0].message")
        }
        if let refusal = message["refusal"]?.stringValue, !refusal.isEmpty { throw LLMError(.refused, "\(id) refused: \(refusal)") }
        let calls = (message["tool_calls"]?.arrayValue ?? []).enumerated().compactMap { index, call -> ToolCall? in
            guard let name = call["function"]?["name"]?.stringValue else { return nil }
            return ToolCall(id: call["id"]?.stringValue ?? "call_\(index)", name: name, arguments: argumentsObject(call["function"]?["arguments"]))
        }
        return ChatReply(text: message["content"]?.stringValue ?? "", toolCalls: calls, finishReason: choice["finish_reason"]?.stringValue)
    }
}

/// Ollama's native chat API.
public struct OllamaProvider: ChatProvider {
    public let id = "ollama"
    public let baseURL: String
    public let defaultModel: String
    let apiKey: String?
    let post: JSONPost

    public init(baseURL: String, defaultModel: String, apiKey: String? = nil, client: ProviderConnection) {
        self.baseURL = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
        self.defaultModel = defaultModel
        self.apiKey = apiKey
        post = JSONPost(client: client, providerID: "ollama")
    }

    public func body(_ request: ChatRequest) -> JSONValue {
        let messages: [JSONValue] = request.messages.map { m in
            var message: [String: JSONValue] = ["role": .string(m.role.rawValue), "content": .string(m.content)]
            if !m.toolCalls.isEmpty {
                message["tool_calls"] = .array(m.toolCalls.map { ["function": ["name": .string($0.name), "arguments": $0.arguments]] })
            }
            if m.role == .tool { message["tool_name"] = .string(m.toolName ?? "") }
            return .object(message)
        }
        var options: [String: JSONValue] = ["temperature": .number(request.temperature ?? 0), "num_ctx": 16384, "num_batch": 128]
        if let topP = request.topP { options["top_p"] = .number(topP) }
        if request.maxTokens > 0 { options["num_predict"] = .number(Double(request.maxTokens)) }
        var body: [String: JSONValue] = ["model": .string(request.model), "messages": .array(messages), "stream": false,
                                         "keep_alive": "30m", "options": .object(options)]
        if !request.tools.isEmpty {
            body["tools"] = .array(request.tools.map { ["type": "function", "function": ["name": .string($0.name), "description": .string($0.description), "parameters": $0.parameters]] })
        }
        return .object(body)
    }

    /// What to tell a person whose Ollama does not answer.
    var notRunningHint: String { "; is Ollama running there? Start it with `ollama serve` (and `ollama pull <model>`), or set OLLAMA_HOST or another provider" }

    /// The models this Ollama has pulled (`GET /api/tags`), to say at start what is missing.
    public func installedModels(timeout: Duration = .seconds(3)) async throws(LLMError) -> [String] {
        let request = ClientRequest(method: "GET", url: baseURL + "/api/tags", timeout: timeout)
        let response: ClientResponse
        do { response = try await post.client.http.send(request) } catch {
            throw LLMError(.unreachable, "could not reach ollama at \(JSONPost.origin(baseURL)): \(error.description)" + notRunningHint)
        }
        guard response.status == 200, let json = parseJSON(response.body) else {
            throw LLMError(.rejected, "ollama at \(JSONPost.origin(baseURL)) answered \(response.status) to /api/tags")
        }
        return json["models"]?.arrayValue?.compactMap { $0["name"]?.stringValue } ?? []
    }

    public func complete(_ request: ChatRequest) async throws(LLMError) -> ChatReply {
        var headers: [(String, String)] = []
        if let apiKey, !apiKey.isEmpty { headers.append(("authorization", "Bearer \(apiKey)")) }
        let json: JSONValue
        do {
            json = try await post.send(url: baseURL + "/api/chat", headers: headers, body: body(request), timeout: request.timeout)
        } catch where error.kind == .unreachable {
            throw LLMError(.unreachable, error.message + notRunningHint)
        }
        guard let message = json["message"] else { throw LLMError(.malformed, "ollama answered without a message") }
        let calls = (message["tool_calls"]?.arrayValue ?? []).enumerated().compactMap { index, call -> ToolCall? in
            guard let name = call["function"]?["name"]?.stringValue else { return nil }
            return ToolCall(id: call["id"]?.stringValue ?? "call_\(index)", name: name, arguments: argumentsObject(call["function"]?["arguments"]))
        }
        return ChatReply(text: message["content"]?.stringValue ?? "", toolCalls: calls, finishReason: json["done_reason"]?.stringValue)
    }
}

/// Anthropic's Messages API.
public struct AnthropicProvider: ChatProvider {
    public let id = "anthropic"
    public static let version = "2023-06-01"
    public static let defaultMaxTokens = 4096
    public let baseURL: String
    public let defaultModel: String
    let apiKey: String
    let post: JSONPost

    public init(baseURL: String, apiKey: String, defaultModel: String, client: ProviderConnection) {
        self.baseURL = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
        self.apiKey = apiKey
        self.defaultModel = defaultModel
        post = JSONPost(client: client, providerID: "anthropic")
    }

    /// Tool names as Anthropic accepts them: `[A-Za-z0-9_-]`, at most 128 characters, collisions numbered.
    public static func wireNames(_ names: [String]) -> [String: String] {
        var result: [String: String] = [:]
        var used: Set<String> = []
        for name in names {
            let safe = String(String(name.unicodeScalars.map { ch -> Character in
                (("a"..."z").contains(ch) || ("A"..."Z").contains(ch) || ("0"..."9").contains(ch) || ch == "_" || ch == "-")
                    ? Character(ch) : "_"
            }).prefix(128))
            var candidate = safe
            var n = 2
            while used.contains(candidate) {
                let suffix = "_\(n)"
                candidate = String(safe.prefix(128 - suffix.count)) + suffix
                n += 1
            }
            used.insert(candidate)
            result[name] = candidate
        }
        return result
    }

    public func body(_ request: ChatRequest) -> JSONValue {
        let names = Self.wireNames(request.tools.map(\.name))
        let system = request.messages.filter { $0.role == .system }.map(\.content).joined(separator: "\n\n")
        var messages: [JSONValue] = []
        for m in request.messages where m.role != .system {
            switch m.role {
            case .assistant:
                var blocks: [JSONValue] = []
                if !m.content.isEmpty { blocks.append(["type": "text", "text": .string(m.content)]) }
                for call in m.toolCalls {
                    blocks.append(["type": "tool_use", "id": .string(call.id), "name": .string(names[call.name] ?? call.name), "input": call.arguments])
                }
                messages.append(["role": "assistant", "content": .array(blocks)])
            case .tool:
                let block: JSONValue = ["type": "tool_result", "tool_use_id": .string(m.toolCallID ?? ""), "content": .string(m.content)]
                // Consecutive tool results go in one user turn, as the API requires.
                if case .object(var last)? = messages.last, last["role"] == "user", case .array(var blocks)? = last["content"],
                   blocks.first?["type"] == "tool_result" {
                    blocks.append(block)
                    last["content"] = .array(blocks)
                    messages[messages.count - 1] = .object(last)
                } else {
                    messages.append(["role": "user", "content": [block]])
                }
            default:
                messages.append(["role": "user", "content": .string(m.content)])
            }
        }
        var body: [String: JSONValue] = ["model": .string(request.model), "messages": .array(messages),
                                         "max_tokens": .number(Double(request.maxTokens > 0 ? request.maxTokens : Self.defaultMaxTokens))]
        if !system.isEmpty { body["system"] = .string(system) }
        if let t = request.temperature, t > 0 { body["temperature"] = .number(t) }
        if let topP = request.topP { body["top_p"] = .number(topP) }
        if !request.tools.isEmpty {
            body["tools"] = .array(request.tools.map { ["name": .string(names[$0.name]!), "description": .string($0.description), "input_schema": $0.parameters] })
            switch request.toolChoice {
            case "required"?: body["tool_choice"] = ["type": "any"]
            case "auto"?: body["tool_choice"] = ["type": "auto"]
            case nil, "none"?, ""?: break
            case let name?: body["tool_choice"] = ["type": "tool", "name": .string(names[name] ?? name)]
            }
        }
        return .object(body)
    }

    public func complete(_ request: ChatRequest) async throws(LLMError) -> ChatReply {
        let headers = [("x-api-key", apiKey), ("anthropic-version", Self.version)]
        let json = try await post.send(url: baseURL + "/v1/messages", headers: headers, body: body(request), timeout: request.timeout)
        guard let blocks = json["content"]?.arrayValue else { throw LLMError(.malformed, "anthropic answered without content") }
        if json["stop_reason"]?.stringValue == "refusal" { throw LLMError(.refused, "anthropic refused to answer") }
        let back = Dictionary(Self.wireNames(request.tools.map(\.name)).map { ($1, $0) }, uniquingKeysWith: { a, _ in a })
        var text = ""
        var calls: [ToolCall] = []
        for block in blocks {
            switch block["type"]?.stringValue {
            case "text": text += block["text"]?.stringValue ?? ""
            case "tool_use":
                let name = block["name"]?.stringValue ?? ""
                calls.append(ToolCall(id: block["id"]?.stringValue ?? "", name: back[name] ?? name, arguments: argumentsObject(block["input"])))
            default: break
            }
        }
        return ChatReply(text: text, toolCalls: calls, finishReason: json["stop_reason"]?.stringValue)
    }
}
