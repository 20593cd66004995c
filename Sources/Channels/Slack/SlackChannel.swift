import ChannelAPI
import ChannelSupport
import Foundation
import HTTPClient
import JSON

/// One Slack bot's settings, read from `channels.slack` (or one of its `bots:`).
public struct SlackConfiguration: Sendable, Equatable {
    /// The configured id SOUL.yaml names: `slack`, `slack-<agent>`.
    public var id: String
    /// The bot token (`xoxb-…`): a secret.
    public var botToken: String
    /// Socket Mode's app-level token (`xapp-…`), for inbound only: a secret, read and kept, unused for sending.
    public var appToken: String?
    /// The Web API's base, `https://slack.com/api` unless `api_url` says otherwise.
    public var apiURL: String
    public var caFile: String?
    public var timeout: Duration

    public init(id: String, botToken: String, appToken: String? = nil, apiURL: String = "https://slack.com/api", caFile: String? = nil,
                timeout: Duration = .seconds(10)) {
        self.id = id
        self.botToken = botToken
        self.appToken = appToken
        self.apiURL = apiURL
        self.caFile = caFile
        self.timeout = timeout
    }
}

/// Posts outputs to Slack with chat.postMessage: plain `text`, as the original sends it, in pieces of at most
/// 40,000 characters (Slack refuses longer text with `msg_too_long`).
public final class SlackChannel: OutboundChannel {
    public let configuration: SlackConfiguration
    private let client: HTTP2Client
    private let pieces = PieceDelivery()

    /// Slack's hard limit for `text` ("Truncating content", chat.postMessage's `msg_too_long`).
    public static let textLimit = 40_000

    public init(configuration: SlackConfiguration) {
        self.configuration = configuration
        client = HTTP2Client(configuration: HTTP2ClientConfiguration(caFile: configuration.caFile))
    }

    public var name: String { configuration.id }

    /// A conversation id (`C…` public channel, `G…` private channel or group DM, `D…` direct message) or a user
    /// id (`U…`, `W…` on Enterprise Grid), which chat.postMessage turns into the DM with that user.
    public func validate(destination: String) throws(DestinationError) {
        guard Self.isConversationID(destination) else {
            throw .invalid("Slack destination '\(destination)' is not a conversation id (C…, G…, D…) or a user id (U…, W…); "
                           + "use the id from the channel's details in Slack, not its name")
        }
    }

    static func isConversationID(_ text: String) -> Bool {
        guard let first = text.first, "CGDUW".contains(first), (9...24).contains(text.count) else { return false }
        return text.unicodeScalars.allSatisfy { ("A"..."Z").contains($0) || ("0"..."9").contains($0) }
    }

    public func attempt(_ send: ChannelSend) async -> ChannelSendOutcome {
        let text = MessageText.body(of: send.output)
        let parts = MessageText.split(text, limit: Self.textLimit, count: { $0.unicodeScalars.count })
        let outcome = await pieces.send(send, pieces: parts) { piece, _ in
            await self.post(piece, to: send.destination)
        }
        return outcome.redacting([configuration.botToken, configuration.appToken].compactMap { $0 })
    }

    private func post(_ text: String, to channel: String) async -> PieceAnswer {
        let body: [UInt8]
        do {
            body = Array(try JSONCoding.encoder.encode(PostMessage(channel: channel, text: text)))
        } catch {
            return .stop(.failed(reason: "cannot encode the message for Slack: \(error)"))
        }
        let request = ClientRequest(method: "POST", url: configuration.apiURL + "/chat.postMessage",
                                    headers: [("Authorization", "Bearer \(configuration.botToken)"),
                                              ("Content-Type", "application/json; charset=utf-8"),
                                              ("Accept", "application/json")],
                                    body: body, timeout: configuration.timeout)
        let response: ClientResponse
        do {
            response = try await client.send(request)
        } catch {
            return .stop(HTTPOutcome.transportFailure(error, service: "Slack"))
        }
        return Self.answer(response)
    }

    /// What an answer to chat.postMessage means. Slack answers 200 with `ok` for everything it understood; a
    /// refusal is `ok: false` with an error code.
    static func answer(_ response: ClientResponse) -> PieceAnswer {
        let answer = try? JSONCoding.decode(PostMessageAnswer.self, from: response.body, what: "Slack's answer")
        guard response.status == 200 else {
            // 429 with Retry-After and `ratelimited`; 5xx from Slack's edge with a text body.
            let detail = answer?.error ?? HTTPOutcome.excerpt(response.body)
            return .stop(HTTPOutcome.classify(response, service: "Slack", detail: detail))
        }
        guard let answer else {
            return .stop(.retry(after: nil, reason: "Slack answered 200 with a body that is not a Web API answer: "
                                + (HTTPOutcome.excerpt(response.body) ?? "(empty)")))
        }
        if answer.ok {
            return .delivered(remoteID: answer.ts)
        }
        let code = answer.error ?? "unknown_error"
        let reason = "Slack answered \(code)" + (answer.needed.map { " (needs the scope \($0))" } ?? "")
        switch SlackError(rawValue: code).action {
        case .retry: return .stop(.retry(after: RetryAfter.parse(response.headers["retry-after"]), reason: reason))
        case .fail: return .stop(.failed(reason: reason))
        case .reject: return .stop(.rejected(reason: reason))
        }
    }
}

/// chat.postMessage's JSON body: the channel and plain text, nothing else (the original sends no blocks,
/// mrkdwn options or thread_ts).
struct PostMessage: Encodable {
    let channel: String
    let text: String
}

/// chat.postMessage's answer: `{"ok": true, "channel", "ts", "message"}` or `{"ok": false, "error", "needed"?}`.
struct PostMessageAnswer: Decodable {
    let ok: Bool
    let error: String?
    let ts: String?
    let channel: String?
    /// missing_scope's scope.
    let needed: String?
}

/// Slack's error codes as values; the ones not named here are refusals ("an open enum": a new code breaks nothing).
public struct SlackError: RawRepresentable, Sendable, Hashable {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let invalidAuth = SlackError(rawValue: "invalid_auth")
    public static let notAuthed = SlackError(rawValue: "not_authed")
    public static let tokenRevoked = SlackError(rawValue: "token_revoked")
    public static let accountInactive = SlackError(rawValue: "account_inactive")
    public static let channelNotFound = SlackError(rawValue: "channel_not_found")
    public static let notInChannel = SlackError(rawValue: "not_in_channel")
    public static let isArchived = SlackError(rawValue: "is_archived")
    public static let messageTooLong = SlackError(rawValue: "msg_too_long")
    public static let rateLimited = SlackError(rawValue: "ratelimited")

    enum Action { case retry, reject, fail }

    /// Slack's "Errors" for every Web API method: rate limits and its own passing trouble are worth another try;
    /// a text Slack finds too long cannot be sent as it is (our pieces are within the limit, so it should not occur);
    /// the rest (auth, the channel, permissions) are refusals.
    var action: Action {
        switch rawValue {
        case "ratelimited", "rate_limited", "internal_error", "fatal_error", "service_unavailable", "request_timeout",
             "team_added_to_org":
            .retry
        case "msg_too_long", "no_text", "invalid_json", "invalid_blocks", "invalid_blocks_format", "invalid_arguments":
            .fail
        default:
            .reject
        }
    }
}
