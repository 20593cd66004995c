import Memory
import Agents
import APIKit
import Foundation
import Identity

/// `/api/v1/memory/facts`: what the gateway remembers about the caller, in the original app's shapes
/// (`content`, `category`, the sync feed, export, status, purge).
public struct MemoryAPI: Sendable {
    let memory: MemoryFactStore
    let catalog: AgentCatalog

    public init(memory: MemoryFactStore, catalog: AgentCatalog) {
        self.memory = memory
        self.catalog = catalog
    }

    public var routes: [Route] {
        // Every person reads their own facts; changing them needs an operator. The literal paths come before `/:id`,
        // which would otherwise take them.
        var facts = RouteGroup("/api/v1/memory/facts", role: .viewer)
        facts.get("/status", summary: "Memory status and counts", handler: status)
        facts.get("/export", summary: "Export your facts as a JSON file", handler: export)
        facts.get("/sync", summary: "Changes since a cursor, for the phone's copy", handler: sync)
        facts.post(role: .operator, summary: "Remember a fact (yours only)", handler: add)
        facts.get(summary: "Your remembered facts", handler: list)
        facts.delete(role: .operator, summary: "Forget all your facts (confirm=true)", handler: purge)
        facts.patch("/:id", role: .operator, summary: "Edit one of your facts", handler: edit)
        facts.delete("/:id", role: .operator, summary: "Forget one of your facts", handler: delete)
        facts.get("/:id/history", summary: "How one of your facts changed", handler: history)
        return facts.routes
    }

    static let provider = "sqlite"

    static func json(_ f: MemoryFactStore.Fact) -> JSONValue {
        var object: [String: JSONValue] = [
            "id": .string(f.id), "workspace": "default", "owner": .string(f.subject), "agent_id": .string(f.agentID),
            "category": .string(f.category), "content": .string(f.content), "confidence": 1, "status": .string(f.status),
            "source": .string(f.source == "api" || f.source == "siri" || f.source.isEmpty ? "manual" : f.source),
            "created_at": .timestamp(f.createdAt), "updated_at": .timestamp(f.updatedAt),
            // This gateway's older name for the content.
            "text": .string(f.content),
        ]
        if let expires = f.expiresAt { object["expires_at"] = .timestamp(expires) }
        return .object(object)
    }

    /// Whose memory: the caller's; `?owner=` someone else's only for an admin.
    func owner(_ request: HTTPRequest, _ caller: Principal) throws -> String {
        guard let owner = request.query["owner"], !owner.isEmpty, owner != caller.subject else { return caller.subject }
        guard caller.role == .admin else { throw APIError.forbidden("owner: only an admin may read another person's memory") }
        return owner
    }

    /// `agent_id` scopes to one agent; an unknown one is 404 as in the original.
    func agentScope(_ id: String?) throws -> String? {
        guard let id, !id.isEmpty else { return nil }
        guard catalog.agent(id: id) != nil else { throw APIError.notFound("Agent not found") }
        return id
    }

    static func content(_ text: String, field: String = "content") throws -> String {
        guard text.unicodeScalars.count <= MemoryFactStore.maximumLength else {
            throw APIError.invalidField(field, "must be at most \(MemoryFactStore.maximumLength) characters")
        }
        let collapsed = SchemaWhitespace.collapse(text)
        guard !collapsed.isEmpty else { throw APIError.invalidField(field, "must not be empty") }
        guard collapsed.count <= MemoryFactStore.maximumLength else {
            throw APIError.invalidField(field, "must be at most \(MemoryFactStore.maximumLength) characters")
        }
        return collapsed
    }

    static func category(_ text: String?) throws -> String? {
        guard let text = text.map(SchemaWhitespace.trim)?.lowercased(), !text.isEmpty else { return nil }
        guard text.count <= 32, let first = text.unicodeScalars.first, ("a"..."z").contains(first),
              text.unicodeScalars.allSatisfy({ ("a"..."z").contains($0) || ("0"..."9").contains($0) || $0 == "-" || $0 == "_" }) else {
            throw APIError.invalidField("category", "must be preference, identity, constraint, entity or a short lower-case slug")
        }
        return text
    }

    /// `YYYY-MM-DD` (the end of that day, UTC) or RFC 3339.
    static func expiry(_ text: String) throws -> Date {
        if text.count == 10, let day = SoulConfigLoader.timestamp(text + "T23:59:59Z", quoted: true) { return day }
        if text.count > 10, let date = SoulConfigLoader.timestamp(text, quoted: true) { return date }
        throw APIError.invalidField("expires_at", "must be a date (YYYY-MM-DD) or an RFC 3339 time")
    }

    /// `POST /api/v1/memory/facts`: the fields a fact is written from.
    struct FactBody: Decodable {
        /// `content` as the original; `text` is this gateway's older name.
        var content: String?
        var text: String?
        var category: String?
        var agentID: String?
        var expiresAt: String?
        var source: String?

        enum CodingKeys: String, CodingKey {
            case content, text, category, source
            case agentID = "agent_id"
            case expiresAt = "expires_at"
        }
    }

    /// `PATCH …/:id`: what an edit may change.
    struct FactEdit: Decodable {
        var content: String?
        var category: String?
        var agentID: String?
        var expiresAt: String?

        enum CodingKeys: String, CodingKey {
            case content, category
            case agentID = "agent_id"
            case expiresAt = "expires_at"
        }
    }

    @Sendable func add(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let body = try request.decode(FactBody.self)
        let (field, given) = body.content == nil && body.text != nil ? ("text", body.text) : ("content", body.content)
        guard let given else { throw JSONFieldError.missing("content") }
        let content = try Self.content(given, field: field)
        let category = try Self.category(try body.category.limited(to: 64, field: "category")) ?? "preference"
        let agentID = try agentScope(try body.agentID.limited(to: 128, field: "agent_id")) ?? ""
        let expires = try body.expiresAt.limited(to: 64, field: "expires_at").flatMap { $0.isEmpty ? nil : $0 }.map(Self.expiry)
        let source = try body.source.limited(to: 40, field: "source") ?? "manual"
        return try await memory.database.answer { _ in
            let fact = try memory.add(content, subject: caller.subject, source: source, category: category, agentID: agentID, expiresAt: expires)
            return .json(["fact": Self.json(fact), "id": .string(fact.id), "text": .string(fact.content), "created_at": .timestamp(fact.createdAt)], status: 201)
        }
    }

    @Sendable func list(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let owner = try owner(request, caller)
        let status = try request.queryChoice("status", among: ["active", "superseded", "retracted"], fallback: "active")
        let agentID = try agentScope(request.query["agent_id"])
        var facts = try memory.facts(subject: owner, status: status, agentID: agentID, limit: try Self.limit(request.query["limit"], fallback: 200, maximum: 500))
        var answer: [String: JSONValue] = ["provider": .string(Self.provider), "owner": .string(owner)]
        if let query = request.query["q"]?.trimmingCharacters(in: .whitespaces), !query.isEmpty {
            // A plain word-overlap score: the share of the query's words the fact contains.
            let words = Set(query.lowercased().split(whereSeparator: { !$0.isLetter && !$0.isNumber }).map(String.init))
            let scored = facts.map { fact -> (MemoryFactStore.Fact, Double) in
                let have = Set(fact.content.lowercased().split(whereSeparator: { !$0.isLetter && !$0.isNumber }).map(String.init))
                return (fact, words.isEmpty ? 0 : Double(words.intersection(have).count) / Double(words.count))
            }.filter { $0.1 > 0 }.sorted { $0.1 > $1.1 }
            let limit = try Self.limit(request.query["limit"], fallback: 10, maximum: 50)
            facts = scored.prefix(limit).map(\.0)
            let scores = Dictionary(scored.map { ($0.0.id, $0.1) }, uniquingKeysWith: { a, _ in a })
            answer["query"] = .string(query)
            answer["facts"] = .array(facts.map { fact in
                guard case .object(var object) = Self.json(fact) else { return .null }
                object["score"] = .number(scores[fact.id] ?? 0)
                return .object(object)
            })
        } else {
            answer["facts"] = .array(facts.map(Self.json))
        }
        var response = HTTPResponse.json(.object(answer))
        response.headers.append(("Cache-Control", "no-store"))
        return response
    }

    /// `?limit=`: a whole number; zero or less means the default, more than the maximum means the maximum.
    static func limit(_ text: String?, fallback: Int, maximum: Int) throws -> Int {
        guard let text, !text.isEmpty else { return fallback }
        guard let n = Int(text) else { throw APIError.invalidField("limit", "must be a whole number") }
        return n > 0 ? min(n, maximum) : fallback
    }

    @Sendable func edit(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let body = try request.decode(FactEdit.self)
        var edit = MemoryFactStore.Edit()
        if let content = body.content { edit.content = try Self.content(content) }
        edit.category = try Self.category(try body.category.limited(to: 64, field: "category"))
        if let agent = try body.agentID.limited(to: 128, field: "agent_id") { edit.agentID = try agentScope(agent) ?? "" }
        switch try body.expiresAt.limited(to: 64, field: "expires_at") {
        case nil, "": break
        case "none": edit.expiresAt = .some(nil)
        case let text?: edit.expiresAt = .some(try Self.expiry(text))
        }
        return try await memory.database.answer { _ in
            guard let fact = try memory.update(id: request.parameter("id"), subject: caller.subject, edit) else { throw APIError.notFound("Fact not found") }
            return .json(["fact": Self.json(fact)])
        }
    }

    @Sendable func delete(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        return try await memory.database.answer { _ in
            guard try memory.delete(id: request.parameter("id"), subject: caller.subject) else { throw APIError.notFound("Fact not found") }
            return .noContent
        }
    }

    @Sendable func history(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let events = try memory.history(id: request.parameter("id"), subject: caller.subject)
        guard !events.isEmpty else { throw APIError.notFound("Fact not found") }
        let json: [JSONValue] = events.map { event in
            ["id": .string(String(event.id)), "fact_id": .string(event.factID), "event": .string(event.event), "content": .string(event.content),
             "category": .string(event.category), "status": .string(event.status), "actor": .string(event.actor),
             "created_at": .timestamp(event.createdAt)]
        }
        var response = HTTPResponse.json(["events": .array(json)])
        response.headers.append(("Cache-Control", "no-store"))
        return response
    }

    @Sendable func purge(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        guard ["1", "true", "yes", "on"].contains(request.query["confirm"] ?? "") else {
            throw APIError(status: 400, code: "confirm_required", message: "Purge requires confirm=true", field: "confirm")
        }
        let agentID = try agentScope(request.query["agent_id"])
        return try await memory.database.answer { _ in
            let removed = try memory.purge(subject: caller.subject, agentID: agentID)
            return .json(["ok": true, "removed": .number(Double(removed))])
        }
    }

    @Sendable func sync(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let since: Int64
        if let text = request.query["since"], !text.isEmpty {
            guard let n = Int64(text), n >= 0 else { throw APIError.invalidField("since", "must be a cursor (a whole number from 0)") }
            since = n
        } else {
            since = 0
        }
        let page = try memory.changes(subject: caller.subject, since: since, limit: try Self.limit(request.query["limit"], fallback: 200, maximum: 500),
                                      agentID: try agentScope(request.query["agent_id"]))
        let changes: [JSONValue] = page.changes.map { change in
            var entry: [String: JSONValue] = ["cursor": .number(Double(change.cursor)), "fact_id": .string(change.factID),
                                              "event": .string(change.event), "deleted": .bool(change.fact == nil)]
            if let fact = change.fact { entry["fact"] = Self.json(fact) }
            return .object(entry)
        }
        var response = HTTPResponse.json(["changes": .array(changes), "next_cursor": .number(Double(page.nextCursor)), "has_more": .bool(page.hasMore),
                                          "reset": .bool(page.reset), "provider": .string(Self.provider), "owner": .string(caller.subject)])
        response.headers.append(("Cache-Control", "no-store"))
        return response
    }

    @Sendable func status(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let counts = try memory.counts(subject: caller.subject)
        return .json(["enabled": true, "provider": .string(Self.provider), "max_prompt_facts": .number(Double(MemoryFactStore.promptFacts)),
                      "prompt_token_budget": 50, "model_provider": "", "model": "", "graph_enabled": false,
                      "categories": .array(MemoryFactStore.builtInCategories.map(JSONValue.string)), "owner": .string(caller.subject),
                      "active": .number(Double(counts["active"] ?? 0)), "superseded": .number(Double(counts["superseded"] ?? 0)),
                      "retracted": .number(Double(counts["retracted"] ?? 0)), "relations": 0])
    }

    @Sendable func export(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let agentID = try agentScope(request.query["agent_id"])
        let facts = try memory.facts(subject: caller.subject, agentID: agentID, limit: 100_000)
        var response = HTTPResponse.json(["exported_at": .timestamp(Date()), "provider": .string(Self.provider), "owner": .string(caller.subject),
                                          "workspace": "default", "agent_id": .string(agentID ?? ""),
                                          "categories": .array(MemoryFactStore.builtInCategories.map(JSONValue.string)),
                                          "facts": .array(facts.map(Self.json)), "relations": []])
        response.headers.append(("Content-Disposition", "attachment; filename=\"soulacy-memory\(agentID.map { "-\($0)" } ?? "").json\""))
        response.headers.append(("Cache-Control", "no-store"))
        return response
    }
}
