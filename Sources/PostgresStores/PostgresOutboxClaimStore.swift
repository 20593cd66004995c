import Foundation
import Outbox
import PostgreSQL

/// SQL both PostgreSQL outboxes share: leases are judged by the database's clock, one clock for every node, so a
/// node whose own clock runs fast never takes a lease another node still holds.
enum PostgresOutboxClaims {
    /// The database's now in milliseconds since 1970 (the time the statement started, the same for every row).
    static let now = "(extract(epoch FROM statement_timestamp()) * 1000)::bigint"

    /// One statement that claims up to `$2` due rows of `table` (due by the caller's `$1`): `FOR UPDATE SKIP LOCKED`
    /// so concurrent claimers on any node pass each other's rows by instead of waiting, rows whose lease ran out
    /// rescued by whoever claims next (no leader), each claim counted for the settle's fence. `$3` owner, `$4` lease ms.
    static func claim(_ table: String) -> String {
        """
        WITH due AS (
            SELECT id FROM \(table)
            WHERE state = 'pending' AND next_attempt_at <= $1 AND (lease_until IS NULL OR lease_until < \(now))
            ORDER BY next_attempt_at, id LIMIT $2
            FOR UPDATE SKIP LOCKED)
        UPDATE \(table) AS o SET lease_owner = $3, lease_until = \(now) + $4, claims = o.claims + 1
        FROM due WHERE o.id = due.id
        RETURNING o.*
        """
    }

    /// Frees the leases of owners on this host whose process is gone, in one transaction.
    static func releaseAbandoned(_ table: String, ownOwner: String, in db: PostgresConnection) throws -> Int {
        let owners = try db.query("SELECT DISTINCT lease_owner FROM \(table) WHERE state = 'pending' AND lease_owner IS NOT NULL")
            .compactMap { $0.string("lease_owner") }
        return try LeaseOwners.abandoned(among: owners, ownOwner: ownOwner).reduce(0) { released, owner in
            try released + db.run("UPDATE \(table) SET lease_owner = NULL, lease_until = NULL WHERE lease_owner = $1 AND state = 'pending'", owner)
        }
    }

    /// Removes the finished rows of `table` older than `cutoff` in batches of short transactions, so claims never
    /// queue behind one long delete; pending rows are never touched.
    static func removeFinished(_ table: String, before cutoff: Date, pool: PostgresPool) async throws -> Int {
        try await pool.deleteInBatches(from: table, where: "state <> 'pending' AND finished_at < $1", arguments: [cutoff.postgresMillis])
    }
}
