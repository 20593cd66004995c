import ChannelAPI
import ChannelTesting
import Foundation
import GatewayTestSupport
import JSON
import Testing

/// A sidecar's `message` frames under a real gateway: taken once into `channel_inbound`, run by the sidecar's
/// `agent_id` in the session `<channel>-<chat_id>`, and answered with a `send` to that chat through the hand-off.
@Suite("Sidecar inbound messages")
struct SidecarInboundTests {
    /// A sidecar that acks every send and records every frame it gets. After each handshake it writes garbage and
    /// refused message frames (their texts hold SECRET, which no log line may show), then `m-1` twice, then a
    /// marker `m-start-<n>` for its n-th start (counted in a file, so it knows a restart).
    static let sidecar = #"""
        import json, os, sys
        record, starts = sys.argv[1], sys.argv[2]
        n = (int(open(starts).read()) if os.path.exists(starts) else 0) + 1
        open(starts, "w").write(str(n))

        def emit(frame):
            sys.stdout.write(json.dumps(frame) + "\n")
            sys.stdout.flush()

        emit({"type": "hello", "protocol": 1, "name": "inbound-test", "capabilities": ["ack"]})
        for line in sys.stdin:
            try:
                frame = json.loads(line)
            except ValueError:
                continue
            with open(record, "a") as f:
                f.write(json.dumps(frame) + "\n")
            kind = frame.get("type")
            if kind == "hello_ack":
                emit({"type": "status", "connected": True, "detail": "ready"})
                sys.stdout.write('{"type":"message","id":"g-0","chat_id":42,"text":"SECRET wrong type"}\n')
                emit({"type": "message", "id": "g-1", "chat_id": "c-42", "text": "   "})
                emit({"type": "message", "id": "g-2", "text": "SECRET no chat"})
                emit({"type": "message", "id": "x" * 2000, "chat_id": "c-42", "text": "SECRET long id"})
                emit({"type": "message", "id": "g-4", "chat_id": "c-42", "text": "SECRET oversize " + "x" * (2 << 20)})
                emit({"type": "message", "id": "m-1", "chat_id": "c-42", "sender_id": "u-7", "sender_name": "Ann",
                      "text": "hello bot", "timestamp": 1700000000, "is_group": False})
                emit({"type": "message", "id": "m-1", "chat_id": "c-42", "text": "hello bot"})
                emit({"type": "message", "id": "m-start-%d" % n, "chat_id": "c-42", "text": "start %d" % n})
            elif kind == "send":
                emit({"type": "ack", "id": frame.get("id")})
            elif kind == "shutdown":
                break
        """#

    static let agents = """
        agents:
          - id: helper
            name: Helper
            enabled: true
            trigger: channel
            channels: [notes]
            runner:
              command: ["/bin/sh", "-c", "echo \\"$SOULACY_SESSION_ID $SOULACY_TRIGGER: you said: $(cat)\\""]
              timeout: 10s
        """

    /// The `send` frames the sidecar got, as (id, to, text); a retry of one delivery comes with the same id.
    static func sends(_ record: String) -> [(id: String, to: String, text: String)] {
        guard let text = try? String(contentsOfFile: record, encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { line in
            guard case .object(let frame)? = try? JSONCoding.decode(JSONValue.self, from: String(line)), frame["type"] == .string("send"),
                  let id = frame["id"]?.stringValue, let to = frame["to"]?.stringValue, let body = frame["text"]?.stringValue else { return nil }
            return (id, to, body)
        }
    }

    @Test("a message runs the sidecar's agent in <channel>-<chat_id> and its reply is a send to that chat; a repeated id, garbage and an oversize frame run nothing, across a restart too")
    func messageRunsAgentAndRepliesOnce() async throws {
        let directory = TestGateway.makeTemporaryDirectory()
        let script = directory + "/inbound_sidecar.py"
        let record = directory + "/record.ndjson"
        try Self.sidecar.write(toFile: script, atomically: true, encoding: .utf8)
        let config = """
            channels:
              sidecars:
                - channel: notes
                  command: python3
                  args: [\(script), \(record), \(directory)/starts]
                  agent_id: helper
            """
        let logs = MemoryLogHandler()
        let log = Log(minimum: .debug, handler: logs)
        let reply = "notes-c-42 channel: you said: hello bot"

        // Each start of the sidecar says its own marker: on a loaded machine the supervisor may restart it (a late
        // hello), so the test counts the markers the starts said rather than assuming one start per gateway.
        @Sendable func answeredStarts() -> Set<Int> {
            Set(Self.sends(record).compactMap { send in send.text.wholeMatch(of: #/notes-c-42 channel: you said: start (\d+)/#).flatMap { Int($0.1) } })
        }
        try await withTestGateway(config: Self.agents, directory: directory, log: log, gatewayConfig: config) { _ in
            #expect(await eventually(timeout: .seconds(60)) { !answeredStarts().isEmpty })
            #expect(await eventually(timeout: .seconds(30)) { Self.sends(record).contains { $0.text == reply } })
        }
        let beforeRestart = answeredStarts().max() ?? 0
        // The gateway again on the same data: the sidecar says m-1 once more (twice), and it is not run again.
        try await withTestGateway(config: Self.agents, directory: directory, log: log, gatewayConfig: config) { _ in
            #expect(await eventually(timeout: .seconds(60)) { (answeredStarts().max() ?? 0) > beforeRestart })
        }

        // One delivery per run (a send whose ack was cut off by the stop comes again with its id: that is not a run).
        let sends = Self.sends(record)
        #expect(Set(sends.filter { $0.text == reply }.map(\.id)).count == 1, "\(sends)")
        #expect(sends.allSatisfy { $0.to == "c-42" }, "\(sends)")
        let starts = answeredStarts().count
        #expect(Set(sends.map(\.id)).count == 1 + starts, "only m-1 and each start's marker were answered: \(sends)")
        let lines = logs.lines
        #expect(lines.contains { $0.contains("field chat_id has the wrong type") })
        #expect(lines.contains { $0.contains("a message frame without text") })
        #expect(lines.contains { $0.contains("a message frame without chat_id") })
        #expect(lines.contains { $0.contains("a message frame whose id is over 1024 bytes") })
        #expect(lines.contains { $0.contains("skipped a line of") && $0.contains("bytes on stdout") })
        // m-1 once, and each start's marker once.
        #expect(lines.filter { $0.contains("inbound: a message on notes started run") }.count == 1 + starts, "\(lines)")
        #expect(!lines.contains { $0.contains("SECRET") || $0.contains("hello bot") || $0.contains("you said") })
    }

    @Test("the example file sidecar under the gateway: an agent's output lands in its outbox once, an inbox line runs the channel's agent and the reply goes back to that chat")
    func exampleFileSidecar() async throws {
        let directory = TestGateway.makeTemporaryDirectory()
        let outbox = directory + "/outbox.ndjson"
        let inbox = directory + "/inbox.txt"
        let config = """
            channels:
              sidecars:
                - channel: notes
                  command: python3
                  args: [\(RepositoryPaths.root)/examples/channels/file-sidecar/file_sidecar.py]
                  env:
                    FILE_SIDECAR_OUTBOX: \(outbox)
                    FILE_SIDECAR_INBOX: \(inbox)
                  agent_id: helper
            """
        let agents = Self.agents + """

              - id: brief
                name: Brief
                enabled: true
                trigger: cron
                schedule:
                  cron: "0 0 1 1 *"
                  output: {channel: notes, to: "me"}
                runner:
                  command: ["/bin/sh", "-c", "echo report for brief"]
            """
        /// The outbox's lines as (to, text): what the example's "platform" received.
        @Sendable func received() -> [(to: String, text: String)] {
            guard let text = try? String(contentsOfFile: outbox, encoding: .utf8) else { return [] }
            return text.split(separator: "\n").compactMap { line in
                guard case .object(let entry)? = try? JSONCoding.decode(JSONValue.self, from: String(line)),
                      let to = entry["to"]?.stringValue, let body = entry["text"]?.stringValue else { return nil }
                return (to, body)
            }
        }
        try await withTestGateway(config: agents, directory: directory, gatewayConfig: config) { gw in
            let run = try await gw.runAgent("brief", input: "")
            #expect(run["status"] == "succeeded", "\(run)")
            let runID = try #require(run["id"]?.stringValue)
            #expect(await eventually(timeout: .seconds(30)) {
                (try? await gw.request("GET", "/api/v1/runs/\(runID)").json["outputs"]?[0]?["state"]) == "delivered"
            }, "the run's output is delivered once the sidecar acked it")
            #expect(received().map(\.to) == ["me"] && received().first?.text.contains("report for brief") == true, "\(received())")

            // A line a person writes on the "platform" is a message in the chat "me": the helper answers there.
            try "me\thello there\n".write(toFile: inbox, atomically: false, encoding: .utf8)
            #expect(await eventually(timeout: .seconds(30)) { received().contains { $0.text == "notes-me channel: you said: hello there" } }, "\(received())")
            #expect(received().allSatisfy { $0.to == "me" } && received().count == 2, "\(received())")
        }
    }
}
