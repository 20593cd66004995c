import Foundation
import HTTPClient
import JSON

/// Sends one JSON request and reads the JSON answer; provider errors become `LLMError` with the provider's own
/// message. 429, 5xx and broken connections are tried again (`ProviderRetryPolicy`) within the call's deadline.
struct JSONPost: Sendable {
    let client: ProviderConnection
    let providerID: String
    var retry: ProviderRetryPolicy = .standard

    func send(url: String, headers: [(String, String)], body: JSONValue, for request: ChatRequest) async throws(LLMError) -> JSONValue {
        let response = try await retrying(request) { timeout throws(AttemptFailure) in
            try await attempt(url: url, headers: headers, body: body, timeout: timeout, onBody: nil)
        }
        guard let json = parseJSON(response.body) else { throw LLMError(.malformed, "\(providerID) answered with something that is not JSON") }
        return json
    }

    /// One POST with a JSON body: a transport failure or a non-2xx answer becomes the `LLMError` a run reports,
    /// with the provider's own message, and says whether it is worth another try. `onBody`, when given, gets the
    /// body as it arrives (streaming).
    func attempt(url: String, headers: [(String, String)], body: JSONValue, timeout: Duration,
                 onBody: (@Sendable ([UInt8]) -> Void)?) async throws(AttemptFailure) -> ClientResponse {
        let request = ClientRequest(method: "POST", url: url, headers: headers + [("content-type", "application/json")],
                                    body: body.serializedBytes(), timeout: timeout)
        let response: ClientResponse
        do {
            if let onBody { response = try await client.http.send(request, onBody: onBody) } else { response = try await client.http.send(request) }
        } catch {
            if error.neverSent {
                throw AttemptFailure(error: LLMError(.notSent, "\(providerID) was not called: \(error.description)"),
                                     status: nil, retryable: false, requestedWait: nil, reason: error.description)
            }
            if error.description.lowercased().contains("timeout") || error.description.lowercased().contains("timed out") {
                throw AttemptFailure(error: LLMError(.timedOut, "\(providerID) did not answer within \(timeout)"),
                                     status: nil, retryable: false, requestedWait: nil, reason: error.description)
            }
            throw AttemptFailure(error: LLMError(.unreachable, "could not reach \(providerID) at \(Self.origin(url)): \(error.description)"),
                                 status: nil, retryable: error.isTransient, requestedWait: nil, reason: error.description)
        }
        guard (200..<300).contains(response.status) else {
            let json = parseJSON(response.body)
            let detail = json.flatMap(Self.errorMessage) ?? String(decoding: response.body.prefix(300), as: UTF8.self)
            throw AttemptFailure(error: LLMError(.rejected, "\(providerID) answered \(response.status): \(detail)"), status: response.status,
                                 retryable: ProviderRetryPolicy.retries(status: response.status, body: json),
                                 requestedWait: ProviderRetryPolicy.requestedWait(response.headers), reason: "answered \(response.status)")
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

    public init(id: String, baseURL: String, apiKey: String?, defaultModel: String, client: ProviderConnection, retry: ProviderRetryPolicy = .standard) {
        self.id = id
        self.baseURL = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
        self.apiKey = apiKey
        self.defaultModel = defaultModel
        post = JSONPost(client: client, providerID: id, retry: retry)
    }

    /// Tool names as OpenAI's pattern allows them (`mobile.invoke` is refused with a 400).
    public func toolNames(_ request: ChatRequest) -> ToolNameMap { ToolNameMap(pattern: .openAI, request: request) }

    public func body(_ request: ChatRequest) -> JSONValue {
        let names = toolNames(request)
        var messages: [JSONValue] = []
        for m in request.messages {
            var message: [String: JSONValue] = ["role": .string(m.role.rawValue), "content": .string(m.content)]
            if !m.toolCalls.isEmpty {
                message["tool_calls"] = .array(m.toolCalls.map { call in
                    ["id": .string(call.id), "type": "function",
                     "function": ["name": .string(names.wire(call.name)), "arguments": .string(call.arguments.serialized())]]
                })
            }
            if m.role == .tool {
                message["tool_call_id"] = .string(m.toolCallID ?? "")
                message["name"] = .string(m.toolName.map(names.wire) ?? "")
            }
            messages.append(.object(message))
        }
        var body: [String: JSONValue] = ["model": .string(request.model), "messages": .array(messages), "stream": false,
                                         "temperature": .number(request.temperature ?? 0)]
        if let topP = request.topP { body["top_p"] = .number(topP) }
        if request.maxTokens > 0 { body["max_tokens"] = .number(Double(request.maxTokens)) }
        if !request.tools.isEmpty {
            body["tools"] = .array(request.tools.map { tool in
                ["type": "function", "function": ["name": .string(names.wire(tool.name)), "description": .string(tool.description), "parameters": tool.parameters]]
            })
            if let choice = request.toolChoice {
                body["tool_choice"] = ["auto", "none", "required"].contains(choice) ? .string(choice) : ["type": "function", "function": ["name": .string(names.wire(choice))]]
            }
        }
        return .object(body)
    }

    public func complete(_ request: ChatRequest) async throws(LLMError) -> ChatReply {
        var headers: [(String, String)] = []
        if let apiKey, !apiKey.isEmpty { headers.append(("authorization", "Bearer \(apiKey)")) }
        let json = try await post.send(url: baseURL + "/chat/completions", headers: headers, body: body(request), for: request)
        let names = toolNames(request)
        guard let choice = json["choices"]?.arrayValue?.first, let message = choice["message"] else {
            throw LLMError(.malformed, "\(id) answered without choices[0].message")
        }
        if let refusal = message["refusal"]?.stringValue, !refusal.isEmpty { throw LLMError(.refused, "\(id) refused: \(refusal)") }
        let calls = (message["tool_calls"]?.arrayValue ?? []).enumerated().compactMap { index, call -> ToolCall? in
            guard let name = call["function"]?["name"]?.stringValue else { return nil }
            return ToolCall(id: call["id"]?.stringValue ?? "call_\(index)", name: names.original(name), arguments: argumentsObject(call["function"]?["arguments"]))
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

    public init(baseURL: String, defaultModel: String, apiKey: String? = nil, client: ProviderConnection, retry: ProviderRetryPolicy = .standard) {
        self.baseURL = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
        self.defaultModel = defaultModel
        self.apiKey = apiKey
        post = JSONPost(client: client, providerID: "ollama", retry: retry)
    }

    /// Ollama documents no rule for tool names: they go as they are (the map is the identity).
    public func toolNames(_ request: ChatRequest) -> ToolNameMap { ToolNameMap(pattern: nil, request: request) }

    public func body(_ request: ChatRequest) -> JSONValue {
        let names = toolNames(request)
        let messages: [JSONValue] = request.messages.map { m in
            var message: [String: JSONValue] = ["role": .string(m.role.rawValue), "content": .string(m.content)]
            if !m.toolCalls.isEmpty {
                message["tool_calls"] = .array(m.toolCalls.map { ["function": ["name": .string(names.wire($0.name)), "arguments": $0.arguments]] })
            }
            if m.role == .tool { message["tool_name"] = .string(m.toolName.map(names.wire) ?? "") }
            return .object(message)
        }
        var options: [String: JSONValue] = ["temperature": .number(request.temperature ?? 0), "num_ctx": 16384, "num_batch": 128]
        if let topP = request.topP { options["top_p"] = .number(topP) }
        if request.maxTokens > 0 { options["num_predict"] = .number(Double(request.maxTokens)) }
        var body: [String: JSONValue] = ["model": .string(request.model), "messages": .array(messages), "stream": false,
                                         "keep_alive": "30m", "options": .object(options)]
        if !request.tools.isEmpty {
            body["tools"] = .array(request.tools.map { ["type": "function", "function": ["name": .string(names.wire($0.name)), "description": .string($0.description), "parameters": $0.parameters]] })
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
            json = try await post.send(url: baseURL + "/api/chat", headers: headers, body: body(request), for: request)
        } catch where error.kind == .unreachable {
            throw LLMError(.unreachable, error.message + notRunningHint)
        }
        guard let message = json["message"] else { throw LLMError(.malformed, "ollama answered without a message") }
        let names = toolNames(request)
        let calls = (message["tool_calls"]?.arrayValue ?? []).enumerated().compactMap { index, call -> ToolCall? in
            guard let name = call["function"]?["name"]?.stringValue else { return nil }
            return ToolCall(id: call["id"]?.stringValue ?? "call_\(index)", name: names.original(name), arguments: argumentsObject(call["function"]?["arguments"]))
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

    public init(baseURL: String, apiKey: String, defaultModel: String, client: ProviderConnection, retry: ProviderRetryPolicy = .standard) {
        self.baseURL = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
        self.apiKey = apiKey
        self.defaultModel = defaultModel
        post = JSONPost(client: client, providerID: "anthropic", retry: retry)
    }

    /// Tool names as Anthropic's pattern allows them.
    public func toolNames(_ request: ChatRequest) -> ToolNameMap { ToolNameMap(pattern: .anthropic, request: request) }

    public func body(_ request: ChatRequest) -> JSONValue {
        let names = toolNames(request)
        let system = request.messages.filter { $0.role == .system }.map(\.content).joined(separator: "\n\n")
        var messages: [JSONValue] = []
        for m in request.messages where m.role != .system {
            switch m.role {
            case .assistant:
                var blocks: [JSONValue] = []
                if !m.content.isEmpty { blocks.append(["type": "text", "text": .string(m.content)]) }
                for call in m.toolCalls {
                    blocks.append(["type": "tool_use", "id": .string(call.id), "name": .string(names.wire(call.name)), "input": call.arguments])
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
            body["tools"] = .array(request.tools.map { ["name": .string(names.wire($0.name)), "description": .string($0.description), "input_schema": $0.parameters] })
            switch request.toolChoice {
            case "required"?: body["tool_choice"] = ["type": "any"]
            case "auto"?: body["tool_choice"] = ["type": "auto"]
            case nil, "none"?, ""?: break
            case let name?: body["tool_choice"] = ["type": "tool", "name": .string(names.wire(name))]
            }
        }
        return .object(body)
    }

    public func complete(_ request: ChatRequest) async throws(LLMError) -> ChatReply {
        let headers = [("x-api-key", apiKey), ("anthropic-version", Self.version)]
        let json = try await post.send(url: baseURL + "/v1/messages", headers: headers, body: body(request), for: request)
        guard let blocks = json["content"]?.arrayValue else { throw LLMError(.malformed, "anthropic answered without content") }
        if json["stop_reason"]?.stringValue == "refusal" { throw LLMError(.refused, "anthropic refused to answer") }
        let names = toolNames(request)
        var text = ""
        var calls: [ToolCall] = []
        for block in blocks {
            switch block["type"]?.stringValue {
            case "text": text += block["text"]?.stringValue ?? ""
            case "tool_use":
                let name = block["name"]?.stringValue ?? ""
                calls.append(ToolCall(id: block["id"]?.stringValue ?? "", name: names.original(name), arguments: argumentsObject(block["input"])))
            default: break
            }
        }
        return ChatReply(text: text, toolCalls: calls, finishReason: json["stop_reason"]?.stringValue)
    }
}
