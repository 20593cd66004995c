import Foundation
import LLM
import Synchronization

/// Conversations kept between chat calls with the same `session_id`, as Soulacy keeps them: in memory, per person,
/// agent and session, at most 100 messages, forgotten after a day without a turn.
///
/// Bounded, since any key may open sessions at will: each conversation keeps its newest messages within
/// `maximumConversationBytes`, and all of them together within `maximumTotalBytes` and `maximumConversations`,
/// the least recently used forgotten first (a forgotten session starts afresh, as an expired one does).
public final class ChatSessions: Sendable {
    public static let maximumMessages = 100
    public static let idleLifetime: TimeInterval = 24 * 3600
    public let maximumConversationBytes: Int
    public let maximumTotalBytes: Int
    public let maximumConversations: Int

    private struct Conversation {
        var messages: [ChatMessage]
        var bytes: Int
        var lastUsed: Date
    }

    private struct State {
        var conversations: [String: Conversation] = [:]
        var totalBytes = 0
    }

    private let state = Mutex(State())

    public init(maximumConversationBytes: Int = 1 << 20, maximumTotalBytes: Int = 64 << 20, maximumConversations: Int = 10_000) {
        self.maximumConversationBytes = maximumConversationBytes
        self.maximumTotalBytes = maximumTotalBytes
        self.maximumConversations = maximumConversations
    }

    static func key(subject: String, agentID: String, sessionID: String) -> String { [subject, agentID, sessionID].joined(separator: "\u{0}") }

    /// How many conversations are kept, and their bytes (for tests and the bounds' checks).
    public var footprint: (conversations: Int, bytes: Int) { state.withLock { ($0.conversations.count, $0.totalBytes) } }

    /// The conversation so far, oldest first (empty for a new, expired or forgotten session).
    public func history(subject: String, agentID: String, sessionID: String, now: Date = Date()) -> [ChatMessage] {
        let key = Self.key(subject: subject, agentID: agentID, sessionID: sessionID)
        return state.withLock { s in
            guard let conversation = s.conversations[key] else { return [] }
            guard now.timeIntervalSince(conversation.lastUsed) < Self.idleLifetime else {
                s.totalBytes -= conversation.bytes
                s.conversations[key] = nil
                return []
            }
            return conversation.messages
        }
    }

    /// Adds a finished turn.
    public func record(subject: String, agentID: String, sessionID: String, user: String, reply: String, now: Date = Date()) {
        let key = Self.key(subject: subject, agentID: agentID, sessionID: sessionID)
        state.withLock { s in
            var conversation = s.conversations[key] ?? Conversation(messages: [], bytes: 0, lastUsed: now)
            s.totalBytes -= conversation.bytes
            conversation.messages += [.user(user), .assistant(reply)]
            conversation.bytes += user.utf8.count + reply.utf8.count
            // The newest whole turns that fit (a history opens with the person's message, as providers require): a
            // turn larger than the whole budget leaves the conversation empty.
            var drop = max(0, conversation.messages.count - Self.maximumMessages)
            var bytes = conversation.bytes - conversation.messages.prefix(drop).reduce(0) { $0 + $1.content.utf8.count }
            while bytes > maximumConversationBytes, drop < conversation.messages.count {
                bytes -= conversation.messages[drop...].prefix(2).reduce(0) { $0 + $1.content.utf8.count }
                drop = min(drop + 2, conversation.messages.count)
            }
            conversation.messages.removeFirst(drop)
            conversation.bytes = bytes
            conversation.lastUsed = now
            s.conversations[key] = conversation
            s.totalBytes += bytes
            if s.totalBytes > maximumTotalBytes || s.conversations.count > maximumConversations { forgetLeastRecent(&s, now: now) }
        }
    }

    /// Drops expired conversations, then the least recently used until both bounds have a tenth to spare (so the
    /// sort is paid once per many turns, not on each).
    private func forgetLeastRecent(_ s: inout State, now: Date) {
        for (key, conversation) in s.conversations where now.timeIntervalSince(conversation.lastUsed) >= Self.idleLifetime {
            s.totalBytes -= conversation.bytes
            s.conversations[key] = nil
        }
        let bytesGoal = maximumTotalBytes - maximumTotalBytes / 10, countGoal = maximumConversations - maximumConversations / 10
        guard s.totalBytes > bytesGoal || s.conversations.count > countGoal else { return }
        for (key, conversation) in s.conversations.sorted(by: { $0.value.lastUsed < $1.value.lastUsed }) {
            guard s.totalBytes > bytesGoal || s.conversations.count > countGoal else { break }
            s.totalBytes -= conversation.bytes
            s.conversations[key] = nil
        }
    }
}
