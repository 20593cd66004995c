import ChannelAPI
import Foundation
import SQLite

/// The console's reads of the inbox: a person's lines with filters, and each line's timelines on their phones.
extension MobileStore {
    /// A person's lines newest first, as far as `limit`, for the console: optionally one agent's, or those whose id
    /// starts with `idPrefix`, below the store sequence `before`. Visibility is the inbox's own (`lineKinds`).
    public func consoleLines(subject: String, agentID: String?, idPrefix: String?, before: Int64?, limit: Int) throws -> [Delivery] {
        try database.readSnapshot { db in
            let kinds = Self.lineKinds(subject: subject, deviceID: nil)
            var extra = ""
            var extraArgs: [any SQLiteBindable] = []
            if let agentID {
                extra += " AND agent_id = ?"
                extraArgs.append(agentID)
            }
            if let idPrefix {
                // Ids are ASCII: every id that starts with the prefix sorts between it and it followed by U+10FFFF.
                extra += " AND id >= ? AND id < ?"
                extraArgs += [idPrefix, idPrefix + "\u{10FFFF}"]
            }
            let cursor = before ?? Int64.max
            if idPrefix != nil {
                // Along the unique id index: a prefix names few lines, wherever they are in time.
                return try db.query("""
                    SELECT d.*, NULL AS read_at FROM mobile_deliveries d
                    WHERE (\(kinds.map { "(\($0.sql))" }.joined(separator: " OR "))) AND seq < ?\(extra)
                    ORDER BY seq DESC LIMIT ?
                    """, arguments: kinds.flatMap(\.args) + [cursor] + extraArgs + [limit]).map(Self.delivery)
            }
            // As the inbox reads a page: each kind of destination backwards along its index, `limit` of each at most.
            let newest = kinds.map { kind in
                (sql: "SELECT seq FROM (SELECT seq FROM mobile_deliveries WHERE \(kind.sql) AND seq < ?\(extra) ORDER BY seq DESC LIMIT ?)",
                 args: kind.args + [cursor] + extraArgs + [limit])
            }
            return try db.query("""
                SELECT d.*, NULL AS read_at FROM mobile_deliveries d
                WHERE d.seq IN (\(newest.map(\.sql).joined(separator: " UNION ALL ")))
                ORDER BY d.seq DESC LIMIT ?
                """, arguments: newest.flatMap(\.args) + [limit]).map(Self.delivery)
        }
    }
}

extension DeliveryTimelineStore {
    /// These lines with the timelines of the caller's phones (`devices`, each with when it was registered): each phone
    /// the line was written for, or that fetched or read it since. A phone registered after a line was written was
    /// not its recipient, whatever an earlier registration of its id was.
    public func consoleTimelines(_ lines: [Delivery], devices: [String: Date]) async throws -> [ConsoleLine] {
        let ids = lines.map(\.id)
        let allEvents = try await events(deliveryIDs: ids)
        let allRecipients = try await recipients(deliveryIDs: ids)
        let allReceipts = try await receipts(deliveryIDs: ids)
        let allWaiting = try await waitingWakeUps(deliveryIDs: ids)
        return lines.map { line in
            let lineEvents = (allWaiting[line.id] ?? []) + (allEvents[line.id] ?? [])
            let lineReceipts = allReceipts[line.id] ?? [:]
            var involved = Set((allRecipients[line.id] ?? []).filter { devices[$0].map { line.createdAt >= $0 } ?? false })
            involved.formUnion(lineEvents.compactMap { event in event.deviceID.flatMap { id in devices[id].map { event.at >= $0 } == true ? id : nil } })
            involved.formUnion(lineReceipts.keys)
            let timelines = involved.filter { devices[$0] != nil }.sorted().map {
                DeviceTimeline(deviceID: $0, line: line, events: lineEvents, readAt: lineReceipts[$0], registeredAt: devices[$0] ?? .distantPast)
            }
            return ConsoleLine(delivery: line, devices: timelines)
        }
    }
}
