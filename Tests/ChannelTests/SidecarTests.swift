import ChannelAPI
import ChannelTesting
import Foundation
import Glibc
import GatewayTestSupport
import JSON
import Sidecar
import Testing

/// Sidecars (External Channel Protocol v1) as the supervisor runs them: real Python children speaking NDJSON.
@Suite("Sidecar channels")
struct SidecarTests {
    static let scripted = RepositoryPaths.standIns + "/scripted_sidecar.py"
    static let example = RepositoryPaths.root + "/examples/channels/file-sidecar/file_sidecar.py"
    static let broken = RepositoryPaths.root + "/examples/channels/file-sidecar/broken_sidecar.py"

    /// A scripted sidecar under a supervisor, with a memory log, a manual clock for the backoff and a record file.
    final class Harness: Sendable {
        let channel: SidecarChannel
        let logs = MemoryLogHandler()
        let clock = ManualClock(Date(timeIntervalSince1970: 1_700_000_000))
        let record: String

        /// The product's timing with room for a Python interpreter that starts slowly on a loaded machine: a handshake
        /// timeout nobody advances the manual clock past would leave the test waiting for a restart that never comes.
        static var patientTiming: SidecarTiming {
            var timing = SidecarTiming()
            timing.handshakeTimeout = .seconds(60)
            return timing
        }

        init(mode: String, timing: SidecarTiming = Harness.patientTiming, ackTimeout: Duration = .seconds(30), sharedDir: String? = nil,
             agentID: String? = "helper", random: @escaping @Sendable () -> Double = { 0.5 }) {
            record = NSTemporaryDirectory() + "sidecar-record-\(UUID().uuidString).ndjson"
            let config = SidecarConfig(name: "notes", command: "python3", args: [SidecarTests.scripted],
                                       env: ["SIDECAR_MODE": .text(mode), "SIDECAR_RECORD": .text(record)],
                                       sharedDirectory: sharedDir, ackTimeout: ackTimeout, agentID: agentID)
            channel = SidecarChannel(config: config, timing: timing, hostEnvironment: ["HOME": NSTemporaryDirectory()],
                                     log: Log(minimum: .debug, handler: logs), clock: clock, random: random)
        }

        var supervisor: SidecarSupervisor { channel.supervisor }

        /// Frames the sidecar received, in order (its pid first).
        var received: [[String: JSONValue]] {
            guard let text = try? String(contentsOfFile: record, encoding: .utf8) else { return [] }
            return text.split(separator: "\n").compactMap { line in
                guard case .object(let fields)? = try? JSONCoding.decode(JSONValue.self, from: String(line)) else { return nil }
                return fields
            }
        }

        func frames(_ type: String) -> [[String: JSONValue]] { received.filter { $0["type"] == .string(type) } }

        var pids: [Int32] { frames("_pid").compactMap { if case .number(let n)? = $0["pid"] { Int32(n) } else { nil } } }

        func send(_ text: String, to: String = "chat-1", id: String = UUID().uuidString) async -> ChannelSendOutcome {
            await channel.attempt(ChannelSend(id: id, channel: "notes", destination: to,
                                              output: Output(agentID: "a", agentName: "A", sessionID: "s", parts: [text]), createdAt: Date()))
        }

        /// Waits until the status satisfies `condition`.
        func status(within limit: Duration = .seconds(60), _ condition: (SidecarStatus) -> Bool) async -> SidecarStatus {
            let deadline = ContinuousClock.now + limit
            var status = await channel.status
            while !condition(status), ContinuousClock.now < deadline {
                try? await Task.sleep(for: .milliseconds(20))
                status = await channel.status
            }
            return status
        }

        func ready() async -> SidecarStatus { await status { $0.detail == "scripted sidecar ready" } }

        deinit { try? FileManager.default.removeItem(atPath: record) }
    }

    static func eventually(within limit: Duration = .seconds(10), _ condition: () -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + limit
        while !condition() {
            if ContinuousClock.now >= deadline { return false }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return true
    }

    // MARK: Handshake

    @Test("hello → hello_ack with min(versions) and shared_dir; the status follows the handshake and the sidecar's status")
    func handshake() async throws {
        let h = Harness(mode: "protocol=3", sharedDir: "/tmp/scratch-notes")
        await h.channel.start()
        let status = await h.ready()
        #expect(status.detail == "scripted sidecar ready")
        #expect(status.connected)
        #expect(status.protocolVersion == 1)
        #expect(status.sidecarName == "scripted")
        #expect(!status.acknowledgesSends)
        let acks = h.frames("hello_ack")
        #expect(acks.count == 1)
        #expect(acks.first?["protocol"] == .number(1))
        #expect(acks.first?["shared_dir"] == .string("/tmp/scratch-notes"))
        #expect(h.logs.lines.contains { $0.contains("sidecar notes: hello from scripted, protocol 1") })
        await h.channel.stop()
        #expect(await h.channel.status.detail == "stopped")
    }

    @Test("no hello within the handshake timeout, or a hello without a version, kills it with the original's status")
    func handshakeFailures() async throws {
        var timing = SidecarTiming()
        timing.handshakeTimeout = .milliseconds(500)
        let silent = Harness(mode: "no-hello", timing: timing)
        await silent.channel.start()
        let timedOut = await silent.status { $0.lastExit == "handshake timeout: sidecar never sent hello" }
        #expect(timedOut.lastExit == "handshake timeout: sidecar never sent hello")
        #expect(timedOut.detail.hasPrefix("sidecar exited; restart #1 in "))
        await silent.channel.stop()

        let bad = Harness(mode: "bad-hello")
        await bad.channel.start()
        let refused = await bad.status { $0.lastExit != nil }
        #expect(refused.lastExit == "protocol negotiation failed: hello has no protocol version of 1 or more")
        #expect(bad.frames("hello_ack").isEmpty)
        await bad.channel.stop()
    }

    // MARK: Sends

    @Test("without acks a send is delivered once its frame is written, as the original: send {to, text, id}")
    func sendWithoutAcks() async throws {
        let h = Harness(mode: "")
        await h.channel.start()
        _ = await h.ready()
        let outcome = await h.send("The weather is fine", to: "chat-42", id: "d-1")
        #expect(outcome == .delivered(remoteID: nil))
        #expect(await Self.eventually { !h.frames("send").isEmpty })
        #expect(h.frames("send").first == ["type": .string("send"), "to": .string("chat-42"), "text": .string("The weather is fine"), "id": .string("d-1")])
        await h.channel.stop()
    }

    @Test("a sidecar that declares acks: delivered on its ack (with its remote id), a retry after its nack's retry_after, a retry on silence")
    func sendWithAcks() async throws {
        let acking = Harness(mode: "acks")
        await acking.channel.start()
        #expect(await acking.ready().acknowledgesSends)
        #expect(await acking.send("hello", id: "d-7") == .delivered(remoteID: "r-d-7"))
        await acking.channel.stop()

        let nacking = Harness(mode: "nack")
        await nacking.channel.start()
        _ = await nacking.ready()
        #expect(await nacking.send("hello", id: "d-8") == .retry(after: .seconds(7), reason: "sidecar notes could not deliver it: platform says slow down"))
        await nacking.channel.stop()

        var timing = Harness.patientTiming
        timing.writeTimeout = .seconds(1)
        let silent = Harness(mode: "silent", timing: timing, ackTimeout: .seconds(1))
        await silent.channel.start()
        _ = await silent.ready()
        let started = ContinuousClock.now
        let outcome = await silent.send("hello", id: "d-9")
        #expect(outcome == .retry(after: nil, reason: "sidecar notes did not acknowledge the send within 1s"))
        #expect(ContinuousClock.now - started < .seconds(15))
        await silent.channel.stop()
    }

    @Test("an empty output fails for good; a destination must be a one-line chat id")
    func validation() async throws {
        let h = Harness(mode: "")
        #expect(await h.send("") == .failed(reason: "nothing to send: the output has no text"))
        #expect(throws: DestinationError.self) { try h.channel.validate(destination: "  ") }
        #expect(throws: DestinationError.self) { try h.channel.validate(destination: "a\nb") }
        try h.channel.validate(destination: "!room:matrix.org")
    }

    // MARK: Restarts

    @Test("killed mid-run: status restart #1, a send while it is down is a retry after the time to the restart, then it is delivered")
    func killedAndRestarted() async throws {
        let h = Harness(mode: "acks")
        await h.channel.start()
        _ = await h.ready()
        let pid = try #require(h.pids.first)
        kill(pid, SIGKILL)
        let down = await h.status { $0.detail.hasPrefix("sidecar exited; restart #1 in ") }
        #expect(down.detail == "sidecar exited; restart #1 in 1s")  // random 0.5: exactly the middle of ±10 %
        #expect(down.restarts == 1)
        #expect(down.lastExit == "was killed by signal 9 (SIGKILL)")
        // While it is down the send is not lost: the framework holds it and retries after the restart.
        let whileDown = await h.send("kept for later", id: "d-down")
        guard case .retry(let after, let reason) = whileDown else { Issue.record("got \(whileDown)"); return }
        #expect(reason == "sidecar notes is restarting")
        #expect(after == .seconds(1))
        h.clock.advance(by: .seconds(1))
        _ = await h.ready()
        #expect(h.pids.count == 2)
        #expect(await h.send("kept for later", id: "d-down") == .delivered(remoteID: "r-d-down"))
        #expect(h.frames("send").map { $0["id"] } == [.string("d-down")])
        await h.channel.stop()
    }

    @Test("restart delays double from 1 s to 60 s with ±10 % jitter, and 10 healthy minutes reset the count")
    func backoff() async throws {
        for restart in 1...10 {
            let base = min(pow(2, Double(restart - 1)), 60)
            for unit in [0, 0.25, 0.5, 0.999] {
                let delay = SidecarBackoff.seconds(SidecarBackoff.delay(restart: restart, unit: unit))
                #expect(delay >= base * 0.9 - 0.001 && delay <= base * 1.1 + 0.001, "restart \(restart) unit \(unit): \(delay)")
            }
            #expect(SidecarBackoff.delay(restart: restart, unit: 0) == .milliseconds(Int64(base * 900)))
        }
        #expect(SidecarBackoff.text(.milliseconds(1043)) == "1.043s")
        #expect(SidecarBackoff.text(.milliseconds(900)) == "900ms")
        #expect(SidecarBackoff.text(.milliseconds(65_500)) == "1m5.5s")

        // Through the supervisor: a sidecar that never says hello is killed each time; the low edge of the jitter.
        var timing = SidecarTiming()
        timing.handshakeTimeout = .milliseconds(200)
        let h = Harness(mode: "no-hello", timing: timing, random: { 0 })
        await h.channel.start()
        var seen: [String] = []
        for (n, delay) in [(1, "900ms"), (2, "1.8s"), (3, "3.6s"), (4, "7.2s")] {
            let status = await h.status { $0.detail == "sidecar exited; restart #\(n) in \(delay)" }
            seen.append(status.detail)
            h.clock.advance(by: .seconds(8))
        }
        #expect(seen == ["sidecar exited; restart #1 in 900ms", "sidecar exited; restart #2 in 1.8s", "sidecar exited; restart #3 in 3.6s", "sidecar exited; restart #4 in 7.2s"])
        await h.channel.stop()

        // A child that ran 10 minutes before it died starts the count again.
        let healthy = Harness(mode: "", random: { 0 })
        await healthy.channel.start()
        _ = await healthy.ready()
        kill(try #require(healthy.pids.first), SIGKILL)
        _ = await healthy.status { $0.restarts == 1 }
        healthy.clock.advance(by: .seconds(1))
        _ = await healthy.status { $0.detail == "scripted sidecar ready" }
        healthy.clock.advance(by: .seconds(601))
        kill(try #require(healthy.pids.last), SIGKILL)
        let reset = await healthy.status { $0.detail.hasPrefix("sidecar exited; restart #") }
        #expect(reset.detail == "sidecar exited; restart #1 in 900ms")
        await healthy.channel.stop()
    }

    // MARK: Shutdown

    @Test("stop: shutdown and end of stdin, a sidecar that ignores them is SIGKILLed after the grace")
    func shutdownGrace() async throws {
        #expect(SidecarTiming().shutdownGrace == .seconds(3))
        // With a grace of a minute, a sidecar that exits on shutdown ends the stop long before it: stop does not sit out
        // the grace (the bounds leave room for any stall of a loaded machine).
        var politeTiming = Harness.patientTiming
        politeTiming.shutdownGrace = .seconds(60)
        let polite = Harness(mode: "", timing: politeTiming)
        await polite.channel.start()
        _ = await polite.ready()
        var started = ContinuousClock.now
        await polite.channel.stop()
        #expect(ContinuousClock.now - started < .seconds(30))
        #expect(polite.frames("shutdown").count == 1)
        #expect(polite.logs.lines.contains { $0.contains("sidecar notes stopping: exited with status 0") })

        var timing = Harness.patientTiming
        timing.shutdownGrace = .seconds(1)
        let stubborn = Harness(mode: "ignore-shutdown", timing: timing)
        await stubborn.channel.start()
        _ = await stubborn.ready()
        let pid = try #require(stubborn.pids.first)
        started = ContinuousClock.now
        await stubborn.channel.stop()
        let took = ContinuousClock.now - started
        // Killed once the grace is over, not before; the upper bound only rules out waiting for the sidecar itself.
        #expect(took >= .seconds(1) && took < .seconds(30), "\(took)")
        #expect(stubborn.frames("shutdown").count == 1)
        #expect(kill(pid, 0) != 0, "the sidecar is gone")
        #expect(stubborn.logs.lines.contains { $0.contains("sidecar notes stopping: was killed by signal 9 (SIGKILL)") })
        #expect(await stubborn.channel.status.detail == "stopped")
    }

    // MARK: What a sidecar may write

    @Test("unknown frames are ignored before and after the handshake")
    func unknownFrames() async throws {
        let h = Harness(mode: "unknown,acks")
        await h.channel.start()
        #expect(await h.ready().connected)
        #expect(await h.send("still fine", id: "d-u") == .delivered(remoteID: "r-d-u"))
        #expect(!h.logs.lines.contains { $0.contains("invalid line") })
        await h.channel.stop()
    }

    @Test("a 2 MiB line is skipped with a log line; the sidecar keeps working")
    func oversizedLine() async throws {
        let h = Harness(mode: "big-line,acks")
        await h.channel.start()
        #expect(await h.ready().connected)
        #expect(h.logs.lines.contains { $0.contains("skipped a line of 2097") && $0.contains("bytes on stdout (over the 1048576-byte limit)") })
        #expect(await h.send("after the big line", id: "d-b") == .delivered(remoteID: "r-d-b"))
        await h.channel.stop()
    }

    @Test("garbage lines are logged and skipped; a flood of them is counted, not logged line by line, and no send is lost")
    func garbageAndFlood() async throws {
        let h = Harness(mode: "garbage,acks")
        await h.channel.start()
        #expect(await h.ready().connected)
        let invalid = h.logs.lines.filter { $0.contains("an invalid line on stdout") }
        #expect(invalid.count == 4, "\(invalid)")
        #expect(invalid.contains { $0.contains("(not a JSON object)") })
        #expect(invalid.contains { $0.contains("(the frame has no type)") })
        await h.channel.stop()

        let flood = Harness(mode: "flood,acks")
        await flood.channel.start()
        let sending = Task { await flood.send("during the flood", id: "d-f") }
        #expect(await flood.status(within: .seconds(30)) { $0.detail == "scripted sidecar ready" }.connected)
        let outcome = await sending.value
        // Sent while it was starting (a retry after 1 s) or delivered; either way nothing was dropped silently.
        #expect(outcome == .delivered(remoteID: "r-d-f") || outcome == .retry(after: .seconds(1), reason: "sidecar notes is starting"))
        #expect(await flood.send("after the flood", id: "d-g") == .delivered(remoteID: "r-d-g"))
        #expect(flood.logs.lines.filter { $0.contains("an invalid line on stdout") }.count <= 5)
        await flood.channel.stop()
    }

    @Test("a frame nested 10,000 levels is refused with a log line naming the limit; the sidecar keeps working")
    func deeplyNestedFrame() async throws {
        let h = Harness(mode: "deep,acks")
        await h.channel.start()
        #expect(await h.ready().connected, "the status frame after the deep one was read")
        let refused = h.logs.lines.filter { $0.contains("an invalid line on stdout") }
        #expect(refused.count == 1 && refused.first?.contains("64") == true, "\(refused)")
        #expect(await h.send("after the deep frame", id: "d-deep") == .delivered(remoteID: "r-d-deep"))
        await h.channel.stop()
    }

    @Test("stderr goes to the log line by line; no message text is ever logged")
    func stderrLogged() async throws {
        let h = Harness(mode: "stderr,message,acks")
        await h.channel.start()
        _ = await h.ready()
        #expect(await h.send("a secret diary entry", to: "chat-9", id: "d-s") == .delivered(remoteID: "r-d-s"))
        #expect(await Self.eventually { h.logs.lines.contains { $0.contains("sidecar notes stderr: scripted sidecar: got a send for chat-9") } })
        var inbound = h.channel.inbound.makeAsyncIterator()
        _ = await inbound.next()
        #expect(!h.logs.lines.contains { $0.contains("a secret diary entry") || $0.contains("hi there") })
        await h.channel.stop()
    }

    @Test("message frames come out as inbound messages: chat id for replies, sender, group or direct")
    func inboundMessages() async throws {
        let h = Harness(mode: "message")
        await h.channel.start()
        var inbound = h.channel.inbound.makeAsyncIterator()
        let message = await inbound.next()
        #expect(message == InboundMessage(id: "m1", replyTo: "c1", senderID: "u7", senderName: "Ann", text: "hi there", isDirect: false))
        await h.channel.stop()
        #expect(await inbound.next() == nil)
    }

    @Test("a sidecar without agent_id has no poller: its messages are dropped with one log line, and its sends still go")
    func inboundWithoutAgent() async throws {
        let h = Harness(mode: "message,acks", agentID: nil)
        #expect(h.channel.poller == nil)
        await h.channel.start()
        #expect(await h.ready().connected)
        #expect(await Self.eventually { h.logs.lines.contains { $0.contains("no agent_id is configured for this sidecar; its messages are dropped") } })
        #expect(await h.send("still delivered", id: "d-n") == .delivered(remoteID: "r-d-n"))
        #expect(!h.logs.lines.contains { $0.contains("hi there") })
        await h.channel.stop()
    }

    // MARK: The example and the checklist

    @Test("the example file sidecar: a send is appended to its outbox and acked, an inbox line becomes a message")
    func exampleSidecar() async throws {
        let dir = NSTemporaryDirectory() + "file-sidecar-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let config = SidecarConfig(name: "notes", command: "python3", args: [Self.example],
                                   env: ["FILE_SIDECAR_OUTBOX": .text(dir + "/outbox.ndjson"), "FILE_SIDECAR_INBOX": .text("${INBOX_PATH}")], agentID: "helper")
        let channel = SidecarChannel(config: config, hostEnvironment: ["INBOX_PATH": dir + "/inbox.txt", "HOME": dir], log: Log(handler: MemoryLogHandler()))
        await channel.start()
        let deadline = ContinuousClock.now + .seconds(10)
        while await !channel.status.connected, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        let send = ChannelSend(id: "d-1", channel: "notes", destination: "me", output: Output(agentID: "a", agentName: "A", sessionID: "s", parts: ["Good morning"]), createdAt: Date())
        #expect(await channel.attempt(send) == .delivered(remoteID: nil))
        #expect(await channel.attempt(send) == .delivered(remoteID: nil))  // a retry of the same id: acked, not written twice
        let outbox = try String(contentsOfFile: dir + "/outbox.ndjson", encoding: .utf8)
        #expect(outbox == #"{"id": "d-1", "to": "me", "text": "Good morning"}"# + "\n")
        try "ann\tremind me at 5\n".write(toFile: dir + "/inbox.txt", atomically: false, encoding: .utf8)
        var inbound = channel.inbound.makeAsyncIterator()
        let message = try #require(await inbound.next())
        #expect(message.replyTo == "ann" && message.text == "remind me at 5" && message.isDirect)
        await channel.stop()
    }

    @Test("conformance: the example sidecar passes every rule; the broken one is flagged")
    func conformance() async throws {
        let dir = NSTemporaryDirectory() + "file-sidecar-check-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let env = ["PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": dir]
        let good = await SidecarConformance.run(argv: ["python3", Self.example], environment: env, workingDirectory: dir)
        #expect(good.count == SidecarConformance.rules.count)
        #expect(good.filter { !$0.passed }.isEmpty, "\(good.filter { !$0.passed })")
        #expect(good.contains { $0.rule.hasPrefix("ack:") && $0.detail.hasPrefix("ack for channel-check-") })

        let bad = await SidecarConformance.run(argv: ["python3", Self.broken], environment: env, workingDirectory: dir)
        let failed = Set(bad.filter { !$0.passed }.map { String($0.rule.prefix { $0 != ":" }) })
        #expect(failed == ["hello", "hello fields", "shutdown", "stdout"], "\(bad)")
    }

    // MARK: Config

    @Test("config: the sidecars list, its keys and its errors naming channels.sidecars[i].<key>; env from the gateway and from files")
    func config() throws {
        let secretFile = NSTemporaryDirectory() + "sidecar-secret-\(UUID().uuidString)"
        try "s3cret-from-file\n".write(toFile: secretFile, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: secretFile) }
        let list = ChannelSetting.list([
            .map(["channel": .string("matrix"), "command": .string("python3"), "args": .list([.string("/opt/matrix.py"), .string("-v")]),
                  "env": .map(["TOKEN": .string("${MATRIX_TOKEN}"), "PASSWORD": .map(["file": .string(secretFile)]), "MODE": .string("room-${ROOM}")]),
                  "working_dir": .string("/var/lib/matrix"), "ack_timeout": .number(12), "agent_id": .string("assistant")]),
            .map(["channel": .string("sms"), "command": .string("sms-sidecar"), "args": .string("--port 5 --quiet"), "enabled": .bool(true)]),
            .map(["channel": .string("off"), "command": .string("x"), "enabled": .bool(false)]),
        ])
        let factory = SidecarChannelFactory(hostEnvironment: [:])
        #expect(factory.kind == "sidecars")
        let configs = try factory.configs(ChannelSettings(kind: "sidecars", values: ["sidecars": list]))
        #expect(configs.map(\.name) == ["matrix", "sms"])
        #expect(configs[0].args == ["/opt/matrix.py", "-v"] && configs[1].args == ["--port", "5", "--quiet"])
        #expect(configs[0].workingDirectory == "/var/lib/matrix" && configs[0].ackTimeout == .seconds(12))
        #expect(configs[0].agentID == "assistant" && configs[1].agentID == nil)
        let env = try configs[0].environment(host: ["MATRIX_TOKEN": "tok-123", "ROOM": "7", "HOME": "/home/gw", "OPENAI_API_KEY": "sk-leak-me-not"])
        #expect(env == ["TOKEN": "tok-123", "PASSWORD": "s3cret-from-file", "MODE": "room-7", "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/home/gw", "LANG": "C.UTF-8"])
        #expect(throws: SidecarEnvError(description: "env TOKEN: ${MATRIX_TOKEN} is not set in the gateway's environment")) {
            try configs[0].environment(host: ["ROOM": "7"])
        }
        #expect(try factory.make(ChannelSettings(kind: "sidecars", values: ["sidecars": list])).map(\.name) == ["matrix", "sms"])

        let blocks = try SidecarChannelFactory.blocks(from: .list([.map(["channel": .string("x")])]))
        #expect(throws: ChannelConfigError(field: "channels.sidecars[0].command", problem: "is required")) { try factory.make(blocks[0]) }
        let badEnv = try SidecarChannelFactory.blocks(from: .list([.map(["channel": .string("x"), "command": .string("y"), "env": .map(["A": .list([])])])]))
        #expect(throws: ChannelConfigError(field: "channels.sidecars[0].env.A", problem: "must be a string or {file: PATH}")) { try factory.make(badEnv[0]) }
        #expect(throws: ChannelConfigError(field: "channels.sidecars[1].channel", problem: "'a' is used by another sidecar")) {
            try factory.make(ChannelSettings(kind: "sidecars", values: ["sidecars": .list([.map(["channel": .string("a"), "command": .string("y")]),
                                                                                        .map(["channel": .string("a"), "command": .string("z")])])]))
        }
        #expect(throws: ChannelConfigError(field: "channels.sidecars", problem: "must be a list of sidecars")) { try SidecarChannelFactory.blocks(from: .string("x")) }
        let unclosed = try SidecarChannelFactory.blocks(from: .list([.map(["channel": .string("x"), "command": .string("y"), "env": .map(["A": .string("${OPEN")])])]))
        #expect(throws: ChannelConfigError(field: "channels.sidecars[0].env.A", problem: "'${' without a closing '}'")) { try factory.make(unclosed[0]) }
    }

    @Test("a spawn failure is a restart failed status and goes into backoff; the gateway's secrets never reach the reason")
    func spawnFailure() async throws {
        let config = SidecarConfig(name: "notes", command: "python3", args: [], env: ["TOKEN": .text("${NOT_SET}")])
        let logs = MemoryLogHandler()
        let channel = SidecarChannel(config: config, hostEnvironment: ["OTHER": "sk-leak-me-not"], log: Log(handler: logs), clock: ManualClock(Date()))
        await channel.start()
        let deadline = ContinuousClock.now + .seconds(5)
        while await channel.status.restarts == 0, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        let status = await channel.status
        #expect(status.lastExit == "restart failed: env TOKEN: ${NOT_SET} is not set in the gateway's environment")
        #expect(status.detail.hasPrefix("sidecar exited; restart #1 in "))
        #expect(!logs.lines.contains { $0.contains("sk-leak-me-not") })
        await channel.stop()
    }
}
