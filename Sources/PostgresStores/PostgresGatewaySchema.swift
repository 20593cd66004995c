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
