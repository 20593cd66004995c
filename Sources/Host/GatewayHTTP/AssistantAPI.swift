import Storage
import Agents
import APIKit
import Crypto
import Foundation
import LLM
import Synchronization
import Identity
import Mobile
import ChannelAPI

/// Chat and the agent list: the Siri/Shortcuts and watch surface.
public struct AssistantAPI: Sendable {
    let runs: AgentRuns
    let catalog: AgentCatalog
    let sessions: ChatSessions

    public init(runs: AgentRuns, catalog: AgentCatalog, sessions: ChatSessions) {
        self.runs = runs
        self.catalog = catalog
        self.sessions = sessions
    }

    public var routes: [Route] {
        [
            Route(.POST, "/api/v1/chat", role: .viewer, summary: "Ask an agent and get its reply", handler: chat),
            Route(.POST, "/api/v1/chat/stream", role: .viewer, summary: "Ask an agent; the reply streams as server-sent events", handler: chatStream),
            Route(.GET, "/api/v1/chat/stream", role: .viewer, summary: "The same stream, asked with query parameters", handler: chatStream),
            Route(.POST, "/api/v1/chat/cancel", role: .viewer, summary: "Stop one of your runs (its run id, or a chat's session id)", handler: cancel),
            Route(.POST, "/chat", role: .viewer, summary: "Ask an agent (watch voice mode)", handler: chat),
        ]
    }

    /// The chat request as the original reads it: `agent_id` (optional here when only one agent answers chat) and
    /// `text`, `session_id` to continue a conversation, `response_mode` text or voice.
    struct ChatBody: Decodable {
        var text: String
        var agentID: String?
        var sessionID: String?
        var responseMode: String?

        enum CodingKeys: String, CodingKey {
            case text
            case agentID = "agent_id"
            case sessionID = "session_id"
            case responseMode = "response_mode"
        }
    }

    /// A chat request, checked.
    struct ChatRequest {
        var agentID: String
        var text: String
        var sessionID: String
        var voice: Bool
    }

    func chatRequest(_ request: HTTPRequest) throws -> ChatRequest {
        // GET /chat/stream carries the same names in its query.
        let body = request.method == "GET"
            ? try JSONValueDecoder().decode(ChatBody.self, from: .object(request.query.mapValues(JSONValue.string)))
            : try request.decode(ChatBody.self)
        // A URL carries less than a body: GET /chat/stream takes at most 2,000 characters of text.
        let text = try body.text.limited(to: request.method == "GET" ? 2000 : 100_000, field: "text")
        // As the original: an empty text is refused with agent_id's words, never run as an empty turn.
        guard !text.isEmpty else { throw Self.agentAndTextRequired(field: "text") }
        let visible = catalog.current.visibleAgents.filter(\.isOn)
        let agentID: String
        if let id = try body.agentID.limited(to: 128, field: "agent_id"), !id.isEmpty {
            agentID = id
        } else if visible.count == 1 {
            agentID = visible[0].id
        } else {
            throw Self.agentAndTextRequired(field: "agent_id")
        }
        // An unknown agent is a missing resource, as in the original (404 "agent not found").
        guard visible.contains(where: { $0.id == agentID }) else { throw APIError.notFound("agent_id: no agent '\(agentID)'") }
        let given = try body.sessionID.limited(to: 128, field: "session_id").map(SchemaWhitespace.trim)
        let sessionID = given.flatMap { $0.isEmpty ? nil : $0 } ?? "http-" + UUID().uuidString.lowercased()
        let mode = body.responseMode.map(SchemaWhitespace.trim)?.lowercased() ?? ""
        guard ["", "text", "voice"].contains(mode) else { throw APIError.invalidField("response_mode", "response_mode must be text or voice") }
        return ChatRequest(agentID: agentID, text: text, sessionID: sessionID, voice: mode == "voice")
    }

    /// The original's refusal of a chat without its agent or its text; `field` names the one missing.
    static func agentAndTextRequired(field: String) -> APIError {
        APIError(status: 400, code: "missing_field", message: "agent_id and text are required", field: field)
    }

    @Sendable func chat(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let ask = try chatRequest(request)
        let history = sessions.history(subject: caller.subject, agentID: ask.agentID, sessionID: ask.sessionID)
        let (response, record) = try await runs.runToEnd(agentID: ask.agentID, input: ask.text, trigger: .chat, output: .replyOnly, subject: caller.subject,
                                                         chat: ChatContext(sessionID: ask.sessionID, history: history, voice: ask.voice)) { record in
            let reply = record.reply ?? ""
            var answer = ChatReply(reply: reply, parts: reply.isEmpty ? [] : [TextPart(text: reply)], sessionID: record.sessionID, runID: record.id,
                                   responseID: record.id, agentID: ask.agentID)
            if ask.voice, let spoken = record.spokenReply, !spoken.isEmpty { answer.spokenReply = spoken }
            return .json(answer)
        }
        if record.status == .succeeded {
            sessions.record(subject: caller.subject, agentID: ask.agentID, sessionID: ask.sessionID, user: ask.text, reply: record.reply ?? "")
        }
        return response
    }

    /// One server-sent event frame; newlines inside the data go as the two characters `\n`, as the original sends them.
    static func frame(event: String? = nil, _ data: String) -> String {
        let escaped = data.replacingOccurrences(of: "\r", with: "").replacingOccurrences(of: "\n", with: "\\n")
        return (event.map { "event: \($0)\n" } ?? "") + "data: \(escaped)\n\n"
    }

    /// `/chat/stream`: `event: run` first, the reply's pieces as `data:` frames (whole at the end for an agent that does
    /// not stream), `event: tool_confirm` while a tool waits for a decision, `event: error` or `data: [DONE]` last.
    @Sendable func chatStream(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let ask = try chatRequest(request)
        let stream = ResponseStream()
        let streamed = Mutex(false)
        let history = sessions.history(subject: caller.subject, agentID: ask.agentID, sessionID: ask.sessionID)
        // The run is announced first, before any piece of its reply can be written.
        let runID = AgentRuns.newRunID()
        stream.write(Self.frame(event: "run", (try? JSONCoding.text(RunFrame(runID: runID, sessionID: ask.sessionID))) ?? "{}"))
        var context = ChatContext(sessionID: ask.sessionID, history: history, voice: ask.voice, onText: { piece in
            streamed.withLock { $0 = true }
            stream.write(Self.frame(piece))
        }, onToolConfirm: { callID, call in
            let confirm = ToolConfirmFrame(callID: callID, tool: call.name, args: call.arguments, reason: "\(ask.agentID) wants to run \(call.name)")
            stream.write(Self.frame(event: "tool_confirm", (try? JSONCoding.text(confirm)) ?? "{}"))
        })
        context.runID = runID
        let started: StartedRun
        do {
            started = try await runs.start(agentID: ask.agentID, input: ask.text, trigger: .chat, output: .replyOnly, subject: caller.subject, chat: context)
        } catch {
            throw APIError.runRefused(error)
        }
        let runs = self.runs
        let sessions = self.sessions
        Task {
            let record = await runs.wait(runID: started.runID)
            if let record, record.status == .succeeded {
                let reply = record.reply ?? ""
                if !streamed.withLock({ $0 }), !reply.isEmpty { stream.write(Self.frame(reply)) }
                sessions.record(subject: caller.subject, agentID: ask.agentID, sessionID: ask.sessionID, user: ask.text, reply: reply)
                stream.write(Self.frame("[DONE]"))
            } else {
                stream.write(Self.frame(event: "error", "the agent did not answer: \(record?.error ?? "the run vanished")"))
            }
            stream.finish()
        }
        return .streaming(stream, headers: [("Content-Type", "text/event-stream"), ("Cache-Control", "no-cache"), ("X-Accel-Buffering", "no")])
    }

    /// The original's `/chat/cancel {run_id}`; for `/chat` the id may be the session id.
    struct CancelRequest: Decodable {
        var runID: String
        enum CodingKeys: String, CodingKey { case runID = "run_id" }
    }

    @Sendable func cancel(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let id = try request.decode(CancelRequest.self).runID.limited(to: 200, field: "run_id")
        guard let cancelled = await runs.cancel(id, subject: caller.subject) else {
            throw APIError.notFound("run not found — it may have already finished")
        }
        return .json(Cancelled(cancelled: cancelled))
    }
}

// MARK: Answers, in the original's field names

extension AssistantAPI {
    /// A piece of a reply as the original's `parts` carry it.
    struct TextPart: Encodable {
        var type = "text"
        var text: String
    }

    struct ChatReply: Encodable {
        var reply: String
        var parts: [TextPart]
        var sessionID, runID, responseID, agentID: String
        var spokenReply: String?

        enum CodingKeys: String, CodingKey {
            case reply, parts
            case sessionID = "session_id", runID = "run_id", responseID = "response_id", agentID = "agent_id", spokenReply = "spoken_reply"
        }
    }

    struct Cancelled: Encodable {
        var ok = true
        var cancelled: String
    }

    /// `/chat/stream`'s first frame (`event: run`).
    struct RunFrame: Encodable {
        var runID, sessionID: String

        enum CodingKeys: String, CodingKey {
            case runID = "run_id", sessionID = "session_id"
        }
    }

    /// `event: tool_confirm`: a tool waits for a decision (on the approvals broker).
    struct ToolConfirmFrame: Encodable {
        var callID, tool: String
        var args: JSONValue
        var reason: String

        enum CodingKeys: String, CodingKey {
            case tool, args, reason
            case callID = "call_id"
        }
    }
}
