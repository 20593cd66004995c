import Foundation
import Glibc
import Synchronization

/// A long-running part of a process (a listener, a scheduler, a drain), in swift-service-lifecycle's shape.
/// `run()` returns when the service is done: after graceful shutdown was announced (`GracefulShutdown.wait()`),
/// it finishes what it has in hand and returns; if it does not within the group's limit, it is cancelled.
public protocol Service: Sendable {
    func run() async throws
}

/// The announcement a service listens for. Each service of a group gets its own, so the group can shut them
/// down one by one, in reverse order.
public final class ShutdownTrigger: Sendable {
    private let state = Mutex<(announced: Bool, waiting: [CheckedContinuation<Void, Never>])>((false, []))

    public init() {}

    public var isAnnounced: Bool { state.withLock { $0.announced } }

    public func announce() {
        let waiting = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            guard !s.announced else { return [] }
            s.announced = true
            defer { s.waiting = [] }
            return s.waiting
        }
        waiting.forEach { $0.resume() }
    }

    func wait() async {
        await withCheckedContinuation { continuation in
            let now = state.withLock { s -> Bool in
                if s.announced { return true }
                s.waiting.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }
}

public enum GracefulShutdown {
    @TaskLocal static var trigger: ShutdownTrigger?

    /// Returns once graceful shutdown is announced to the calling service (never outside a group: then it
    /// waits for cancellation).
    public static func wait() async {
        if let trigger {
            await withTaskCancellationHandler { await trigger.wait() } onCancel: { trigger.announce() }
        } else {
            while !Task.isCancelled { try? await Task.sleep(for: .seconds(3600)) }
        }
    }

    /// Runs `body` with its own trigger, as a group does for each service (and tests do for one).
    public static func withTrigger<T>(_ trigger: ShutdownTrigger, _ body: () async throws -> T) async rethrows -> T {
        try await $trigger.withValue(trigger) { try await body() }
    }
}

/// A loop that only stops by cancellation (`Scheduler.run`, `PushDispatcher.run`…) as a service: graceful
/// shutdown cancels it. A loop that ends early by itself (nothing to watch) leaves the service idle until shutdown;
/// it does not end the group.
public struct CancelledOnShutdown: Service {
    let body: @Sendable () async -> Void

    public init(_ body: @escaping @Sendable () async -> Void) { self.body = body }

    public func run() async throws {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await body() }
            await GracefulShutdown.wait()
            group.cancelAll()
        }
    }
}

/// Work to do once when shutdown reaches this service (a drain, a final poke); it runs nothing before that.
public struct OnShutdown: Service {
    let body: @Sendable () async -> Void

    public init(_ body: @escaping @Sendable () async -> Void) { self.body = body }

    public func run() async throws {
        await GracefulShutdown.wait()
        await body()
    }
}

/// The first error any service ended with.
final class FirstFailure: Sendable {
    private let box = Mutex<(any Error)?>(nil)
    func record(_ error: any Error) { box.withLock { if $0 == nil { $0 = error } } }
    var error: (any Error)? { box.withLock { $0 } }
}

/// Runs services together until a signal, an explicit shutdown, or one of them ending. Then it announces
/// graceful shutdown to each in reverse order of the list, waiting for each to finish (cancelling it after
/// `gracefulTimeout`), so what was started first stops last: listeners drain before the runs they feed,
/// runs before the dispatcher that delivers their wake-ups.
public final class ServiceGroup: Sendable {
    public typealias Entry = (name: String, service: any Service)

    let services: [Entry]
    let signals: [Int32]
    let gracefulTimeout: Duration
    let report: @Sendable (String) -> Void
    private let requested = ShutdownTrigger()

    public init(services: [Entry], signals: [Int32] = [SIGTERM, SIGINT], gracefulTimeout: Duration = .seconds(30),
                report: @escaping @Sendable (String) -> Void = { _ in }) {
        self.services = services
        self.signals = signals
        self.gracefulTimeout = gracefulTimeout
        self.report = report
    }

    /// Starts the shutdown, as a signal would (idempotent).
    public func triggerGracefulShutdown() { requested.announce() }

    /// Runs until shutdown is complete; throws the first error a service ended with.
    public func run() async throws {
        let triggers = services.map { _ in ShutdownTrigger() }
        let sources = signals.map { number -> DispatchSourceSignal in
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { [requested, report] in
                report("signal \(number): shutting down gracefully")
                requested.announce()
            }
            source.resume()
            return source
        }
        defer { sources.forEach { $0.cancel() } }
        let firstFailure = FirstFailure()
        let finished = services.map { _ in ShutdownTrigger() }
        await withTaskGroup(of: Void.self) { group in
            for (index, entry) in services.enumerated() {
                group.addTask { [requested, report] in
                    do {
                        try await GracefulShutdown.withTrigger(triggers[index]) { try await entry.service.run() }
                    } catch is CancellationError {
                    } catch {
                        report("\(entry.name) ended with an error: \(error)")
                        firstFailure.record(error)
                    }
                    finished[index].announce()
                    // A service that ends by itself ends the group.
                    requested.announce()
                }
            }
            await requested.wait()
            for index in services.indices.reversed() {
                triggers[index].announce()
                let done = await Self.waitFor(finished[index], timeout: gracefulTimeout)
                if !done {
                    report("\(services[index].name) did not stop within \(gracefulTimeout); cancelling it")
                    group.cancelAll()
                    break
                }
            }
            await group.waitForAll()
        }
        if let failure = firstFailure.error { throw failure }
    }

    /// Whether the service finished within `timeout` (checked every 2 ms: a shutdown is not a hot path).
    private static func waitFor(_ finished: ShutdownTrigger, timeout: Duration) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        while !finished.isAnnounced, ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(2))
        }
        return finished.isAnnounced
    }
}

/// Calls `handler` on each arrival of `signal` until shutdown (SIGHUP reloading the agent files, say).
public struct SignalHandler: Service {
    let number: Int32
    let handler: @Sendable () -> Void

    public init(signal number: Int32, _ handler: @escaping @Sendable () -> Void) {
        self.number = number
        self.handler = handler
    }

    public func run() async throws {
        signal(number, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
        source.setEventHandler(handler: handler)
        source.resume()
        await GracefulShutdown.wait()
        source.cancel()
    }
}

/// Starts something with the group and stops it when shutdown reaches this service (a sidecar process).
public struct StartedThenStopped: Service {
    let start: @Sendable () async -> Void
    let stop: @Sendable () async -> Void

    public init(start: @escaping @Sendable () async -> Void, stop: @escaping @Sendable () async -> Void) {
        self.start = start
        self.stop = stop
    }

    public func run() async throws {
        await start()
        await GracefulShutdown.wait()
        await stop()
    }
}
