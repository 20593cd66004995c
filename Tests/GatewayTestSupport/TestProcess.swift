import CProcessShims
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A child process started with `posix_spawn`, with the parts of Foundation's `Process` the tests use. Not
/// Foundation's own: on this toolchain its `run()` reads `/proc/self/fd` with a 256-byte over-read past glibc's
/// directory buffer (swift-corelibs-foundation PR 5472), which crashed the whole test process now and then when many
/// descriptors were open (a suite's gateways, stand-ins and databases at once).
///
/// Standard streams take a `Pipe` or a `FileHandle` (`FileHandle.nullDevice` is /dev/null) as Foundation's do; a
/// pipe end given to the child is closed here after the start, so a reader sees the end of its output. The child
/// gets no other descriptor of this process, and default SIGPIPE, SIGTERM and SIGINT.
public final class TestProcess: @unchecked Sendable {
    public var executableURL: URL?
    public var arguments: [String]?
    /// Nil: this process's own environment.
    public var environment: [String: String]?
    public var currentDirectoryURL: URL?
    public var standardInput: Any?
    public var standardOutput: Any?
    public var standardError: Any?
    public private(set) var processIdentifier: Int32 = 0

    private let lock = NSLock()
    /// The raw wait status once the child was reaped (`Reaper`).
    private var waitStatus: Int32?
    private var ended = false

    public init() {}

    /// Called by the reaper once the child is gone; `status` nil when it could not be read.
    fileprivate func reaped(_ status: Int32?) {
        lock.withLock {
            waitStatus = status
            ended = true
        }
    }

    public func run() throws {
        guard let path = executableURL?.path, !path.isEmpty else { throw TestFailure("TestProcess: no executable") }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        var handedOver: [FileHandle] = []
        for (stream, target) in [(standardInput, Int32(0)), (standardOutput, Int32(1)), (standardError, Int32(2))] {
            switch stream {
            case let pipe as Pipe:
                let end = target == 0 ? pipe.fileHandleForReading : pipe.fileHandleForWriting
                posix_spawn_file_actions_adddup2(&actions, end.fileDescriptor, target)
                handedOver.append(end)
            case let handle as FileHandle where handle === FileHandle.nullDevice:
                posix_spawn_file_actions_addopen(&actions, target, "/dev/null", target == 0 ? O_RDONLY : O_WRONLY, 0)
            case let handle as FileHandle:
                posix_spawn_file_actions_adddup2(&actions, handle.fileDescriptor, target)
            default:
                break
            }
        }
        soulacy_spawn_add_closefrom(&actions, 3)
        if let directory = currentDirectoryURL?.path { soulacy_spawn_add_chdir(&actions, directory) }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        var empty = sigset_t()
        sigemptyset(&empty)
        posix_spawnattr_setsigmask(&attributes, &empty)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGPIPE, SIGTERM, SIGINT] { sigaddset(&defaults, signal) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)

        let argv = ([path] + (arguments ?? [])).map { strdup($0) } + [nil]
        let pairs = (environment ?? ProcessInfo.processInfo.environment).map { "\($0.key)=\($0.value)" }
        let envp = pairs.map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) }; envp.forEach { free($0) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, path, &actions, &attributes, argv, envp)
        guard rc == 0 else { throw TestFailure("TestProcess: cannot start \(path): \(String(cString: strerror(rc)))") }
        lock.withLock { processIdentifier = pid }
        Reaper.shared.watch(self, pid: pid)
        // The child holds its ends now; the reader of a pipe sees its end only once this copy is closed too.
        for end in handedOver { try? end.close() }
    }

    /// Whether the child has not ended yet.
    public var isRunning: Bool {
        lock.withLock { processIdentifier > 0 && !ended }
    }

    public func terminate() {
        if isRunning { kill(processIdentifier, SIGTERM) }
    }

    /// Blocks until the child has ended (on a thread of its own where the caller is async).
    public func waitUntilExit() {
        while isRunning { usleep(2_000) }
    }

    /// As Foundation reports it: the exit code, or the number of the signal that ended the child.
    public var terminationStatus: Int32 {
        lock.withLock {
            guard let status = waitStatus else { return 0 }
            return status & 0x7f == 0 ? (status >> 8) & 0xff : status & 0x7f
        }
    }
}

/// Reaps every child a `TestProcess` started, within milliseconds of its end, as Foundation's `Process` does: a
/// killed gateway left a zombie, and a zombie's pid still answers `kill(pid, 0)`, so a gateway restarted on the same
/// data took its abandoned leases for a live owner's.
private final class Reaper: @unchecked Sendable {
    static let shared = Reaper()
    private let lock = NSLock()
    private var children: [pid_t: TestProcess] = [:]

    private init() {
        Thread.detachNewThread { [self] in
            while true {
                sweep()
                usleep(5_000)
            }
        }
    }

    func watch(_ process: TestProcess, pid: pid_t) {
        lock.withLock { children[pid] = process }
    }

    private func sweep() {
        for (pid, process) in lock.withLock({ children }) {
            var status: Int32 = 0
            let result = waitpid(pid, &status, WNOHANG)
            guard result != 0 else { continue }
            process.reaped(result == pid ? status : nil)
            lock.withLock { children[pid] = nil }
        }
    }
}
