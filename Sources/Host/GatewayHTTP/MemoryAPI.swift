import Memory
import Agents
import APIKit
import Foundation
import Identity

/// `/api/v1/memory/facts`: what the gateway remembers about the caller, in the original app's shapes
/// (`content`, `category`, the sync feed, export, status, purge).
public struct MemoryAPI: Sendable {
    let memory: any MemoryFactStore
    let catalog: AgentCatalog

    public init(memory: any MemoryFactStore, catalog: AgentCatalog) {
        self.memory = memory
        self.catalog = catalog
    }

    public var routes: [Route] {
        // Every person reads their own facts; changing them needs an operator. The router prefers the literal paths
        // (`/status`, `/export`, `/sync`) over `/:id` wherever they stand.
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

    /// The answers' `provider`: the engine that keeps the facts (`sqlite`, `postgresql`).
    var provider: String { memory.transactions.engine }

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
        guard text.unicodeScalars.count <= MemoryFacts.maximumLength else {
            throw APIError.invalidField(field, "must be at most \(MemoryFacts.maximumLength) characters")
        }
        let collapsed = SchemaWhitespace.collapse(text)
        guard !collapsed.isEmpty else { throw APIError.invalidField(field, "must not be empty") }
        guard collapsed.count <= MemoryFacts.maximumLength else {
            throw APIError.invalidField(field, "must be at most \(MemoryFacts.maximumLength) characters")
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
            case content
            case text
            case category
            case agentID = "agent_id"
            case expiresAt = "expires_at"
            case source
        }
    }

    /// `PATCH …/:id`: what an edit may change.
    struct FactEdit: Decodable {
        var content: String?
        var category: String?
        var agentID: String?
        var expiresAt: String?

        enum CodingKeys: String, CodingKey {
            case content
            case category
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
        return try await memory.transactions.answer { session in
            let fact: MemoryFact
            do {
                fact = try memory.add(content, subject: caller.subject, source: source, category: category, agentID: agentID, expiresAt: expires, in: session)
            } catch MemoryFactError.tooManyFacts {
                throw APIError(status: 409, code: "too_many_facts", message: MemoryFactError.tooManyFacts.description, field: field)
            }
            return .json(Added(fact: FactView(fact), id: fact.id, text: fact.content, createdAt: Timestamp(fact.createdAt)), status: 201)
        }
    }

    @Sendable func list(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let owner = try owner(request, caller)
        let status = try request.queryChoice("status", among: ["active", "superseded", "retracted"], fallback: "active")
        let agentID = try agentScope(request.query["agent_id"])
        var facts = try await memory.facts(subject: owner, status: status, agentID: agentID, limit: try Self.limit(request.query["limit"], fallback: 200, maximum: 500))
        var answer = FactList(provider: provider, owner: owner, facts: [])
        if let query = request.query["q"]?.trimmingCharacters(in: .whitespaces), !query.isEmpty {
            // A plain word-overlap score: the share of the query's words the fact contains.
            let words = Set(query.lowercased().split(whereSeparator: { !$0.isLetter && !$0.isNumber }).map(String.init))
            let scored = facts.map { fact -> (MemoryFact, Double) in
                let have = Set(fact.content.lowercased().split(whereSeparator: { !$0.isLetter && !$0.isNumber }).map(String.init))
                return (fact, words.isEmpty ? 0 : Double(words.intersection(have).count) / Double(words.count))
            }.filter { $0.1 > 0 }.sorted { $0.1 > $1.1 }
            let limit = try Self.limit(request.query["limit"], fallback: 10, maximum: 50)
            facts = scored.prefix(limit).map(\.0)
            let scores = Dictionary(scored.map { ($0.0.id, $0.1) }, uniquingKeysWith: { a, _ in a })
            answer.query = query
            answer.facts = facts.map { fact in FactView(fact, score: scores[fact.id] ?? 0) }
        } else {
            answer.facts = facts.map { FactView($0) }
        }
        var response = HTTPResponse.json(answer)
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
        var edit = MemoryFactEdit()
        if let content = body.content { edit.content = try Self.content(content) }
        edit.category = try Self.category(try body.category.limited(to: 64, field: "category"))
        if let agent = try body.agentID.limited(to: 128, field: "agent_id") { edit.agentID = try agentScope(agent) ?? "" }
        switch try body.expiresAt.limited(to: 64, field: "expires_at") {
        case nil, "": break
        case "none": edit.expiresAt = .some(nil)
        case let text?: edit.expiresAt = .some(try Self.expiry(text))
        }
        return try await memory.transactions.answer { session in
            guard let fact = try memory.update(id: request.parameter("id"), subject: caller.subject, edit, actor: nil, in: session) else { throw APIError.notFound("Fact not found") }
            return .json(["fact": FactView(fact)])
        }
    }

    @Sendable func delete(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        return try await memory.transactions.answer { session in
            guard try memory.delete(id: request.parameter("id"), subject: caller.subject, actor: nil, in: session) else { throw APIError.notFound("Fact not found") }
            return .noContent
        }
    }

    @Sendable func history(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let events = try await memory.history(id: request.parameter("id"), subject: caller.subject)
        guard !events.isEmpty else { throw APIError.notFound("Fact not found") }
        var response = HTTPResponse.json(["events": events.map(HistoryEvent.init)])
        response.headers.append(("Cache-Control", "no-store"))
        return response
    }

    @Sendable func purge(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        guard ["1", "true", "yes", "on"].contains(request.query["confirm"] ?? "") else {
            throw APIError(status: 400, code: "confirm_required", message: "Purge requires confirm=true", field: "confirm")
        }
        let agentID = try agentScope(request.query["agent_id"])
        return try await memory.transactions.answer { session in
            let removed = try memory.purge(subject: caller.subject, agentID: agentID, in: session)
            return .json(Purged(removed: removed))
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
        let page = try await memory.changes(subject: caller.subject, since: since, limit: try Self.limit(request.query["limit"], fallback: 200, maximum: 500),
                                      agentID: try agentScope(request.query["agent_id"]))
        let changes = page.changes.map { change in
            Change(cursor: change.cursor, factID: change.factID, event: change.event, deleted: change.fact == nil, fact: change.fact.map { FactView($0) })
        }
        var response = HTTPResponse.json(SyncPage(changes: changes, nextCursor: page.nextCursor, hasMore: page.hasMore, reset: page.reset,
                                                  provider: provider, owner: caller.subject))
        response.headers.append(("Cache-Control", "no-store"))
        return response
    }

    @Sendable func status(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let counts = try await memory.counts(subject: caller.subject)
        return .json(Status(provider: provider, maxPromptFacts: MemoryFacts.promptFacts, categories: MemoryFacts.builtInCategories,
                            owner: caller.subject, active: counts["active"] ?? 0, superseded: counts["superseded"] ?? 0, retracted: counts["retracted"] ?? 0))
    }

    @Sendable func export(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let agentID = try agentScope(request.query["agent_id"])
        let facts = try await memory.facts(subject: caller.subject, status: "active", agentID: agentID, limit: 100_000)
        var response = HTTPResponse.json(Export(exportedAt: Timestamp(Date()), provider: provider, owner: caller.subject, agentID: agentID ?? "",
                                                categories: MemoryFacts.builtInCategories, facts: facts.map { FactView($0) }))
        response.headers.append(("Content-Disposition", "attachment; filename=\"soulacy-memory\(agentID.map { "-\($0)" } ?? "").json\""))
        response.headers.append(("Cache-Control", "no-store"))
        return response
    }
}

// MARK: Answers, in the original app's field names

extension MemoryAPI {
    /// One fact as the app reads it.
    struct FactView: Encodable {
        var id, owner, agentID, category, content, status, source: String
        var workspace = "default"
        var confidence = 1
        var createdAt, updatedAt: Timestamp
        var expiresAt: Timestamp?
        /// This gateway's older name for the content.
        var text: String
        /// A search's word-overlap score (only in search answers).
        var score: Double?

        init(_ f: MemoryFact, score: Double? = nil) {
            id = f.id
            owner = f.subject
            agentID = f.agentID
            category = f.category
            content = f.content
            status = f.status
            source = f.source == "api" || f.source == "siri" || f.source.isEmpty ? "manual" : f.source
            createdAt = Timestamp(f.createdAt)
            updatedAt = Timestamp(f.updatedAt)
            expiresAt = f.expiresAt.map(Timestamp.init)
            text = f.content
            self.score = score
        }

        enum CodingKeys: String, CodingKey {
            case id, owner, category, content, status, source, workspace, confidence, text, score
            case agentID = "agent_id", createdAt = "created_at", updatedAt = "updated_at", expiresAt = "expires_at"
        }
    }

    struct Added: Encodable {
        var fact: FactView
        var id, text: String
        var createdAt: Timestamp

        enum CodingKeys: String, CodingKey {
            case fact, id, text
            case createdAt = "created_at"
        }
    }

    struct FactList: Encodable {
        var provider, owner: String
        var query: String?
        var facts: [FactView]
    }

    struct HistoryEvent: Encodable {
        var id, factID, event, content, category, status, actor: String
        var createdAt: Timestamp

        init(_ e: MemoryFactHistoryEvent) {
            id = String(e.id)
            factID = e.factID
            event = e.event
            content = e.content
            category = e.category
            status = e.status
            actor = e.actor
            createdAt = Timestamp(e.createdAt)
        }

        enum CodingKeys: String, CodingKey {
            case id, event, content, category, status, actor
            case factID = "fact_id", createdAt = "created_at"
        }
    }

    struct Purged: Encodable {
        var ok = true
        var removed: Int
    }

    struct Change: Encodable {
        var cursor: Int64
        var factID, event: String
        var deleted: Bool
        var fact: FactView?

        enum CodingKeys: String, CodingKey {
            case cursor, event, deleted, fact
            case factID = "fact_id"
        }
    }

    struct SyncPage: Encodable {
        var changes: [Change]
        var nextCursor: Int64
        var hasMore, reset: Bool
        var provider, owner: String

        enum CodingKeys: String, CodingKey {
            case changes, reset, provider, owner
            case nextCursor = "next_cursor", hasMore = "has_more"
        }
    }

    struct Status: Encodable {
        var enabled = true
        var provider: String
        var maxPromptFacts: Int
        var promptTokenBudget = 50
        var modelProvider = "", model = ""
        var graphEnabled = false
        var categories: [String]
        var owner: String
        var active, superseded, retracted: Int
        var relations = 0

        enum CodingKeys: String, CodingKey {
            case enabled, provider, model, categories, owner, active, superseded, retracted, relations
            case maxPromptFacts = "max_prompt_facts", promptTokenBudget = "prompt_token_budget", modelProvider = "model_provider"
            case graphEnabled = "graph_enabled"
        }
    }

    struct Export: Encodable {
        var exportedAt: Timestamp
        var provider, owner: String
        var workspace = "default"
        var agentID: String
        var categories: [String]
        var facts: [FactView]
        var relations: [String] = []

        enum CodingKeys: String, CodingKey {
            case provider, owner, workspace, categories, facts, relations
            case exportedAt = "exported_at", agentID = "agent_id"
        }
    }
}
