import ChannelAPI
import Foundation
import HTTPClient
import JSON

/// Publishes each output as one ntfy notification: `POST <server>/<topic>` with the text as the body and the
/// title, priority and tags as headers ("Publishing" in ntfy's docs). SOUL.yaml's `to` is the topic.
///
/// One attempt is one request; the framework retries. ntfy has no idempotency key, so an answer lost on the way
/// back means the retry may show the notification twice (at least once, never lost).
public final class NtfyChannel: OutboundChannel {
    /// ntfy's default `message-size-limit`: a longer body is stored as an attachment (`attachment.txt`) or, on a
    /// server without an attachment cache (a self-hosted default), refused with 400. Longer outputs are cut to fit.
    public static let messageLimit = 4096
    /// The topic names ntfy routes (`[-_A-Za-z0-9]{1,64}`), less those its web app uses (`DefaultDisallowedTopics`).
    public static let reservedTopics: Set<String> = ["docs", "static", "file", "app", "metrics", "account", "settings", "signup", "login", "v1"]

    public let configuration: NtfyConfiguration
    private let client: HTTP2Client

    public init(configuration: NtfyConfiguration) {
        self.configuration = configuration
        client = HTTP2Client(configuration: HTTP2ClientConfiguration(caFile: configuration.caFile))
    }

    public var name: String { configuration.id }

    public func validate(destination: String) throws(DestinationError) {
        let allowed = { (s: Unicode.Scalar) in ("a"..."z").contains(s) || ("A"..."Z").contains(s) || ("0"..."9").contains(s) || s == "-" || s == "_" }
        guard (1...64).contains(destination.unicodeScalars.count), destination.unicodeScalars.allSatisfy(allowed) else {
            throw .invalid("ntfy topic '\(destination)' must be 1 to 64 letters, digits, '-' or '_' (the topic is the address: pick one nobody guesses)")
        }
        guard !Self.reservedTopics.contains(destination) else {
            throw .invalid("ntfy topic '\(destination)' is reserved by ntfy's web app; pick another name")
        }
    }

    public func attempt(_ send: ChannelSend) async -> ChannelSendOutcome {
        do { try validate(destination: send.destination) } catch { return .failed(reason: error.description) }
        let text = send.output.body.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !text.isEmpty else { return .failed(reason: "the output has no text to send to ntfy") }
        let response: ClientResponse
        do {
            response = try await client.send(request(for: send.output, text: text, topic: send.destination))
        } catch {
            return .retry(after: nil, reason: "could not reach ntfy at \(configuration.serverURL): \(error.description)")
        }
        return redacted(Self.outcome(of: response))
    }

    /// The publish request: the body as ntfy shows it, the rest as the `X-` headers ntfy reads first.
    func request(for output: Output, text: String, topic: String) -> ClientRequest {
        var headers: [(String, String)] = [("Content-Type", "text/plain; charset=utf-8"), ("X-Title", Self.headerText(output.title))]
        if let priority = configuration.priority { headers.append(("X-Priority", priority.description)) }
        if !configuration.tags.isEmpty { headers.append(("X-Tags", configuration.tags.joined(separator: ","))) }
        if configuration.markdown { headers.append(("X-Markdown", "yes")) }
        if let token = configuration.token { headers.append(("Authorization", "Bearer \(token)")) }
        return ClientRequest(method: "POST", url: "\(configuration.serverURL)/\(topic)", headers: headers,
                             body: Array(Self.fitted(text, limit: Self.messageLimit).utf8), timeout: configuration.timeout)
    }

    /// What ntfy's answer means. 200 carries the message (`{"id", "time", "event": "message", …}`); an error
    /// carries `{"code", "http", "error", "link"}`, `code` being ntfy's own (42901: too many requests).
    static func outcome(of response: ClientResponse) -> ChannelSendOutcome {
        let answer = try? JSONValue.parse(response.body)
        if (200..<300).contains(response.status) {
            return .delivered(remoteID: answer?["id"]?.stringValue)
        }
        var words = answer?["error"]?.stringValue ?? excerpt(response.body)
        if let code = answer?["code"]?.numberValue { words = (words.map { $0 + " " } ?? "") + "(code \(Int(code)))" }
        let reason = "ntfy answered \(response.status)" + (words.map { ": \($0)" } ?? "")
        switch response.status {
        case 408, 429, 500..<600:
            // ntfy itself sends no Retry-After with its 429s; a proxy in front of it may.
            return .retry(after: RetryAfter.parse(response.headers["retry-after"]), reason: reason)
        default:
            // 401 a token ntfy does not know, 403 one without write access to the topic, 400 a request it refuses.
            return .rejected(reason: reason)
        }
    }

    /// A header value: one line, and non-ASCII as RFC 2047 encoded words, which ntfy decodes for its parameters.
    static func headerText(_ text: String) -> String {
        var scalars = String.UnicodeScalarView()
        for scalar in text.unicodeScalars { scalars.append(scalar.properties.generalCategory == .control ? " " : scalar) }
        let line = String(scalars).trimmingCharacters(in: .whitespaces)
        guard !line.unicodeScalars.allSatisfy({ $0.isASCII }) else { return line }
        // Encoded words of at most 75 characters (45 bytes of UTF-8 in base64), never splitting a character.
        var words: [String] = []
        var chunk = ""
        for character in line {
            if chunk.utf8.count + character.utf8.count > 45 {
                words.append(chunk)
                chunk = ""
            }
            chunk.append(character)
        }
        words.append(chunk)
        return words.map { "=?UTF-8?B?\(Data($0.utf8).base64EncodedString())?=" }.joined(separator: " ")
    }

    /// `text` in at most `limit` bytes of UTF-8, cut at a character with `…` when it is longer.
    static func fitted(_ text: String, limit: Int) -> String {
        guard text.utf8.count > limit else { return text }
        let marker = "…"
        var kept = ""
        var used = marker.utf8.count
        for character in text {
            used += character.utf8.count
            if used > limit { break }
            kept.append(character)
        }
        return kept + marker
    }

    static func excerpt(_ body: [UInt8]) -> String? {
        let text = String(decoding: body.prefix(300), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        return text.isEmpty ? nil : text
    }

    /// The token never reaches a reason shown on a run, whatever a server or a proxy echoes back.
    private func redacted(_ outcome: ChannelSendOutcome) -> ChannelSendOutcome {
        guard let token = configuration.token else { return outcome }
        switch outcome {
        case .retry(let after, let reason): return .retry(after: after, reason: reason.replacingOccurrences(of: token, with: "[token]"))
        case .rejected(let reason): return .rejected(reason: reason.replacingOccurrences(of: token, with: "[token]"))
        case .failed(let reason): return .failed(reason: reason.replacingOccurrences(of: token, with: "[token]"))
        case .delivered: return outcome
        }
    }
}
