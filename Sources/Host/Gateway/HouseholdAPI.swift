import APIKit
import Crypto
import Foundation
import LLM
import Synchronization
import HTTPServer
import Identity
import Mobile
import SQLite
import ChannelAPI

/// Pairing phones and watches, the household's members, and what each role may do.
struct HouseholdAPI: Sendable {
    let household: HouseholdStore
    let keys: any APIKeyStore
    let mobile: MobileStore
    let limiter: PairingRateLimiter
    /// The address a pairing link sends the phone to.
    let gatewayURL: @Sendable () -> String
    /// The LAN listener's address and certificate pin, when it is on.
    /// Where the pinned TLS is (`host:port`) and its pin, when pairing links should pin.
    let pinned: @Sendable () -> (address: String, pin: String)?
    /// The certificate's pin when the main port serves TLS (so a typed `base_url` can be pinned).
    let mainPortPin: String?
    /// Gives a redeemed phone its relay mailbox place and pairing secret, when a relay is configured.
    let enroll: @Sendable (String, String) async -> RelayCarriage.Enrollment?
    /// Whether a relay mailbox is configured (the redeem answer then says how to get onto it).
    var relayConfigured: @Sendable () -> Bool = { false }

    static func scopes(for role: Role) -> [String] {
        var scopes = ["agents:read", "inbox:read", "approvals:read", "chat", "devices:register"]
        if role >= .operator { scopes += ["agents:write", "approvals:write", "memory:write", "triggers:fire"] }
        if role >= .admin { scopes += ["admin"] }
        return scopes
    }

    var routes: [Route] {
        var routes: [Route] = []
        for prefix in ["/api/v1", ""] {
            // The watch and Shortcuts call the short paths; the app calls /api/v1.
            routes.append(Route(.POST, "\(prefix)/pairing/tokens", role: .viewer, summary: "Create a pairing code (for yourself, or as admin for someone)", handler: createCode))
            routes.append(Route(.POST, "\(prefix)/pairing/redeem", access: .open, summary: "Redeem a pairing code for a managed key", handler: redeem))
        }
        routes.append(Route(.GET, "/api/v1/pairing/members", access: .role(.admin), summary: "Everyone with a paired phone", handler: members))
        routes.append(Route(.GET, "/mobile", access: .open, summary: "The page a pairing QR opens in a browser: open it in the Soulacy app", handler: mobilePage))
        return routes
    }

    /// The original's `POST /pairing/tokens`: no body pairs the caller's own device (a viewer's as a viewer, anyone
    /// else's as an operator); `name` (admins only) pairs someone else, as operator unless `role` says viewer.
    @Sendable func createCode(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let body = try JSONObject(body: request.body, allowEmpty: true)
        return try household.database.answer { _ in
            let offer: PairingOffer
            let displayName: String
            if let rawName = try body.optionalString("name") {
                guard caller.role == .admin else { throw APIError.forbidden("only an admin can pair a phone for someone else") }
                guard rawName.unicodeScalars.count <= 60 else { throw APIError.invalidField("name", "must be at most 60 characters") }
                let name = SchemaWhitespace.trim(rawName)
                guard !name.isEmpty else { throw APIError.invalidField("name", "must not be empty") }
                let roleText = SchemaWhitespace.trim(try body.optionalString("role") ?? "").lowercased()
                let role: Role
                switch roleText {
                case "", "operator": role = .operator
                case "viewer": role = .viewer
                default: throw APIError.invalidField("role", "must be \"operator\" or \"viewer\", got \"\(roleText)\"")
                }
                let subject = try household.subject(forName: name)
                guard subject != "admin", subject != caller.subject else {
                    throw APIError.invalidField("name", "'\(name)' names you or the owner; send no body to pair your own device")
                }
                offer = try household.createOffer(subject: subject, name: name, role: role, createdBy: caller.keyID)
                displayName = name
            } else {
                guard try body.optionalString("role") == nil else { throw APIError.invalidField("role", "goes with name; your own device gets your role") }
                displayName = try household.displayName(subject: caller.subject) ?? ""
                offer = try household.createOffer(subject: caller.subject, name: displayName.isEmpty ? caller.subject : displayName,
                                                  role: caller.role == .viewer ? .viewer : .operator, createdBy: caller.keyID)
            }
            let links = try pairingLinks(offer, typedBase: body.optionalString("base_url", maxLength: 500).map(SchemaWhitespace.trim))
            let pinned = self.pinned()
            return .json([
                "code": .string(offer.code), "expires_at": .timestamp(offer.expiresAt), "subject": .string(offer.subject),
                "display_name": .string(displayName), "role": .string(offer.role.rawValue),
                "pair_url": .string(links.original), "base_url": .string(links.base), "fingerprint": .string(links.pin),
                // This gateway's three-path link (LAN, tailnet, relay), for its own client.
                "link": .string(PairingLink.url(offer: offer, gateway: gatewayURL(), pinnedAddress: pinned?.address, pin: pinned?.pin)),
            ])
        }
    }

    /// The original app's link: `https://host:port/mobile?pair=CODE&fp=PIN` over the pinned listener when there is
    /// one, else `<gateway>/mobile?pair=CODE`. A `base_url` the operator typed is direct: with TLS on the main port
    /// it is pinned (an `http://` base becomes `https://` on the same host and port), as the original does.
    func pairingLinks(_ offer: PairingOffer, typedBase: String? = nil) throws -> (original: String, base: String, pin: String) {
        if let typedBase, !typedBase.isEmpty {
            guard let address = PairingLink.directAddress(ofBase: typedBase) else {
                throw APIError.invalidField("base_url", "must be http://host:port or https://host:port, got \"\(typedBase)\"")
            }
            if let pin = mainPortPin {
                return (PairingLink.original(code: offer.code, gateway: "", pinnedAddress: address, pin: pin), "https://\(address)", pin)
            }
            let base = typedBase.hasSuffix("/") ? String(typedBase.dropLast()) : typedBase
            return (PairingLink.original(code: offer.code, gateway: base), base, "")
        }
        if let pinned = pinned(), !pinned.pin.isEmpty {
            return (PairingLink.original(code: offer.code, gateway: gatewayURL(), pinnedAddress: pinned.address, pin: pinned.pin), "https://\(pinned.address)", pinned.pin)
        }
        return (PairingLink.original(code: offer.code, gateway: gatewayURL()), gatewayURL(), "")
    }

    /// `GET /mobile`: someone scanned the pairing QR with the camera; the page says to open it in the app.
    @Sendable func mobilePage(_ request: HTTPRequest) async throws -> HTTPResponse {
        let html = """
            <!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
            <title>Pair with Soulacy</title></head><body style="font-family: -apple-system, sans-serif; margin: 2em; max-width: 32em">
            <h1>Open this in the Soulacy app</h1>
            <p>This pairing code is for the Soulacy app. Open the app, choose <b>Pair with a gateway</b>, and scan the same QR code there.</p>
            <p>The code works once and only for two minutes; if it has run out, ask for a new one.</p>
            </body></html>
            """
        return HTTPResponse(status: 200, headers: [("Content-Type", "text/html; charset=utf-8"), ("Cache-Control", "no-store"),
                                                   ("Referrer-Policy", "no-referrer")], body: Array(html.utf8))
    }

    @Sendable func redeem(_ request: HTTPRequest) async throws -> HTTPResponse {
        let address = request.remoteAddress
        if let wait = limiter.retryAfter(address: address) {
            var error = APIError(status: 429, code: "too_many_attempts", message: "too many wrong pairing codes; try again in \(wait) s")
            error.extraHeaders["Retry-After"] = String(wait)
            throw error
        }
        let body = try JSONObject(body: request.body)
        let code = SchemaWhitespace.trim(try body.optionalString("code", maxLength: 64) ?? "")
        guard !code.isEmpty else { throw APIError(status: 400, code: "missing_field", message: "code is required", field: "code") }
        let deviceName = try body.optionalString("name", maxLength: 200) ?? "Paired device"
        do {
            let minted = try household.redeem(code: code, deviceName: deviceName)
            let displayName = try household.displayName(subject: minted.key.subject) ?? ""
            var answer: [String: JSONValue] = [
                "paired": true, "token": .string(minted.token), "key_id": .string(minted.key.id), "subject": .string(minted.key.subject),
                "role": .string(minted.key.role.rawValue), "scopes": .array(Self.scopes(for: minted.key.role).map(JSONValue.string)),
                "display_name": .string(displayName), "fingerprint": .string(pinned()?.pin ?? ""),
                "message": "Store this token; it is shown only once.",
            ]
            // The relay path: the pairing secret S reaches the phone only over the pinned TLS listener, never in plain
            // HTTP (a tailnet or LAN eavesdropper) and never via the relay itself.
            if !request.isSecure, relayConfigured() {
                answer["relay_hint"] = "pair over the pinned Wi-Fi link (https) to reach this gateway through the relay too"
            } else if request.isSecure, let relay = await enroll(minted.key.id, minted.key.subject) {
                answer["relay"] = ["url": .string(relay.url), "mailbox_id": .string(relay.mailboxID), "device_id": .string(relay.deviceID),
                                   "secret": .string(Base64URL.encode(relay.secret))]
            }
            return .json(.object(answer))
        } catch let error as PairingError {
            limiter.recordFailure(address: address)
            // The original's answer for any code that does not pair: 401 {paired: false, reason}; `error` and `code`
            // say the same for clients that read this gateway's error shape.
            let reason = "invalid or expired pairing code"
            let detail: String = switch error {
            case .unknownCode: "pairing_code_unknown"
            case .expired: "pairing_code_expired"
            case .alreadyUsed: "pairing_code_used"
            }
            return .json(["paired": false, "reason": .string(reason), "error": .string("\(reason): \(error)"), "code": .string(detail)], status: 401)
        }
    }

    @Sendable func members(_ request: HTTPRequest) async throws -> HTTPResponse {
        let paired = try keys.list().filter { $0.kind == .managed && $0.revokedAt == nil }
        let bySubject = Dictionary(grouping: paired, by: \.subject)
        var members: [JSONValue] = []
        for subject in bySubject.keys.sorted() {
            let keys = bySubject[subject] ?? []
            let devices = try mobile.devices(subject: subject)
            members.append([
                "subject": .string(subject), "name": .string(try household.displayName(subject: subject) ?? subject),
                "role": .string((keys.map(\.role).max() ?? .viewer).rawValue),
                "keys": .array(keys.map { ["id": .string($0.id), "name": .string($0.name), "role": .string($0.role.rawValue), "created_at": .timestamp($0.createdAt)] }),
                "devices": .array(devices.map { ["id": .string($0.id), "name": .string($0.name), "platform": .string($0.platform.rawValue)] }),
            ])
        }
        return .json(["members": .array(members)])
    }
}

/// Approvals over HTTP: runs ask, people answer from any surface; the broker keeps it to one decision.
struct ApprovalsAPI: Sendable {
    let broker: ApprovalsBroker
    let catalog: AgentCatalog
    let runs: AgentRuns
    /// The longest one request waits for a decision; a run still waiting asks again (GET …/approvals/:id?wait=true).
    let longPoll: Duration

    var routes: [Route] {
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

    static func json(_ a: Approval, withArguments: Bool = true) -> JSONValue {
        var object: [String: JSONValue] = [
            "call_id": .string(a.callID), "agent_id": .string(a.agentID), "agent_name": .string(a.agentName),
            "session_id": .string(a.sessionID), "tool": .string(a.tool), "state": .string(a.state.rawValue),
            "created_at": .timestamp(a.createdAt), "expires_at": .timestamp(a.expiresAt),
            "decided_at": a.decidedAt.map(JSONValue.timestamp) ?? .null,
        ]
        if withArguments {
            let arguments = (try? JSONValue.parse(Array(a.arguments.utf8))) ?? .string(a.arguments)
            object["arguments"] = arguments
            // The original's names: `args` (an object, omitted when empty) and `reason`.
            if case .object(let fields) = arguments, !fields.isEmpty { object["args"] = arguments }
            object["reason"] = .string("\(a.agentName) wants to run \(a.tool)")
        }
        return .object(object)
    }

    @Sendable func ask(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let body = try JSONObject(body: request.body)
        let agentID = try body.string("agent_id", maxLength: 64)
        // An unknown agent is a missing resource, as in the original (404 "agent not found").
        guard let agent = catalog.agent(id: agentID) else { throw APIError.notFound("agent_id: no agent '\(agentID)' in SOUL.yaml") }
        let tool = try body.string("tool", maxLength: 200)
        guard !tool.isEmpty else { throw APIError.invalidField("tool", "must not be empty") }
        let callID = try body.optionalString("call_id", maxLength: 128)
        if callID?.isEmpty == true { throw APIError.invalidField("call_id", "must not be empty; leave it out to get one made") }
        let sessionID = try body.optionalString("session_id", maxLength: 128) ?? ""
        let arguments = body.fields["arguments"].map { $0.serialized() } ?? "{}"
        guard arguments.utf8.count <= 64 * 1024 else { throw APIError.invalidField("arguments", "must be at most 64 KiB of JSON") }
        let timeout = try body.optionalInteger("timeout_seconds", in: 1...3600).map(TimeInterval.init)
        let wait = try body.optionalBool("wait") ?? true
        // The lock screen the prompt lands on is the session's person's: only they (or their run) may ask in it.
        let activity: ActivityRun?
        if caller.keyID.hasPrefix("run:") {
            activity = await runs.activityRun(runID: String(caller.keyID.dropFirst(4)))
            if !sessionID.isEmpty, sessionID != activity?.sessionID { throw APIError.notFound("no session \(sessionID) of yours") }
        } else if !sessionID.isEmpty {
            activity = await runs.activityRun(sessionID: sessionID)
            let owner = try activity?.subject ?? runs.store.subject(ofSession: sessionID)
            if let owner, owner != caller.subject { throw APIError.notFound("no session \(sessionID) of yours") }
        } else {
            activity = nil
        }
        let open = { (callID: String?) throws -> Approval in
            do {
                return try broker.open(callID: callID, subject: caller.subject, agentID: agentID, agentName: agent.name, sessionID: sessionID,
                                       tool: tool, arguments: arguments, timeout: timeout)
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
            asked = try open(id)
        } else {
            let (opened, answer) = try broker.database.transaction(answering: { $0.1.committedAnswer }) { _ -> (Approval, HTTPResponse) in
                let opened = try open(callID)
                return (opened, .json(Self.json(opened), status: 201))
            }
            (asked, immediate) = (opened, answer)
        }
        // The run waiting on this approval shows on the lock screen with Approve/Deny, whatever started it.
        if let activity, asked.state == .pending {
            await runs.liveActivities?.waitingForApproval(activity, callID: asked.callID, tool: tool)
        }
        if let immediate { return immediate }
        let state = await broker.wait(callID: asked.callID, atMost: longPoll)
        if let activity, state != .pending { await runs.liveActivities?.approvalAnswered(sessionID: activity.sessionID, approved: state == .approved) }
        return Self.decisionAnswer(callID: asked.callID, state: state)
    }

    /// A waiting ask's answer. Expired counts as denied for the run: nothing runs without a yes.
    static func decisionAnswer(callID: String, state: Approval.State) -> HTTPResponse {
        .json(["call_id": .string(callID), "state": .string(state.rawValue), "approved": .bool(state == .approved)])
    }

    static let resumeKind = "approval"

    /// A waiting ask whose process died before it answered: its retry waits for the same decision.
    var resumer: AnswerResumer {
        AnswerResumer(kind: Self.resumeKind) { [broker, longPoll] callID, caller in
            guard let approval = try broker.approval(callID: callID), approval.subject == caller.subject else { return nil }
            return Self.decisionAnswer(callID: callID, state: await broker.wait(callID: callID, atMost: longPoll))
        }
    }

    @Sendable func list(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let all = try request.queryChoice("state", among: ["pending", "all"], fallback: "pending") == "all"
        return .json(["approvals": .array(try broker.approvals(subject: caller.subject, all: all).map { Self.json($0) })])
    }

    @Sendable func get(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let wait = try request.queryFlag("wait")
        guard var approval = try broker.approval(callID: request.parameter("id")), approval.subject == caller.subject else {
            throw APIError.notFound(ApprovalError.notFound(request.parameter("id")).description)
        }
        if wait, approval.state == .pending {
            _ = await broker.wait(callID: approval.callID, atMost: longPoll)
            approval = try broker.approval(callID: approval.callID) ?? approval
        }
        guard case .object(var body) = Self.json(approval) else { throw APIError.internal("approval encoding") }
        body["approved"] = .bool(approval.state == .approved)
        return .json(.object(body))
    }

    /// The original's `/chat/confirm {call_id, approved}`: one decision on the shared broker, `{"ok": true}`.
    @Sendable func confirm(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let body = try JSONObject(body: request.body)
        let callID = try body.string("call_id", maxLength: 200)
        guard let approved = try body.optionalBool("approved") else { throw APIError.missingField("approved") }
        do {
            return try broker.database.answer { _ in
                let (approval, decidedNow) = try broker.decide(callID: callID, subject: caller.subject, approve: approved, by: caller.keyID)
                return .json(["ok": true, "approved": .bool(approval.state == .approved), "already_decided": .bool(!decidedNow)])
            }
        } catch let error as ApprovalError {
            throw APIError.notFound(error.description)
        }
    }

    @Sendable func approve(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse { try decide(request, caller: caller, approve: true) }
    @Sendable func deny(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse { try decide(request, caller: caller, approve: false) }

    func decide(_ request: HTTPRequest, caller: Principal, approve: Bool) throws -> HTTPResponse {
        do {
            return try broker.database.answer { _ in
                let (approval, decidedNow) = try broker.decide(callID: request.parameter("id"), subject: caller.subject, approve: approve, by: caller.keyID)
                guard case .object(var body) = Self.json(approval, withArguments: false) else { throw APIError.internal("approval encoding") }
                body["already_decided"] = .bool(!decidedNow)
                // The original app reads `ok` and `approved`: approved is the decision actually taken (the seed's rule).
                body["ok"] = true
                body["approved"] = .bool(approval.state == .approved)
                if !decidedNow {
                    body["message"] = .string(approval.state == .expired ? "this approval expired before it was answered"
                                                                          : "this approval was already \(approval.state.rawValue); nothing ran twice")
                }
                return .json(.object(body))
            }
        } catch let error as ApprovalError {
            throw APIError.notFound(error.description)
        }
    }
}

/// Chat and the agent list: the Siri/Shortcuts and watch surface.
struct AssistantAPI: Sendable {
    let runs: AgentRuns
    let catalog: AgentCatalog
    let sessions: ChatSessions

    var routes: [Route] {
        [
            Route(.POST, "/api/v1/chat", role: .viewer, summary: "Ask an agent and get its reply", handler: chat),
            Route(.POST, "/api/v1/chat/stream", role: .viewer, summary: "Ask an agent; the reply streams as server-sent events", handler: chatStream),
            Route(.GET, "/api/v1/chat/stream", role: .viewer, summary: "The same stream, asked with query parameters", handler: chatStream),
            Route(.POST, "/api/v1/chat/cancel", role: .viewer, summary: "Stop one of your runs (its run id, or a chat's session id)", handler: cancel),
            Route(.POST, "/chat", role: .viewer, summary: "Ask an agent (watch voice mode)", handler: chat),
            Route(.GET, "/agents", access: .role(.viewer), summary: "Agents (watch)", handler: agents),
        ]
    }

    /// The chat request as the original reads it: `agent_id` (optional here when only one agent answers chat) and
    /// `text`, `session_id` to continue a conversation, `response_mode` text or voice.
    struct ChatRequest {
        var agentID: String
        var text: String
        var sessionID: String
        var voice: Bool
    }

    func chatRequest(_ request: HTTPRequest) throws -> ChatRequest {
        // GET /chat/stream carries the same names in its query.
        let body = request.method == "GET"
            ? try JSONObject(body: JSONValue.object(request.query.mapValues(JSONValue.string)).serializedBytes())
            : try JSONObject(body: request.body)
        // A URL carries less than a body: GET /chat/stream takes at most 2,000 characters of text.
        let text = try body.string("text", maxLength: request.method == "GET" ? 2000 : 100_000)
        let visible = catalog.current.visibleAgents.filter(\.isOn)
        let agentID: String
        if let id = try body.optionalString("agent_id", maxLength: 128), !id.isEmpty {
            agentID = id
        } else if visible.count == 1 {
            agentID = visible[0].id
        } else {
            throw APIError.missingField("agent_id")
        }
        // An unknown agent is a missing resource, as in the original (404 "agent not found").
        guard visible.contains(where: { $0.id == agentID }) else { throw APIError.notFound("agent_id: no agent '\(agentID)'") }
        let given = try body.optionalString("session_id", maxLength: 128).map(SchemaWhitespace.trim)
        let sessionID = given.flatMap { $0.isEmpty ? nil : $0 } ?? "http-" + UUID().uuidString.lowercased()
        let mode = try body.optionalString("response_mode").map(SchemaWhitespace.trim)?.lowercased() ?? ""
        guard ["", "text", "voice"].contains(mode) else { throw APIError.invalidField("response_mode", "response_mode must be text or voice") }
        return ChatRequest(agentID: agentID, text: text, sessionID: sessionID, voice: mode == "voice")
    }

    @Sendable func chat(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let ask = try chatRequest(request)
        let history = sessions.history(subject: caller.subject, agentID: ask.agentID, sessionID: ask.sessionID)
        let (response, record) = try await runs.runToEnd(agentID: ask.agentID, input: ask.text, trigger: "chat", destination: nil, subject: caller.subject,
                                                         chat: ChatContext(sessionID: ask.sessionID, history: history, voice: ask.voice)) { record in
            let reply = record.reply ?? ""
            var answer: [String: JSONValue] = [
                "reply": .string(reply), "parts": reply.isEmpty ? [] : [["type": "text", "text": .string(reply)]],
                "session_id": .string(record.sessionID), "run_id": .string(record.id), "response_id": .string(record.id),
                "agent_id": .string(ask.agentID),
            ]
            if ask.voice, let spoken = record.spokenReply, !spoken.isEmpty { answer["spoken_reply"] = .string(spoken) }
            return .json(.object(answer))
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
        stream.write(Self.frame(event: "run", JSONValue.object(["run_id": .string(runID), "session_id": .string(ask.sessionID)]).serialized()))
        var context = ChatContext(sessionID: ask.sessionID, history: history, voice: ask.voice, onText: { piece in
            streamed.withLock { $0 = true }
            stream.write(Self.frame(piece))
        }, onToolConfirm: { callID, call in
            let confirm: JSONValue = ["call_id": .string(callID), "tool": .string(call.name), "args": call.arguments,
                                      "reason": .string("\(ask.agentID) wants to run \(call.name)")]
            stream.write(Self.frame(event: "tool_confirm", confirm.serialized()))
        })
        context.runID = runID
        let started: StartedRun
        do {
            started = try await runs.start(agentID: ask.agentID, input: ask.text, trigger: "chat", destination: nil, subject: caller.subject, chat: context)
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
    @Sendable func cancel(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let body = try JSONObject(body: request.body)
        let id = try body.string("run_id", maxLength: 200)
        guard let cancelled = await runs.cancel(id, subject: caller.subject) else {
            throw APIError.notFound("run not found — it may have already finished")
        }
        return .json(["ok": true, "cancelled": .string(cancelled)])
    }

    @Sendable func agents(_ request: HTTPRequest) async throws -> HTTPResponse {
        .json(["agents": .array(catalog.current.visibleAgents.map {
            ["id": .string($0.id), "name": .string($0.name)]
        })])
    }
}

/// The links a pairing QR code carries.
public enum PairingLink {
    nonisolated(unsafe) static let basePattern = /([Hh][Tt][Tt][Pp][Ss]?):\/\/([A-Za-z0-9.\-]+|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?\/?/

    /// `host:port` of a direct base (`http(s)://host[:port][/]`, the default port by scheme); nil for anything else.
    public static func directAddress(ofBase base: String) -> String? {
        guard let match = base.wholeMatch(of: basePattern) else { return nil }
        let port = match.output.3.map { String($0.dropFirst()) } ?? (match.output.1.lowercased() == "https" ? "443" : "80")
        return "\(match.output.2):\(port)"
    }

    /// The original app's link: `https://<pinned>/mobile?pair=CODE&fp=PIN` over pinned TLS, else `<gateway>/mobile?pair=CODE`.
    public static func original(code: String, gateway: String, pinnedAddress: String? = nil, pin: String? = nil) -> String {
        if let pinnedAddress, let pin, !pin.isEmpty { return "https://\(pinnedAddress)/mobile?pair=\(code)&fp=\(pin)" }
        return "\(gateway)/mobile?pair=\(code)"
    }

    /// This gateway's three-path link: `lan` is where pinned TLS answers, `fp` its pin (the same as the original's).
    public static func url(offer: PairingOffer, gateway: String, pinnedAddress: String? = nil, pin: String? = nil) -> String {
        var components = URLComponents()
        components.scheme = "soulacy"
        components.host = "pair"
        var items = [URLQueryItem(name: "v", value: "1"), URLQueryItem(name: "code", value: offer.code),
                     URLQueryItem(name: "gateway", value: gateway), URLQueryItem(name: "name", value: offer.name)]
        if let pinnedAddress, let pin, !pin.isEmpty {
            items.append(URLQueryItem(name: "lan", value: pinnedAddress))
            items.append(URLQueryItem(name: "fp", value: pin))
        }
        components.queryItems = items
        return components.string ?? "soulacy://pair?v=1&code=\(offer.code)"
    }
}
