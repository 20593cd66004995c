import Foundation
import GatewayHTTP
import Storage
import Synchronization

/// What every engine's `IdempotencyStore` must do, whatever keeps its rows: lines round-trip byte for byte, "applied"
/// commits with the effect and never without it, an answer built in the effect's transaction commits with it, a
/// rolled-back effect leaves nothing, concurrent records of one key leave one line, old lines are forgotten, and a
/// key is held by one call at a time (of concurrent calls exactly one), let go only by its holder.
/// Returns the broken rules (empty: conformant).
public struct IdempotencyStoreConformance: Sendable {
    public let fixture: any StorageEngineFixture
    public let store: any IdempotencyStore
    /// Whether a held key can outlive its process (a database several processes share): then holds must lapse.
    public let holdsOutliveTheProcess: Bool

    public init(fixture: any StorageEngineFixture, store: any IdempotencyStore, holdsOutliveTheProcess: Bool = false) {
        self.fixture = fixture
        self.store = store
        self.holdsOutliveTheProcess = holdsOutliveTheProcess
    }

    struct Refused: Error {}

    public func run() async -> [ConformanceFailure] {
        var failures: [ConformanceFailure] = []
        func check(_ rule: String, _ holds: Bool, _ detail: @autoclosure () -> String) {
            if !holds { failures.append(ConformanceFailure(rule: rule, detail: "\(fixture.engine): \(detail())")) }
        }
        do {
            let scope = "key_\(UUID().uuidString.prefix(8))"
            let now = Date(timeIntervalSince1970: 1_780_000_000.123)
            check("missing", try await store.line(scope: scope, key: "none") == nil, "an unknown key has a line")

            // Every byte value, a long body, no content type: kept exactly.
            let body = (0..<4096).map { UInt8($0 % 256) }
            let line = IdempotencyLine(method: "POST", path: "/api/v1/x", status: 201, contentType: nil, body: body, sealed: true)
            try await store.record(line, scope: scope, key: "k1", at: now)
            let read = try await store.line(scope: scope, key: "k1")
            check("round-trip", read == line, "recorded \(line.status)/\(line.body.count) bytes, read \(String(describing: read?.status))/\(read?.body.count ?? -1)")
            // Another scope's key of the same name is another line.
            check("scoped", try await store.line(scope: scope + "x", key: "k1") == nil, "a key is shared across scopes")

            // The applied line commits with its effect, with what the call waits for.
            let hook = store.appliedHook(scope: scope, key: "k2", method: "POST", path: "/api/v1/y", at: now) { answer in
                IdempotencyLine(method: "POST", path: "/api/v1/y", status: answer.status, contentType: answer.contentType, body: answer.body, sealed: false)
            }
            hook.resume(from: "approval:call_1")
            try await CommitHook.$current.withValue(hook) {
                try await fixture.storage.withTransaction { session in try fixture.writeEffect("applied", in: session) }
            }
            let applied = try await store.line(scope: scope, key: "k2")
            check("applied with effect", applied?.status == 0 && applied?.resume == "approval:call_1", "after the effect: \(String(describing: applied))")
            check("applied with effect", hook.runCount == 1, "the hook ran \(hook.runCount) times")

            // An effect rolled back takes its applied line with it; a transaction that changed nothing writes none.
            let undone = store.appliedHook(scope: scope, key: "k3", method: "POST", path: "/p", at: now) { _ in line }
            try? await CommitHook.$current.withValue(undone) {
                try await fixture.storage.withTransaction { session -> Void in
                    try fixture.writeEffect("rolled back", in: session)
                    throw Refused()
                }
            }
            check("rollback", try await store.line(scope: scope, key: "k3") == nil, "a rolled-back effect left its line")
            let idle = store.appliedHook(scope: scope, key: "k4", method: "POST", path: "/p", at: now) { _ in line }
            try await CommitHook.$current.withValue(idle) {
                try await fixture.storage.withTransaction { _ in }
            }
            check("no effect, no line", try await store.line(scope: scope, key: "k4") == nil, "a transaction that changed nothing wrote a line")

            // An answer built in the effect's transaction is recorded there: effect, line and answer commit as one.
            let answering = store.appliedHook(scope: scope, key: "k5", method: "PUT", path: "/api/v1/z", at: now) { answer in
                IdempotencyLine(method: "PUT", path: "/api/v1/z", status: answer.status, contentType: answer.contentType, body: answer.body, sealed: false)
            }
            let value = try await CommitHook.$current.withValue(answering) {
                try await fixture.storage.withTransaction(answering: { CommitHook.Answer(status: $0, contentType: "application/json", body: Array("{\"ok\":true}".utf8)) }) { session in
                    try fixture.writeEffect("answered", in: session)
                    return 202
                }
            }
            let answered = try await store.line(scope: scope, key: "k5")
            check("answer with effect", value == 202 && answered?.status == 202 && answered?.body == Array("{\"ok\":true}".utf8)
                  && answered?.contentType == "application/json" && answering.answeredWithEffect, "\(String(describing: answered))")
            let effects = try await fixture.effects()
            check("effects", effects == ["answered", "applied"], "the scratch table holds \(effects)")

            // Recording over an applied line gives it its answer.
            try await store.record(IdempotencyLine(method: "POST", path: "/api/v1/y", status: 200, contentType: "text/plain", body: [1, 2], sealed: false),
                                   scope: scope, key: "k2", at: now)
            check("record over applied", try await store.line(scope: scope, key: "k2")?.status == 200, "the applied line kept status 0")

            // Concurrent records of one key: one line, one of the answers whole.
            await withTaskGroup(of: Void.self) { group in
                for status in 200..<220 {
                    group.addTask {
                        try? await store.record(IdempotencyLine(method: "POST", path: "/c", status: status, contentType: nil, body: Array(repeating: UInt8(status - 200), count: 64), sealed: false),
                                                scope: scope, key: "k7", at: now)
                    }
                }
            }
            let raced = try await store.line(scope: scope, key: "k7")
            check("concurrent records", raced.map { (200..<220).contains($0.status) && $0.body == Array(repeating: UInt8($0.status - 200), count: 64) } == true,
                  "\(String(describing: raced))")

            // Forgetting: lines before the cutoff go, later ones stay.
            let later = now.addingTimeInterval(3600)
            try await store.record(line, scope: scope, key: "fresh", at: later)
            failures += try await holdFailures(scope: scope)
            let removed = try await store.forget(before: now.addingTimeInterval(60))
            check("forget", removed >= 4, "removed \(removed)")
            let (old, fresh) = (try await store.line(scope: scope, key: "k1"), try await store.line(scope: scope, key: "fresh"))
            check("forget", old == nil && fresh != nil, "the cutoff was not kept")
        } catch {
            failures.append(ConformanceFailure(rule: "no error", detail: "\(fixture.engine): \(error)"))
        }
        return failures
    }

    /// One call holds a key at a time; only its holder lets go; of concurrent holders exactly one; a hold that can
    /// outlive its process lapses.
    private func holdFailures(scope: String) async throws -> [ConformanceFailure] {
        var failures: [ConformanceFailure] = []
        let engine = fixture.engine
        func check(_ rule: String, _ holds: Bool, _ detail: String) {
            if !holds { failures.append(ConformanceFailure(rule: rule, detail: "\(engine): \(detail)")) }
        }
        let store = self.store
        // One call holds a key at a time; only its holder lets go.
        let held = "held_\(UUID().uuidString.prefix(8))"
        check("one holder", try await store.hold(scope: scope, key: held, holder: "call-a", lease: .seconds(60)), "a free key could not be held")
        check("one holder", try await !store.hold(scope: scope, key: held, holder: "call-b", lease: .seconds(60)), "a held key was held again by another call")
        check("one holder", try await store.hold(scope: scope, key: held, holder: "call-a", lease: .seconds(60)), "the holder could not hold its own key again")
        try await store.release(scope: scope, key: held, holder: "call-b")
        check("only the holder lets go", try await !store.hold(scope: scope, key: held, holder: "call-b", lease: .seconds(60)), "another call's release freed the key")
        try await store.release(scope: scope, key: held, holder: "call-a")
        check("released", try await store.hold(scope: scope, key: held, holder: "call-b", lease: .seconds(60)), "a released key could not be held")
        let contested = "contested_\(UUID().uuidString.prefix(8))"
        let holders = try await withThrowingTaskGroup(of: Bool.self) { group in
            for index in 0..<10 { group.addTask { try await store.hold(scope: scope, key: contested, holder: "call-\(index)", lease: .seconds(60)) } }
            return try await group.reduce(0) { $0 + ($1 ? 1 : 0) }
        }
        check("one of concurrent holders", holders == 1, "\(holders) of 10 concurrent calls held one key")
        if holdsOutliveTheProcess {
            let lapsing = "lapsing_\(UUID().uuidString.prefix(8))"
            _ = try await store.hold(scope: scope, key: lapsing, holder: "dead-call", lease: .milliseconds(200))
            try await Task.sleep(for: .milliseconds(600))
            check("a dead holder's key lapses", try await store.hold(scope: scope, key: lapsing, holder: "call-b", lease: .seconds(60)),
                  "a hold past its lease still kept the key")
        }
        return failures
    }
}
