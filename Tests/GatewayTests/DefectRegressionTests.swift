import ChannelAPI
import ChannelTesting
import Crypto
import Foundation
import Gateway
import GatewayTestSupport
import Glibc
import HTTPClient
import APIKit
import Mobile
import RelayMailbox
import RelayProtocol
import SQLite
import Testing

/// Regressions for the defects found when the gateway was tried from outside: each test states the contract
/// the outside check used, and fails on the code before its fix.
@Suite("Defects found from outside")
struct DefectRegressionTests {
    // MARK: Exactly once

    @Test("kill between effect and answer on each kind of mutating route: the retry gets the very answer the effect committed with, applied once")
    func exactlyOnceAcrossCrash() async throws {
        let directory = TestGateway.makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let normal = try GatewayProcess(directory: directory)
        let admin = try #require(try await normal.start())
        // What the calls below act on, made by a gateway without the fault.
        _ = try await normal.call("POST", "/api/v1/mobile/devices", key: admin, json: ["id": "phone", "notifications_enabled": true])
        _ = try await normal.call("POST", "/api/v1/mobile/nodes/register", key: admin, json: ["device_id": "phone", "capabilities": ["system.notify"]])
        let fact = try await normal.call("POST", "/api/v1/memory/facts", key: admin, json: ["content": "likes tea"])
        let factID = try #require(fact.json["fact"]?["id"]?.stringValue)
        _ = try await normal.call("POST", "/api/v1/approvals", key: admin, json: ["agent_id": "echo", "tool": "unlock", "call_id": "call-k", "wait": false])
        normal.terminate()

        // Each call: the process dies after the effect commits and before the client hears anything; the retry, with
        // the same key, is answered from the log with what the effect committed together with.
        let cases: [(method: String, path: String, body: JSONValue?, check: @Sendable (Int, JSONValue) -> Bool)] = [
            ("POST", "/api/v1/memory/facts", ["content": "likes coffee"], { status, json in status == 201 && json["fact"]?["content"] == "likes coffee" }),
            ("PATCH", "/api/v1/memory/facts/\(factID)", ["content": "likes green tea"], { status, json in status == 200 && json["fact"]?["content"] == "likes green tea" }),
            ("POST", "/api/v1/mobile/devices", ["id": "phone-2"], { status, json in status == 201 && json["registered"] == true && json["created"] == true }),
            ("POST", "/api/v1/mobile/nodes/phone/commands", ["command": "system.notify", "params": ["title": "hi"]], { status, json in status == 201 && json["status"] == "queued" }),
            // Without the answer in the effect's transaction, this retry would say already_decided.
            ("POST", "/api/v1/approvals/call-k/approve", nil, { status, json in status == 200 && json["approved"] == true && json["already_decided"] == false }),
            ("POST", "/admin/api-keys", ["name": "Phone", "role": "viewer"], { status, json in status == 201 && json["key"]?.stringValue?.hasPrefix("sk_") == true }),
            ("POST", "/api/v1/pairing/tokens", nil, { status, json in status == 200 && json["code"]?.stringValue?.count == 16 }),
            // An answer known before its effect: the 202 names the run whose record it commits with.
            ("POST", "/api/v1/agents/echo/run", ["input": "once"], { status, json in status == 202 && json["run_id"]?.stringValue != nil }),
            // Answers that exist only when a run ends: recorded with the run's end.
            ("POST", "/api/v1/chat", ["agent_id": "echo", "text": "hello once"], { status, json in status == 200 && json["reply"] == "hello once" && json["run_id"]?.stringValue != nil }),
            ("POST", "/api/v1/agents/echo/trigger", nil, { status, json in status == 200 && json["run_id"]?.stringValue != nil && json["result"] == "" }),
            ("POST", "/api/v1/channels/mobile/test", ["to": "device:phone"], { status, json in status == 201 && json["recipients"] == 1 && json["delivery_id"]?.stringValue != nil }),
        ]
        for (n, call) in cases.enumerated() {
            let key = ["Idempotency-Key": "intent-\(n)"]
            let dying = try GatewayProcess(directory: directory, environment: ["SOULACY_FAULT_KILL_AFTER_EFFECT": "1"])
            try await dying.start()
            await #expect(throws: (any Error).self, "\(call.path): the process died before answering") {
                _ = try await dying.call(call.method, call.path, key: admin, json: call.body, headers: key)
            }
            dying.kill9()
            let back = try GatewayProcess(directory: directory)
            try await back.start()
            let retry = try await back.call(call.method, call.path, key: admin, json: call.body, headers: key)
            #expect(call.check(retry.status, retry.json), "\(call.method) \(call.path): \(retry.status) \(retry.json)")
            #expect(retry.json["answer_lost"] == nil)
            switch n {
            case 0:
                let facts = try await back.call("GET", "/api/v1/memory/facts", key: admin).json["facts"]?.arrayValue ?? []
                #expect(facts.filter { $0["content"] == "likes coffee" }.map { $0["id"] } == [retry.json["fact"]?["id"]], "applied once")
            case 3:
                let queued = try await back.call("GET", "/api/v1/mobile/nodes/phone/commands", key: admin).json["commands"]?.arrayValue ?? []
                #expect(queued.count == 1 && queued.first?["id"] == retry.json["id"], "applied once")
            case 7:
                // The run the answer names is the one that was recorded (the crash interrupted it); no second run started.
                let run = try await back.call("GET", "/api/v1/runs/\(retry.json["run_id"]?.stringValue ?? "")", key: admin)
                #expect(run.status == 200 && run.json["agent_id"] == "echo", "\(run.json)")
            case 10:
                let lines = try await back.call("GET", "/api/v1/mobile/deliveries?device_id=phone", key: admin).json["deliveries"]?.arrayValue ?? []
                #expect(lines.filter { $0["agent_id"] == "mobile-test" }.map { $0["id"] } == [retry.json["delivery_id"]], "applied once")
            case 5:
                // The replayed key is the one minted before the crash, and it works.
                let token = try #require(retry.json["key"]?.stringValue)
                #expect(try await back.call("GET", "/api/v1/mobile/deliveries", key: token).status == 200)
            default:
                break
            }
            back.terminate()
        }
    }

    @Test("a call killed while it waits after its effect (a decision, a phone's result, a run) is answered on retry from what it waited for, never applied twice")
    func waitingCallsResumeAcrossCrash() async throws {
        let directory = TestGateway.makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let config = TestGateway.defaultConfig + """

              - id: slow
                name: Slow
                runner:
                  command: ["/bin/sh", "-c", "while kill -0 $PPID 2>/dev/null; do sleep 0.1; done"]
                  timeout: 60s
            """
        let first = try GatewayProcess(directory: directory, config: config)
        let admin = try #require(try await first.start())
        _ = try await first.call("POST", "/api/v1/mobile/devices", key: admin, json: ["id": "phone", "capabilities": ["canvas"]])
        // Three calls that wait after their effect; the process dies while they wait.
        let calls: [(method: String, path: String, body: JSONValue?, key: String)] = [
            ("POST", "/api/v1/approvals", ["agent_id": "echo", "tool": "unlock", "call_id": "call-resume", "wait": true], "ask-1"),
            ("POST", "/api/v1/mobile/invoke", ["device_id": "phone", "command": "canvas.present", "params": ["title": "Pick", "body": "One"], "expires_in_seconds": 600], "invoke-1"),
            ("POST", "/api/v1/agents/slow/trigger", nil, "trigger-1"),
        ]
        for call in calls {
            Task { _ = try? await first.call(call.method, call.path, key: admin, json: call.body, headers: ["Idempotency-Key": call.key]) }
        }
        // Each effect is committed: the approval is asked, the command queued, the run started.
        #expect(try await eventually {
            let asked = try await first.call("GET", "/api/v1/approvals/call-resume", key: admin).status == 200
            let queued = try await first.call("GET", "/api/v1/mobile/commands?device_id=phone", key: admin).json["commands"]?.arrayValue?.count == 1
            return asked && queued && first.output.contains("of agent slow started")
        })
        first.kill9()

        let back = try GatewayProcess(directory: directory, config: config)
        try await back.start()
        // What they waited for happens after the restart: the person approves, the phone answers.
        #expect(try await back.call("POST", "/api/v1/approvals/call-resume/approve", key: admin).status == 200)
        let command = try #require(try await back.call("GET", "/api/v1/mobile/commands?device_id=phone", key: admin).json["commands"]?[0])
        let commandID = try #require(command["id"]?.stringValue)
        #expect(try await back.call("POST", "/api/v1/mobile/commands/\(commandID)/result", key: admin, json: ["device_id": "phone", "presented": true]).status == 200)

        let asked = try await back.call(calls[0].method, calls[0].path, key: admin, json: calls[0].body, headers: ["Idempotency-Key": calls[0].key])
        #expect(asked.status == 200 && asked.json == ["call_id": "call-resume", "state": "approved", "approved": true], "\(asked)")
        let invoked = try await back.call(calls[1].method, calls[1].path, key: admin, json: calls[1].body, headers: ["Idempotency-Key": calls[1].key])
        #expect(invoked.status == 200 && invoked.json["command_id"]?.stringValue == commandID && invoked.json["presented"] == true, "\(invoked)")
        // Applied once: no second command was queued.
        #expect(try await back.call("GET", "/api/v1/mobile/commands?device_id=phone", key: admin).json["commands"]?.arrayValue?.isEmpty == true)
        // The run the crash interrupted is the trigger's failure; it is not run again.
        let triggered = try await back.call(calls[2].method, calls[2].path, key: admin, json: calls[2].body, headers: ["Idempotency-Key": calls[2].key])
        #expect(triggered.status == 500 && triggered.json["code"] == "agent_failed", "\(triggered)")
        #expect(triggered.json["error"]?.stringValue?.contains("the gateway stopped during the run") == true, "\(triggered)")
        #expect(!back.output.contains("of agent slow started"))
        back.terminate()
    }

    @Test("a minted API key in an idempotent answer is not readable from the database file; its replay still answers it")
    func sealedAnswers() async throws {
        try await withTestGateway { gw in
            let headers = ["Idempotency-Key": "mint-phone-key"]
            let minted = try await gw.request("POST", "/admin/api-keys", json: ["name": "Phone", "role": "viewer"], headers: headers)
            #expect(minted.status == 201)
            let token = try #require(minted.json["key"]?.stringValue)
            let again = try await gw.request("POST", "/admin/api-keys", json: ["name": "Phone", "role": "viewer"], headers: headers)
            #expect(again.json["key"]?.stringValue == token && again.headers["idempotent-replayed"] == "true")
            // Both answers came after their commits: whatever was written is in the files now.
            var bytes = Data()
            for suffix in ["", "-wal"] {
                bytes.append((try? Data(contentsOf: URL(fileURLWithPath: gw.directory + "/data/soulacy.db" + suffix))) ?? Data())
            }
            #expect(bytes.range(of: Data(token.utf8)) == nil)
        }
    }

    // MARK: Isolation

    @Test("a run is its person's: another key gets 404 for GET /runs/:id, with or without wait")
    func runsBelongToTheirPerson() async throws {
        try await withTestGateway { gw in
            let priya = try await gw.mintKey(subject: "priya", role: "operator")
            let sam = try await gw.mintKey(subject: "sam", role: "operator")
            let run = try await gw.runAgent("echo", input: "hello", key: priya)
            let id = try #require(run["id"]?.stringValue)
            #expect(try await gw.request("GET", "/api/v1/runs/\(id)?wait=true", key: .some(priya)).status == 200)
            #expect(try await gw.request("GET", "/api/v1/runs/\(id)", key: .some(sam)).status == 404)
            #expect(try await gw.request("GET", "/api/v1/runs/\(id)?wait=true", key: .some(sam)).status == 404)
            #expect(try await gw.request("GET", "/api/v1/runs/\(id)").status == 404)  // not even the admin
        }
    }

    @Test("an approval in someone else's session is 404 and reaches no lock screen")
    func approvalSessionsBelongToTheirPerson() async throws {
        let config = """
            agents:
              - id: slow
                name: Slow
                runner:
                  command: ["/bin/sleep", "3"]
                  timeout: 10s
            """
        try await withTestGateway(config: config) { gw in
            let priya = try await gw.mintKey(subject: "priya", role: "operator")
            let sam = try await gw.mintKey(subject: "sam", role: "operator")
            let run = try await gw.request("POST", "/api/v1/agents/slow/run", json: ["input": ""], key: .some(priya))
            let session = try #require(run.json["session_id"]?.stringValue)
            let intruder = try await gw.request("POST", "/api/v1/approvals", json: ["agent_id": "slow", "tool": "shell", "session_id": .string(session), "wait": false], key: .some(sam))
            #expect(intruder.status == 404)
            let owner = try await gw.request("POST", "/api/v1/approvals", json: ["agent_id": "slow", "tool": "shell", "session_id": .string(session), "wait": false], key: .some(priya))
            #expect(owner.status == 201)
        }
    }

    @Test("a failing agent's stderr never reaches the log; its person reads it with the run")
    func stderrStaysWithTheRun() async throws {
        let canary = "CANARY-\(UUID().uuidString)"
        let config = """
            agents:
              - id: broken
                name: Broken
                runner:
                  command: ["/bin/sh", "-c", "echo \(canary) >&2; exit 3"]
                  timeout: 10s
            """
        let directory = TestGateway.makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let process = try GatewayProcess(directory: directory, config: config)
        let admin = try #require(try await process.start())
        defer { process.terminate() }
        let started = try await process.call("POST", "/api/v1/agents/broken/run", key: admin, json: ["input": ""])
        let id = try #require(started.json["run_id"]?.stringValue)
        let run = try await process.call("GET", "/api/v1/runs/\(id)?wait=true", key: admin)
        #expect(run.json["status"] == "failed" && run.json["error"]?.stringValue?.contains(canary) == true)
        // The log writer batches: wait for the line rather than race it.
        #expect(await eventually(timeout: .seconds(30)) { process.output.contains("exited with status 3") })
        #expect(!process.output.contains(canary))
    }

    // MARK: Relay mailbox

    @Test("a push's sealed payload is its own type: it never opens as a down item, nor an item as a push")
    func pushesSealedAsTheirOwnType() throws {
        let keys = try RelayKeys(secret: SecureBytes.random(count: 32), deviceID: "phone")
        typealias Fields = [String: JSONValue]
        let push = try RelayEnvelope.seal(["id": "dlv_1"], kind: .push, key: keys.down)
        #expect(throws: (any Error).self) { _ = try RelayEnvelope.open(push, as: Fields.self, kind: .record, key: keys.down) }
        #expect(throws: (any Error).self) { _ = try RelayEnvelope.open(push, as: Fields.self, kind: .result, key: keys.down) }
        #expect((try RelayEnvelope.open(push, as: Fields.self, kind: .push, key: keys.down))["id"] == "dlv_1")
        let record = try RelayEnvelope.seal(["id": "dlv_1"], kind: .record, key: keys.down)
        #expect(throws: (any Error).self) { _ = try RelayEnvelope.open(record, as: Fields.self, kind: .push, key: keys.down) }
    }

    @Test("the LAN door checks in order: Origin 403, bad bearer 401, outside the allowlist 404, missing key 422")
    func doorOrder() async throws {
        try await withTestGateway(lan: true) { gw in
            let fingerprint = try #require(gw.gateway.tlsPin)
            let key = try await gw.mintKey(subject: "owner", role: "operator")
            let client = HTTP2Client(configuration: HTTP2ClientConfiguration(pinnedPublicKeySHA256: Hex.decode(fingerprint)))
            let base = "https://127.0.0.1:\(gw.gateway.lanPort!)"
            func post(_ path: String, _ headers: [(String, String)]) async throws -> Int {
                try await client.send(ClientRequest(method: "POST", url: base + path, headers: headers, body: Array(#"{"text":"x"}"#.utf8))).status
            }
            #expect(try await post("/api/v1/memory/facts", [("origin", "https://evil.example"), ("authorization", "Bearer nope")]) == 403)
            #expect(try await post("/api/v1/memory/facts", [("authorization", "Bearer nope")]) == 401)
            #expect(try await post("/api/v1/memory/facts", []) == 401)
            #expect(try await post("/admin/api-keys", [("authorization", "Bearer \(key)")]) == 404)
            #expect(try await post("/api/v1/memory/facts", [("authorization", "Bearer \(key)")]) == 422)
            #expect(try await post("/api/v1/memory/facts", [("authorization", "Bearer \(key)"), ("idempotency-key", "k1")]) == 201)
        }
    }

    // MARK: Scheduling

    @Test("after a weekend off, the latest missed fire inside the window is replayed, not the earliest")
    func latestMissedFire() throws {
        let cron = try CronSchedule("0 7 * * *")
        let utc = TimeZone(identifier: "UTC")!
        let friday = try Date("2026-01-02T07:00:00Z", strategy: .iso8601)
        let monday = try Date("2026-01-05T09:00:00Z", strategy: .iso8601)
        let replay = Scheduler.latestMissedFire(of: cron, in: utc, window: .seconds(24 * 3600), lastFire: friday, start: monday)
        #expect(replay == (try Date("2026-01-05T07:00:00Z", strategy: .iso8601)))
        // Nothing inside the window: nothing replayed.
        let tuesday = try Date("2026-01-06T06:59:00Z", strategy: .iso8601)
        #expect(Scheduler.latestMissedFire(of: cron, in: utc, window: .seconds(3600), lastFire: friday, start: tuesday) == nil)
    }

    @Test("cron: weekday steps stop at Saturday, rare days are found decades ahead, impossible days and signs are refused")
    func cronDefects() throws {
        let utc = TimeZone(identifier: "UTC")!
        let from = try Date("2026-01-01T00:00:00Z", strategy: .iso8601)
        var at = from
        var weekdays: Set<Int> = []
        for _ in 0..<8 {
            at = try #require(try CronSchedule("0 0 * * 1/2").nextFire(after: at, in: utc))
            weekdays.insert(Calendar(identifier: .gregorian).component(.weekday, from: at) - 1)
        }
        #expect(weekdays == [1, 3, 5])  // Monday, Wednesday, Friday: never Sunday
        #expect(try CronSchedule("0 0 * * MON/2").nextFire(after: try Date("2026-01-03T00:00:00Z", strategy: .iso8601), in: utc)
                == (try Date("2026-01-05T00:00:00Z", strategy: .iso8601)))
        // Feb 29 on a Sunday: `*/7` leaves the day-of-week field unrestricted-looking but only Sunday in it.
        #expect(try CronSchedule("0 0 29 2 */7").nextFire(after: from, in: utc) == (try Date("2032-02-29T00:00:00Z", strategy: .iso8601)))
        for never in ["* * 31 2 *", "0 0 31 4,6,9,11 *", "0 0 30 2 *"] {
            #expect(throws: CronError.self) { _ = try CronSchedule(never) }
        }
        #expect(throws: CronError.self) { _ = try CronSchedule("+5 * * * *") }
        do { _ = try CronSchedule("-5 * * * *"); Issue.record("-5 accepted") } catch { #expect(!error.message.contains("''")) }
        do { _ = try CronSchedule("/5 * * * *"); Issue.record("/5 accepted") } catch { #expect(error.message.contains("*/5")) }
    }

    // MARK: HTTP framing and input

    @Test("hostile framing gets one clean 400 or 501 and the connection closes; nothing smuggled runs")
    func framing() async throws {
        try await withTestGateway { gw in
            let port = gw.gateway.port
            func statusLines(_ reply: String) -> Int {
                reply.split(separator: "\r\n", omittingEmptySubsequences: false).filter { $0.wholeMatch(of: /HTTP\/1\.1 [0-9]{3} .*/) != nil }.count
            }
            let smuggle = await RawHTTP.exchange(port: port, "POST /api/v1/memory/facts HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 40\r\n\r\n{}\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            #expect(smuggle.hasPrefix("HTTP/1.1 400") && statusLines(smuggle) == 1)
            for coding in ["gzip, chunked", "xchunked"] {
                let reply = await RawHTTP.exchange(port: port, "POST /health HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: \(coding)\r\n\r\n0\r\n\r\n")
                #expect(reply.hasPrefix("HTTP/1.1 501") && statusLines(reply) == 1)
            }
            let both = await RawHTTP.exchange(port: port, "POST /health HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
            #expect(both.hasPrefix("HTTP/1.1 400"))
            let noHost = await RawHTTP.exchange(port: port, "GET /health HTTP/1.1\r\n\r\n")
            #expect(noHost.hasPrefix("HTTP/1.1 400") && statusLines(noHost) == 1 && noHost.contains("Host"))
            let spaced = await RawHTTP.exchange(port: port, "GET /health HTTP/1.1\r\nHost: x\r\nBad Name: 1\r\n\r\n")
            #expect(spaced.hasPrefix("HTTP/1.1 400"))
            let nul = await RawHTTP.exchange(port: port, "GET /api/v1/runs/abc%00def HTTP/1.1\r\nHost: x\r\n\r\n")
            #expect(nul.hasPrefix("HTTP/1.1 400"))
            let nulQuery = await RawHTTP.exchange(port: port, "GET /api/v1/mobile/deliveries?device_id=a%00b HTTP/1.1\r\nHost: x\r\n\r\n")
            #expect(nulQuery.hasPrefix("HTTP/1.1 400"))
        }
    }

    @Test("text with a NUL reads back whole; a trailing comma is invalid_json")
    func textAndJSON() async throws {
        try await withTestGateway { gw in
            let saved = try await gw.request("POST", "/api/v1/memory/facts", json: ["text": "before\u{0}after"])
            #expect(saved.status == 201)
            let facts = try await gw.request("GET", "/api/v1/memory/facts")
            #expect(facts.json["facts"]?.arrayValue?.contains { $0["text"]?.stringValue == "before\u{0}after" } == true)
            for body in [#"{"text":"x",}"#, #"{"text":["a",]}"#] {
                let refused = try await gw.request("POST", "/api/v1/memory/facts", body: Array(body.utf8))
                #expect(refused.status == 400 && refused.errorCode == "invalid_json")
            }
            #expect(try await gw.request("POST", "/api/v1/memory/facts", body: Array(#"{"text":"a, b"}"#.utf8)).status == 201)
        }
    }

    @Test("what openapi.yaml forbids is refused, naming the field; unknown agents are 404, as in the original")
    func describedValuesOnly() async throws {
        try await withTestGateway { gw in
            for (path, field) in [("/api/v1/approvals?state=AAA", "state"), ("/approvals?state=done", "state"), ("/api/v1/runs/run_x?wait=maybe", "wait"),
                                  ("/api/v1/approvals/call_x?wait=1", "wait")] {
                let refused = try await gw.request("GET", path)
                #expect(refused.status == 400 && refused.errorField == field, "\(path)")
            }
            #expect(try await gw.request("GET", "/api/v1/approvals?state=all").status == 200)
            let emptyCall = try await gw.request("POST", "/api/v1/approvals", json: ["agent_id": "echo", "tool": "shell", "call_id": "", "wait": false])
            #expect(emptyCall.status == 400 && emptyCall.errorField == "call_id")
            #expect(try await gw.request("POST", "/api/v1/approvals", json: ["agent_id": "nobody", "tool": "shell", "wait": false]).status == 404)
            #expect(try await gw.request("POST", "/api/v1/chat", json: ["agent_id": "nobody", "text": "hi"]).status == 404)
            try await gw.registerDevice(id: "pixel", key: nil, platform: "android")
            let android = try await gw.request("POST", "/api/v1/mobile/activities", json: ["device_id": "pixel", "agent_id": "echo", "session_id": "s", "token": .string(String(repeating: "ab", count: 32))])
            #expect(android.status == 409 && android.errorField == "device_id")
            // No body pairs the caller; blanks are not JSON.
            #expect(try await gw.request("POST", "/api/v1/pairing/tokens").status == 200)
            #expect(try await gw.request("POST", "/api/v1/pairing/tokens", body: Array(" ".utf8)).errorCode == "invalid_json")
            #expect(await RawHTTP.exchange(port: gw.gateway.port, "GET /api/v1/mobile/commands?device_id=a%00b HTTP/1.1\r\nHost: x\r\n\r\n").hasPrefix("HTTP/1.1 400"))
        }
    }

    @Test("1,100 slow connections from one address: a normal client is still served, and the slow ones are closed at the deadline")
    func slowClients() async throws {
        var configuration = HTTPServerConfiguration(host: "127.0.0.1", port: 0)
        configuration.perAddressConnectionLimit = 64
        configuration.requestReceiveSeconds = 2
        // Answered on the server's own thread: the test's waiting must not compete with the answer for a task thread.
        let server = HTTPServer(configuration: configuration, immediate: { _ in .json(["ok": true]) }) { _ in .json(["ok": true]) }
        try server.start()
        defer { Task { await server.stop() } }
        // The slow clients run in a child process, waited for on a thread of its own: a thousand descriptors in
        // this process would trip Foundation's Process.run in tests running beside it.
        let port = server.port
        let (status, output) = try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<(Int32, String), any Error>) in
            Thread.detachNewThread {
                continuation.resume(with: Result { try runProgramBlocking("/usr/bin/env", ["python3", RepositoryPaths.standIns + "/slow_clients.py", String(port), "1100", "3"]) })
            }
        }
        #expect(status == 0)
        #expect(output.contains("served=1 open_after=0"), "\(output)")
        #expect(await RawHTTP.exchange(port: server.port, "GET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").hasPrefix("HTTP/1.1 200"))
    }

    @Test("one stalled wake-up does not hold back the others: they settle while it waits")
    func stalledPush() async throws {
        // Stalled well past the test's end, so "not sent yet" below cannot be outrun by a slow machine.
        let transport = StallingTransport(stalledDevice: "stuck", stall: .seconds(300))
        let directory = TestGateway.makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try MobileStore(database: try migratedDatabase(directory + "/soulacy.db"))
        let dispatcher = PushDispatcher(store: store, transports: WakeTransportRegistry([transport]), log: Log(minimum: .error), pollInterval: .milliseconds(50))
        let channel = MobileChannel(store: store.inbox, dispatcher: dispatcher)
        for id in ["stuck", "a", "b"] {
            try store.devices.register(try DeviceRegistration(json: JSONObject(["notifications_enabled": true, "id": .string(id), "push_token": .string(String(repeating: "ab", count: 32))])), subject: "owner")
        }
        let running = Task { await dispatcher.run() }
        defer { running.cancel() }
        _ = try await channel.deliver(Output(agentID: "brief", agentName: "Brief", sessionID: "s", parts: ["one"]), to: "all")
        try await Task.sleep(for: .milliseconds(300))
        // While "stuck" is still waiting, a second delivery goes out to the other phones.
        _ = try await channel.deliver(Output(agentID: "brief", agentName: "Brief", sessionID: "s", parts: ["two"]), to: "device:a")
        let quick = await eventually(timeout: .seconds(30)) { transport.sent.filter { $0 == "a" }.count == 2 && transport.sent.contains("b") }
        #expect(quick)
        #expect(!transport.sent.contains("stuck"))
    }
}

/// Sends at once, except to one device, whose answer takes `stall`.
final class StallingTransport: WakeTransport, @unchecked Sendable {
    let name = "stalling"
    let stalledDevice: String
    let stall: Duration
    private let lock = NSLock()
    private var log: [String] = []
    init(stalledDevice: String, stall: Duration) {
        self.stalledDevice = stalledDevice
        self.stall = stall
    }
    var sent: [String] { lock.withLock { log } }
    func canWake(_ target: WakeTarget) -> Bool { true }
    func send(_ signal: WakeSignal, to target: WakeTarget) async -> WakeOutcome {
        if target.deviceID == stalledDevice { try? await Task.sleep(for: stall) }
        lock.withLock { log.append(target.deviceID) }
        return .delivered
    }
}
