internal import CProcessShims
import Foundation
import Glibc
import Synchronization

/// What to start: the program and its arguments, the whole environment it gets, and where it runs.
public struct SubprocessCommand: Sendable, Equatable {
    /// `argv[0]` is the program, looked up in the gateway's PATH when it has no slash.
    public var argv: [String]
    /// Exactly the child's environment: nothing of the parent's is inherited.
    public var environment: [String: String]
    public var workingDirectory: String?

    public init(argv: [String], environment: [String: String], workingDirectory: String? = nil) {
        self.argv = argv
        self.environment = environment
        self.workingDirectory = workingDirectory
    }
}

public enum SubprocessError: Error, Sendable, Equatable, CustomStringConvertible {
    case noProgram
    case pipes(String)
    case spawnFailed(program: String, reason: String)

    public var description: String {
        switch self {
        case .noProgram: return "no program to run (argv is empty)"
        case .pipes(let reason): return "could not make pipes: \(reason)"
        case let .spawnFailed(program, reason): return "could not start \(program): \(reason)"
        }
    }
}

/// How a child ended.
public enum ExitStatus: Sendable, Equatable, CustomStringConvertible {
    case exited(Int32)
    case signalled(Int32)

    init(waitStatus status: Int32) {
        self = (status & 0x7f) == 0 ? .exited((status >> 8) & 0xff) : .signalled(status & 0x7f)
    }

    public var description: String {
        switch self {
        case .exited(let code): return "exited with status \(code)"
        case .signalled(let signal): return "was killed by signal \(signal)\(signal == SIGKILL ? " (SIGKILL)" : signal == SIGTERM ? " (SIGTERM)" : "")"
        }
    }
}

/// A running child in its own process group, with pipes for its stdin, stdout and stderr that are read and
/// written without blocking a thread of Swift's cooperative pool. It inherits no descriptor but the three pipes.
public final class Subprocess: Sendable {
    public let pid: Int32
    public let standardInput: PipeWriter
    public let standardOutput: PipeReader
    public let standardError: PipeReader
    private let exit: ExitWatch

    private init(pid: Int32, stdin: Int32, stdout: Int32, stderr: Int32) {
        self.pid = pid
        standardInput = PipeWriter(fd: stdin)
        standardOutput = PipeReader(fd: stdout)
        standardError = PipeReader(fd: stderr)
        exit = ExitWatch(pid: pid)
    }

    /// Starts `command`. Also makes SIGPIPE harmless for this process (once), so writing to a child that died
    /// is an error value, not the gateway's death; the child gets the default disposition back.
    public static func spawn(_ command: SubprocessCommand) throws(SubprocessError) -> Subprocess {
        guard let program = command.argv.first, !program.isEmpty else { throw .noProgram }
        SignalSetup.ignoreSIGPIPE
        var stdinPipe: [Int32] = [-1, -1], stdoutPipe: [Int32] = [-1, -1], stderrPipe: [Int32] = [-1, -1]
        guard soulacy_pipe_cloexec(&stdinPipe) == 0 else { throw .pipes(Self.errnoText()) }
        guard soulacy_pipe_cloexec(&stdoutPipe) == 0 else {
            let reason = Self.errnoText()
            stdinPipe.forEach { close($0) }
            throw .pipes(reason)
        }
        guard soulacy_pipe_cloexec(&stderrPipe) == 0 else {
            let reason = Self.errnoText()
            (stdinPipe + stdoutPipe).forEach { close($0) }
            throw .pipes(reason)
        }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, stdinPipe[0], 0)
        posix_spawn_file_actions_adddup2(&actions, stdoutPipe[1], 1)
        posix_spawn_file_actions_adddup2(&actions, stderrPipe[1], 2)
        // Nothing else of the gateway's reaches the child: no listening socket, database or inherited descriptor
        // that lacks close-on-exec (a descriptor a supervisor passed down, say).
        soulacy_spawn_add_closefrom(&actions, 3)
        if let directory = command.workingDirectory { soulacy_spawn_add_chdir(&actions, directory) }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        // Its own process group, so a stop reaches the whole tree the command started.
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
        let cArgs = command.argv.map { strdup($0) } + [nil]
        let pairs: [String] = command.environment.map { "\($0.key)=\($0.value)" }.sorted()
        let cEnv = pairs.map { strdup($0) } + [nil]
        defer { cArgs.forEach { free($0) }; cEnv.forEach { free($0) } }
        let rc = posix_spawnp(&pid, program, &actions, &attributes, cArgs, cEnv)
        close(stdinPipe[0]); close(stdoutPipe[1]); close(stderrPipe[1])
        guard rc == 0 else {
            close(stdinPipe[1]); close(stdoutPipe[0]); close(stderrPipe[0])
            throw .spawnFailed(program: program, reason: String(cString: strerror(rc)))
        }
        return Subprocess(pid: pid, stdin: stdinPipe[1], stdout: stdoutPipe[0], stderr: stderrPipe[0])
    }

    /// Sends `signal` to the child's whole process group (its grandchildren too).
    public func signalGroup(_ signal: Int32) {
        // After the child is reaped its pid is free again; only a group that still has members keeps it reserved.
        if exit.status == nil || groupAlive { Glibc.kill(-pid, signal) }
    }

    private var groupAlive: Bool { Glibc.kill(-pid, 0) == 0 }

    /// How it ended, nil while it runs.
    public var exitStatus: ExitStatus? { exit.status }

    /// Waits for it to end (waitpid on a thread of its own, away from the cooperative pool).
    public func waitForExit() async -> ExitStatus { await exit.wait() }

    /// Waits for it to end, or returns nil as soon as the task is cancelled.
    public func waitForExitUnlessCancelled() async -> ExitStatus? { await exit.waitUnlessCancelled() }

    /// Waits up to `timeout` for it to end; nil if it still runs (or the task was cancelled).
    public func waitForExit(timeout: Duration) async -> ExitStatus? {
        if let status = exit.status { return status }
        return await withTaskGroup(of: ExitStatus?.self) { group in
            group.addTask { await self.exit.waitUnlessCancelled() }
            group.addTask {
                try? await Task.sleep(for: timeout)
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first ?? exit.status
        }
    }

    /// SIGTERM to the group, up to `grace` to end, then SIGKILL to the group.
    public func terminate(grace: Duration) async -> ExitStatus {
        signalGroup(SIGTERM)
        return await kill(after: grace)
    }

    /// Up to `grace` to end by itself (after a shutdown request), then SIGKILL to the group.
    public func kill(after grace: Duration) async -> ExitStatus {
        if let status = await waitForExit(timeout: grace) {
            signalGroup(SIGKILL)
            return status
        }
        signalGroup(SIGKILL)
        return await waitForExit()
    }

    static func errnoText() -> String { String(cString: strerror(errno)) }
}

private enum SignalSetup {
    static let ignoreSIGPIPE: Void = {
        var current = sigaction()
        sigaction(SIGPIPE, nil, &current)
        if current.__sigaction_handler.sa_handler == nil { signal(SIGPIPE, SIG_IGN) }
    }()
}

/// Reaps one child on a thread of its own and tells every waiter.
private final class ExitWatch: Sendable {
    private struct State {
        var status: ExitStatus?
        var waiters: [Int: CheckedContinuation<ExitStatus?, Never>] = [:]
        var nextTicket = 0
    }
    private let state = Mutex(State())

    init(pid: Int32) {
        let thread = Thread { [self] in
            var raw: Int32 = 0
            while waitpid(pid, &raw, 0) < 0 {
                if errno != EINTR { raw = 0x7f00; break }  // already reaped elsewhere: say "exited 127"
            }
            let status = ExitStatus(waitStatus: raw)
            let waiters = state.withLock { s -> [CheckedContinuation<ExitStatus?, Never>] in
                s.status = status
                defer { s.waiters = [:] }
                return Array(s.waiters.values)
            }
            waiters.forEach { $0.resume(returning: status) }
        }
        thread.name = "waitpid \(pid)"
        thread.stackSize = 64 * 1024
        thread.start()
    }

    var status: ExitStatus? { state.withLock { $0.status } }

    /// The status; cancellation does not cut it short (the child ends or is killed by its owner).
    func wait() async -> ExitStatus {
        let ticket = state.withLock { s -> Int in
            s.nextTicket += 1
            return s.nextTicket
        }
        let status = await withCheckedContinuation { (continuation: CheckedContinuation<ExitStatus?, Never>) in
            let done = state.withLock { s -> ExitStatus? in
                if let status = s.status { return status }
                s.waiters[ticket] = continuation
                return nil
            }
            if let done { continuation.resume(returning: done) }
        }
        return status!  // only the reaper resumes a ticket that is not cancellable
    }

    /// The status, or nil as soon as the task is cancelled.
    func waitUnlessCancelled() async -> ExitStatus? {
        let ticket = state.withLock { s -> Int in
            s.nextTicket += 1
            return s.nextTicket
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<ExitStatus?, Never>) in
                let done = state.withLock { s -> ExitStatus?? in
                    if let status = s.status { return .some(status) }
                    if Task.isCancelled { return .some(nil) }
                    s.waiters[ticket] = continuation
                    return nil
                }
                if let done { continuation.resume(returning: done) }
            }
        } onCancel: {
            let waiter = state.withLock { $0.waiters.removeValue(forKey: ticket) }
            waiter?.resume(returning: nil)
        }
    }
}
