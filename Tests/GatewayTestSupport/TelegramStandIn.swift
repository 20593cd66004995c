import APIKit
import Foundation

/// The Telegram Bot API stand-in (`telegram_standin.py`): sendMessage with the API's checks (chat exists, text
/// 1-4096 UTF-16 units, parse_mode parsed only when given), getUpdates long polling with offsets that confirm,
/// 401 for an unknown token. Its chats: 424242 (private), -1001234567890 (supergroup), @soulacy_test (channel).
public final class TelegramStandIn: StandInProcess, @unchecked Sendable {
    public static let token = "123456:ABC-standin_telegram_token_0123456789"
    public static let privateChat: Int64 = 424242
    public static let groupChat: Int64 = -1001234567890

    public static func start() async throws -> TelegramStandIn {
        let standIn = TelegramStandIn(directory: TestGateway.makeTemporaryDirectory())
        try await standIn.start()
        return standIn
    }

    init(directory: String) {
        super.init(script: "telegram_standin.py", directory: directory, arguments: ["--token", Self.token])
    }

    /// Queues updates (Bot API Updates without update_id, or the stand-in's `{"text", "chat_id", "from_id"}`
    /// shortcut for a private-chat message); returns the update ids it gave them.
    @discardableResult
    public func inject(_ updates: [JSONValue]) async throws -> [Int64] {
        let answer = try await control("POST", "/control/updates", json: ["updates": .array(updates)])
        return (answer["update_ids"]?.arrayValue ?? []).compactMap { $0.numberValue.map { Int64($0) } }
    }

    /// A text message from `fromID` (with `username`) in a chat of `type`, as a Bot API Update.
    public static func message(_ text: String, chat: Int64, type: String, from fromID: Int64, username: String? = nil) -> JSONValue {
        var from: [String: JSONValue] = ["id": .number(Double(fromID)), "is_bot": false, "first_name": "Test"]
        if let username { from["username"] = .string(username) }
        var chatObject: [String: JSONValue] = ["id": .number(Double(chat)), "type": .string(type)]
        chatObject[type == "private" ? "first_name" : "title"] = type == "private" ? "Test" : "Soulacy Test Group"
        return ["message": ["message_id": 7, "from": .object(from), "chat": .object(chatObject), "date": .number(Date().timeIntervalSince1970.rounded()),
                            "text": .string(text)]]
    }

    /// Updates not yet confirmed by a getUpdates with a higher offset.
    public func pending() async throws -> [JSONValue] {
        try await control("GET", "/control/pending")["updates"]?.arrayValue ?? []
    }

    /// The Messages sendMessage accepted, in order.
    public func messages() async throws -> [JSONValue] {
        try await control("GET", "/control/messages")["messages"]?.arrayValue ?? []
    }

    /// Later sends to `chatID` answer 403 "Forbidden: bot was blocked by the user".
    public func block(chatID: Int64) async throws {
        try await control("POST", "/control/block", json: ["chat_id": .number(Double(chatID))])
    }
}
