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
        try store.begin(RunRecord(id: "run_1", agentID: "brief", sessionID: "ses_1", trigger: .api, startedAt: Date()))
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
}
