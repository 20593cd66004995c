import ChannelAPI
import ChannelDelivery
import Foundation
import GatewayTestSupport
import SQLite
import Testing

/// The snapshot every channel attempt reads its endpoint's state through: this process's changes at once, another
/// process's within the snapshot's age, and the same answer for every attempt reading at once.
@Suite("Disabled endpoints through a snapshot")
struct EndpointStateSnapshotTests {
    static func record(_ endpoint: String, channel: String = "webhook") -> DisabledEndpoint {
        DisabledEndpoint(channel: channel, endpoint: endpoint, fingerprint: "f-\(endpoint)", display: endpoint, reason: "answered 410 Gone",
                         since: Date(timeIntervalSince1970: 1_780_000_000))
    }

    @Test("a change made here shows at once; one made by another process on the same database within the snapshot's age")
    func freshness() async throws {
        let database = try migratedDatabase(TestGateway.makeTemporaryDirectory() + "/soulacy.db")
        defer { database.close() }
        let elsewhere = SQLiteEndpointStateStore(database: database)
        let snapshot = EndpointStateSnapshot(SQLiteEndpointStateStore(database: database), maximumAge: .seconds(2))

        #expect(try await snapshot.disabled(channel: "webhook", endpoint: "endpoint:a") == nil)
        try await snapshot.disable(Self.record("endpoint:a"))
        #expect(try await snapshot.disabled(channel: "webhook", endpoint: "endpoint:a") == Self.record("endpoint:a"))
        try await snapshot.enable(channel: "webhook", endpoint: "endpoint:a")
        #expect(try await snapshot.disabled(channel: "webhook", endpoint: "endpoint:a") == nil)

        // Another gateway disables b: the snapshot just read (with a's enable) does not know yet, the store's list does.
        try await elsewhere.disable(Self.record("endpoint:b"))
        #expect(try await snapshot.disabled(channel: "webhook", endpoint: "endpoint:b") == nil)
        #expect(try await snapshot.disabled(channel: "webhook").map(\.endpoint) == ["endpoint:b"])
        try await Task.sleep(for: .milliseconds(2_200))
        #expect(try await snapshot.disabled(channel: "webhook", endpoint: "endpoint:b") == Self.record("endpoint:b"))
        // A channel's snapshot is its own: another channel's record of the same endpoint name is not this one's.
        #expect(try await snapshot.disabled(channel: "hooks2", endpoint: "endpoint:b") == nil)

        // Many attempts reading at once after the snapshot aged all get the answer of the database as it is.
        try await elsewhere.enable(channel: "webhook", endpoint: "endpoint:b")
        try await elsewhere.disable(Self.record("endpoint:c"))
        try await Task.sleep(for: .milliseconds(2_200))
        let answers = try await withThrowingTaskGroup(of: [String?].self) { group in
            for _ in 0..<64 {
                group.addTask {
                    [try await snapshot.disabled(channel: "webhook", endpoint: "endpoint:b")?.endpoint,
                     try await snapshot.disabled(channel: "webhook", endpoint: "endpoint:c")?.endpoint]
                }
            }
            return try await group.reduce(into: [[String?]]()) { $0.append($1) }
        }
        #expect(answers.count == 64 && answers.allSatisfy { $0 == [nil, "endpoint:c"] }, "\(Set(answers.map { "\($0)" }))")
    }

    @Test("a read that fails is the attempt's error, and the next attempt reads again")
    func failedRead() async throws {
        let database = try DatabasePool(path: TestGateway.makeTemporaryDirectory() + "/soulacy.db", readerCount: 1)
        defer { database.close() }
        // No migrations yet: the table is missing, so the read fails.
        let snapshot = EndpointStateSnapshot(SQLiteEndpointStateStore(database: database))
        await #expect(throws: (any Error).self) { try await snapshot.disabled(channel: "webhook", endpoint: "endpoint:a") }
        try database.migrate(ChannelOutboxSchema.migrations)
        try await SQLiteEndpointStateStore(database: database).disable(Self.record("endpoint:a"))
        #expect(try await snapshot.disabled(channel: "webhook", endpoint: "endpoint:a") == Self.record("endpoint:a"))
    }
}
