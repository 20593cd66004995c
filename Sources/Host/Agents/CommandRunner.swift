import Foundation
import Glibc
import LLM
import Subprocess

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

    func environment(for request: RunRequest) -> [String: String] {
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
        return env
    }

    public func run(_ request: RunRequest) async throws(RunError) -> RunResult {
        let started = ContinuousClock.now
        let command = SubprocessCommand(argv: config.argv, environment: environment(for: request), workingDirectory: config.workingDirectory)
        let process: Subprocess
        do throws(SubprocessError) {
            process = try Subprocess.spawn(command)
        } catch {
            switch error {
            case let .spawnFailed(program, reason): throw RunError.spawnFailed(program: program, reason: reason)
            case .noProgram, .pipes: throw RunError.spawnFailed(program: config.argv.first ?? "", reason: error.description)
            }
        }
        let reply = try await Self.collect(process, input: request.input, timeout: request.timeout).get()
        return RunResult(reply: reply, duration: ContinuousClock.now - started)
    }

    private enum Event: Sendable {
        case stdout(bytes: [UInt8], overflowed: Bool)
        case stderr([UInt8])
        case exited(ExitStatus)
        case deadline
        case cancelled
    }

    private enum Stop { case timedOut, overflowed, cancelled }

    /// Feeds the input, reads stdout (up to the limit) and stderr, and waits for the exit, the timeout or the
    /// run's cancellation, whichever comes first; a stop is SIGTERM to the group, 2 s, then SIGKILL.
    private static func collect(_ process: Subprocess, input: String, timeout: Duration) async -> Result<String, RunError> {
        let inputBytes = Array(input.utf8)
        Task {
            try? await process.standardInput.write(inputBytes)
            process.standardInput.close()
        }
        var stdout: (bytes: [UInt8], overflowed: Bool)?
        var stderr: [UInt8]?
        var status: ExitStatus?
        var stop: Stop?
        await withTaskGroup(of: Event.self) { group in
            group.addTask {
                let read = await process.standardOutput.readAll(limit: maximumOutputBytes, stopAtLimit: true)
                return .stdout(bytes: read.bytes, overflowed: read.overflowed)
            }
            group.addTask { .stderr(await process.standardError.readAll(limit: 64 * 1024, stopAtLimit: false).bytes) }
            group.addTask { await process.waitForExitUnlessCancelled().map { .exited($0) } ?? .cancelled }
            group.addTask {
                do { try await Task.sleep(for: timeout) } catch { return .cancelled }
                return .deadline
            }
            func halt(_ reason: Stop) async {
                guard stop == nil, status == nil else { return }
                stop = reason
                // Not in this (maybe cancelled) task, so the grace is really given.
                status = await Task { await process.terminate(grace: .seconds(2)) }.value
                // Grandchildren may hold the pipes open; once the command is gone, stop them too.
                process.signalGroup(SIGKILL)
            }
            while stdout == nil || stderr == nil || status == nil, let event = await group.next() {
                switch event {
                case let .stdout(bytes, overflowed):
                    stdout = (bytes, overflowed)
                    if overflowed { await halt(.overflowed) }
                case .stderr(let bytes): stderr = bytes
                case .exited(let exit):
                    status = exit
                    process.signalGroup(SIGKILL)
                case .deadline: await halt(.timedOut)
                case .cancelled: if Task.isCancelled { await halt(.cancelled) }
                }
            }
            group.cancelAll()
        }
        process.standardInput.close()
        process.standardOutput.close()
        process.standardError.close()

        if stop == .cancelled { return .failure(.cancelled) }
        if stop == .overflowed || stdout?.overflowed == true { return .failure(.outputTooLarge(limit: maximumOutputBytes)) }
        if stop == .timedOut { return .failure(.timedOut(after: timeout)) }
        switch status ?? .exited(0) {
        case .signalled(let signal): return .failure(.killedBySignal(signal))
        case .exited(let code) where code != 0:
            let tail = String(decoding: (stderr ?? []).suffix(stderrTailBytes), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            return .failure(.exited(status: code, stderr: tail))
        case .exited:
            return .success(String(decoding: stdout?.bytes ?? [], as: UTF8.self))
        }
    }
}
