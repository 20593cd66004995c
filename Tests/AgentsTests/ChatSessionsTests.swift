import Agents
import Foundation
import Testing

/// Chat conversations are held in memory between calls, keyed by a session id any key may choose: they stay
/// within their bounds whatever a caller sends.
@Suite("Chat sessions in memory")
struct ChatSessionsTests {
    static let start = Date(timeIntervalSince1970: 1_780_000_000)

    @Test("a conversation keeps its newest whole turns within its byte budget and at most 100 messages; a turn larger than the budget leaves it empty")
    func perConversation() {
        let sessions = ChatSessions(maximumConversationBytes: 100, maximumTotalBytes: 10_000, maximumConversations: 100)
        for turn in 1...3 {
            sessions.record(subject: "ana", agentID: "pal", sessionID: "s", user: "u\(turn)" + String(repeating: "x", count: 28),
                            reply: "r\(turn)" + String(repeating: "y", count: 28), now: Self.start.addingTimeInterval(Double(turn)))
        }
        let kept = sessions.history(subject: "ana", agentID: "pal", sessionID: "s", now: Self.start.addingTimeInterval(4))
        // Turns of 60 bytes in a budget of 100: the last one alone, opening with the person's message.
        #expect(kept.map { String($0.content.prefix(2)) } == ["u3", "r3"], "\(kept.map { $0.content.prefix(2) })")
        #expect(sessions.footprint == (1, 60))
        sessions.record(subject: "ana", agentID: "pal", sessionID: "s", user: String(repeating: "z", count: 200), reply: "ok", now: Self.start.addingTimeInterval(5))
        #expect(sessions.history(subject: "ana", agentID: "pal", sessionID: "s", now: Self.start.addingTimeInterval(6)).isEmpty)
        #expect(sessions.footprint.bytes == 0)

        let many = ChatSessions()
        for turn in 0..<80 { many.record(subject: "ana", agentID: "pal", sessionID: "m", user: "q\(turn)", reply: "a\(turn)", now: Self.start) }
        let history = many.history(subject: "ana", agentID: "pal", sessionID: "m", now: Self.start)
        #expect(history.count == ChatSessions.maximumMessages && history.first?.content == "q30" && history.last?.content == "a79")
    }

    @Test("all conversations together stay within the total bytes and count, the least recently used forgotten first; a day idle forgets one")
    func acrossConversations() {
        let sessions = ChatSessions(maximumConversationBytes: 1000, maximumTotalBytes: 1000, maximumConversations: 8)
        // 30 sessions of 90 bytes each, one a second: a caller opening sessions without end.
        for n in 0..<30 {
            sessions.record(subject: "ana", agentID: "pal", sessionID: "s\(n)", user: String(repeating: "u", count: 45), reply: String(repeating: "r", count: 45),
                            now: Self.start.addingTimeInterval(Double(n)))
            let (count, bytes) = sessions.footprint
            #expect(count <= 8 && bytes <= 1000, "after \(n + 1) sessions: \(count) kept, \(bytes) bytes")
        }
        let now = Self.start.addingTimeInterval(31)
        #expect(sessions.history(subject: "ana", agentID: "pal", sessionID: "s29", now: now).count == 2, "the newest is kept")
        #expect(sessions.history(subject: "ana", agentID: "pal", sessionID: "s0", now: now).isEmpty, "the oldest is forgotten")
        // Another person's session id of the same name is not this one.
        #expect(sessions.history(subject: "ben", agentID: "pal", sessionID: "s29", now: now).isEmpty)
        // A day without a turn: forgotten when next asked, and its bytes with it.
        let before = sessions.footprint
        #expect(sessions.history(subject: "ana", agentID: "pal", sessionID: "s29", now: now.addingTimeInterval(ChatSessions.idleLifetime)).isEmpty)
        #expect(sessions.footprint.conversations == before.conversations - 1 && sessions.footprint.bytes == before.bytes - 90)
    }
}
