import Foundation
import Glibc
import Lifecycle
import Synchronization
import Testing

/// What happened, in order, across services.
final class Journal: Sendable {
    private let lines = Mutex<[String]>([])
    func add(_ line: String) { lines.withLock { $0.append(line) } }
    var all: [String] { lines.withLock { $0 } }
}

/// Runs until shutdown reaches it, then records its name (after `linger`).
struct Recorder: Service {
    let name: String
    let journal: Journal
    var linger: Duration = .zero
    func run() async throws {
        journal.add("start \(name)")
        await GracefulShutdown.wait()
        try? await Task.sleep(for: linger)
        journal.add("stop \(name)")
    }
}

struct Failing: Service {
    struct Boom: Error {}
    func run() async throws {
        try await Task.sleep(for: .milliseconds(50))
        throw Boom()
    }
}

@Suite("Service lifecycle")
struct LifecycleTests {
    @Test("shutdown reaches the services in reverse order, each finishing before the next is told")
    func reverseOrder() async throws {
        let journal = Journal()
        let group = ServiceGroup(services: [("a", Recorder(name: "a", journal: journal)), ("b", Recorder(name: "b", journal: journal, linger: .milliseconds(100))),
                                            ("c", Recorder(name: "c", journal: journal))], signals: [])
        let running = Task { try await group.run() }
        while journal.all.count < 3 { try await Task.sleep(for: .milliseconds(5)) }
        group.triggerGracefulShutdown()
        try await running.value
        #expect(journal.all.suffix(3) == ["stop c", "stop b", "stop a"])
    }

    @Test("a service that ignores shutdown is cancelled after the graceful limit; the rest still stop")
    func cancelAfterTimeout() async throws {
        let journal = Journal()
        // Never listens for the announcement: only cancellation ends it.
        struct Stubborn: Service {
            let journal: Journal
            func run() async throws {
                journal.add("stubborn running")
                while !Task.isCancelled { try? await Task.sleep(for: .milliseconds(10)) }
                journal.add("stubborn cancelled")
            }
        }
        let stubborn = Stubborn(journal: journal)
        let group = ServiceGroup(services: [("first", Recorder(name: "first", journal: journal)), ("stubborn", stubborn)], signals: [], gracefulTimeout: .seconds(1))
        let running = Task { try await group.run() }
        while journal.all.count < 2 { try await Task.sleep(for: .milliseconds(5)) }
        let asked = ContinuousClock.now
        group.triggerGracefulShutdown()
        try await running.value
        #expect(ContinuousClock.now - asked >= .seconds(1), "it had its graceful second")
        #expect(journal.all.contains("stubborn cancelled") && journal.all.contains("stop first"))
    }

    @Test("a cancelled-on-shutdown loop that ends early by itself leaves the group running until shutdown")
    func earlyLoopEnd() async throws {
        let journal = Journal()
        let group = ServiceGroup(services: [("r", Recorder(name: "r", journal: journal)), ("idle", CancelledOnShutdown { journal.add("loop ended") })], signals: [])
        let running = Task { try await group.run() }
        while journal.all.count < 2 { try await Task.sleep(for: .milliseconds(5)) }
        try await Task.sleep(for: .milliseconds(100))
        #expect(!journal.all.contains("stop r"), "the group is still running")
        group.triggerGracefulShutdown()
        try await running.value
        #expect(journal.all.last == "stop r")
    }

    @Test("a service that fails ends the group: the others are shut down and the error comes out")
    func failureEndsTheGroup() async throws {
        let journal = Journal()
        let group = ServiceGroup(services: [("recorder", Recorder(name: "r", journal: journal)), ("failing", Failing())], signals: [])
        await #expect(throws: Failing.Boom.self) { try await group.run() }
        #expect(journal.all == ["start r", "stop r"])
    }

    @Test("a configured signal starts the graceful shutdown")
    func signalShutsDown() async throws {
        let journal = Journal()
        let reports = Journal()
        let group = ServiceGroup(services: [("r", Recorder(name: "r", journal: journal))], signals: [SIGUSR2], report: { reports.add($0) })
        let running = Task { try await group.run() }
        while journal.all.isEmpty { try await Task.sleep(for: .milliseconds(5)) }
        try await Task.sleep(for: .milliseconds(50))
        kill(getpid(), SIGUSR2)
        try await running.value
        #expect(journal.all == ["start r", "stop r"])
        #expect(reports.all.first?.contains("signal \(SIGUSR2)") == true)
    }
}
