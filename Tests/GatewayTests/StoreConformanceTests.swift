import Foundation
import GatewayHTTP
import GatewayTestSupport
import Storage
import PostgresStores
import SQLiteStores
import Testing

/// Each store protocol's conformance suite (in the test kit), run against every engine the gateway can use.
@Suite("Store conformance")
struct StoreConformanceTests {
    /// The engines under test; each case makes a fresh database.
    enum Engine: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case sqlite, postgresql
        var testDescription: String { rawValue }

        /// A fresh database with every migration the suites' stores need.
        func fixture() async throws -> any StorageEngineFixture {
            switch self {
            case .sqlite: try SQLiteEngineFixture()
            case .postgresql: try await PostgresEngineFixture.make(migrations: PostgresIdempotencyStore.migrations + PostgresTriggerCooldownStore.migrations)
            }
        }

        func idempotencyStore(_ fixture: any StorageEngineFixture) throws -> any IdempotencyStore {
            switch self {
            case .sqlite: SQLiteIdempotencyStore(database: try #require(fixture as? SQLiteEngineFixture).database)
            case .postgresql: PostgresIdempotencyStore(pool: try #require(fixture as? PostgresEngineFixture).pool)
            }
        }

        func triggerCooldownStore(_ fixture: any StorageEngineFixture) throws -> any TriggerCooldownStore {
            switch self {
            case .sqlite: SQLiteTriggerCooldownStore(database: try #require(fixture as? SQLiteEngineFixture).database)
            case .postgresql: PostgresTriggerCooldownStore(pool: try #require(fixture as? PostgresEngineFixture).pool)
            }
        }
    }

    @Test("location triggers' cooldowns", arguments: Engine.allCases)
    func triggerCooldowns(engine: Engine) async throws {
        let fixture = try await engine.fixture()
        let failures = await TriggerCooldownStoreConformance(engine: engine.rawValue, store: try engine.triggerCooldownStore(fixture)).run()
        #expect(failures.isEmpty, "\(failures)")
    }

    @Test("the cooldown suite itself catches a store that lets every fire through")
    func catchesALenientCooldownStore() async throws {
        struct Lenient: TriggerCooldownStore {
            func claim(agentID: String, deviceID: String, cooldown: Duration, now: Date) async throws -> Int? { nil }
            func release(agentID: String, deviceID: String) async throws {}
        }
        let rules = Set(await TriggerCooldownStoreConformance(engine: "lenient", store: Lenient()).run().map(\.rule))
        #expect(rules == ["within the cooldown", "rounded up", "one of concurrent fires"], "\(rules)")
    }

    @Test("the idempotency log", arguments: Engine.allCases)
    func idempotency(engine: Engine) async throws {
        let fixture = try await engine.fixture()
        let failures = await IdempotencyStoreConformance(fixture: fixture, store: try engine.idempotencyStore(fixture)).run()
        #expect(failures.isEmpty, "\(failures)")
    }

    @Test("the conformance suite itself catches a store that forgets its lines")
    func catchesABrokenStore() async throws {
        /// Keeps nothing: every rule about reading back must fail.
        struct ForgetfulStore: IdempotencyStore {
            let real: any IdempotencyStore
            func line(scope: String, key: String) async throws -> IdempotencyLine? { nil }
            func record(_ line: IdempotencyLine, scope: String, key: String, at now: Date) async throws {}
            func appliedHook(scope: String, key: String, method: String, path: String, at now: Date,
                             line: @escaping @Sendable (CommitHook.Answer) -> IdempotencyLine) -> CommitHook {
                real.appliedHook(scope: scope, key: key, method: method, path: path, at: now, line: line)
            }
            func forget(before cutoff: Date) async throws -> Int { 0 }
        }
        let fixture = try await Engine.sqlite.fixture()
        let failures = await IdempotencyStoreConformance(fixture: fixture, store: ForgetfulStore(real: try Engine.sqlite.idempotencyStore(fixture))).run()
        let rules = Set(failures.map(\.rule))
        #expect(rules.isSuperset(of: ["round-trip", "applied with effect", "answer with effect", "forget"]), "\(failures)")
    }
}
