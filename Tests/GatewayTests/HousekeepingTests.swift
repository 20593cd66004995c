import ChannelAPI
import ChannelTesting
import Foundation
import GatewayTestSupport
import Testing

/// Bookkeeping tables stay bounded; the household's own history does not shrink.
@Suite("Housekeeping")
struct HousekeepingTests {
    @Test("settled wake-ups go after a week and idempotency answers after a month; pending wake-ups and inbox lines stay")
    func sweeps() async throws {
        let clock = ManualClock(Date())
        try await withTestGateway(clock: clock) { (gw) async throws in
            let key = "intent-1"
            let first = try await gw.request("POST", "/api/v1/memory/facts", json: ["text": "likes tea"], headers: ["Idempotency-Key": key])
            #expect(first.status == 201)
            #expect(try await gw.request("POST", "/api/v1/memory/facts", json: ["text": "likes tea"], headers: ["Idempotency-Key": key]).headers["idempotent-replayed"] == "true")
            _ = try await gw.request("POST", "/api/v1/channels/mobile/test", json: ["body": "kept"])

            let day: Int64 = 86_400_000
            let now = clock.now().sqliteMillis
            try gw.gateway.database.transaction { db in
                for (wake, state, finished) in [("w-sent-old", "sent", now - 8 * day), ("w-failed-old", "failed", now - 8 * day),
                                                ("w-pending-old", "pending", nil), ("w-sent-new", "sent", now - day)] as [(String, String, Int64?)] {
                    try db.run("INSERT INTO mobile_push_outbox (wake_id, device_id, signal, state, next_attempt_at, expires_at, created_at, finished_at) VALUES (?, 'd', '{}', ?, ?, ?, ?, ?)",
                               wake, state, now + day, now + day, now - 8 * day, finished)
                }
            }
            func wakeIDs() throws -> [String] {
                try gw.gateway.database.read { try $0.query("SELECT wake_id FROM mobile_push_outbox WHERE device_id = 'd' ORDER BY wake_id").compactMap { $0.string("wake_id") } }
            }
            try await gw.gateway.housekeeping.sweep()
            #expect(try wakeIDs() == ["w-pending-old", "w-sent-new"])
            #expect(try await gw.request("POST", "/api/v1/memory/facts", json: ["text": "likes tea"], headers: ["Idempotency-Key": key]).headers["idempotent-replayed"] == "true")

            clock.advance(by: .seconds(31 * 86_400))
            try await gw.gateway.housekeeping.sweep()
            #expect(try wakeIDs() == ["w-pending-old"])
            // A month later the key is forgotten: the same intent is applied again.
            let late = try await gw.request("POST", "/api/v1/memory/facts", json: ["text": "likes tea"], headers: ["Idempotency-Key": key])
            #expect(late.status == 201 && late.headers["idempotent-replayed"] == nil)
            #expect(late.json["id"] != first.json["id"])
            #expect(try await gw.request("GET", "/api/v1/mobile/deliveries").json["deliveries"]?.arrayValue?.count == 1)
        }
    }
}
