import Foundation
import Gateway
import GatewayTestSupport
import APIKit
import SoulacyClient
import Testing

/// The phone-side `SoulacyAPI` is a second, Swift-typed client of the original contract: it pairs, registers,
/// reads and marks the inbox, chats (with a session, voice and streaming), remembers and syncs facts, approves as a
/// viewer, lists and triggers agents, and shows every refusal's text.
@Suite("SoulacyClient speaks the app contract", .serialized)
struct SoulacyClientContractTests {
    static let config = """
        id: brief
        name: Brief
        enabled: true
        trigger: channel
        channels: [http]
        runner: {command: ["/bin/sh", "-c", "echo \\"Heard: $(cat)\\""]}
        """

    @Test("pair, register, inbox, chat, stream, memory, approvals as a viewer, agents, trigger and refusals")
    func everything() async throws {
        try await withTestGateway(config: Self.config) { (gw) async throws in
            // The owner pairs a viewer phone for Priya; the phone redeems the code with no key yet.
            let offer = try await gw.request("POST", "/api/v1/pairing/tokens", json: ["name": "Priya", "role": "viewer"])
            let code = try #require(offer.json["code"]?.stringValue)
            let paired = try await SoulacyAPI.redeem(code: code, gateway: gw.baseURL, name: "Priya's iPhone")
            #expect(paired.paired && paired.role == "viewer" && paired.subject == "priya" && paired.display_name == "Priya")
            do {
                _ = try await SoulacyAPI.redeem(code: code, gateway: gw.baseURL)
                Issue.record("a used code paired again")
            } catch let refusal as SoulacyAPI.Refusal {
                #expect(refusal.status == 401 && refusal.error == "invalid or expired pairing code")
            }

            let api = SoulacyAPI(client: GatewayClient(paths: GatewayPaths(tailnet: gw.baseURL), token: paired.token))
            try await api.register(deviceID: "priya-phone", name: "Priya's iPhone", pushToken: String(repeating: "AB", count: 32))
            _ = try await gw.runAgent("brief", input: "the weekly report", to: "user:priya")
            let inbox = try await api.inbox(deviceID: "priya-phone")
            #expect(inbox.unread_count == 1 && inbox.deliveries.first?.parts?.first?.text == "Heard: the weekly report")
            #expect(inbox.deliveries.first?.presentation?.blocks.first?.kind == "markdown")
            try await api.markRead(try #require(inbox.deliveries.first?.id), deviceID: "priya-phone")
            #expect(try await api.inbox(deviceID: "priya-phone").unread_count == 0)

            let first = try await api.chat(agentID: "brief", text: "hello")
            let second = try await api.chat(agentID: "brief", text: "again", sessionID: first.session_id, voice: true)
            #expect(first.reply == "Heard: hello" && second.session_id == first.session_id && second.spoken_reply == "Heard: again.")
            let events = try await api.chatStream(agentID: "brief", text: "line one\nline two")
            #expect(events.first?.event == "run" && events.contains { $0.data == "Heard: line one\nline two" } && events.last?.data == "[DONE]")

            // A viewer may not remember (as the original's rbac); the owner's phone may, and syncs the change.
            do {
                _ = try await api.remember("likes tea")
                Issue.record("a viewer wrote a fact")
            } catch let refusal as SoulacyAPI.Refusal {
                #expect(refusal.status == 403 && !refusal.error.isEmpty)
            }
            let owner = SoulacyAPI(client: GatewayClient(paths: GatewayPaths(tailnet: gw.baseURL), token: gw.adminKey))
            let fact = try await owner.remember("Starts work at 9", category: "preference")
            let sync = try await owner.syncFacts(since: 0)
            #expect(sync.changes.map(\.fact_id) == [fact.id] && !sync.has_more && !sync.reset)

            _ = try await gw.request("POST", "/api/v1/approvals", json: ["agent_id": "brief", "tool": "unlock_door", "call_id": "call-door", "wait": false],
                                     key: .some(try await gw.mintKey(subject: "priya", role: "operator")))
            let pending = try await api.approvals()
            #expect(pending.map(\.call_id) == ["call-door"] && pending.first?.tool == "unlock_door")
            let decision = try await api.decide("call-door", approve: false)
            #expect(decision.ok && !decision.approved)

            let agents = try await api.agents()
            #expect(agents.count == 1 && agents.agents.first?.id == "brief" && agents.agents.first?.description == "")
            do {
                _ = try await api.trigger("brief")
                Issue.record("a viewer triggered an agent")
            } catch let refusal as SoulacyAPI.Refusal {
                #expect(refusal.status == 403)
            }
            #expect(try await owner.trigger("brief").result == "Heard:")
            do {
                _ = try await api.inbox(deviceID: "someone-elses-phone")
                Issue.record("read another phone's inbox")
            } catch let refusal as SoulacyAPI.Refusal {
                #expect((400..<500).contains(refusal.status) && refusal.error.contains("someone-elses-phone"))
            }
        }
    }

    @Test("from the QR link: the client pins the link's key, pairs over TLS, and reads the inbox over the pinned same-Wi-Fi path")
    func pairFromLink() async throws {
        try await withTestGateway(config: Self.config) { (gw) async throws in
            let offer = try await gw.request("POST", "/api/v1/pairing/tokens", json: ["name": "Priya", "role": "viewer"])
            let pairURL = try #require(offer.json["pair_url"]?.stringValue)
            let link = try #require(SoulacyAPI.PairingLink(pairURL))
            #expect(link.gateway == "https://127.0.0.1:\(gw.gateway.port)" && link.pin.count == 64)
            let paired = try await SoulacyAPI.pair(link: link, name: "Priya's iPhone")
            #expect(paired.paired && paired.fingerprint == link.pin && paired.subject == "priya")
            let api = SoulacyAPI(client: GatewayClient(paths: GatewayPaths(lan: (link.gateway, paired.fingerprint)), token: paired.token))
            try await api.register(deviceID: "priya-phone", name: "Priya's iPhone", pushToken: nil)
            _ = try await gw.runAgent("brief", input: "over the pinned path", to: "user:priya")
            #expect(try await api.inbox(deviceID: "priya-phone").deliveries.first?.parts?.first?.text == "Heard: over the pinned path")
            // A link whose pin is not the gateway's key pairs nothing.
            let forged = try #require(SoulacyAPI.PairingLink(link.gateway + "/mobile?pair=AAAABBBBCCCCDDDD&fp=" + String(repeating: "0", count: 64)))
            await #expect(throws: (any Error).self) { _ = try await SoulacyAPI.pair(link: forged) }
            #expect(SoulacyAPI.PairingLink("soulacy://pair?code=X") == nil && SoulacyAPI.PairingLink("https://x/mobile?pair=A&fp=zz") == nil)
        }
    }
}
