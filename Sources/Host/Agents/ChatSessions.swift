import Foundation
import LLM
import Synchronization

/// Conversations kept between chat calls with the same `session_id`, as Soulacy keeps them: in memory, per person,
/// agent and session, at most 100 messages, forgotten after a day without a turn.
public final class ChatSessions: Sendable {
    public static let maximumMessages = 100
    public static let idleLifetime: TimeInterval = 24 * 3600

    private struct Conversation {
        var messages: [ChatMessage]
        var lastUsed: Date
    }

    private let conversations = Mutex<[String: Conversation]>([:])

    public init() {}

    static func key(subject: String, agentID: String, sessionID: String) -> String { [subject, agentID, sessionID].joined(separator: "\u{0}") }

    /// The conversation so far, oldest first (empty for a new or expired session).
    public func history(subject: String, agentID: String, sessionID: String, now: Date = Date()) -> [ChatMessage] {
        conversations.withLock { all in
            all = all.filter { now.timeIntervalSince($0.value.lastUsed) < Self.idleLifetime }
            return all[Self.key(subject: subject, agentID: agentID, sessionID: sessionID)]?.messages ?? []
        }
    }

    /// Adds a finished turn.
    public func record(subject: String, agentID: String, sessionID: String, user: String, reply: String, now: Date = Date()) {
        conversations.withLock { all in
            let key = Self.key(subject: subject, agentID: agentID, sessionID: sessionID)
            var conversation = all[key] ?? Conversation(messages: [], lastUsed: now)
            conversation.messages += [.user(user), .assistant(reply)]
            if conversation.messages.count > Self.maximumMessages { conversation.messages.removeFirst(conversation.messages.count - Self.maximumMessages) }
            conversation.lastUsed = now
            all[key] = conversation
        }
    }
}
