import ChannelAPI
import ChannelSupport
import Foundation
import HTTPClient
import JSON

/// One Discord bot's settings, read from `channels.discord` (or one of its `bots:`).
public struct DiscordConfiguration: Sendable, Equatable {
    /// The configured id SOUL.yaml names: `discord`, `discord-<agent>`.
    public var id: String
    /// The bot token without its `Bot ` prefix: a secret.
    public var token: String
    /// The REST base with its version, `https://discord.com/api/v10` unless `api_url` says otherwise.
    public var apiURL: String
    public var caFile: String?
    public var timeout: Duration

    public init(id: String, token: String, apiURL: String = "https://discord.com/api/v10", caFile: String? = nil, timeout: Duration = .seconds(15)) {
        self.id = id
        self.token = token
        self.apiURL = apiURL
        self.caFile = caFile
        self.timeout = timeout
    }
}

/// Posts outputs to a Discord channel with Create Message: plain `content`, in pieces of at most 2000
/// characters sent in order, as soulacy-personal splits them.
public final class DiscordChannel: OutboundChannel {
    public let configuration: DiscordConfiguration
    private let client: HTTP2Client
    private let pieces = PieceDelivery()

    /// Create Message's limit for `content`.
    public static let contentLimit = 2000
    /// "Reference: User Agent": `DiscordBot ($url, $versionNumber)`, which Discord requires of every client.
    public static let userAgent = "DiscordBot (https://github.com/vmodekurti/soulacy, 0.1.0) SoulacyMobile"

    public init(configuration: DiscordConfiguration) {
        self.configuration = configuration
        client = HTTP2Client(configuration: HTTP2ClientConfiguration(caFile: configuration.caFile))
    }

    public var name: String { configuration.id }

    /// A channel id: a snowflake, 17 to 20 digits (a user id is not a channel; a DM has a channel id of its own).
    public func validate(destination: String) throws(DestinationError) {
        guard (17...20).contains(destination.count), destination.unicodeScalars.allSatisfy({ ("0"..."9").contains($0) }) else {
            throw .invalid("Discord destination '\(destination)' is not a channel id (a snowflake of 17 to 20 digits: "
                           + "Developer Mode, then Copy Channel ID)")
        }
    }

    public func attempt(_ send: ChannelSend) async -> ChannelSendOutcome {
        let text = MessageText.body(of: send.output)
        let parts = MessageText.split(text, limit: Self.contentLimit, count: { $0.unicodeScalars.count })
        let outcome = await pieces.send(send, pieces: parts) { piece, _ in
            await self.create(piece, in: send.destination)
        }
        return outcome.redacting([configuration.token])
    }

    private func create(_ content: String, in channelID: String) async -> PieceAnswer {
        let body: [UInt8]
        do {
            body = Array(try JSONCoding.encoder.encode(CreateMessage(content: content)))
        } catch {
            return .stop(.failed(reason: "cannot encode the message for Discord: \(error)"))
        }
        let request = ClientRequest(method: "POST", url: "\(configuration.apiURL)/channels/\(channelID)/messages",
                                    headers: [("Authorization", "Bot \(configuration.token)"), ("User-Agent", Self.userAgent),
                                              ("Content-Type", "application/json")],
                                    body: body, timeout: configuration.timeout)
        let response: ClientResponse
        do {
            response = try await client.send(request)
        } catch {
            return .stop(HTTPOutcome.transportFailure(error, service: "Discord"))
        }
        return Self.answer(response)
    }

    /// What an answer to Create Message means: 200 with the Message object; an error with Discord's JSON error
    /// (`message`, `code`, `errors`); a 429 with `retry_after` in float seconds.
    static func answer(_ response: ClientResponse) -> PieceAnswer {
        if (200..<300).contains(response.status) {
            guard let message = try? JSONCoding.decode(CreatedMessage.self, from: response.body, what: "Discord's answer") else {
                return .delivered(remoteID: nil, holdNext: bucketEmpty(response))
            }
            return .delivered(remoteID: message.id, holdNext: bucketEmpty(response))
        }
        let error = try? JSONCoding.decode(DiscordError.self, from: response.body, what: "Discord's answer")
        let detail = error.map(\.summary) ?? HTTPOutcome.excerpt(response.body)
        var retryAfter: Duration?
        if response.status == 429 {
            // The body's float seconds are finer than the header's whole ones.
            retryAfter = error?.retryAfter.flatMap(Self.duration(seconds:)) ?? RetryAfter.parse(response.headers["retry-after"])
        }
        var outcome = HTTPOutcome.classify(response, service: "Discord", detail: detail, retryAfter: retryAfter)
        if case .retry(let after, let reason) = outcome, response.status == 429 {
            // Which limit it was (user, global, shared) tells a reader whether other channels wait too.
            let scope = error?.global == true ? "global" : response.headers["x-ratelimit-scope"]
            outcome = .retry(after: after, reason: reason + (scope.map { " (\($0) rate limit)" } ?? ""))
        }
        return .stop(outcome)
    }

    /// "Rate Limits": when the bucket has no request left, the next one waits for `X-RateLimit-Reset-After`.
    static func bucketEmpty(_ response: ClientResponse) -> Duration? {
        guard response.headers["x-ratelimit-remaining"]?.trimmingCharacters(in: .whitespaces) == "0",
              let resetAfter = response.headers["x-ratelimit-reset-after"].flatMap({ Double($0.trimmingCharacters(in: .whitespaces)) }) else { return nil }
        return duration(seconds: resetAfter)
    }

    static func duration(seconds: Double) -> Duration? {
        guard seconds.isFinite, seconds >= 0, seconds < 86_400 * 7 else { return nil }
        return .milliseconds(Int64((seconds * 1000).rounded(.up)))
    }
}

/// Create Message's JSON body: `content` only, as the original sends it (no embeds).
struct CreateMessage: Encodable {
    let content: String
}

/// The Message object Create Message answers with; only its id matters here.
struct CreatedMessage: Decodable {
    let id: String
    let channel_id: String?
}

/// Discord's JSON error: `{"message", "code", "errors"?}`, and on a 429 `{"message", "retry_after", "global"}`.
struct DiscordError: Decodable {
    let message: String?
    let code: Int?
    let retry_after: Double?
    let global: Bool?
    /// 50035's field errors: `{"content": {"_errors": [{"code", "message"}]}}`, nested by the field's path.
    let errors: JSONValue?

    var retryAfter: Double? { retry_after }

    /// "Unknown Channel (code 10003)"; a form error adds its first field's message.
    var summary: String {
        var text = message ?? "no message"
        if let code, code != 0 { text += " (code \(code))" }
        if let errors, let first = Self.firstFieldError(errors, path: "") { text += ": \(first)" }
        return text
    }

    static func firstFieldError(_ value: JSONValue, path: String) -> String? {
        guard let object = value.objectValue else { return nil }
        if let list = object["_errors"]?.arrayValue, let first = list.first, let message = first["message"]?.stringValue {
            return path.isEmpty ? message : "\(path): \(message)"
        }
        for key in object.keys.sorted() where key != "_errors" {
            if let found = firstFieldError(object[key]!, path: path.isEmpty ? key : "\(path).\(key)") { return found }
        }
        return nil
    }
}
