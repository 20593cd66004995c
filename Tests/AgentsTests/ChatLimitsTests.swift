import Agents
import Foundation
import Gateway
import GatewayTestSupport
import Testing

/// Each chat message (an API call, or anyone messaging a channel's bot) starts a conversation run, each a process
/// or a model call: they are bounded per person and per gateway, and a start past a bound is refused, not queued.
@Suite("Conversations running at once")
struct ChatLimitsTests {
    @Test("a person runs at most 8 conversations at once and the gateway 64; past either a start is busy (429 on the API), and a finished one frees its place")
    func bounded() async throws {
        let gate = TestGateway.makeTemporaryDirectory() + "/open"
        let file = """
            agents:
              - id: talker
                runner: {command: ["/bin/sh", "-c", "while [ ! -e \(gate) ]; do sleep 0.1; done; echo done"]}
            """
        try await withTestGateway(config: file) { (gw) async throws in
            let runs = gw.gateway.runs
            #expect(runs.maximumChatsPerPerson == 8 && runs.maximumChats == 64)
            func chat(_ subject: String, _ n: Int) async throws(RunStartError) {
                try await runs.start(agentID: "talker", input: "hi", trigger: .chat, output: .scheduled, subject: subject,
                                     chat: ChatContext(sessionID: "ses_\(subject)_\(n)"))
            }
            for n in 0..<8 { try await chat("ana", n) }
            await #expect(throws: RunStartError.busy(limit: 8, perPerson: true)) { try await chat("ana", 8) }
            // Through the API the same refusal is 429, naming why.
            let refused = try await gw.request("POST", "/api/v1/chat", json: ["agent_id": "talker", "text": "hi"],
                                               key: .some(try await gw.mintKey(subject: "ana", role: "operator")))
            #expect(refused.status == 429 && refused.errorCode == "busy", "\(refused.status) \(refused.text)")
            // Seven more people fill the gateway's 64; the ninth person is refused for the gateway's sake.
            for person in 1...7 { for n in 0..<8 { try await chat("p\(person)", n) } }
            await #expect(throws: RunStartError.busy(limit: 64, perPerson: false)) { try await chat("zoe", 0) }
            // Once they finish, the places are free again.
            #expect(FileManager.default.createFile(atPath: gate, contents: nil))
            await runs.waitForAll()
            try await chat("ana", 100)
            try await chat("zoe", 1)
            await runs.waitForAll()
        }
    }
}
