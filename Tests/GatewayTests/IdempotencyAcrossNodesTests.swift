import APIKit
import Foundation
import GatewayHTTP
import GatewayTestSupport
import HTTPServer
import Identity
import PostgreSQL
import PostgresStores
import Storage
import Synchronization
import Testing

/// Several gateway processes on one PostgreSQL database share one idempotency log: a retry that lands on another
/// node is answered from the log, and duplicates sent to two nodes at once apply once (one waits on the key, then
/// replays the other's answer).
@Suite("Idempotency across nodes")
struct IdempotencyAcrossNodesTests {
    /// One node's log, on its own pool of the shared database.
    static func node(_ fixture: PostgresEngineFixture) throws -> IdempotencyLog {
        IdempotencyLog(store: PostgresIdempotencyStore(pool: try PostgresPool(url: fixture.database.url, size: 2)))
    }

    /// A call whose effect is a row of the scratch table, committed with the log's hook; it takes a while, so a
    /// duplicate arrives while it runs.
    /// How many times the handler ran.
    final class Calls: Sendable {
        private let count = Mutex(0)
        func add() { count.withLock { $0 += 1 } }
        var value: Int { count.withLock { $0 } }
    }

    static func apply(_ fixture: PostgresEngineFixture, calls: Calls) async -> HTTPResponse {
        calls.add()
        try? await Task.sleep(for: .milliseconds(300))
        let id = UUID().uuidString
        do {
            try await fixture.storage.withTransaction { session in try fixture.writeEffect(id, in: session) }
        } catch {
            return .json(["error": "\(error)"], status: 500)
        }
        return .json(["effect": id], status: 201)
    }

    static func request(key: String) -> HTTPRequest {
        HTTPRequest(method: "POST", path: "/api/v1/memory/facts", query: [:], headers: ["idempotency-key": key, "authorization": "Bearer sk_test_node_token"],
                    body: Array(#"{"content":"likes tea"}"#.utf8), remoteAddress: "127.0.0.1")
    }

    @Test("the same key sent to nodes A and B at once: one effect, and both get its answer; a later retry on C replays it")
    func concurrentDuplicatesApplyOnce() async throws {
        let fixture = try await PostgresEngineFixture.make(migrations: PostgresIdempotencyStore.migrations)
        let (a, b, c) = (try Self.node(fixture), try Self.node(fixture), try Self.node(fixture))
        let caller = Principal(keyID: "key_phone", subject: "alice", role: .operator)
        let calls = Calls()
        let first = Task { await a.answer(Self.request(key: "intent-1"), principal: caller) { _ in await Self.apply(fixture, calls: calls) } }
        let second = Task { await b.answer(Self.request(key: "intent-1"), principal: caller) { _ in await Self.apply(fixture, calls: calls) } }
        let (fromA, fromB) = (await first.value, await second.value)
        let effects = try await fixture.effects()
        #expect(effects.count == 1, "the intent was applied \(effects.count) times")
        #expect(calls.value == 1)
        #expect(fromA.status == 201 && fromB.status == 201 && fromA.body == fromB.body, "\(fromA.status) \(fromB.status)")
        let replayedCount = [fromA, fromB].filter { $0.header("idempotent-replayed") == "true" }.count
        #expect(replayedCount == 1)
        let later = await c.answer(Self.request(key: "intent-1"), principal: caller) { _ in await Self.apply(fixture, calls: calls) }
        #expect(later.status == 201 && later.body == fromA.body && later.header("idempotent-replayed") == "true")
        #expect(try await fixture.effects().count == 1)
    }

    @Test("a node that died holding a key: the duplicate is applied once the hold lapses, not before")
    func deadHolderLapses() async throws {
        let fixture = try await PostgresEngineFixture.make(migrations: PostgresIdempotencyStore.migrations)
        let store = PostgresIdempotencyStore(pool: fixture.pool)
        // The dead node's hold, with a short lease; the surviving node waits for it, then applies the call.
        #expect(try await store.hold(scope: "key_phone", key: "intent-2", holder: "dead-node-call", lease: .milliseconds(500)))
        let survivor = IdempotencyLog(store: store, holdWait: .seconds(20))
        let calls = Calls()
        let answer = await survivor.answer(Self.request(key: "intent-2"), principal: Principal(keyID: "key_phone", subject: "alice", role: .operator)) { _ in
            await Self.apply(fixture, calls: calls)
        }
        #expect(answer.status == 201 && calls.value == 1)
        #expect(try await fixture.effects().count == 1)
    }

    @Test("a duplicate that outwaits its limit is told to retry, and nothing is applied twice")
    func waitLimit() async throws {
        let fixture = try await PostgresEngineFixture.make(migrations: PostgresIdempotencyStore.migrations)
        let store = PostgresIdempotencyStore(pool: fixture.pool)
        #expect(try await store.hold(scope: "key_phone", key: "intent-3", holder: "slow-call", lease: .seconds(60)))
        let impatient = IdempotencyLog(store: store, holdWait: .milliseconds(200))
        let calls = Calls()
        let answer = await impatient.answer(Self.request(key: "intent-3"), principal: Principal(keyID: "key_phone", subject: "alice", role: .operator)) { _ in
            await Self.apply(fixture, calls: calls)
        }
        #expect(answer.status == 409 && String(decoding: answer.body, as: UTF8.self).contains("idempotency_key_in_flight"))
        #expect(calls.value == 0)
    }
}
