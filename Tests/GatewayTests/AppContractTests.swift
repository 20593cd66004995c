import ChannelAPI
import Foundation
import Gateway
import GatewayTestSupport
import APIKit
import Testing

/// The original Soulacy app's side of the contract, written from SOULACY-CONTRACT.md only: every answer is
/// decoded with the app's field names and types, so a missing or retyped field fails here.
@Suite("Soulacy app contract", .serialized)
struct AppContractTests {
    // MARK: The app's models (names and types from the contract; optional only where it says "omitted").

    struct ErrorBody: Decodable { let error: String }
    struct Part: Decodable { let type: String; let text: String?; let mime_type: String?; let data: String?; let url: String? }
    struct Delivery: Decodable {
        let id: String; let destination: String; let agent_id: String; let session_id: String; let title: String; let body: String
        let parts: [Part]?; let metadata: [String: String]?; let created_at: String; let read_at: String?
        let presentation: Presentation?
    }
    struct Presentation: Decodable { let headline: String?; let summary: String?; let blocks: [Block] }
    struct Block: Decodable {
        let kind: String; let title: String?; let text: String?; let items: [Item]?; let columns: [String]?; let rows: [[String]]?
        let numeric: [String]?; let best: Best?; let chart: Chart?
    }
    struct Item: Decodable {
        let label: String?; let value: String?; let hint: String?; let at: String?; let title: String?; let detail: String?; let url: String?; let done: Bool?
    }
    struct Best: Decodable { let column: String; let row: Int }
    struct Chart: Decodable { let type: String; let x: [String]; let series: [Series] }
    struct Series: Decodable { let name: String; let values: [Double] }
    struct DeliveryPage: Decodable { let deliveries: [Delivery]; let unread_count: Int }
    struct Registered: Decodable { let registered: Bool; let device_id: String }
    struct ReadAnswer: Decodable { let read: Bool }
    struct Fact: Decodable {
        let id: String; let workspace: String; let owner: String; let agent_id: String; let category: String; let content: String
        let confidence: Double; let status: String; let source: String; let created_at: String; let updated_at: String; let expires_at: String?
    }
    struct FactAnswer: Decodable { let fact: Fact }
    struct FactList: Decodable { let facts: [Fact]; let provider: String; let owner: String }
    struct SyncChange: Decodable { let cursor: Int; let fact_id: String; let event: String; let deleted: Bool; let fact: Fact? }
    struct SyncPage: Decodable { let changes: [SyncChange]; let next_cursor: Int; let has_more: Bool; let reset: Bool; let provider: String; let owner: String }
    struct HistoryEvent: Decodable {
        let id: String; let fact_id: String; let event: String; let content: String; let category: String; let status: String; let actor: String
        let created_at: String
    }
    struct History: Decodable { let events: [HistoryEvent] }
    struct Purged: Decodable { let ok: Bool; let removed: Int }
    struct MemoryStatus: Decodable { let enabled: Bool; let provider: String; let max_prompt_facts: Int; let categories: [String] }
    struct Export: Decodable { let exported_at: String; let provider: String; let owner: String; let workspace: String; let facts: [Fact] }
    struct Approval: Decodable {
        let call_id: String; let tool: String; let args: [String: JSONValue]?; let reason: String?; let agent_id: String?; let session_id: String?
        let created_at: String
    }
    struct ApprovalList: Decodable { let approvals: [Approval] }
    struct Decision: Decodable { let ok: Bool; let approved: Bool }
    struct LLMBlock: Decodable { let provider: String; let model: String }
    struct Definition: Decodable {
        let id: String; let name: String; let description: String; let version: String; let trigger: String; let system_prompt: String
        let llm: LLMBlock; let memory: [String: Int]; let max_turns: Int; let stream_reply: Bool; let enabled: Bool
    }
    struct Interface: Decodable { let surfaces: [String]; let chat_eligible: Bool }
    struct AgentList: Decodable { let agents: [Definition]; let count: Int; let interfaces: [String: Interface] }
    struct Triggered: Decodable { let result: String; let delivered: Bool }
    struct ChatAnswer: Decodable { let reply: String; let parts: [Part]; let session_id: String; let run_id: String; let response_id: String; let spoken_reply: String? }
    struct Ping: Decodable { let status: String; let auth: String; let mode: String }
    struct Health: Decodable { let status: String; let version: String; let timestamp: String; let deps: [String: JSONValue]; let request_id: String }
    struct Check: Decodable { let key: String; let label: String; let status: String; let detail: String }
    struct MobileStatus: Decodable { let status: String; let score: Double; let ready: Int; let total: Int; let checks: [Check]; let next_actions: [String] }

    func decode<T: Decodable>(_ type: T.Type, _ response: TestResponse, status: Int = 200, sourceLocation: SourceLocation = #_sourceLocation) throws -> T {
        #expect(response.status == status, "\(response.json)", sourceLocation: sourceLocation)
        return try JSONDecoder().decode(T.self, from: Data(response.json.serialized().utf8))
    }

    static let token = String(repeating: "ab", count: 32)

    // MARK: Registration, inbox, receipts (contract §3, §4)

    @Test("registration, the inbox and read receipts decode as the app's models; errors carry error as a string")
    func inbox() async throws {
        try await withTestGateway { (gw) async throws in
            let registered = try decode(Registered.self, try await gw.request("POST", "/api/v1/mobile/devices", json: [
                "id": " phone-1 ", "name": "Ana's iPhone", "push_token": .string(Self.token.uppercased()), "push_environment": "sandbox",
                "notifications_enabled": true, "live_start_token": "",
            ]), status: 201)
            #expect(registered.registered && registered.device_id == "phone-1")
            _ = try decode(Registered.self, try await gw.request("POST", "/api/v1/mobile/devices", json: ["id": "phone-1", "push_token": ""]), status: 201)

            _ = try await gw.runAgent("echo", input: "The report is ready.\nThree items changed.")
            let page = try decode(DeliveryPage.self, try await gw.request("GET", "/api/v1/mobile/deliveries?device_id=phone-1"))
            #expect(page.unread_count == 1 && page.deliveries.count == 1)
            let line = try #require(page.deliveries.first)
            #expect(line.parts?.first?.type == "text" && line.parts?.first?.text == "The report is ready.\nThree items changed.")
            #expect(line.agent_id == "echo" && line.read_at == nil && line.title == "Result from echo")
            // Unread: read_at is omitted, not null. List items say how to show them; the single line does not.
            let raw = try await gw.request("GET", "/api/v1/mobile/deliveries?device_id=phone-1")
            #expect(!raw.text.contains("read_at"))
            #expect(line.presentation?.headline == "The report is ready." && line.presentation?.blocks.first?.kind == "markdown")
            let single = try decode(Delivery.self, try await gw.request("GET", "/api/v1/mobile/deliveries/\(line.id)?device_id=phone-1"))
            #expect(single.presentation == nil && single.body == line.body)
            #expect(try await gw.request("GET", "/api/v1/mobile/deliveries/\(line.id)").status == 400)
            #expect(try decode(ReadAnswer.self, try await gw.request("POST", "/api/v1/mobile/deliveries/\(line.id)/read", json: ["device_id": "phone-1"])).read)
            let after = try decode(DeliveryPage.self, try await gw.request("GET", "/api/v1/mobile/deliveries?device_id=phone-1"))
            #expect(after.unread_count == 0 && after.deliveries.first?.read_at != nil)

            // notifications_enabled absent means off, as the original: the line lands, no wake-up is queued for it.
            _ = try decode(Registered.self, try await gw.request("POST", "/api/v1/mobile/devices", json: ["id": "quiet", "push_token": .string(Self.token)]), status: 201)
            let quietRun = try await gw.runAgent("echo", input: "for the quiet phone", to: "device:quiet")
            let quietLine = try #require(quietRun["delivery_id"]?.stringValue)
            #expect(try await gw.gateway.mobileStore.outbox.entries(deliveryID: quietLine).isEmpty)
            #expect(try decode(DeliveryPage.self, try await gw.request("GET", "/api/v1/mobile/deliveries?device_id=quiet")).deliveries.first?.id == quietLine)

            // Every refusal: the app reads `error` as a string.
            let refusals = [
                try await gw.request("POST", "/api/v1/mobile/devices", json: ["name": "no id"]),
                try await gw.request("GET", "/api/v1/mobile/deliveries/nope?device_id=phone-1"),
                try await gw.request("GET", "/api/v1/mobile/deliveries", key: .some("sk_wrong")),
            ]
            for refusal in refusals {
                #expect(!(try decode(ErrorBody.self, refusal, status: refusal.status)).error.isEmpty)
            }
        }
    }

    // MARK: Memory (contract §10)

    @Test("memory: content and category, PATCH, the sync feed with tombstones and reset, export, status, purge")
    func memory() async throws {
        try await withTestGateway { (gw) async throws in
            let first = try decode(FactAnswer.self, try await gw.request("POST", "/api/v1/memory/facts",
                                                                          json: ["content": "  I start   work at 9 ", "category": "Preference"]), status: 201).fact
            #expect(first.content == "I start work at 9" && first.category == "preference" && first.owner == "owner" && first.status == "active")
            let second = try decode(FactAnswer.self, try await gw.request("POST", "/api/v1/memory/facts",
                                                                           json: ["content": "Vegetarian", "category": "constraint", "expires_at": "2099-01-31"]), status: 201).fact
            #expect(second.expires_at?.hasPrefix("2099-01-31T23:59:59") == true)
            // Siri's older field still works.
            _ = try decode(FactAnswer.self, try await gw.request("POST", "/api/v1/memory/facts", json: ["text": "Likes tea"]), status: 201)

            var sync = try decode(SyncPage.self, try await gw.request("GET", "/api/v1/memory/facts/sync?since=0&limit=2"))
            #expect(sync.changes.count == 2 && sync.has_more && !sync.reset && sync.changes.allSatisfy { !$0.deleted && $0.fact != nil })
            let cursor = sync.next_cursor
            sync = try decode(SyncPage.self, try await gw.request("GET", "/api/v1/memory/facts/sync?since=\(cursor)"))
            #expect(sync.changes.count == 1 && !sync.has_more)

            let edited = try decode(FactAnswer.self, try await gw.request("PATCH", "/api/v1/memory/facts/\(first.id)", json: ["content": "I start work at 8:30", "category": ""])).fact
            #expect(edited.content == "I start work at 8:30" && edited.category == "preference")
            #expect(try await gw.request("DELETE", "/api/v1/memory/facts/\(second.id)").status == 204)
            // Each fact's history: what it was after each change, oldest first (deleted facts keep theirs).
            let history = try decode(History.self, try await gw.request("GET", "/api/v1/memory/facts/\(first.id)/history")).events
            #expect(history.map(\.event) == ["created", "updated"] && history.map(\.content) == ["I start work at 9", "I start work at 8:30"])
            #expect(history.allSatisfy { $0.fact_id == first.id && $0.actor == "owner" && $0.status == "active" && $0.category == "preference" })
            #expect(try decode(History.self, try await gw.request("GET", "/api/v1/memory/facts/\(second.id)/history")).events.last?.event == "deleted")
            #expect(try await gw.request("GET", "/api/v1/memory/facts/nope/history").status == 404)
            sync = try decode(SyncPage.self, try await gw.request("GET", "/api/v1/memory/facts/sync?since=\(sync.next_cursor)"))
            #expect(sync.changes.map(\.fact_id) == [first.id, second.id])
            #expect(sync.changes.last?.deleted == true && sync.changes.last?.fact == nil, "a deletion is a tombstone")
            #expect(try decode(SyncPage.self, try await gw.request("GET", "/api/v1/memory/facts/sync?since=999999")).reset)

            let list = try decode(FactList.self, try await gw.request("GET", "/api/v1/memory/facts"))
            #expect(list.facts.count == 2 && list.provider == "sqlite" && list.owner == "owner")
            let found = try decode(FactList.self, try await gw.request("GET", "/api/v1/memory/facts?q=work"))
            #expect(found.facts.map(\.id) == [first.id])
            #expect(try decode(MemoryStatus.self, try await gw.request("GET", "/api/v1/memory/facts/status")).categories.contains("identity"))
            let exported = try await gw.request("GET", "/api/v1/memory/facts/export")
            #expect(try decode(Export.self, exported).facts.count == 2)
            #expect(exported.headers["content-disposition"]?.contains("soulacy-memory.json") == true)

            #expect(try await gw.request("DELETE", "/api/v1/memory/facts").status == 400)
            #expect(try decode(Purged.self, try await gw.request("DELETE", "/api/v1/memory/facts?confirm=true")).removed == 2)
            #expect(try decode(FactList.self, try await gw.request("GET", "/api/v1/memory/facts")).facts.isEmpty)
            for bad: JSONValue in [["content": ""], ["content": .string(String(repeating: "x", count: 401))], ["content": "x", "category": "Not A Slug!"],
                                   ["content": "x", "expires_at": "next week"]] {
                let refused = try await gw.request("POST", "/api/v1/memory/facts", json: bad)
                let body = try decode(ErrorBody.self, refused, status: 400)
                #expect(!body.error.isEmpty, "\(bad)")
            }
            // A viewer reads but does not write.
            let viewer = try await gw.mintKey(subject: "owner", role: "viewer")
            #expect(try await gw.request("GET", "/api/v1/memory/facts", key: .some(viewer)).status == 200)
            #expect(try await gw.request("POST", "/api/v1/memory/facts", json: ["content": "x"], key: .some(viewer)).status == 403)
        }
    }

    // MARK: Approvals, agents, chat, health (contract §7, §8, §9, §15)

    @Test("approvals, the agents list and trigger, chat with a session and voice, ping, health and mobile status")
    func assistant() async throws {
        let config = """
            id: brief
            name: Brief
            description: ""
            enabled: true
            trigger: channel
            channels: [http]
            runner: {command: ["/bin/sh", "-c", "echo \\"Heard: $(cat)\\""]}
            """
        try await withTestGateway(config: config) { (gw) async throws in
            let viewer = try await gw.mintKey(subject: "owner", role: "viewer")
            _ = try await gw.request("POST", "/api/v1/approvals", json: ["agent_id": "brief", "tool": "send_email", "call_id": "call-9",
                                                                        "arguments": ["to": "bank@example.com"], "wait": false])
            let approvals = try decode(ApprovalList.self, try await gw.request("GET", "/api/v1/approvals", key: .some(viewer)))
            #expect(approvals.approvals.first?.call_id == "call-9" && approvals.approvals.first?.args?["to"] == "bank@example.com")
            #expect(approvals.approvals.first?.reason?.contains("send_email") == true)
            #expect(try decode(Decision.self, try await gw.request("POST", "/api/v1/approvals/call-9/approve", key: .some(viewer))).approved)
            let again = try decode(Decision.self, try await gw.request("POST", "/api/v1/approvals/call-9/deny", key: .some(viewer)))
            #expect(again.ok && again.approved, "the decision already taken, not run twice")
            #expect(try await gw.request("POST", "/api/v1/approvals/nope/approve").status == 404)

            let agents = try decode(AgentList.self, try await gw.request("GET", "/api/v1/agents"))
            #expect(agents.count == 1 && agents.agents.first?.id == "brief" && agents.agents.first?.description == "" && agents.agents.first?.enabled == true)
            #expect(agents.interfaces["brief"]?.chat_eligible == true && agents.interfaces["brief"]?.surfaces == ["http", "chat"])
            #expect(try decode(AgentList.self, try await gw.request("GET", "/api/v1/agents?surface=schedule")).count == 0)
            let triggered = try decode(Triggered.self, try await gw.request("POST", "/api/v1/agents/brief/trigger"))
            #expect(triggered.result == "Heard:" && !triggered.delivered)
            #expect(try await gw.request("POST", "/api/v1/agents/nope/trigger").status == 404)

            let first = try decode(ChatAnswer.self, try await gw.request("POST", "/api/v1/chat", json: ["agent_id": "brief", "text": "hello"], key: .some(viewer)))
            #expect(first.reply == "Heard: hello" && first.parts.first?.text == "Heard: hello" && first.session_id.hasPrefix("http-") && first.spoken_reply == nil)
            let voiced = try decode(ChatAnswer.self, try await gw.request("POST", "/api/v1/chat", json: [
                "agent_id": "brief", "text": "again", "session_id": .string(first.session_id), "response_mode": "voice",
            ]))
            #expect(voiced.session_id == first.session_id && voiced.spoken_reply == "Heard: again.")
            let badMode = try await gw.request("POST", "/api/v1/chat", json: ["agent_id": "brief", "text": "x", "response_mode": "song"])
            let badModeBody = try decode(ErrorBody.self, badMode, status: 400)
            #expect(badModeBody.error.contains("response_mode must be text or voice"))

            #expect(try decode(Ping.self, try await gw.request("GET", "/ping", key: .none)).status == "ok")
            #expect(try decode(Health.self, try await gw.request("GET", "/api/v1/health")).status == "ok")
            let status = try decode(MobileStatus.self, try await gw.request("GET", "/api/v1/mobile/status", key: .some(viewer)))
            #expect(status.status == "fail" && status.checks.first?.key == "devices" && !status.next_actions.isEmpty)
        }
    }

    @Test("a disabled agent is listed with enabled false on /api/v1/agents and on the watch's /agents, and its runs are refused")
    func disabledAgentsListed() async throws {
        let config = """
            agents:
              - id: brief
                name: Brief
                enabled: true
                trigger: channel
                channels: [http]
                runner: {command: ["/bin/cat"]}
              - id: checkin
                name: Daily check-in
                enabled: false
                trigger: cron
                schedule: {cron: "0 9 * * *"}
                runner: {command: ["/bin/cat"]}
            """
        try await withTestGateway(config: config) { (gw) async throws in
            let watch = try await gw.mintKey(subject: "owner", role: "viewer")
            for path in ["/api/v1/agents", "/agents"] {
                let list = try decode(AgentList.self, try await gw.request("GET", path, key: .some(watch)))
                #expect(list.count == 2 && list.agents.map(\.id) == ["brief", "checkin"], "\(path)")
                #expect(list.agents.first { $0.id == "checkin" }?.enabled == false, "\(path)")
                #expect(list.agents.first { $0.id == "brief" }?.enabled == true, "\(path)")
            }
            #expect(try await gw.request("POST", "/api/v1/agents/checkin/trigger").status >= 400)
        }
    }

    @Test("a chat session carries its history to a model; a chat runs while the agent's scheduled run is going")
    func conversation() async throws {
        let llm = try await LLMStandIn.start()
        defer { llm.stop() }
        try await llm.script([["text": "Nice to meet you, Ana."], ["text": "You are Ana."]])
        let file = "id: pal\nenabled: true\ntrigger: channel\nllm: {provider: openai, model: m}\n"
        try await withTestGateway(config: file, environment: llm.environment) { (gw) async throws in
            let first = try decode(ChatAnswer.self, try await gw.request("POST", "/api/v1/chat", json: ["agent_id": "pal", "text": "I am Ana"]))
            _ = try decode(ChatAnswer.self, try await gw.request("POST", "/api/v1/chat", json: ["agent_id": "pal", "text": "Who am I?", "session_id": .string(first.session_id)]))
            let sent = try await llm.requests().last?["body"]?["messages"]?.arrayValue?.map { "\($0["role"]?.stringValue ?? ""): \($0["content"]?.stringValue ?? "")" } ?? []
            #expect(sent == ["user: I am Ana", "assistant: Nice to meet you, Ana.", "user: Who am I?"], "\(sent)")
        }
        // The first run waits at a gate the test opens last; every later one (the chat's) goes straight through. So the
        // run is still going when the second run and the chat ask, however slow the machine.
        let directory = TestGateway.makeTemporaryDirectory()
        let busy = """
            agents:
              - id: slow
                runner: {command: ["/bin/sh", "-c", "if mkdir \(directory)/first 2>/dev/null; then while [ ! -e \(directory)/open ]; do sleep 0.05; done; fi; echo done"]}
            """
        try await withTestGateway(config: busy) { (gw) async throws in
            _ = try await gw.request("POST", "/api/v1/agents/slow/run", json: [:])
            #expect(await eventually { FileManager.default.fileExists(atPath: directory + "/first") })
            #expect(try await gw.request("POST", "/api/v1/agents/slow/run", json: [:]).status == 409, "runs of one agent never overlap")
            let chat = try await gw.request("POST", "/api/v1/chat", json: ["agent_id": "slow", "text": "hi"])
            #expect(chat.status == 200 && chat.json["reply"] == "done", "a chat does not wait for the agent's other run")
            #expect(FileManager.default.createFile(atPath: directory + "/open", contents: nil))
            await gw.gateway.runs.waitForAll()
        }
    }
}
