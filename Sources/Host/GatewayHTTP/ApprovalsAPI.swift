import Storage
import Approvals
import Agents
import APIKit
import Crypto
import Foundation
import LLM
import Synchronization
import Identity
import Mobile
import ChannelAPI

/// Approvals over HTTP: runs ask, people answer from any surface; the broker keeps it to one decision.
public struct ApprovalsAPI: Sendable {
    let broker: ApprovalsBroker
    let catalog: AgentCatalog
    let runs: AgentRuns
    /// The longest one request waits for a decision; a run still waiting asks again (GET …/approvals/:id?wait=true).
    let longPoll: Duration

    public init(broker: ApprovalsBroker, catalog: AgentCatalog, runs: AgentRuns, longPoll: Duration) {
        self.broker = broker
        self.catalog = catalog
        self.runs = runs
        self.longPoll = longPoll
    }

    public var routes: [Route] {
        var routes = [
            Route(.POST, "/api/v1/approvals", role: .operator, summary: "Ask for approval of a tool call and wait for the decision", handler: ask),
            Route(.GET, "/api/v1/approvals/:id", role: .viewer, summary: "One approval with its arguments", handler: get),
        ]
        routes.append(Route(.POST, "/api/v1/chat/confirm", role: .viewer, summary: "Decide a chat stream's tool_confirm (the same broker)", handler: confirm))
        for prefix in ["/api/v1", ""] {
            routes.append(Route(.GET, "\(prefix)/approvals", role: .viewer, summary: "Your pending approvals", handler: list))
            // A viewer decides from the lock screen as the original allows (chat:chat): deciding is their own approvals only.
            routes.append(Route(.POST, "\(prefix)/approvals/:id/approve", role: .viewer, summary: "Approve (idempotent)", handler: approve))
            routes.append(Route(.POST, "\(prefix)/approvals/:id/deny", role: .viewer, summary: "Deny (idempotent)", handler: deny))
        }
        return routes
    }

    /// `POST /api/v1/approvals`: a tool call to approve; `wait` (default true) answers with the decision.
    struct AskRequest: Decodable {
        var agentID: String
        var tool: String
        var callID: String?
        var sessionID: String?
        /// Any JSON: kept as the call's arguments and shown on the lock screen.
        var arguments: JSONValue?
        var timeoutSeconds: Double?
        var wait: Bool?

        enum CodingKeys: String, CodingKey {
            case agentID = "agent_id"
            case tool
            case callID = "call_id"
            case sessionID = "session_id"
            case arguments
            case timeoutSeconds = "timeout_seconds"
            case wait
        }
    }

    @Sendable func ask(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let body = try request.decode(AskRequest.self)
        let agentID = try body.agentID.limited(to: 64, field: "agent_id")
        guard !agentID.isEmpty else { throw APIError.invalidField("agent_id", "must not be empty") }
        // An unknown agent is a missing resource, as in the original (404 "agent not found").
        guard let agent = catalog.agent(id: agentID) else { throw APIError.notFound("agent_id: no agent '\(agentID)' in SOUL.yaml") }
        let tool = try body.tool.limited(to: 200, field: "tool")
        guard !tool.isEmpty else { throw APIError.invalidField("tool", "must not be empty") }
        let callID = try body.callID.limited(to: 128, field: "call_id")
        if callID?.isEmpty == true { throw APIError.invalidField("call_id", "must not be empty; leave it out to get one made") }
        let sessionID = try body.sessionID.limited(to: 128, field: "session_id") ?? ""
        let arguments = body.arguments.map { $0.serialized() } ?? "{}"
        guard arguments.utf8.count <= 64 * 1024 else { throw APIError.invalidField("arguments", "must be at most 64 KiB of JSON") }
        let timeout = try body.timeoutSeconds.wholeNumber(in: 1...3600, field: "timeout_seconds").map(TimeInterval.init)
        let wait = body.wait ?? true
        // The lock screen the prompt lands on is the session's person's: only they (or their run) may ask in it.
        let activity: ActivityRun?
        if caller.keyID.hasPrefix("run:") {
            activity = await runs.activityRun(runID: String(caller.keyID.dropFirst(4)))
            if !sessionID.isEmpty, sessionID != activity?.sessionID { throw APIError.notFound("no session \(sessionID) of yours") }
        } else if !sessionID.isEmpty {
            activity = await runs.activityRun(sessionID: sessionID)
            let owner: String?
            if let subject = activity?.subject { owner = subject } else { owner = try await runs.store.subject(ofSession: sessionID) }
            if let owner, owner != caller.subject { throw APIError.notFound("no session \(sessionID) of yours") }
        } else {
            activity = nil
        }
        let open = { (callID: String?, session: any StorageSession) throws -> Approval in
            do {
                return try broker.open(callID: callID, subject: caller.subject, agentID: agentID, agentName: agent.name, sessionID: sessionID,
                                       tool: tool, arguments: arguments, timeout: timeout, in: session)
            } catch ApprovalError.tooManyPending {
                throw APIError(status: 409, code: "too_many_pending_approvals", message: ApprovalError.tooManyPending.description)
            } catch let error as ApprovalError {
                throw APIError.conflict(error.description, code: "call_id_taken")
            }
        }
        // Not waiting: the request is the answer, committed with it. Waiting: the answer is the decision, later.
        let asked: Approval
        var immediate: HTTPResponse?
        if wait {
            // The decision is the answer: a retry after a crash waits for it again (`resumer`).
            let id = callID ?? ApprovalsBroker.newCallID()
            CommitHook.current?.resume(from: AnswerResumer.reference(kind: Self.resumeKind, id: id))
            asked = try await broker.transactions.withTransaction { try open(id, $0) }
        } else {
            let (opened, answer) = try await broker.transactions.withTransaction(answering: { $0.1.committedAnswer }) { session -> (Approval, HTTPResponse) in
                let opened = try open(callID, session)
                return (opened, .json(ApprovalView(opened), status: 201))
            }
            (asked, immediate) = (opened, answer)
        }
        // The run waiting on this approval shows on the lock screen with Approve/Deny, whatever started it.
        if let activity, asked.state == .pending {
            await runs.progress?.waitingForApproval(activity, callID: asked.callID, tool: tool)
            await runs.approvalAsked(runID: activity.runID, callID: asked.callID, tool: tool, arguments: body.arguments ?? .object([:]))
        }
        if let immediate { return immediate }
        let state = await broker.wait(callID: asked.callID, atMost: longPoll)
        if let activity, state != .pending { await runs.progress?.approvalAnswered(sessionID: activity.sessionID, approved: state == .approved) }
        // Still pending when the long poll ran out: a retry with the same key waits for the decision again.
        if state == .pending { CommitHook.current?.answerIsProvisional() }
        return Self.decisionAnswer(callID: asked.callID, state: state)
    }

    /// A waiting ask's answer. Expired counts as denied for the run: nothing runs without a yes.
    static func decisionAnswer(callID: String, state: Approval.State) -> HTTPResponse {
        .json(Decision(callID: callID, state: state.rawValue, approved: state == .approved))
    }

    static let resumeKind = "approval"

    /// A waiting ask whose process died before it answered: its retry waits for the same decision.
    public var resumer: AnswerResumer {
        AnswerResumer(kind: Self.resumeKind) { [broker, longPoll] callID, caller in
            guard let approval = try await broker.approval(callID: callID), approval.subject == caller.subject else { return nil }
            return Self.decisionAnswer(callID: callID, state: await broker.wait(callID: callID, atMost: longPoll))
        }
    }

    @Sendable func list(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let all = try request.queryChoice("state", among: ["pending", "all"], fallback: "pending") == "all"
        return .json(["approvals": try await broker.approvals(subject: caller.subject, all: all).map { ApprovalView($0) }])
    }

    @Sendable func get(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let wait = try request.queryFlag("wait")
        guard var approval = try await broker.approval(callID: request.parameter("id")), approval.subject == caller.subject else {
            throw APIError.notFound(ApprovalError.notFound(request.parameter("id")).description)
        }
        if wait, approval.state == .pending {
            _ = await broker.wait(callID: approval.callID, atMost: longPoll)
            approval = try await broker.approval(callID: approval.callID) ?? approval
        }
        var body = ApprovalView(approval)
        body.approved = approval.state == .approved
        return .json(body)
    }

    /// The original's `/chat/confirm {call_id, approved}`: one decision on the shared broker, `{"ok": true}`.
    struct ConfirmRequest: Decodable {
        var callID: String
        var approved: Bool
        enum CodingKeys: String, CodingKey {
            case callID = "call_id"
            case approved
        }
    }

    @Sendable func confirm(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let body = try request.decode(ConfirmRequest.self)
        let (callID, approved) = (try body.callID.limited(to: 200, field: "call_id"), body.approved)
        do {
            return try await broker.transactions.answer { session in
                let (approval, decidedNow) = try broker.decide(callID: callID, subject: caller.subject, approve: approved, by: caller.keyID, in: session)
                return .json(Confirmed(approved: approval.state == .approved, alreadyDecided: !decidedNow))
            }
        } catch let error as ApprovalError {
            throw APIError.notFound(error.description)
        }
    }

    @Sendable func approve(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse { try await decide(request, caller: caller, approve: true) }
    @Sendable func deny(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse { try await decide(request, caller: caller, approve: false) }

    func decide(_ request: HTTPRequest, caller: Principal, approve: Bool) async throws -> HTTPResponse {
        do {
            return try await broker.transactions.answer { session in
                let (approval, decidedNow) = try broker.decide(callID: request.parameter("id"), subject: caller.subject, approve: approve, by: caller.keyID, in: session)
                var body = ApprovalView(approval, withArguments: false)
                body.alreadyDecided = !decidedNow
                // The original app reads `ok` and `approved`: approved is the decision actually taken (the seed's rule).
                body.ok = true
                body.approved = approval.state == .approved
                if !decidedNow {
                    body.message = approval.state == .expired ? "this approval expired before it was answered"
                                                              : "this approval was already \(approval.state.rawValue); nothing ran twice"
                }
                return .json(body)
            }
        } catch let error as ApprovalError {
            throw APIError.notFound(error.description)
        }
    }
}

// MARK: Answers, in the original app's field names

extension ApprovalsAPI {
    /// One approval; a decision's answer adds what it decided (`ok`, `approved`, `already_decided`, `message`).
    struct ApprovalView: Encodable {
        var callID, agentID, agentName, sessionID, tool, state: String
        var createdAt, expiresAt: Timestamp
        var decidedAt: Nullable<Timestamp>
        /// The call's arguments as asked (JSON, or the text when it was not JSON).
        var arguments: JSONValue?
        /// The original's name for them: an object, left out when empty.
        var args: JSONValue?
        var reason: String?
        var ok: Bool?
        var approved: Bool?
        var alreadyDecided: Bool?
        var message: String?

        init(_ a: Approval, withArguments: Bool = true) {
            callID = a.callID
            agentID = a.agentID
            agentName = a.agentName
            sessionID = a.sessionID
            tool = a.tool
            state = a.state.rawValue
            createdAt = Timestamp(a.createdAt)
            expiresAt = Timestamp(a.expiresAt)
            decidedAt = Nullable(a.decidedAt.map(Timestamp.init))
            guard withArguments else { return }
            let parsed = (try? JSONValue.parse(Array(a.arguments.utf8))) ?? .string(a.arguments)
            arguments = parsed
            if case .object(let fields) = parsed, !fields.isEmpty { args = parsed }
            reason = "\(a.agentName) wants to run \(a.tool)"
        }

        enum CodingKeys: String, CodingKey {
            case tool, state, arguments, args, reason, ok, approved, message
            case callID = "call_id", agentID = "agent_id", agentName = "agent_name", sessionID = "session_id"
            case createdAt = "created_at", expiresAt = "expires_at", decidedAt = "decided_at", alreadyDecided = "already_decided"
        }
    }

    /// A waiting ask's answer.
    struct Decision: Encodable {
        var callID, state: String
        var approved: Bool

        enum CodingKeys: String, CodingKey {
            case state, approved
            case callID = "call_id"
        }
    }

    /// `/chat/confirm`'s answer.
    struct Confirmed: Encodable {
        var ok = true
        var approved, alreadyDecided: Bool

        enum CodingKeys: String, CodingKey {
            case ok, approved
            case alreadyDecided = "already_decided"
        }
    }
}
