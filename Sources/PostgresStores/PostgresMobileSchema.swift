import PostgreSQL

/// The mobile channel's tables on PostgreSQL, as one ordered list (SQLite's is `MobileSchema`): the rows every node
/// of a gateway shares. Times are milliseconds since 1970 in BIGINT, as in SQLite, so both engines read the same
/// values. A version never changes once shipped: add a new one at the end.
public enum PostgresMobileSchema {
    public static let migrations = [
        PostgresMigration(module: "mobile", version: 1, sql: """
            CREATE TABLE mobile_devices (
                id TEXT PRIMARY KEY,
                subject TEXT NOT NULL,
                name TEXT NOT NULL,
                platform TEXT NOT NULL CHECK (platform IN ('ios', 'android', 'web')),
                bundle_id TEXT NOT NULL,
                push_token TEXT,
                push_environment TEXT,
                notifications_enabled BOOLEAN NOT NULL,
                live_start_token TEXT,
                created_at BIGINT NOT NULL,
                updated_at BIGINT NOT NULL,
                registered_by_key TEXT,
                capabilities TEXT NOT NULL DEFAULT '[]'
            );
            CREATE INDEX mobile_devices_by_subject ON mobile_devices (subject);
            -- The hot rows: pending wake-ups. Settled rows stay only for the line's wake_ups and housekeeping; each
            -- attempt's detail goes to the append-only events below, so a row is written at most once per attempt.
            CREATE TABLE mobile_push_outbox (
                id BIGSERIAL PRIMARY KEY,
                wake_id TEXT NOT NULL UNIQUE,
                delivery_id TEXT,
                device_id TEXT NOT NULL,
                signal TEXT NOT NULL,
                state TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'sent', 'failed', 'skipped')),
                attempts INTEGER NOT NULL DEFAULT 0,
                next_attempt_at BIGINT NOT NULL,
                expires_at BIGINT NOT NULL,
                lease_owner TEXT,
                lease_until BIGINT,
                claims BIGINT NOT NULL DEFAULT 0,
                transport TEXT,
                outcome TEXT,
                created_at BIGINT NOT NULL,
                finished_at BIGINT
            );
            -- Only pending rows are in the claim's index, so a backlog of settled rows costs a claim nothing.
            CREATE INDEX mobile_push_outbox_due ON mobile_push_outbox (next_attempt_at, id) WHERE state = 'pending';
            CREATE INDEX mobile_push_outbox_by_delivery ON mobile_push_outbox (delivery_id);
            CREATE INDEX mobile_push_outbox_finished ON mobile_push_outbox (finished_at) WHERE state <> 'pending';
            CREATE TABLE mobile_delivery_events (
                id BIGSERIAL PRIMARY KEY,
                delivery_id TEXT,
                device_id TEXT,
                wake_id TEXT,
                kind TEXT NOT NULL CHECK (kind IN ('stored', 'queued', 'attempt', 'retry_scheduled', 'token_rejected', 'sent',
                                                   'failed', 'skipped', 'fetched')),
                at BIGINT NOT NULL,
                transport TEXT,
                outcome TEXT,
                status INTEGER,
                reason TEXT,
                service_id TEXT,
                latency_ms BIGINT,
                next_attempt_at BIGINT
            );
            CREATE INDEX mobile_delivery_events_by_delivery ON mobile_delivery_events (delivery_id, id);
            CREATE INDEX mobile_delivery_events_wakes_by_device ON mobile_delivery_events (device_id, id)
                WHERE kind IN ('attempt', 'token_rejected');
            CREATE UNIQUE INDEX mobile_delivery_events_fetched_once ON mobile_delivery_events (delivery_id, device_id)
                WHERE kind = 'fetched';
            """),
        // The inbox: lines, who they went to, who read them. Free text is BYTEA (UTF-8): PostgreSQL's text cannot
        // hold NUL, and a line is stored whole whatever an agent wrote.
        PostgresMigration(module: "mobile", version: 2, sql: """
            CREATE TABLE mobile_deliveries (
                seq BIGSERIAL PRIMARY KEY,
                id TEXT NOT NULL UNIQUE,
                destination TEXT NOT NULL,
                destination_kind TEXT NOT NULL CHECK (destination_kind IN ('all', 'user', 'device')),
                destination_value TEXT NOT NULL,
                destination_subject TEXT,
                agent_id TEXT NOT NULL,
                agent_name BYTEA NOT NULL,
                session_id BYTEA NOT NULL,
                title BYTEA NOT NULL,
                body BYTEA NOT NULL,
                parts TEXT NOT NULL,
                metadata TEXT NOT NULL,
                created_at BIGINT NOT NULL
            );
            CREATE INDEX mobile_deliveries_visible ON mobile_deliveries (destination_kind, destination_value, seq, agent_id, destination_subject);
            CREATE TABLE mobile_delivery_recipients (
                delivery_id TEXT NOT NULL REFERENCES mobile_deliveries (id) ON DELETE CASCADE,
                device_id TEXT NOT NULL,
                PRIMARY KEY (delivery_id, device_id)
            );
            CREATE TABLE mobile_receipts (
                delivery_id TEXT NOT NULL REFERENCES mobile_deliveries (id) ON DELETE CASCADE,
                device_id TEXT NOT NULL,
                read_at BIGINT NOT NULL,
                PRIMARY KEY (delivery_id, device_id)
            );
            CREATE INDEX mobile_receipts_by_device ON mobile_receipts (device_id);
            """),
        // Live Activities' update tokens, one per device and session (PostgresLiveActivityTokenStore).
        PostgresMigration(module: "mobile", version: 3, sql: """
            CREATE TABLE mobile_live_activities (
                device_id TEXT NOT NULL,
                session_id TEXT NOT NULL,
                agent_id TEXT NOT NULL,
                token TEXT NOT NULL,
                environment TEXT NOT NULL,
                created_at BIGINT NOT NULL,
                PRIMARY KEY (device_id, session_id)
            );
            CREATE INDEX mobile_live_activities_by_session ON mobile_live_activities (session_id);
            """),
        // Phones as nodes and their command queue (PostgresDeviceNodeStore), the same rows as SQLite's. What the
        // phone writes in its own words is BYTEA (UTF-8), since text cannot hold NUL; JSON this gateway serialized is text.
        PostgresMigration(module: "mobile", version: 4, sql: """
            CREATE TABLE mobile_nodes (
                device_id TEXT PRIMARY KEY,
                subject TEXT NOT NULL,
                name BYTEA NOT NULL,
                platform BYTEA NOT NULL,
                model BYTEA NOT NULL,
                os_version BYTEA NOT NULL,
                app_version BYTEA NOT NULL,
                capabilities TEXT NOT NULL,
                permissions TEXT NOT NULL,
                updated_at BIGINT NOT NULL
            );
            CREATE INDEX mobile_nodes_by_subject ON mobile_nodes (subject, updated_at);
            CREATE TABLE mobile_node_commands (
                id TEXT NOT NULL,
                device_id TEXT NOT NULL,
                subject TEXT NOT NULL,
                command TEXT NOT NULL,
                params TEXT NOT NULL,
                status TEXT NOT NULL CHECK (status IN ('queued', 'running', 'completed', 'failed', 'declined', 'expired')),
                result TEXT,
                error BYTEA,
                created_at BIGINT NOT NULL,
                expires_at BIGINT NOT NULL,
                completed_at BIGINT,
                PRIMARY KEY (device_id, id)
            );
            CREATE INDEX mobile_node_commands_queued ON mobile_node_commands (device_id, status, created_at);
            """),
        // The console's search by id prefix: a byte-wise index, so a range over ids needs no collation's order.
        PostgresMigration(module: "mobile", version: 5, sql: """
            CREATE INDEX mobile_deliveries_id_pattern ON mobile_deliveries (id text_pattern_ops);
            """),
        // Housekeeping finds phone commands long expired along an index (see SQLite's mobile.14).
        PostgresMigration(module: "mobile", version: 6, sql: "CREATE INDEX mobile_node_commands_by_expiry ON mobile_node_commands (expires_at);"),
    ]
}
