import Storage
import Agents
import Foundation
import GatewayTestSupport
import SQLite
import Synchronization
import Testing

/// The run history on a real SQLite file.
@Suite("Run store")
struct RunStoreTests {
    @Test("a run's end commits on the database's own threads, with the waiting caller's answer in the same transaction")
    func finishOffTheCooperativePool() async throws {
        let database = try migratedDatabase(TestGateway.makeTemporaryDirectory() + "/soulacy.db")
        defer { database.close() }
        let store = try SQLiteRunStore(database: database)
        #expect(try await store.begin(RunRecord(id: "run_1", agentID: "brief", sessionID: "ses_1", trigger: .api, startedAt: Date()), fire: nil))
        let onStorageThread = Mutex(false)
        let recorded = Mutex<[Int]>([])
        let hook = CommitHook({ _, _ in onStorageThread.withLock { $0 = database.executor.isCurrent } },
                              recordAnswer: { answer, _ in recorded.withLock { $0.append(answer.status) } })
        try await CommitHook.$current.withValue(hook) {
            try await store.finish(id: "run_1", status: .succeeded, error: nil, deliveryID: nil, note: nil, at: Date(),
                                   answer: CommitHook.Answer(status: 200, contentType: "application/json", body: Array(#"{"ok":true}"#.utf8)), sends: [])
        }
        #expect(onStorageThread.withLock { $0 })
        #expect(recorded.withLock { $0 } == [200])
        #expect(try await store.run(id: "run_1")?.status == .succeeded)
    }

    @Test("a scheduled fire begins one run: of concurrent begins of one fire exactly one records a run, and a later fire is its own")
    func fireBegunOnce() async throws {
        let database = try migratedDatabase(TestGateway.makeTemporaryDirectory() + "/soulacy.db")
        defer { database.close() }
        let store = try SQLiteRunStore(database: database)
        let fire = ScheduledFire(agentID: "brief", at: Date(timeIntervalSince1970: 1_780_000_000))
        let begun = try await withThrowingTaskGroup(of: Bool.self) { group in
            for i in 0..<10 {
                group.addTask {
                    try await store.begin(RunRecord(id: "run_\(i)", agentID: "brief", sessionID: "ses_\(i)", trigger: .cron, startedAt: Date()), fire: fire)
                }
            }
            return try await group.reduce(0) { $0 + ($1 ? 1 : 0) }
        }
        #expect(begun == 1)
        let runs = try database.read { db in try db.query("SELECT COUNT(*) AS n FROM runs").first?.int("n") }
        #expect(runs == 1)
        let next = ScheduledFire(agentID: "brief", at: fire.at.addingTimeInterval(60))
        #expect(try await store.begin(RunRecord(id: "run_next", agentID: "brief", sessionID: "ses_next", trigger: .cron, startedAt: Date()), fire: next))
        let other = ScheduledFire(agentID: "digest", at: fire.at)
        #expect(try await store.begin(RunRecord(id: "run_digest", agentID: "digest", sessionID: "ses_digest", trigger: .cron, startedAt: Date()), fire: other))
    }
}
