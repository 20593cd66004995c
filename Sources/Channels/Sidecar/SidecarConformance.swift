import Foundation
import Glibc
import Subprocess
import Synchronization

/// The protocol's conformance checklist, run against any command (`soulacy channel-check -- COMMAND ARGS…`).
public enum SidecarConformance {
    /// One rule of the checklist and how the sidecar did.
    public struct Result: Sendable, Equatable, CustomStringConvertible {
        public var rule: String
        public var passed: Bool
        public var detail: String

        public var description: String { "\(passed ? "PASS" : "FAIL") \(rule): \(detail)" }
    }

    public struct Timing: Sendable {
        public var helloTimeout: Duration = .seconds(5)
        public var shutdownGrace: Duration = .seconds(3)
        /// How long the sidecar must stay up after each frame to count as having survived it.
        public var settle: Duration = .milliseconds(400)
        public var ackTimeout: Duration = .seconds(5)
        public init() {}
    }

    public static let rules = [
        "hello: a hello within 5 s",
        "hello fields: protocol ≥ 1 and a name",
        "hello_ack: still running after the hello_ack",
        "unknown frame: ignores a frame type it does not know",
        "send: answers a send without dying",
        "ack: acknowledges the send (when it declares acks)",
        "shutdown: exits within the grace after shutdown",
        "stdout: nothing but NDJSON frames",
        "line limit: no line over 1 MiB",
    ]

    /// Runs the checklist; every rule is in the result, passed or not.
    public static func run(argv: [String], environment: [String: String], workingDirectory: String? = nil, timing: Timing = Timing()) async -> [Result] {
        func rule(_ index: Int, _ passed: Bool, _ detail: String) -> Result {
            Result(rule: rules[index], passed: passed, detail: detail)
        }
        let process: Subprocess
        do {
            process = try Subprocess.spawn(SubprocessCommand(argv: argv, environment: environment, workingDirectory: workingDirectory))
        } catch {
            return rules.indices.map { rule($0, false, "not checked: \(error)") }
        }
        let transcript = Transcript()
        let started = ContinuousClock.now
        let reader = Task.detached {
            var lines = LineReader(process.standardOutput, limit: SidecarProtocol.maximumLineBytes)
            while let item = await lines.next() { transcript.append(item, at: ContinuousClock.now - started) }
        }
        let stderr = Task.detached { _ = await process.standardError.readAll(limit: 64 * 1024, stopAtLimit: false) }
        var results: [Result] = []

        // 1–2: the hello.
        let hello = await transcript.waitForFrame(within: timing.helloTimeout) { if case .hello = $0 { true } else { false } }
        var helloFrame: HelloFrame?
        if case .hello(let frame)? = hello?.frame {
            helloFrame = frame
            results.append(rule(0, true, "hello after \(SidecarBackoff.text(hello!.at))"))
            let valid = (frame.protocol ?? 0) >= 1 && !(frame.name ?? "").isEmpty
            results.append(rule(1, valid, valid ? "protocol \(frame.protocol!), name '\(frame.name!)'"
                                               : "protocol \(frame.protocol.map(String.init) ?? "missing"), name \(frame.name.map { "'\($0)'" } ?? "missing")"))
        } else {
            let why = process.exitStatus.map { "it \($0) without one" } ?? "none within \(SidecarBackoff.text(timing.helloTimeout))"
            results.append(rule(0, false, why))
            results.append(rule(1, false, "not checked: no hello"))
        }

        // 3: the hello_ack.
        let version = min(SidecarProtocol.version, max(1, helloFrame?.protocol ?? 1))
        let ackWritten = await write(.helloAck(HelloAckFrame(protocol: version)), to: process)
        results.append(await survived(process, ackWritten, timing, rule: { rule(2, $0, $1) }, what: "hello_ack {protocol: \(version)}"))

        // 4: an unknown frame.
        let probe: [UInt8] = Array(#"{"type":"soulacy_conformance_probe","detail":"an unknown frame type: ignore it","future_field":[1,2,3]}"#.utf8) + [10]
        let probeWritten = await write(raw: probe, to: process)
        results.append(await survived(process, probeWritten, timing, rule: { rule(3, $0, $1) }, what: "a frame of type soulacy_conformance_probe"))

        // 5–6: a send, and its ack when acks are declared.
        let sendID = "channel-check-\(UInt32.random(in: 0...UInt32.max))"
        let sendWritten = await write(.send(SendFrame(to: "channel-check", text: "Soulacy channel-check: a test message", id: sendID)), to: process)
        results.append(await survived(process, sendWritten, timing, rule: { rule(4, $0, $1) }, what: "send {to: channel-check}"))
        if helloFrame?.acknowledgesSends == true {
            let answer = await transcript.waitForFrame(within: timing.ackTimeout) { frame in
                switch frame {
                case .ack(let a): a.id == sendID
                case .nack(let n): n.id == sendID
                default: false
                }
            }
            switch answer?.frame {
            case .ack?: results.append(rule(5, true, "ack for \(sendID)"))
            case .nack(let n)?: results.append(rule(5, true, "nack for \(sendID)\(n.reason.map { ": \($0.prefix(200))" } ?? "")"))
            default: results.append(rule(5, false, "it declared acks but neither acked nor nacked \(sendID) within \(SidecarBackoff.text(timing.ackTimeout))"))
            }
        } else {
            results.append(rule(5, true, "not declared: the send counts once written"))
        }

        // 7: shutdown within the grace.
        let before = ContinuousClock.now
        _ = await write(.shutdown, to: process)
        process.standardInput.close()
        if let exit = await process.waitForExit(timeout: timing.shutdownGrace) {
            results.append(rule(6, true, "\(exit) after \(SidecarBackoff.text(ContinuousClock.now - before))"))
        } else {
            results.append(rule(6, false, "still running \(SidecarBackoff.text(timing.shutdownGrace)) after shutdown; killed"))
        }
        process.signalGroup(SIGKILL)
        _ = await process.waitForExit()
        if await finished(reader, within: .seconds(2)) == false { process.standardOutput.close() }
        if await finished(stderr, within: .seconds(1)) == false { process.standardError.close() }

        // 8–9: what stdout carried.
        let lines = transcript.lines
        let invalid = lines.enumerated().compactMap { index, line -> String? in
            guard case .invalid(let problem) = line.kind else { return nil }
            return "line \(index + 1): \(problem)"
        }
        results.append(rule(7, invalid.isEmpty, invalid.isEmpty ? "\(lines.count) line(s), all frames" : invalid.prefix(3).joined(separator: "; ") + (invalid.count > 3 ? "; \(invalid.count - 3) more" : "")))
        let long = lines.enumerated().compactMap { index, line -> String? in
            guard case .tooLong(let count) = line.kind else { return nil }
            return "line \(index + 1) has \(count) bytes"
        }
        results.append(rule(8, long.isEmpty, long.isEmpty ? "every line within \(SidecarProtocol.maximumLineBytes) bytes" : long.prefix(3).joined(separator: "; ")))
        return results
    }

    private static func write(_ frame: SidecarFrame, to process: Subprocess) async -> Bool {
        await write(raw: frame.line(), to: process)
    }

    private static func write(raw line: [UInt8], to process: Subprocess) async -> Bool {
        if case .written = await SidecarSupervisor.write(line, to: process, timeout: .seconds(2)) { return true }
        return false
    }

    private static func survived(_ process: Subprocess, _ written: Bool, _ timing: Timing, rule: (Bool, String) -> Result, what: String) async -> Result {
        guard written else {
            return rule(false, process.exitStatus.map { "it had already ended (\($0)) before \(what)" } ?? "it did not read \(what) from its stdin")
        }
        if let exit = await process.waitForExit(timeout: timing.settle) { return rule(false, "it \(exit) after \(what)") }
        return rule(true, "still running after \(what)")
    }

    /// Every line the sidecar wrote, as it came.
    private final class Transcript: Sendable {
        enum Kind: Sendable { case frame(SidecarFrame), invalid(String), tooLong(Int) }
        struct Line: Sendable { var kind: Kind; var at: Duration }
        private let kept = Mutex<[Line]>([])

        var lines: [Line] { kept.withLock { $0 } }

        func append(_ item: LineReader.Item, at time: Duration) {
            let kind: Kind
            switch item {
            case .tooLong(let count): kind = .tooLong(count)
            case .line(let bytes):
                if bytes.allSatisfy({ $0 == 0x20 || $0 == 0x09 }) { kind = .invalid("an empty line") }
                else {
                    do { kind = .frame(try SidecarFrame.decode(bytes)) } catch {
                        let shown = String(decoding: bytes.prefix(60), as: UTF8.self)
                        kind = .invalid("\(error.description): \(shown.debugDescription)\(bytes.count > 60 ? "…" : "")")
                    }
                }
            }
            kept.withLock { $0.append(Line(kind: kind, at: time)) }
        }

        func waitForFrame(within limit: Duration, _ matches: (SidecarFrame) -> Bool) async -> (frame: SidecarFrame, at: Duration)? {
            let deadline = ContinuousClock.now + limit
            while true {
                for line in lines { if case .frame(let frame) = line.kind, matches(frame) { return (frame, line.at) } }
                if ContinuousClock.now >= deadline { return nil }
                try? await Task.sleep(for: .milliseconds(20))
            }
        }
    }
}
