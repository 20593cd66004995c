import Foundation
import HTTPClient
import JSON
import Synchronization

/// Splits a streamed body into lines (SSE and NDJSON are both line-framed) as the pieces arrive.
final class LineSplitter: Sendable {
    private let pending = Mutex<[UInt8]>([])
    private let onLine: @Sendable (String) -> Void

    init(onLine: @escaping @Sendable (String) -> Void) { self.onLine = onLine }

    func feed(_ bytes: [UInt8]) {
        let lines: [String] = pending.withLock { buffer in
            buffer.append(contentsOf: bytes)
            var lines: [String] = []
            while let newline = buffer.firstIndex(of: 0x0A) {
                var line = Array(buffer[..<newline])
                if line.last == 0x0D { line.removeLast() }
                lines.append(String(decoding: line, as: UTF8.self))
                buffer.removeSubrange(...newline)
            }
            return lines
        }
        for line in lines { onLine(line) }
    }

    /// A last line without its newline.
    func finish() {
        let rest = pending.withLock { buffer -> [UInt8] in defer { buffer.removeAll() }; return buffer }
        if !rest.isEmpty { onLine(String(decoding: rest, as: UTF8.self)) }
    }
}

/// The text collected from a stream, and an error event if the provider sent one mid-stream.
final class StreamedText: Sendable {
    private let state = Mutex<(text: String, error: String?, finish: String?)>(("", nil, nil))
    func append(_ piece: String) { state.withLock { $0.text += piece } }
    /// Before another attempt: what a failed one left (an error answer's line) is not this answer's.
    func reset() { state.withLock { $0 = ("", nil, nil) } }
    /// Text has gone on to the listener: the call can no longer be tried again.
    var passedOn: Bool { state.withLock { !$0.text.isEmpty } }
    func fail(_ message: String) { state.withLock { $0.error = $0.error ?? message } }
    func finished(_ reason: String) { state.withLock { $0.finish = reason } }
    var value: (text: String, error: String?, finish: String?) { state.withLock { $0 } }
}

extension JSONPost {
    /// POSTs with `stream: true` and feeds each line of the answer to `onLine`; a non-2xx status is an error with
    /// the provider's message. A failed attempt is tried again only while no text has reached the listener.
    func stream(url: String, headers: [(String, String)], body: JSONValue, for request: ChatRequest, collected: StreamedText,
                onLine: @escaping @Sendable (String) -> Void) async throws(LLMError) {
        try await retrying(request, mayRetry: { !collected.passedOn }) { timeout throws(AttemptFailure) in
            collected.reset()
            let splitter = LineSplitter(onLine: onLine)
            // An error answer's lines reach the parser too; `attempt` refuses the status, and the next attempt resets.
            _ = try await attempt(url: url, headers: headers, body: body, timeout: timeout) { bytes in splitter.feed(bytes) }
            splitter.finish()
        }
    }
}

func parseJSON(_ text: some StringProtocol) -> JSONValue? { parseJSON(Array(text.utf8)) }
func parseJSON(_ bytes: [UInt8]) -> JSONValue? { try? JSONCoding.decode(JSONValue.self, from: Data(bytes)) }

extension OpenAICompatibleProvider {
    /// Server-sent events: `data: {choices:[{delta:{content}}]}` lines, then `data: [DONE]`.
    public func stream(_ request: ChatRequest, onText: @escaping @Sendable (String) -> Void) async throws(LLMError) -> ChatReply {
        guard request.tools.isEmpty else { return try await complete(request) }
        guard case .object(var body) = body(request) else { return try await complete(request) }
        body["stream"] = true
        var headers: [(String, String)] = [("accept", "text/event-stream")]
        if let apiKey, !apiKey.isEmpty { headers.append(("authorization", "Bearer \(apiKey)")) }
        let collected = StreamedText()
        try await post.stream(url: baseURL + "/chat/completions", headers: headers, body: .object(body), for: request, collected: collected) { line in
            guard line.hasPrefix("data:") else { return }
            let data = line.dropFirst(5).trimmingCharacters(in: .whitespaces)
            guard data != "[DONE]", let event = parseJSON(data) else { return }
            if let message = event["error"]?["message"]?.stringValue { collected.fail(message); return }
            let choice = event["choices"]?[0]
            if let piece = choice?["delta"]?["content"]?.stringValue, !piece.isEmpty {
                collected.append(piece)
                onText(piece)
            }
            if let reason = choice?["finish_reason"]?.stringValue { collected.finished(reason) }
        }
        let result = collected.value
        if let error = result.error { throw LLMError(.rejected, "\(id) failed mid-answer: \(error)") }
        return ChatReply(text: result.text, finishReason: result.finish)
    }
}

extension OllamaProvider {
    /// NDJSON: one `{message:{content}, done}` object per line.
    public func stream(_ request: ChatRequest, onText: @escaping @Sendable (String) -> Void) async throws(LLMError) -> ChatReply {
        guard request.tools.isEmpty else { return try await complete(request) }
        guard case .object(var body) = body(request) else { return try await complete(request) }
        body["stream"] = true
        var headers: [(String, String)] = []
        if let apiKey, !apiKey.isEmpty { headers.append(("authorization", "Bearer \(apiKey)")) }
        let collected = StreamedText()
        try await post.stream(url: baseURL + "/api/chat", headers: headers, body: .object(body), for: request, collected: collected) { line in
            guard let event = parseJSON(line) else { return }
            if let error = event["error"]?.stringValue { collected.fail(error); return }
            if let piece = event["message"]?["content"]?.stringValue, !piece.isEmpty {
                collected.append(piece)
                onText(piece)
            }
            if event["done"] == true { collected.finished(event["done_reason"]?.stringValue ?? "stop") }
        }
        let result = collected.value
        if let error = result.error { throw LLMError(.rejected, "ollama failed mid-answer: \(error)") }
        return ChatReply(text: result.text, finishReason: result.finish)
    }
}

extension AnthropicProvider {
    /// Server-sent events: `content_block_delta` events carry `text_delta`s; `error` events end the answer.
    public func stream(_ request: ChatRequest, onText: @escaping @Sendable (String) -> Void) async throws(LLMError) -> ChatReply {
        guard request.tools.isEmpty else { return try await complete(request) }
        guard case .object(var body) = body(request) else { return try await complete(request) }
        body["stream"] = true
        let headers = [("x-api-key", apiKey), ("anthropic-version", Self.version), ("accept", "text/event-stream")]
        let collected = StreamedText()
        try await post.stream(url: baseURL + "/v1/messages", headers: headers, body: .object(body), for: request, collected: collected) { line in
            guard line.hasPrefix("data:"), let event = parseJSON(line.dropFirst(5).trimmingCharacters(in: .whitespaces)) else { return }
            switch event["type"]?.stringValue {
            case "content_block_delta":
                if event["delta"]?["type"] == "text_delta", let piece = event["delta"]?["text"]?.stringValue, !piece.isEmpty {
                    collected.append(piece)
                    onText(piece)
                }
            case "message_delta":
                if let reason = event["delta"]?["stop_reason"]?.stringValue { collected.finished(reason) }
            case "error":
                collected.fail(event["error"]?["message"]?.stringValue ?? "an error event")
            default:
                break
            }
        }
        let result = collected.value
        if let error = result.error { throw LLMError(.rejected, "anthropic failed mid-answer: \(error)") }
        if result.finish == "refusal" { throw LLMError(.refused, "anthropic refused to answer") }
        return ChatReply(text: result.text, finishReason: result.finish)
    }
}
