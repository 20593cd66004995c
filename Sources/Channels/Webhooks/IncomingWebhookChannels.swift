import ChannelAPI
import ChannelSupport
import Foundation
import HTTPClient
import JSON

/// What Teams and Google Chat share: a configured incoming-webhook URL, the soulacy-personal rule for `to`, and
/// a message cut into several posts when it is over the service's size, sent in order.
///
/// `to`: empty (the configured URL), or an absolute https:// URL on the same host as the configured one (the
/// original lets a per-message destination change only the path; any other host is an error, not a fallback).
///
/// Pieces: a send whose pieces partly went through continues on its next attempt from the first undelivered one
/// (`PieceDelivery` keeps the count in memory by delivery id); after a restart of the process they are sent again
/// from the first (at least once per piece). Delivered reports the first message's remote id.
final class IncomingWebhookPoster: Sendable {
    let channel: String
    /// How reasons name the service ("Teams", "Google Chat").
    let service: String
    let url: WebhookURL
    let timeout: Duration
    let client: HTTP2Client
    let scrubber: SecretScrubber
    private let delivery = PieceDelivery(reporting: .first, wording: .message)

    init(channel: String, service: String, url: WebhookURL, timeout: Duration, caFile: String?) {
        self.channel = channel
        self.service = service
        self.url = url
        self.timeout = timeout
        client = HTTP2Client(configuration: HTTP2ClientConfiguration(caFile: caFile))
        scrubber = SecretScrubber(secrets: [], urls: [url.text])
    }

    /// The URL a destination posts to.
    func target(for destination: String) throws(DestinationError) -> WebhookURL {
        let to = destination.trimmingCharacters(in: .whitespacesAndNewlines)
        if to.isEmpty { return url }
        let override = try WebhookURL.parseDestination(to, channel: "channels.\(channel)")
        guard override.host == url.host, override.port == url.port else {
            throw .invalid("channels.\(channel): refusing \(override.display): a per-message destination may only change the path on the configured host (\(url.host))")
        }
        return override
    }

    /// Posts the pieces not yet delivered, in order; `answer` reads each response.
    func post(_ send: ChannelSend, pieces: [[UInt8]], answer: (ClientResponse) -> (outcome: ChannelSendOutcome, remoteID: String?)) async -> ChannelSendOutcome {
        let target: WebhookURL
        do { target = try self.target(for: send.destination) } catch { return .failed(reason: error.description) }
        let outcome = await delivery.send(send, pieces: pieces) { body, _ in
            let request = ClientRequest(method: "POST", url: target.text, headers: [("Content-Type", "application/json; charset=utf-8")],
                                        body: body, timeout: timeout)
            let response: ClientResponse
            do throws(ClientTransportError) { response = try await client.send(request) } catch {
                return .stop(.retry(after: nil, reason: "could not reach \(service): \(error.description)"))
            }
            let (outcome, remoteID) = answer(response)
            guard case .delivered = outcome else { return .stop(outcome) }
            return .delivered(remoteID: remoteID)
        }
        // The URL is a secret, and a service's answer may quote it.
        return outcome.mappingReason(scrubber.scrub)
    }

    /// How many bytes `text` takes as a JSON string's content (escapes counted), as the services measure a body.
    static func jsonBytes(_ text: Substring) -> Int {
        text.utf8.reduce(0) { sum, byte in
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"), 0x0A, 0x0D, 0x09: sum + 2
            case 0..<0x20: sum + 6
            default: sum + 1
            }
        }
    }

    /// The configured URL: `webhook_url`, else the original's aliases `url` and `default_output_to`.
    static func configuredURL(_ settings: ChannelSettings) throws(ChannelConfigError) -> WebhookURL {
        for key in ["webhook_url", "url", "default_output_to"] {
            if let text = settings.string(key) { return try WebhookURL.parseConfigured(text, field: settings.field(key), httpsOnly: true) }
        }
        throw ChannelConfigError(field: settings.field("webhook_url"), problem: "is required (or its aliases url, default_output_to)")
    }
}

/// The `teams` channel: a Microsoft Teams incoming webhook (or a Workflows "When a Teams webhook request is
/// received" URL), one MessageCard per message.
///
/// The card is `{"@type": "MessageCard", "@context": "https://schema.org/extensions", "summary", "title", "text"}`:
/// Microsoft's incoming-webhook docs take a MessageCard and refuse one without `summary` or `text` ("Summary or Text
/// is required."), Workflows accept the MessageCard format too, and the stand-in checks the same. With the title
/// in `title` and the body in `text`, Teams renders the heading the original put in as `**<title>**`, and
/// `summary` is what notifications show. Over 28 KB (Teams' message limit) the body goes out in several cards,
/// titled "<title> (2/3)".
///
/// Answers: 200 with "1" (or 2xx with nothing) delivered; a 200 whose text reports "HTTP error 429" or a 5xx (the
/// connector does that when throttled) → retry, one whose text reports another 4xx (a removed channel's 400) →
/// rejected; 429, 408 and 5xx → retry with `Retry-After`; 400 (bad payload), 404 (webhook deleted), 413 and other
/// 4xx rejected with Teams' words. The URL is a secret: never in a reason.
public final class TeamsChannel: OutboundChannel {
    public let name: String
    let poster: IncomingWebhookPoster
    let title: String?
    static let maximumBytes = 28 * 1024

    init(name: String, poster: IncomingWebhookPoster, title: String?) {
        self.name = name
        self.poster = poster
        self.title = title
    }

    public func validate(destination: String) throws(DestinationError) {
        _ = try poster.target(for: destination)
    }

    public func attempt(_ send: ChannelSend) async -> ChannelSendOutcome {
        let body = send.output.body
        guard !body.isEmpty else { return .failed(reason: "the output has no text to send") }
        return await poster.post(send, pieces: cards(title: title ?? send.output.title, body: body), answer: Self.answer)
    }

    /// One card, or several when the body is over Teams' size.
    func cards(title: String, body: String) -> [[UInt8]] {
        func card(_ title: String, _ text: String) -> [UInt8] {
            JSONValue.object(["@type": "MessageCard", "@context": "https://schema.org/extensions", "summary": .string(title),
                              "title": .string(title), "text": .string(text)]).serializedBytes()
        }
        let whole = card(title, body)
        if whole.count <= Self.maximumBytes { return [whole] }
        // Room for the text beside the card's other fields, with "(99/99)" added to the title twice.
        let room = Self.maximumBytes - card(title + " (99/99)", "").count
        let texts = MessageText.split(body, limit: max(1, room), count: IncomingWebhookPoster.jsonBytes)
        return texts.enumerated().map { card("\(title) (\($0.offset + 1)/\(texts.count))", $0.element) }
    }

    static func answer(_ response: ClientResponse) -> (outcome: ChannelSendOutcome, remoteID: String?) {
        let text = HTTPOutcome.excerpt(response.body)
        if (200..<300).contains(response.status), let text, text != "1",
           let range = text.range(of: #"HTTP error (\d{3})"#, options: .regularExpression),
           let code = Int(text[range].suffix(3)), code >= 400 {
            // Office 365 connectors bury a failure in a 200 (a removed channel's 400, MicrosoftDocs/msteams-docs#402):
            // it is not delivered; a buried 4xx other than 429 is refused as an open one would be.
            let reason = "Teams answered \(response.status) but: \(text)"
            if code == 429 || code >= 500 { return (.retry(after: RetryAfter.parse(response.headers["retry-after"]), reason: reason), nil) }
            return (.rejected(reason: reason), nil)
        }
        return (HTTPOutcome.classify(response, service: "Teams", detail: text), nil)
    }
}

/// The `google_chat` channel: a Google Chat space's incoming webhook
/// (`https://chat.googleapis.com/v1/spaces/<space>/messages?key=<key>&token=<token>`; key and token are secrets,
/// never in a reason). Posts `{"text": "<prefix>\n\n<body>"}`, cut into several messages at Google Chat's
/// documented maximum message size, 32,000 bytes including text and cards.
///
/// Answers: 200 delivered (remote id: the first message's `name`); 429 RESOURCE_EXHAUSTED (60 writes a minute per
/// space), 408 and 5xx → retry (`Retry-After` when given); 400, 401, 403, 404 and other 4xx rejected with Google's
/// `error.status` and `error.message`.
public final class GoogleChatChannel: OutboundChannel {
    public let name: String
    let poster: IncomingWebhookPoster
    let prefix: String?
    static let maximumBytes = 32_000

    init(name: String, poster: IncomingWebhookPoster, prefix: String?) {
        self.name = name
        self.poster = poster
        self.prefix = prefix
    }

    public func validate(destination: String) throws(DestinationError) {
        _ = try poster.target(for: destination)
    }

    public func attempt(_ send: ChannelSend) async -> ChannelSendOutcome {
        let body = send.output.body
        guard !body.isEmpty else { return .failed(reason: "the output has no text to send") }
        return await poster.post(send, pieces: messages(body), answer: Self.answer)
    }

    /// `{"text": …}` bodies, each at most 32,000 bytes as sent.
    func messages(_ body: String) -> [[UInt8]] {
        let text = prefix.map { "\($0)\n\n\(body)" } ?? body
        let room = Self.maximumBytes - JSONValue.object(["text": ""]).serializedBytes().count
        return MessageText.split(text, limit: room, count: IncomingWebhookPoster.jsonBytes).map { JSONValue.object(["text": .string($0)]).serializedBytes() }
    }

    static func answer(_ response: ClientResponse) -> (outcome: ChannelSendOutcome, remoteID: String?) {
        struct Created: Decodable { let name: String? }
        struct Failure: Decodable {
            struct Detail: Decodable { let code: Int?; let message: String?; let status: String? }
            let error: Detail?
        }
        if (200..<300).contains(response.status) {
            let name = (try? JSONCoding.decode(Created.self, from: response.body, what: "Google Chat's answer"))?.name
            return (.delivered(remoteID: name), name)
        }
        let error = (try? JSONCoding.decode(Failure.self, from: response.body, what: "Google Chat's error"))?.error
        let detail = error.map { [$0.status, $0.message].compactMap { $0 }.joined(separator: ": ") }.flatMap { $0.isEmpty ? nil : $0 }
            ?? HTTPOutcome.excerpt(response.body)
        return (HTTPOutcome.classify(response, service: "Google Chat", detail: detail), nil)
    }
}

/// Builds `teams` from `channels.teams`: `webhook_url` (aliases `url`, `default_output_to`; a secret), `title`
/// (default: the output's title, "Result from <agent>"), `timeout_seconds` (10), `ca_file`.
public struct TeamsChannelFactory: ChannelFactory {
    public let kind = "teams"
    public init() {}

    public func make(_ settings: ChannelSettings) throws(ChannelConfigError) -> [any OutboundChannel] {
        let url = try IncomingWebhookPoster.configuredURL(settings)
        let timeout = try settings.int("timeout_seconds", in: 1...300) ?? 10
        let poster = IncomingWebhookPoster(channel: settings.kind, service: "Teams", url: url, timeout: .seconds(timeout), caFile: settings.caFile)
        return [TeamsChannel(name: settings.kind, poster: poster, title: settings.string("title"))]
    }
}

/// Builds `google_chat` from `channels.google_chat`: `webhook_url` (aliases `url`, `default_output_to`; a secret:
/// its query holds the space's key and token), `prefix`, `timeout_seconds` (10), `ca_file`.
public struct GoogleChatChannelFactory: ChannelFactory {
    public let kind = "google_chat"
    public init() {}

    public func make(_ settings: ChannelSettings) throws(ChannelConfigError) -> [any OutboundChannel] {
        let url = try IncomingWebhookPoster.configuredURL(settings)
        let timeout = try settings.int("timeout_seconds", in: 1...300) ?? 10
        let poster = IncomingWebhookPoster(channel: settings.kind, service: "Google Chat", url: url, timeout: .seconds(timeout), caFile: settings.caFile)
        return [GoogleChatChannel(name: settings.kind, poster: poster, prefix: settings.string("prefix"))]
    }
}
