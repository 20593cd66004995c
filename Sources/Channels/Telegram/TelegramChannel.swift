import ChannelAPI
import ChannelSupport
import Foundation
import HTTPClient
import JSON

/// One Telegram bot's outbound side: `sendMessage` to a numeric chat id, plain text (the original sends no
/// `parse_mode`), a long output split at Telegram's 4096 UTF-16 units and sent piece by piece, in order.
///
/// A send whose pieces went through only in part is continued on its next attempt from the first piece not yet
/// delivered: `PieceDelivery` remembers, per `send.id`, how many pieces Telegram took. That memory lives in this
/// process only; after a restart a retried send starts again from its first piece (at least once per piece).
/// Delivered reports the last piece's message id; a reason about one piece of several starts "piece 2 of 3".
public final class TelegramChannel: OutboundChannel {
    /// Telegram's limit for one message's text, in UTF-16 code units.
    public static let messageLimit = 4096

    public let name: String
    /// The agent whose inbound messages this bot carries (nil for an outbound-only bot).
    public let agentID: String?
    /// A label for people (`bot_name`); never used to address anything.
    public let botName: String?
    /// `default_output_to`, already checked to be a chat id.
    public let defaultDestination: String?
    let api: TelegramAPI
    let client: HTTP2Client
    /// How long one sendMessage may take (`timeout_seconds`, 35 s as the original's client).
    public let requestTimeout: Duration
    private let pieces = PieceDelivery(reporting: .last, wording: .leading)

    init(name: String, agentID: String?, botName: String?, defaultDestination: String?, api: TelegramAPI, client: HTTP2Client, requestTimeout: Duration) {
        self.name = name
        self.agentID = agentID
        self.botName = botName
        self.defaultDestination = defaultDestination
        self.api = api
        self.client = client
        self.requestTimeout = requestTimeout
    }

    public func validate(destination: String) throws(DestinationError) {
        _ = try TelegramChatID.parse(destination)
    }

    public func attempt(_ send: ChannelSend) async -> ChannelSendOutcome {
        let chatID: Int64
        do { chatID = try TelegramChatID.parse(send.destination) } catch { return .failed(reason: error.description) }
        let texts = MessageText.split(MessageText.body(of: send.output), limit: Self.messageLimit, count: MessageText.utf16Count)
            .filter { !$0.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty }
        guard !texts.isEmpty else { return .failed(reason: "the output has no text to send to Telegram") }
        let outcome = await pieces.send(send, pieces: texts) { text, _ in PieceAnswer(await self.sendPiece(text, to: chatID)) }
        // The token travels in every URL, so a reason quoting one must not carry it.
        return outcome.mappingReason(api.redact)
    }

    /// One `sendMessage`; `.delivered` carries the message id Telegram gave the piece.
    private func sendPiece(_ text: String, to chatID: Int64) async -> ChannelSendOutcome {
        struct SendMessage: Encodable {
            let chat_id: Int64
            let text: String
        }
        let request: ClientRequest
        do {
            request = try api.request("sendMessage", body: SendMessage(chat_id: chatID, text: text), timeout: requestTimeout)
        } catch {
            return .failed(reason: "cannot encode the message for Telegram: \(error)")
        }
        let response: ClientResponse
        do {
            response = try await client.send(request)
        } catch {
            return HTTPOutcome.transportFailure(error, service: "Telegram")
        }
        let answer = TelegramAnswer<TelegramMessage>.decode(response.body)
        if (200..<300).contains(response.status) {
            // Telegram took it; an answer we cannot read must not make us send it again.
            return .delivered(remoteID: answer?.result.map { String($0.message_id) })
        }
        var detail = answer?.description ?? HTTPOutcome.excerpt(response.body)
        if let target = answer?.parameters?.migrate_to_chat_id {
            detail = (detail ?? "the group moved") + " (it is now chat \(target): use that id as `to`)"
        }
        let retryAfter = answer?.parameters?.retry_after.map { Duration.seconds(max(0, $0)) }
        return HTTPOutcome.classify(response, service: "Telegram", detail: detail, retryAfter: retryAfter)
    }
}
