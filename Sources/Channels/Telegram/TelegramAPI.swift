import ChannelAPI
import Foundation
import HTTPClient
import JSON

/// The Bot API as this channel speaks it: `POST <api_url>/bot<token>/<method>` with a JSON body, answers
/// `{"ok", "result" | "description", "error_code", "parameters"}` (https://core.telegram.org/bots/api).
struct TelegramAPI: Sendable {
    /// Never with a trailing slash.
    let baseURL: String
    let token: String

    func url(_ method: String) -> String { "\(baseURL)/bot\(token)/\(method)" }

    /// The token travels in every URL, so any text that may quote a URL (libcurl's errors, an answer) goes
    /// through here before it reaches a reason or an error.
    func redact(_ text: String) -> String {
        token.isEmpty ? text : text.replacingOccurrences(of: token, with: "<telegram-bot-token>")
    }

    func request(_ method: String, body: some Encodable, timeout: Duration) throws -> ClientRequest {
        ClientRequest(method: "POST", url: url(method), headers: [("Content-Type", "application/json")],
                      body: Array(try JSONCoding.encoder.encode(body)), timeout: timeout)
    }
}

/// Every Bot API answer; `result` is the method's own value.
struct TelegramAnswer<Result: Decodable>: Decodable {
    struct Parameters: Decodable {
        let retry_after: Int?
        let migrate_to_chat_id: Int64?
    }

    let ok: Bool
    let result: Result?
    let description: String?
    let error_code: Int?
    let parameters: Parameters?

    static func decode(_ body: [UInt8]) -> TelegramAnswer? {
        try? JSONCoding.decode(TelegramAnswer.self, from: body, what: "a Telegram answer")
    }
}

/// The parts of a Message this channel reads: what sendMessage answers, what getUpdates carries.
struct TelegramMessage: Decodable {
    struct User: Decodable {
        let id: Int64
        let username: String?
    }

    struct Chat: Decodable {
        let id: Int64
        let type: String?
    }

    let message_id: Int64
    let from: User?
    let chat: Chat?
    let text: String?
}

struct TelegramUpdate: Decodable {
    let update_id: Int64
    let message: TelegramMessage?
}

/// A chat id as the original takes `to`: an integer (negative for groups, supergroups and channels).
enum TelegramChatID {
    static func parse(_ text: String) throws(DestinationError) -> Int64 {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        if trimmed.hasPrefix("@") {
            throw .invalid("Telegram destination '\(trimmed)': a @username is not supported, because the original Soulacy sends numeric chat ids "
                + "only (it reads `to` as an integer, so '@name' would go to chat 0); use the chat's numeric id, e.g. -1001234567890 for a "
                + "channel or group (it is in getUpdates, or a forwarded message shows it)")
        }
        guard let id = Int64(trimmed), id != 0 else {
            throw .invalid("Telegram destination '\(trimmed)' is not a chat id: use the numeric chat id, an integer (negative for groups and channels)")
        }
        return id
    }
}
