import ChannelAPI
import ChannelSupport
import Foundation
import HTTPClient
import JSON

/// Which inbound messages may start a run, as the original decides (soulacy-personal's activation policy):
/// empty text never; groups not at all with `ignore_groups` (the default); only listed chats and people when the
/// allow-lists are set; in a group only a message that starts with the trigger phrase, which is stripped; in a
/// private chat every message, the phrase stripped if it is there.
public struct TelegramActivation: Sendable, Equatable {
    public static let defaultTriggerPhrase = "!soulacy"

    public var triggerPhrase: String
    public var ignoreGroups: Bool
    /// Chat ids as text; empty: every chat.
    public var allowedChatIDs: [String]
    /// User ids as text; empty: everyone.
    public var allowedUserIDs: [String]

    public init(triggerPhrase: String = defaultTriggerPhrase, ignoreGroups: Bool = true, allowedChatIDs: [String] = [], allowedUserIDs: [String] = []) {
        self.triggerPhrase = triggerPhrase
        self.ignoreGroups = ignoreGroups
        self.allowedChatIDs = allowedChatIDs
        self.allowedUserIDs = allowedUserIDs
    }

    /// The text the agent gets, or nil when the message does not activate it.
    public func apply(text: String, chatID: String, userID: String, isGroup: Bool) -> String? {
        let text = text.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !text.isEmpty else { return nil }
        if ignoreGroups && isGroup { return nil }
        guard allowedChatIDs.isEmpty || allowedChatIDs.contains(chatID) else { return nil }
        guard allowedUserIDs.isEmpty || allowedUserIDs.contains(userID) else { return nil }
        let phrase = triggerPhrase.trimmingCharacters(in: .whitespacesAndNewlines)
        let stripped = phrase.isEmpty || !text.hasPrefix(phrase) ? text : String(text.dropFirst(phrase.count)).trimmingCharacters(in: .whitespacesAndNewlines)
        if phrase.isEmpty || !isGroup { return stripped.isEmpty ? text : stripped }
        guard text.hasPrefix(phrase) else { return nil }
        // A bare phrase still reaches the agent, as the phrase itself.
        return stripped.isEmpty ? phrase : stripped
    }
}

/// Trouble fetching updates, in words fit for a log line (never the token).
public struct TelegramPollError: Error, Sendable, CustomStringConvertible {
    public let description: String
}

/// One bot's inbound side: `getUpdates` long polling for text messages to its agent. The cursor is the next
/// `offset` (the last update id + 1); passing it confirms everything before it to Telegram, including updates the
/// activation rules skipped, so a skipped message is never fetched again.
public final class TelegramPoller: InboundPoller {
    public let channel: String
    public let agentID: String
    public let activation: TelegramActivation
    let api: TelegramAPI
    let client: HTTP2Client
    let requestTimeout: Duration

    init(channel: String, agentID: String, activation: TelegramActivation, api: TelegramAPI, client: HTTP2Client, requestTimeout: Duration) {
        self.channel = channel
        self.agentID = agentID
        self.activation = activation
        self.api = api
        self.client = client
        self.requestTimeout = requestTimeout
    }

    public func poll(after cursor: String?, timeout: Duration) async throws -> InboundBatch {
        struct GetUpdates: Encodable {
            let offset: Int64?
            let timeout: Int64
            let allowed_updates: [String]
        }
        var offset: Int64?
        if let cursor {
            guard let value = Int64(cursor) else { throw TelegramPollError(description: "Telegram cursor '\(cursor)' is not an update offset") }
            offset = value
        }
        let seconds = max(0, timeout.components.seconds)
        // The request outlives the long poll it asks for, or every quiet poll would end as a timeout.
        let request = try api.request("getUpdates", body: GetUpdates(offset: offset, timeout: seconds, allowed_updates: ["message"]),
                                      timeout: max(requestTimeout, .seconds(seconds + 10)))
        let response: ClientResponse
        do {
            response = try await client.send(request)
        } catch {
            throw TelegramPollError(description: api.redact("could not reach Telegram: \(error.description)"))
        }
        let answer = TelegramAnswer<[TelegramUpdate]>.decode(response.body)
        guard (200..<300).contains(response.status), let answer, answer.ok, let updates = answer.result else {
            let detail = answer?.description ?? HTTPOutcome.excerpt(response.body) ?? "no readable answer"
            throw TelegramPollError(description: api.redact("Telegram getUpdates answered \(response.status): \(detail)"))
        }
        var messages: [InboundMessage] = []
        var next = offset
        for update in updates {
            // Saturating: the id is the server's to write, and a wrapped one must not trap.
            next = max(next ?? 0, update.update_id == .max ? .max : update.update_id + 1)
            if let message = inbound(update) { messages.append(message) }
        }
        return InboundBatch(messages: messages, cursor: next.map(String.init))
    }

    /// A text message that activates the agent, or nil (another kind of update, no text, or skipped by the rules).
    func inbound(_ update: TelegramUpdate) -> InboundMessage? {
        guard let message = update.message, let text = message.text, let chat = message.chat else { return nil }
        let chatID = String(chat.id)
        // A message sent on behalf of a chat has no sender of its own: the chat stands for it.
        let senderID = message.from.map { String($0.id) } ?? chatID
        let isDirect = chat.type == "private"
        guard let activated = activation.apply(text: text, chatID: chatID, userID: senderID, isGroup: !isDirect) else { return nil }
        return InboundMessage(id: String(update.update_id), replyTo: chatID, senderID: senderID, senderName: message.from?.username,
                              text: activated, isDirect: isDirect)
    }
}
