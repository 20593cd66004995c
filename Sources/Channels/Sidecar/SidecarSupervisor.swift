import ChannelAPI
import Foundation
import Glibc
import Subprocess
import Synchronization

/// What the channel's status shows: the platform connection as the sidecar reports it, and the supervisor's word.
public struct SidecarStatus: Sendable, Equatable {
    public var connected = false
    /// `handshake complete (protocol 1), waiting for platform`, `sidecar exited; restart #2 in 2.043s`, the
    /// sidecar's own `status` detail…
    public var detail = "not started"
    /// A pairing QR code the sidecar sent (WhatsApp Web's), until it connects.
    public var qr: String?
    /// Restarts since the sidecar last ran healthy for 10 minutes.
    public var restarts = 0
    /// Every restart since the gateway started (a metric's counter: it never resets).
    public var totalRestarts = 0
    /// The settled protocol version while a sidecar is up.
    public var protocolVersion: Int?
    /// The integration's name from its hello.
    public var sidecarName: String?
    /// Whether the running sidecar declared acks.
    public var acknowledgesSends = false
    /// How the last child ended (`handshake timeout: sidecar never sent hello`, `exited with status 1`).
    public var lastExit: String?
}

/// The supervisor's clocks. The defaults are the original's; tests shorten them.
public struct SidecarTiming: Sendable {
    public var handshakeTimeout: Duration = .seconds(5)
    /// After `shutdown` and closing stdin, how long before SIGKILL.
    public var shutdownGrace: Duration = .seconds(3)
    public var minimumBackoff: Duration = .seconds(1)
    public var maximumBackoff: Duration = .seconds(60)
    /// A child that ran this long resets the restart counter when it ends.
    public var healthyReset: Duration = .seconds(600)
    /// How long a send waits for the sidecar to take the frame from its stdin.
    public var writeTimeout: Duration = .seconds(10)

    public init() {}
}

/// Starts a sidecar, does the handshake, restarts it with backoff when it ends, and carries frames both ways:
/// `send` to it (waiting for its `ack` when it declared acks), `message`, `status` and `error` from it.
public actor SidecarSupervisor {
    public nonisolated let config: SidecarConfig
    public nonisolated let timing: SidecarTiming
    /// Inbound messages for the framework (it starts the runs, session `<channel>-<chat_id>`).
    public nonisolated let inbound: InboundMessageStream
    private let log: Log
    private let clock: any WallClock
    private let hostEnvironment: [String: String]
    /// Uniform in [0, 1): the jitter of each restart delay.
    private let random: @Sendable () -> Double

    public private(set) var status = SidecarStatus() {
        didSet { snapshot.withLock { $0 = status } }
    }
    /// The status as of its last change, readable without awaiting the actor (a metrics scrape reads it).
    private nonisolated let snapshot = Mutex(SidecarStatus())
    public nonisolated var currentStatus: SidecarStatus { snapshot.withLock { $0 } }
    private var child: Child?
    private var generation = 0
    private var loop: Task<Void, Never>?
    private var stopping = false
    private var restartRequested: String?
    /// When the next start is due, while in backoff.
    private var nextStart: Date?
    private var acks = Waiters<AckAnswer>()
    private var pendingAcks: Set<String> = []
    private var invalidLines = InvalidLineReport()
    private var warnedNoAgent = false

    private struct Child {
        let process: Subprocess
        let generation: Int
        let startedAt: Date
        var hello: HelloFrame?
        var version: Int?
        /// Set when the supervisor killed it (no hello, a bad hello), to say why in the status.
        var failure: String?
    }

    enum AckAnswer: Sendable {
        case ack(remoteID: String?)
        case nack(after: Duration?, reason: String?)
        case timedOut
        case exited
        case notWritten(PipeWriteError)
    }

    public init(config: SidecarConfig, timing: SidecarTiming = SidecarTiming(), log: Log = Log(), clock: any WallClock = SystemWallClock(),
                hostEnvironment: [String: String] = ProcessInfo.processInfo.environment,
                random: @escaping @Sendable () -> Double = { Double.random(in: 0..<1) }) {
        self.config = config
        self.timing = timing
        self.log = log.with("channel", config.name)
        self.clock = clock
        self.hostEnvironment = hostEnvironment
        self.random = random
        inbound = InboundMessageStream()
    }

    // MARK: Lifecycle

    /// Starts the sidecar and keeps it running until `stop()`.
    public func start() {
        guard loop == nil, !stopping else { return }
        status.detail = "starting"
        loop = Task { await self.supervise() }
    }

    /// Sends `shutdown`, closes its stdin, gives it the grace (3 s) to exit, then SIGKILLs its process group.
    public func stop() async {
        if !stopping {
            stopping = true
            status.detail = "stopping"
            status.connected = false
            if let child { await shutDown(child, reason: "stopping") }
            loop?.cancel()
        }
        await loop?.value
        status.connected = false
        status.detail = "stopped"
        inbound.finish()
    }

    /// Stops the running sidecar and starts it again at once, not counted as a crash (its credentials changed).
    public func restart(reason: String) async {
        guard !stopping, let child else { return }
        restartRequested = reason
        status.detail = "restarting: \(reason)"
        await shutDown(child, reason: "restarting")
    }

    private func shutDown(_ child: Child, reason: String) async {
        let process = child.process
        _ = await Self.write(SidecarFrame.shutdown.line(), to: process, timeout: .seconds(1))
        process.standardInput.close()
        let exit = await process.kill(after: timing.shutdownGrace)
        log.info("sidecar \(config.name) \(reason): \(exit)")
    }

    private func supervise() async {
        while !stopping {
            let startedAt = clock.now()
            var ending: String
            if let process = spawn(startedAt: startedAt) {
                ending = await run(process)
            } else {
                ending = status.detail
            }
            if stopping { break }
            if let reason = restartRequested {
                restartRequested = nil
                log.info("sidecar \(config.name) restarted: \(reason)")
                continue
            }
            if clock.now().timeIntervalSince(startedAt) >= SidecarBackoff.seconds(timing.healthyReset) { status.restarts = 0 }
            status.restarts += 1
            status.totalRestarts += 1
            let delay = SidecarBackoff.delay(restart: status.restarts, minimum: timing.minimumBackoff, maximum: timing.maximumBackoff, unit: random())
            let due = clock.now().addingTimeInterval(SidecarBackoff.seconds(delay))
            nextStart = due
            status.connected = false
            status.detail = "sidecar exited; restart #\(status.restarts) in \(SidecarBackoff.text(delay))"
            ending = ending.isEmpty ? "ended" : ending
            log.warning("sidecar \(config.name) \(ending); restart #\(status.restarts) in \(SidecarBackoff.text(delay))")
            do { try await clock.sleep(until: due) } catch { break }
            nextStart = nil
        }
        nextStart = nil
    }

    /// Starts one child; nil (with the status saying why) when it cannot start.
    private func spawn(startedAt: Date) -> Subprocess? {
        generation += 1
        let trouble: String
        do {
            let env = try config.environment(host: hostEnvironment)
            let command = SubprocessCommand(argv: [config.command] + config.args, environment: env, workingDirectory: config.workingDirectory)
            do {
                let process = try Subprocess.spawn(command)
                child = Child(process: process, generation: generation, startedAt: startedAt)
                status.connected = false
                status.detail = "started, waiting for hello"
                log.info("sidecar \(config.name) started (pid \(process.pid))")
                return process
            } catch {
                trouble = error.description
            }
        } catch {
            trouble = error.description
        }
        status.connected = false
        status.detail = "restart failed: \(trouble)"
        status.lastExit = status.detail
        log.error("sidecar \(config.name): restart failed: \(trouble)")
        return nil
    }

    /// Runs one child to its end: stderr to the log, the handshake deadline, stdout frames. Says how it ended.
    private func run(_ process: Subprocess) async -> String {
        let generation = self.generation
        let name = config.name
        let log = self.log
        let stderr = Task.detached {
            var lines = LineReader(process.standardError, limit: SidecarProtocol.maximumLineBytes)
            while let item = await lines.next() {
                switch item {
                case .line(let bytes):
                    // The sidecar's own words, line by line (a debug aid); shortened so one line stays a log line.
                    log.warning("sidecar \(name) stderr: \(String(decoding: bytes.prefix(2000), as: UTF8.self))")
                case .tooLong(let count):
                    log.warning("sidecar \(name) stderr: skipped a line of \(count) bytes (over the \(SidecarProtocol.maximumLineBytes)-byte limit)")
                }
            }
        }
        let handshake = Task.detached { [weak self, timing] in
            try? await Task.sleep(for: timing.handshakeTimeout)
            if !Task.isCancelled { await self?.handshakeDeadline(generation) }
        }
        let reader = Task.detached { [weak self] in
            var lines = LineReader(process.standardOutput, limit: SidecarProtocol.maximumLineBytes)
            var count = 0
            while let item = await lines.next() {
                guard let self else { return }
                await self.received(item, generation: generation)
                count += 1
                if count % 64 == 0 { await Task.yield() }  // a flood does not starve sends
            }
        }
        let exit = await process.waitForExit()
        handshake.cancel()
        // Grandchildren may hold the pipes; once the child is gone, stop them too.
        process.signalGroup(SIGKILL)
        if await finished(reader, within: .seconds(2)) == false {
            log.warning("sidecar \(name): its stdout stayed open after it exited (a process outside its group?); closing it")
            process.standardOutput.close()
        }
        await reader.value
        process.standardInput.close()
        if await finished(stderr, within: .seconds(1)) == false { process.standardError.close() }
        let failure = child?.failure
        child = nil
        status.protocolVersion = nil
        status.acknowledgesSends = false
        for id in pendingAcks { acks.answer(id, with: .exited) }
        pendingAcks = []
        let ending = failure ?? "\(exit)"
        status.lastExit = ending
        return ending
    }

    private func handshakeDeadline(_ generation: Int) {
        guard let child, child.generation == generation, child.hello == nil else { return }
        kill(child, because: "handshake timeout: sidecar never sent hello")
    }

    private func kill(_ child: Child, because reason: String) {
        self.child?.failure = reason
        status.connected = false
        status.detail = reason
        log.error("sidecar \(config.name): \(reason)")
        child.process.signalGroup(SIGKILL)
    }

    // MARK: Frames from the sidecar

    private func received(_ item: LineReader.Item, generation: Int) async {
        guard let child, child.generation == generation else { return }
        let bytes: [UInt8]
        switch item {
        case .tooLong(let count):
            log.warning("sidecar \(config.name): skipped a line of \(count) bytes on stdout (over the \(SidecarProtocol.maximumLineBytes)-byte limit)")
            return
        case .line(let line): bytes = line
        }
        if bytes.allSatisfy({ $0 == 0x20 || $0 == 0x09 }) { return }
        let frame: SidecarFrame
        do {
            frame = try SidecarFrame.decode(bytes)
        } catch {
            if let line = invalidLines.note(error.description, at: clock.now()) { log.warning("sidecar \(config.name): \(line)") }
            return
        }
        guard child.hello != nil else {
            // Before the handshake only a hello counts; anything else is skipped, as the original does.
            if case .hello(let hello) = frame { await negotiate(hello, child: child) }
            return
        }
        switch frame {
        case .status(let s):
            if let detail = s.detail, !detail.isEmpty { status.detail = detail }
            status.connected = s.connected ?? false
            if let qr = s.qr, !qr.isEmpty { status.qr = qr } else if status.connected { status.qr = nil }
        case .message(let m):
            // Its words never reach the log: a refused frame is named by what is wrong with it.
            let message: InboundMessage
            do { message = try m.inboundMessage() } catch {
                if let line = invalidLines.note(error.description, at: clock.now()) { log.warning("sidecar \(config.name): \(line)") }
                return
            }
            guard config.agentID != nil else {
                // Nobody reads the stream of a sidecar without an agent; holding its messages would stall its stdout.
                if !warnedNoAgent {
                    warnedNoAgent = true
                    log.warning("sidecar \(config.name): a message arrived, but no agent_id is configured for this sidecar; its messages are dropped")
                }
                return
            }
            await inbound.push(message)
        case .error(let e):
            status.connected = false
            status.detail = [e.detail, e.error].compactMap { $0 }.first { !$0.isEmpty } ?? "sidecar error"
            log.error("sidecar \(config.name) reports an error: \(status.detail.prefix(500))")
        case .ack(let a):
            guard let id = a.id, pendingAcks.remove(id) != nil else { return }
            acks.answer(id, with: .ack(remoteID: a.remoteID.flatMap { $0.isEmpty ? nil : $0 }))
        case .nack(let n):
            guard let id = n.id, pendingAcks.remove(id) != nil else { return }
            let after = n.retryAfter.flatMap { $0.isFinite && $0 > 0 ? Duration.milliseconds(Int64(min($0, 86_400) * 1000)) : nil }
            acks.answer(id, with: .nack(after: after, reason: n.reason))
        case .hello, .helloAck, .send, .shutdown, .unknown:
            break  // not the sidecar's to send, or not known here: ignored
        }
    }

    private func negotiate(_ hello: HelloFrame, child: Child) async {
        guard let offered = hello.protocol, offered >= 1 else {
            kill(child, because: "protocol negotiation failed: hello has no protocol version of 1 or more")
            return
        }
        guard let name = hello.name, !name.isEmpty else {
            kill(child, because: "protocol negotiation failed: hello has no name")
            return
        }
        let version = min(SidecarProtocol.version, offered)
        let ack = SidecarFrame.helloAck(HelloAckFrame(protocol: version, sharedDir: config.sharedDirectory))
        if case .notWritten(let error) = await Self.write(ack.line(), to: child.process, timeout: timing.writeTimeout) {
            kill(child, because: "protocol negotiation failed: could not write hello_ack (\(error))")
            return
        }
        guard self.child?.generation == child.generation else { return }
        self.child?.hello = hello
        self.child?.version = version
        status.connected = false
        status.detail = "handshake complete (protocol \(version)), waiting for platform"
        status.protocolVersion = version
        status.sidecarName = name
        status.acknowledgesSends = hello.acknowledgesSends
        log.info("sidecar \(config.name): hello from \(name.prefix(100)), protocol \(version)\(hello.acknowledgesSends ? ", acks sends" : "")")
    }

    // MARK: Sends

    /// One attempt to hand `text` for `to` to the sidecar (the channel's `attempt`).
    public func send(to: String, text: String, id: String) async -> ChannelSendOutcome {
        if stopping { return .retry(after: nil, reason: "sidecar \(config.name) is stopped") }
        guard let child, let hello = child.hello else {
            if let nextStart { return .retry(after: untilNextStart(nextStart), reason: "sidecar \(config.name) is restarting") }
            return .retry(after: .seconds(1), reason: "sidecar \(config.name) is starting")
        }
        let line = SidecarFrame.send(SendFrame(to: to, text: text, id: id)).line()
        guard hello.acknowledgesSends else {
            // As the original: delivered once the frame is written.
            switch await Self.write(line, to: child.process, timeout: timing.writeTimeout) {
            case .notWritten(let error): return notWritten(error)
            default: return .delivered(remoteID: nil)
            }
        }
        // Parked before the write, so an ack that comes at once finds its waiter.
        let ticket = acks.ticket()
        pendingAcks.insert(id)
        let writing = Task.detached { [weak self, timing] in
            let result = await Self.write(line, to: child.process, timeout: timing.writeTimeout)
            if case .notWritten(let error) = result { await self?.release(id, ticket: ticket, with: .notWritten(error)) }
        }
        let timer = Task.detached { [weak self, timing, config] in
            try? await Task.sleep(for: timing.writeTimeout + config.ackTimeout)
            if !Task.isCancelled { await self?.release(id, ticket: ticket, with: .timedOut) }
        }
        let answer = await withCheckedContinuation { acks.park(id, ticket: ticket, $0) }
        timer.cancel()
        _ = writing
        switch answer {
        case .ack(let remoteID): return .delivered(remoteID: remoteID)
        case .nack(let after, let reason):
            let words = reason.map { String($0.prefix(300)) }.flatMap { $0.isEmpty ? nil : $0 } ?? "no reason given"
            return .retry(after: after, reason: "sidecar \(config.name) could not deliver it: \(words)")
        case .timedOut: return .retry(after: nil, reason: "sidecar \(config.name) did not acknowledge the send within \(SidecarBackoff.text(config.ackTimeout))")
        case .exited:
            return .retry(after: nextStart.map(untilNextStart), reason: "sidecar \(config.name) exited before acknowledging the send")
        case .notWritten(let error): return notWritten(error)
        }
    }

    private func release(_ id: String, ticket: Int, with answer: AckAnswer) {
        // A late ack for it is then ignored (the framework's retry sends the same id again).
        pendingAcks.remove(id)
        acks.release(id, ticket: ticket, with: answer)
    }

    private func notWritten(_ error: PipeWriteError) -> ChannelSendOutcome {
        switch error {
        case .cancelled(let inFlight):
            return .retry(after: nil, reason: "sidecar \(config.name) is not reading its stdin (the send waited \(SidecarBackoff.text(timing.writeTimeout))\(inFlight ? "; it may still arrive" : ""))")
        case .closed, .broken:
            return .retry(after: nextStart.map(untilNextStart), reason: "sidecar \(config.name) exited before the send was written")
        }
    }

    private func untilNextStart(_ due: Date) -> Duration {
        .milliseconds(Int64(max(0, due.timeIntervalSince(clock.now())) * 1000))
    }

    /// When the sidecar is down, how long until the next start is due (nil when it is up or starting).
    public var timeUntilRestart: Duration? { nextStart.map(untilNextStart) }

    enum WriteResult { case written, notWritten(PipeWriteError) }

    /// Writes one frame, giving up after `timeout` (a sidecar that stopped reading its stdin).
    static func write(_ line: [UInt8], to process: Subprocess, timeout: Duration) async -> WriteResult {
        await withTaskGroup(of: WriteResult?.self) { group in
            group.addTask {
                do throws(PipeWriteError) {
                    try await process.standardInput.write(line)
                    return .written
                } catch {
                    return .notWritten(error)
                }
            }
            group.addTask {
                do { try await Task.sleep(for: timeout) } catch { return nil }
                return nil
            }
            while let result = await group.next() {
                if let result {
                    group.cancelAll()
                    return result
                }
                group.cancelAll()  // the timer went off: the write gives up (as cancelled)
            }
            return .notWritten(.cancelled(inFlight: false))
        }
    }
}

/// Invalid lines (and `message` frames refused for their fields) are worth a log line each, but a sidecar spewing
/// garbage must not flood the log: the first few in a minute are logged, then one line a minute says how many more
/// there were.
struct InvalidLineReport {
    private var windowStart: Date?
    private var logged = 0
    private var suppressed = 0
    static let perMinute = 5

    mutating func note(_ problem: String, at now: Date) -> String? {
        if windowStart == nil || now.timeIntervalSince(windowStart!) >= 60 {
            let earlier = suppressed
            windowStart = now
            logged = 0
            suppressed = 0
            if earlier > 0 {
                logged = 1
                return "an invalid line on stdout (\(problem)), skipped; \(earlier) more were skipped in the last minute without a log line"
            }
        }
        guard logged < Self.perMinute else {
            suppressed += 1
            return nil
        }
        logged += 1
        return "an invalid line on stdout (\(problem)), skipped" + (logged == Self.perMinute ? "; further ones this minute are counted, not logged" : "")
    }
}
