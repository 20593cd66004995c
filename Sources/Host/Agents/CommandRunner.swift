internal import CProcessShims
import Foundation
import LLM
import Glibc
import Synchronization

/// What a run gets: who asked and what to read on stdin.
public struct RunRequest: Sendable {
    public var agentID: String
    public var runID: String
    public var sessionID: String
    public var input: String
    public var trigger: RunTrigger
    public var timeout: Duration
    /// Whose run this is: approvals it asks for and device commands it sends belong to this person.
    public var subject: String = "owner"
    /// Variables for this run only (its credential for calling back into the gateway).
    public var environment: [String: String] = [:]
    /// Earlier turns of this conversation (chat with a session), oldest first.
    public var history: [ChatMessage] = []
    /// `response_mode: voice`: the runner also gives a short spoken version.
    public var voice = false
    /// Told when the run waits for a tool-call approval (chat streaming's `tool_confirm`).
    public var onToolConfirm: (@Sendable (_ callID: String, _ call: ToolCall) -> Void)?
    /// Receives the reply's text as the model streams it (chat streaming); nil when nobody is listening.
    public var onText: (@Sendable (String) -> Void)?

    public init(agentID: String, runID: String, sessionID: String, input: String, trigger: RunTrigger, timeout: Duration) {
        self.agentID = agentID
        self.runID = runID
        self.sessionID = sessionID
        self.input = input
        self.trigger = trigger
        self.timeout = timeout
    }
}

public struct RunResult: Sendable, Equatable {
    public var reply: String
    public var duration: Duration
    /// Voice mode: a short version to be read aloud.
    public var spoken: String? = nil

    public init(reply: String, duration: Duration, spoken: String? = nil) {
        self.reply = reply
        self.duration = duration
        self.spoken = spoken
    }
}

public enum RunError: Error, Sendable, Equatable, CustomStringConvertible {
    case spawnFailed(program: String, reason: String)
    case timedOut(after: Duration)
    case exited(status: Int32, stderr: String)
    case killedBySignal(Int32)
    case outputTooLarge(limit: Int)
    /// The model provider failed, refused, or is not configured (LLM agents).
    case model(String)
    /// Someone asked to stop it (`/chat/cancel`).
    case cancelled

    public var description: String {
        switch self {
        case let .spawnFailed(program, reason): return "could not start \(program): \(reason)"
        case let .timedOut(after): return "the run was stopped after its timeout of \(DurationText.format(after))"
        case let .exited(status, stderr): return "the command exited with status \(status)" + (stderr.isEmpty ? "" : ": \(stderr)")
        case let .killedBySignal(signal): return "the command was killed by signal \(signal)"
        case let .outputTooLarge(limit): return "the command wrote more than \(limit) bytes"
        case let .model(message): return message
        case .cancelled: return "the run was cancelled"
        }
    }

    /// What a log line may say: stderr is agent output, so only its size goes to the log; the full text stays
    /// with the run, which only the run's person can read.
    public var logDescription: String {
        switch self {
        case let .exited(status, stderr): return "the command exited with status \(status) (\(stderr.utf8.count) bytes on stderr, kept with the run)"
        default: return description
        }
    }
}

/// The runner plugin seam: something that turns a run request into a reply.
public protocol AgentRunner: Sendable {
    func run(_ request: RunRequest) async throws(RunError) -> RunResult
}

/// Runs an agent as a program: argv and env from SOUL.yaml, the trigger's input on stdin, the reply on stdout.
/// The program gets a clean environment, so the gateway's own secrets never reach it.
public struct CommandRunner: AgentRunner {
    public static let maximumOutputBytes = 1 << 20
    public static let stderrTailBytes = 2000

    public let config: CommandRunnerConfig
    /// Extra variables the gateway adds (its API address for callbacks and so on).
    public let gatewayEnvironment: [String: String]

    /// The gateway's own environment: only HOME is taken from it, nothing else (its secrets stay with it).
    public let hostEnvironment: [String: String]

    public init(config: CommandRunnerConfig, gatewayEnvironment: [String: String] = [:],
                hostEnvironment: [String: String] = ProcessInfo.processInfo.environment) {
        self.config = config
        self.gatewayEnvironment = gatewayEnvironment
        self.hostEnvironment = hostEnvironment
    }

    func environment(for request: RunRequest) -> [String] {
        var env: [String: String] = [
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": hostEnvironment["HOME"] ?? "/",
            "LANG": "C.UTF-8",
        ]
        env.merge(gatewayEnvironment) { $1 }
        env["SOULACY_AGENT_ID"] = request.agentID
        env["SOULACY_RUN_ID"] = request.runID
        env["SOULACY_SESSION_ID"] = request.sessionID
        env["SOULACY_TRIGGER"] = request.trigger.rawValue
        env.merge(request.environment) { $1 }
        env.merge(config.environment) { $1 }
        return env.map { "\($0.key)=\($0.value)" }.sorted()
    }

    public func run(_ request: RunRequest) async throws(RunError) -> RunResult {
        let argv = config.argv
        let env = environment(for: request)
        let directory = config.workingDirectory
        let started = ContinuousClock.now
        let cancelled = Atomic<Bool>(false)
        let outcome: Result<String, RunError> = await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                // Blocking reads and waitpid live on their own thread, away from Swift's cooperative pool.
                Thread.detachNewThread {
                    continuation.resume(returning: Self.spawnAndWait(argv: argv, env: env, directory: directory, input: request.input,
                                                                     timeout: request.timeout, cancelled: cancelled))
                }
            }
        } onCancel: {
            cancelled.store(true, ordering: .relaxed)
        }
        switch outcome {
        case .success(let reply): return RunResult(reply: reply, duration: ContinuousClock.now - started)
        case .failure(let error): throw error
        }
    }

    private static func spawnAndWait(argv: [String], env: [String], directory: String?, input: String, timeout: Duration,
                                     cancelled: borrowing Atomic<Bool>) -> Result<String, RunError> {
        var stdinPipe: [Int32] = [0, 0], stdoutPipe: [Int32] = [0, 0], stderrPipe: [Int32] = [0, 0]
        guard soulacy_pipe_cloexec(&stdinPipe) == 0, soulacy_pipe_cloexec(&stdoutPipe) == 0, soulacy_pipe_cloexec(&stderrPipe) == 0 else {
            return .failure(.spawnFailed(program: argv.first ?? "", reason: String(cString: strerror(errno))))
        }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, stdinPipe[0], 0)
        posix_spawn_file_actions_adddup2(&actions, stdoutPipe[1], 1)
        posix_spawn_file_actions_adddup2(&actions, stderrPipe[1], 2)
        // Nothing else of the gateway's reaches the agent: no listening socket, database or inherited descriptor
        // that lacks close-on-exec (a descriptor a supervisor passed down, say).
        soulacy_spawn_add_closefrom(&actions, 3)
        if let directory { soulacy_spawn_add_chdir(&actions, directory) }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        // Its own process group, so a timeout stops the whole tree the command started.
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        posix_spawnattr_setpgroup(&attributes, 0)
        var empty = sigset_t()
        sigemptyset(&empty)
        posix_spawnattr_setsigmask(&attributes, &empty)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        sigaddset(&defaults, SIGPIPE)
        sigaddset(&defaults, SIGTERM)
        sigaddset(&defaults, SIGINT)
        posix_spawnattr_setsigdefault(&attributes, &defaults)

        var pid: pid_t = 0
        let cArgs = argv.map { strdup($0) } + [nil]
        let cEnv = env.map { strdup($0) } + [nil]
        defer { cArgs.forEach { free($0) }; cEnv.forEach { free($0) } }
        let rc = posix_spawnp(&pid, argv[0], &actions, &attributes, cArgs, cEnv)
        close(stdinPipe[0]); close(stdoutPipe[1]); close(stderrPipe[1])
        guard rc == 0 else {
            close(stdinPipe[1]); close(stdoutPipe[0]); close(stderrPipe[0])
            return .failure(.spawnFailed(program: argv[0], reason: String(cString: strerror(rc))))
        }

        let group = DispatchGroup()
        let stdoutBox = ByteCollector(limit: maximumOutputBytes)
        let stderrBox = ByteCollector(limit: 64 * 1024)
        for (fd, box) in [(stdoutPipe[0], stdoutBox), (stderrPipe[0], stderrBox)] {
            group.enter()
            Thread.detachNewThread {
                box.drain(fd)
                close(fd)
                group.leave()
            }
        }
        let inputBytes = Array(input.utf8)
        let stdinWriter = stdinPipe[1]
        Thread.detachNewThread {
            var offset = 0
            while offset < inputBytes.count {
                let n = inputBytes[offset...].withUnsafeBytes { write(stdinWriter, $0.baseAddress, $0.count) }
                if n <= 0 { break }
                offset += n
            }
            close(stdinWriter)
        }

        let deadline = ContinuousClock.now + timeout
        var status: Int32 = 0
        var timedOut = false
        var stopped = false
        while true {
            let r = waitpid(pid, &status, WNOHANG)
            if r == pid { break }
            if r < 0 && errno != EINTR { break }
            stopped = cancelled.load(ordering: .relaxed)
            if ContinuousClock.now >= deadline || stdoutBox.overflowed || stopped {
                timedOut = !stdoutBox.overflowed && !stopped
                kill(-pid, SIGTERM)
                let grace = ContinuousClock.now + .seconds(2)
                while waitpid(pid, &status, WNOHANG) != pid {
                    if ContinuousClock.now >= grace { kill(-pid, SIGKILL); waitpid(pid, &status, 0); break }
                    usleep(10_000)
                }
                break
            }
            usleep(5_000)
        }
        // Grandchildren may hold the pipes open; once the command is gone, stop them too.
        kill(-pid, SIGKILL)
        group.wait()

        if stopped { return .failure(.cancelled) }
        if stdoutBox.overflowed { return .failure(.outputTooLarge(limit: maximumOutputBytes)) }
        if timedOut { return .failure(.timedOut(after: timeout)) }
        let exited = (status & 0x7f) == 0
        if !exited { return .failure(.killedBySignal(status & 0x7f)) }
        let code = (status >> 8) & 0xff
        guard code == 0 else {
            let tail = String(decoding: stderrBox.bytes.suffix(stderrTailBytes), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            return .failure(.exited(status: code, stderr: tail))
        }
        return .success(String(decoding: stdoutBox.bytes, as: UTF8.self))
    }
}

/// Reads a pipe to its end, keeping at most `limit` bytes.
private final class ByteCollector: @unchecked Sendable {
    private let lock = NSLock()
    private var storage: [UInt8] = []
    private var tooMuch = false
    let limit: Int

    init(limit: Int) { self.limit = limit }

    var bytes: [UInt8] { lock.withLock { storage } }
    var overflowed: Bool { lock.withLock { tooMuch } }

    func drain(_ fd: Int32) {
        var buffer = [UInt8](repeating: 0, count: 16384)
        while true {
            let n = read(fd, &buffer, buffer.count)
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return }
            lock.withLock {
                if storage.count + n > limit { tooMuch = true } else { storage.append(contentsOf: buffer[0..<n]) }
            }
        }
    }
}
