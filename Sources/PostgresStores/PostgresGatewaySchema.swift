import PostgreSQL

/// Every module's migrations of a gateway on PostgreSQL, in one ordered list: what `soulacy serve` applies at start
/// (once, under the migrator's advisory lock, however many nodes start together) and what `soulacy migrate` creates
/// before it copies.
public enum PostgresGatewaySchema {
    public static let migrations: [PostgresMigration] =
        PostgresIdempotencyStore.migrations + PostgresTriggerCooldownStore.migrations + PostgresMobileSchema.migrations
        + PostgresChannelOutbox.migrations + PostgresRunStore.migrations + PostgresAPIKeyStore.migrations
        + PostgresEndpointStateStore.migrations + PostgresApprovalStore.migrations + PostgresRelayCarriageStore.migrations
        + PostgresMemoryFactStore.migrations + PostgresConsoleSessionStore.migrations + PostgresHouseholdStore.migrations
        + PostgresChannelInboundStore.migrations

    /// A pool on the database at `url`, migrated to this binary's schema (once, under the migrator's advisory lock,
    /// however many nodes or commands open it together), with the migrations this call applied. A pool whose
    /// migration failed is closed before the error is thrown.
    public static func openPool(url: String, size: Int) async throws -> (pool: PostgresPool, applied: [PostgresMigration]) {
        let pool = try PostgresPool(url: url, size: size)
        do {
            return (pool, try await PostgresMigrator(migrations).migrate(pool))
        } catch {
            pool.close()
            throw error
        }
    }
}

/// What `soulacy doctor` and `soulacy restore` learn of a gateway's PostgreSQL database, read in a read-only session.
public struct PostgresGatewayInspection: Sendable {
    public var serverVersion: String
    public var databaseBytes: Int64
    /// The server's address as this connection reached it; nil over a Unix socket.
    public var serverAddress: String?
    public var encrypted: Bool
    /// This binary's migrations the database lacks, and recorded versions of its modules it does not know; nil
    /// when the database has no migrations table (no gateway ever started on it).
    public var migrations: (missing: [String], unknown: [String])?
    /// Tables outside PostgreSQL's own schemas (a restore needs zero).
    public var tables: Int
    /// Connections listening for inbox changes: one per running node.
    public var followingNodes: Int
}

extension PostgresGatewaySchema {
    /// Reads `PostgresGatewayInspection` over `pool`, changing nothing.
    public static func inspect(_ pool: PostgresPool) async throws -> PostgresGatewayInspection {
        let migrator = try PostgresMigrator(migrations)
        return try await pool.withConnection { db in
            try db.execute("SET default_transaction_read_only = on")
            let server = try db.query("""
                SELECT current_setting('server_version') AS version, pg_database_size(current_database()) AS bytes, inet_server_addr()::text AS address,
                       COALESCE((SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()), false) AS encrypted,
                       (SELECT count(*) FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema')) AS tables,
                       (SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'soulacy-inbox') AS following
                """).first
            return PostgresGatewayInspection(serverVersion: server?.string("version") ?? "?", databaseBytes: server?.int("bytes") ?? 0,
                                             serverAddress: server?.string("address"), encrypted: server?.bool("encrypted") ?? false,
                                             migrations: try migrator.status(on: db), tables: Int(server?.int("tables") ?? 0),
                                             followingNodes: Int(server?.int("following") ?? 0))
        }
    }
}
