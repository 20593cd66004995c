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
}
