import ChannelAPI
import ChannelDelivery
import Foundation
import GatewayTestSupport
import SQLite
import Synchronization
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
        // The snapshot's age is read from a clock the test moves, so a loaded machine cannot age it early.
        let clock = SteppedClock()
        let snapshot = EndpointStateSnapshot(SQLiteEndpointStateStore(database: database), maximumAge: .seconds(2), now: clock.now)

        #expect(try await snapshot.disabled(channel: "webhook", endpoint: "endpoint:a") == nil)
        try await snapshot.disable(Self.record("endpoint:a"))
        #expect(try await snapshot.disabled(channel: "webhook", endpoint: "endpoint:a") == Self.record("endpoint:a"))
        try await snapshot.enable(channel: "webhook", endpoint: "endpoint:a")
        #expect(try await snapshot.disabled(channel: "webhook", endpoint: "endpoint:a") == nil)

        // Another gateway disables b: the snapshot just read (with a's enable) does not know yet, the store's list does.
        try await elsewhere.disable(Self.record("endpoint:b"))
        #expect(try await snapshot.disabled(channel: "webhook", endpoint: "endpoint:b") == nil)
        #expect(try await snapshot.disabled(channel: "webhook").map(\.endpoint) == ["endpoint:b"])
        clock.advance(by: .milliseconds(1_999))
        #expect(try await snapshot.disabled(channel: "webhook", endpoint: "endpoint:b") == nil)
        clock.advance(by: .milliseconds(1))
        #expect(try await snapshot.disabled(channel: "webhook", endpoint: "endpoint:b") == Self.record("endpoint:b"))
        // A channel's snapshot is its own: another channel's record of the same endpoint name is not this one's.
        #expect(try await snapshot.disabled(channel: "hooks2", endpoint: "endpoint:b") == nil)

        // Many attempts reading at once after the snapshot aged all get the answer of the database as it is.
        try await elsewhere.enable(channel: "webhook", endpoint: "endpoint:b")
        try await elsewhere.disable(Self.record("endpoint:c"))
        clock.advance(by: .seconds(2))
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

    /// A monotonic clock that moves only when the test says.
    final class SteppedClock: Sendable {
        private let start = ContinuousClock.now
        private let offset = Mutex(Duration.zero)
        var now: @Sendable () -> ContinuousClock.Instant { { [self] in start.advanced(by: offset.withLock { $0 }) } }
        func advance(by step: Duration) { offset.withLock { $0 += step } }
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
