import ChannelAPI
import ChannelTesting
import Foundation
import GatewayTestSupport
import APIKit
import Testing

/// One broker for every surface: lock-screen wake-ups, idempotent decisions, races, expiry, runs that ask.
@Suite("Approvals", .serialized)
struct ApprovalsTests {
    @Test("every phone of the same person gets a time-sensitive SOULACY_APPROVAL wake-up with names and ids only")
    func lockScreenWakeUps() async throws {
        let recorder = RecordingTransport()
        try await withTestGateway(transports: [recorder], mode: .router) { (gw) async throws in
            let priya = try await gw.mintKey(subject: "priya", role: "operator")
            try await gw.registerDevice(id: "owner-phone", key: nil, token: String(repeating: "01", count: 32))
            try await gw.registerDevice(id: "owner-ipad", key: nil, token: String(repeating: "02", count: 32))
            try await gw.registerDevice(id: "priya-phone", key: priya, token: String(repeating: "03", count: 32))
            let asked = try await gw.request("POST", "/api/v1/approvals", json: [
                "agent_id": "echo", "tool": "send_email", "session_id": "ses_1", "call_id": "call_42",
                "arguments": ["to": "bank@example.com", "body": "TOP-SECRET-ARGUMENT"], "wait": false,
            ])
            #expect(asked.status == 201)
            #expect(await eventually { recorder.sent.count == 2 })
            // The ask queued exactly these two wake-ups (none for Priya's phone), and nothing more is due.
            await gw.gateway.dispatcher.drain()
            #expect(try await gw.gateway.mobileStore.outbox.entries().map(\.deviceID).sorted() == ["owner-ipad", "owner-phone"])
            #expect(recorder.sent.count == 2)
            #expect(Set(recorder.sent.map(\.target.deviceID)) == ["owner-phone", "owner-ipad"])
            let signal = try #require(recorder.sent.first?.signal)
            #expect(signal.category == .approval && signal.timeSensitive)
            #expect(signal.deepLink == "soulacy://approval/call_42")
            #expect(signal.extra == ["call_id": "call_42", "agent_id": "echo", "session_id": "ses_1", "tool": "send_email"])
            #expect(signal.body == "Echo wants to use send_email")
            #expect(!String(decoding: try JSONEncoder().encode(signal), as: UTF8.self).contains("TOP-SECRET-ARGUMENT"))
            // The arguments come from the authenticated API.
            #expect(try await gw.request("GET", "/api/v1/approvals/call_42").json["arguments"]?["body"] == "TOP-SECRET-ARGUMENT")
        }
    }

    @Test("a person has at most 100 approvals waiting: the next ask is 409 too_many_pending_approvals, a known call id still answers, a decision frees a place")
    func pendingPerPerson() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            for n in 0..<100 {
                let asked = try await gw.request("POST", "/api/v1/approvals", json: ["agent_id": "echo", "tool": "t", "call_id": .string("call_\(n)"), "wait": false])
                #expect(asked.status == 201, "ask \(n): \(asked.text)")
            }
            let refused = try await gw.request("POST", "/api/v1/approvals", json: ["agent_id": "echo", "tool": "t", "call_id": "call_more", "wait": false])
            #expect(refused.status == 409 && refused.errorCode == "too_many_pending_approvals", "\(refused.text)")
            #expect(try await gw.request("GET", "/api/v1/approvals/call_more").status == 404)
            let again = try await gw.request("POST", "/api/v1/approvals", json: ["agent_id": "echo", "tool": "t", "call_id": "call_7", "wait": false])
            #expect(again.status == 201 && again.json["call_id"] == "call_7", "\(again.text)")
            // Another person's count is their own.
            let priya = try await gw.mintKey(subject: "priya", role: "operator")
            #expect(try await gw.request("POST", "/api/v1/approvals", json: ["agent_id": "echo", "tool": "t", "wait": false], key: .some(priya)).status == 201)
            #expect(try await gw.request("POST", "/api/v1/approvals/call_3/deny", json: [:]).status == 200)
            #expect(try await gw.request("POST", "/api/v1/approvals", json: ["agent_id": "echo", "tool": "t", "call_id": "call_more", "wait": false]).status == 201)
        }
    }

    @Test("a bad ask is refused naming its first wrong field, in the order the fields are documented")
    func askRefusalsInOrder() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            let cases: [(JSONValue, String, String)] = [
                (["agent_id": 5], "agent_id", "agent_id: must be a string, got a number"),
                (["agent_id": "echo"], "tool", "tool is required"),
                (["agent_id": "echo", "tool": "t", "call_id": true], "call_id", "call_id: must be a string, got a boolean"),
                (["agent_id": "echo", "tool": "t", "timeout_seconds": 0.5], "timeout_seconds", "timeout_seconds: must be a whole number from 1 to 3600"),
            ]
            for (body, field, message) in cases {
                let refused = try await gw.request("POST", "/api/v1/approvals", json: body)
                #expect(refused.status == 400 && refused.errorField == field, "\(body): \(refused.json)")
                #expect(refused.json["error"]?.stringValue == message, "\(body): \(refused.json)")
            }
        }
    }

    @Test("concurrent approve and deny from several clients resolve to exactly one decision, reported to all")
    func races() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            let phone = try await gw.mintKey(subject: "owner", role: "operator", name: "phone")
            let watch = try await gw.mintKey(subject: "owner", role: "operator", name: "watch")
            let clients = [gw.adminKey, phone, watch]
            for round in 0..<5 {
                let callID = "call_race_\(round)"
                async let waiting = gw.request("POST", "/api/v1/approvals", json: ["agent_id": "echo", "tool": "unlock", "call_id": .string(callID)])
                #expect(await eventually { (try? await gw.gateway.approvals.approval(callID: callID)) != nil })
                let answers = try await withThrowingTaskGroup(of: TestResponse.self) { group in
                    for i in 0..<24 {
                        let key = clients[i % clients.count]
                        let verb = i % 2 == 0 ? "approve" : "deny"
                        let path = i % 3 == 0 ? "/approvals/\(callID)/\(verb)" : "/api/v1/approvals/\(callID)/\(verb)"
                        group.addTask { try await gw.request("POST", path, key: .some(key)) }
                    }
                    var all: [TestResponse] = []
                    for try await response in group { all.append(response) }
                    return all
                }
                #expect(answers.allSatisfy { $0.status == 200 })
                let deciders = answers.filter { $0.json["already_decided"] == false }
                #expect(deciders.count == 1)
                let decided = try #require(deciders.first?.json["state"]?.stringValue)
                #expect(answers.allSatisfy { $0.json["state"]?.stringValue == decided })
                #expect(answers.filter { $0.json["already_decided"] == true }.allSatisfy { $0.json["message"]?.stringValue?.contains("already \(decided)") == true })
                let asker = try await waiting
                #expect(asker.json["state"]?.stringValue == decided)
                #expect(asker.json["approved"] == .bool(decided == "approved"))
            }
        }
    }

    @Test("an unanswered approval expires and the run sees a denial; a late answer is told so")
    func expiry() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            let started = ContinuousClock.now
            let asked = try await gw.request("POST", "/api/v1/approvals", json: ["agent_id": "echo", "tool": "t", "call_id": "call_exp", "timeout_seconds": 1])
            #expect(asked.json["state"] == "expired" && asked.json["approved"] == false)
            #expect(ContinuousClock.now - started >= .milliseconds(900))
            let late = try await gw.request("POST", "/approvals/call_exp/approve")
            #expect(late.json["state"] == "expired" && late.json["already_decided"] == true)
            #expect(late.json["message"]?.stringValue?.contains("expired") == true)
        }
    }

    @Test("waiting is a long poll: after SOULACY_LONG_POLL_SECONDS the answer is pending, and GET ?wait=true picks it up")
    func longPoll() async throws {
        try await withTestGateway(environment: ["SOULACY_LONG_POLL_SECONDS": "1"], mode: .router) { (gw) async throws in
            // The decision comes 200 ms into a 1 s poll. A stall of a loaded machine past the poll's second makes that
            // try's answer "pending"; the rule is shown by a try whose poll the decision reached, with a fresh ask each.
            var answers: [String] = []
            for attempt in 1...5 {
                let callID = "call_lp_\(attempt)"
                let started = ContinuousClock.now
                let first = try await gw.request("POST", "/api/v1/approvals", json: ["agent_id": "echo", "tool": "t", "call_id": .string(callID), "timeout_seconds": 3600])
                #expect(first.json["state"] == "pending" && first.json["approved"] == false)
                #expect(ContinuousClock.now - started >= .milliseconds(900) && ContinuousClock.now - started < .seconds(30))
                async let polled = gw.request("GET", "/api/v1/approvals/\(callID)?wait=true")
                try await Task.sleep(for: .milliseconds(200))
                #expect(try await gw.request("POST", "/approvals/\(callID)/approve").json["state"] == "approved")
                let answer = try await polled
                answers.append(answer.json["state"]?.stringValue ?? "\(answer.status)")
                if answer.json["state"] == "approved" {
                    #expect(answer.json["approved"] == true)
                    break
                }
                #expect(answer.json["state"] == "pending", "\(answer.text)")
            }
            #expect(answers.last == "approved", "\(answers)")
        }
    }

    @Test("a long poll that ran out is not the ask's last word: a retry with the same Idempotency-Key waits for the decision")
    func longPollRetriedWithItsKey() async throws {
        try await withTestGateway(environment: ["SOULACY_LONG_POLL_SECONDS": "1"], mode: .router) { (gw) async throws in
            let ask: JSONValue = ["agent_id": "echo", "tool": "t", "call_id": "call_retry", "timeout_seconds": 3600]
            let key = ["Idempotency-Key": "ask-once"]
            let first = try await gw.request("POST", "/api/v1/approvals", json: ask, headers: key)
            #expect(first.json["state"] == "pending")
            // Still pending: the retry waits again (and hears pending again when nothing was decided).
            let again = try await gw.request("POST", "/api/v1/approvals", json: ask, headers: key)
            #expect(again.json["state"] == "pending" && again.headers["idempotent-replayed"] == "true")
            #expect(try await gw.request("POST", "/approvals/call_retry/approve").json["state"] == "approved")
            let decided = try await gw.request("POST", "/api/v1/approvals", json: ask, headers: key)
            #expect(decided.json == ["call_id": "call_retry", "state": "approved", "approved": true], "\(decided.json)")
            #expect(decided.headers["idempotent-replayed"] == "true")
            // One approval, asked once.
            let all = try await gw.request("GET", "/api/v1/approvals?state=all").json["approvals"]?.arrayValue ?? []
            #expect(all.filter { $0["call_id"] == "call_retry" }.count == 1)
        }
    }

    @Test("a running command asks with its run credential, waits, and runs its tool only after a yes — once")
    func runAsksOverHTTP() async throws {
        let marker = TestGateway.makeTemporaryDirectory() + "/tool-ran"
        let config = """
            agents:
              - id: careful
                name: Careful
                runner:
                  command: ["/bin/sh", "-c", "answer=$(curl -s -X POST -H \\"Authorization: Bearer $SOULACY_RUN_TOKEN\\" -d '{\\"agent_id\\":\\"careful\\",\\"tool\\":\\"delete_files\\",\\"call_id\\":\\"call_run\\",\\"session_id\\":\\"'$SOULACY_SESSION_ID'\\"}' $SOULACY_API_URL/api/v1/approvals); case $answer in *'\\"approved\\":true'*) echo ran >> \(marker); echo done;; *) echo refused;; esac"]
                  timeout: 30s
            """
        try await withTestGateway(config: config) { (gw) async throws in
            let run = try await gw.request("POST", "/api/v1/agents/careful/run", json: [:])
            let runID = try #require(run.json["run_id"]?.stringValue)
            #expect(await eventually { (try? await gw.gateway.approvals.approval(callID: "call_run")) != nil })
            let pending = try await gw.request("GET", "/approvals")
            #expect(pending.json["approvals"]?.arrayValue?.first?["session_id"] == run.json["session_id"])
            #expect(!FileManager.default.fileExists(atPath: marker))
            async let first = gw.request("POST", "/approvals/call_run/approve")
            async let second = gw.request("POST", "/approvals/call_run/approve")
            _ = try await (first, second)
            let finished = try await gw.request("GET", "/api/v1/runs/\(runID)?wait=true")
            #expect(finished.json["status"] == "succeeded")
            #expect(try String(contentsOfFile: marker, encoding: .utf8) == "ran\n")
            // The credential died with the run.
            #expect(try await gw.request("GET", "/approvals", key: .some("srun_whatever")).status == 401)
        }
    }
}
