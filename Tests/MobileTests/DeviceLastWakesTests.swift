import Foundation
import GatewayTestSupport
import Mobile
import SQLite
import Testing

/// Each phone's latest wake-up attempt and token rejection, kept by `mobile.13-device-last-wakes` as the steps are
/// written, checked against the same read along the whole history.
@Suite("A phone's latest wake-up")
struct DeviceLastWakesTests {
    static let migration = "mobile.13-device-last-wakes"
    static let kinds = ["attempt", "attempt", "attempt", "token_rejected", "sent", "failed", "retry_scheduled", "skipped", "fetched"]

    /// `count` random steps over `devices` phones, a few with no phone, by plain inserts (the triggers see every
    /// writer). Each step's `service_id` names it, so a read can say which step it found.
    static func writeSteps(_ count: Int, devices: Int, from first: Int, random: inout SplitMix, in database: DatabasePool) throws {
        try database.transaction { db in
            for n in first..<(first + count) {
                let kind = kinds.randomElement(using: &random)!
                let device: String? = Int.random(in: 0..<50, using: &random) == 0 ? nil : "phone-\(Int.random(in: 0..<devices, using: &random))"
                try db.run("""
                    INSERT INTO mobile_delivery_events (delivery_id, device_id, kind, at, status, service_id) VALUES (?, ?, ?, ?, ?, ?)
                    """, "dlv_\(n)", device, kind, Int64(n), Int64(200 + n % 300), "step-\(n)")
            }
        }
    }

    /// Each phone's latest step of `kind`, found along the whole history.
    static func latest(_ kind: String, in database: DatabasePool) throws -> [String: String] {
        try database.read { db in
            var result: [String: String] = [:]
            for row in try db.query("SELECT device_id, service_id FROM mobile_delivery_events WHERE kind = ? AND device_id IS NOT NULL ORDER BY id", kind) {
                if let device = row.string("device_id") { result[device] = row.string("service_id") }
            }
            return result
        }
    }

    /// What the console reads for every phone (and one that was never woken), beside the history's own answer.
    static func expectSummariesAgree(_ database: DatabasePool, devices: Int, _ when: String) throws {
        let events = DeliveryEventStore(database: database)
        let attempts = try latest("attempt", in: database), rejections = try latest("token_rejected", in: database)
        #expect(!attempts.isEmpty && !rejections.isEmpty)
        var wrong: [String] = []
        for device in (0..<devices).map({ "phone-\($0)" }) + ["phone-never"] {
            let summary = try events.wakeSummary(deviceID: device)
            if summary.lastAttempt?.serviceID != attempts[device] || summary.lastRejection?.serviceID != rejections[device]
                || (summary.lastAttempt.map { $0.kind != .attempt || $0.deviceID != device } ?? false)
                || (summary.lastRejection.map { $0.kind != .tokenRejected || $0.deviceID != device } ?? false) {
                wrong.append("\(device): \(String(describing: summary.lastAttempt?.serviceID)), \(String(describing: summary.lastRejection?.serviceID)) "
                             + "against \(String(describing: attempts[device])), \(String(describing: rejections[device]))")
            }
        }
        #expect(wrong.isEmpty, "\(when): \(wrong.prefix(5))")
    }

    @Test("a history written before the migration is summed up by it, and later steps keep each phone's latest; a phone never woken has none")
    func summariesFollowTheHistory() throws {
        let database = try DatabasePool(path: TestGateway.makeTemporaryDirectory() + "/wakes.db")
        try database.migrate(MobileSchema.migrations.filter { $0.id != Self.migration })
        var random = SplitMix(seed: 13)
        try Self.writeSteps(3000, devices: 40, from: 0, random: &random, in: database)
        try database.migrate(MobileSchema.migrations)
        try Self.expectSummariesAgree(database, devices: 40, "after the migration")
        for round in 1...3 {
            try Self.writeSteps(1000, devices: 40, from: 3000 * round, random: &random, in: database)
            try Self.expectSummariesAgree(database, devices: 40, "after round \(round) of later steps")
        }
    }

    @Test("the summary is two key lookups: no scan of the steps, and no index on them by phone to keep up on every settle")
    func keyLookups() throws {
        let database = try migratedDatabase(TestGateway.makeTemporaryDirectory() + "/plan.db")
        let plan = try database.read { db in
            try db.query("""
                EXPLAIN QUERY PLAN SELECT e.* FROM mobile_device_last_wakes w JOIN mobile_delivery_events e ON e.id = w.attempt_id WHERE w.device_id = ?
                """, "phone").compactMap { $0.string("detail") }
        }
        #expect(plan.count == 2 && plan.allSatisfy { $0.hasPrefix("SEARCH") }, "\(plan)")
        let indexes = try database.read { db in
            try db.query("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'mobile_delivery_events'").compactMap { $0.string("name") }
        }
        #expect(!indexes.isEmpty && !indexes.contains("mobile_delivery_events_wakes_by_device"), "\(indexes)")
    }
}
