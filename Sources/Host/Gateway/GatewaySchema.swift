import ChannelDelivery
import Mobile
import SQLite

/// Every table of the gateway itself (API keys, runs, household, memory facts, approvals, trigger cooldowns, the
/// idempotency log, the relay carriage), as one ordered list. Ids never change once shipped and a migration's SQL
/// never changes: add a new one at the end.
public enum GatewaySchema {
    public static let migrations: [Migration] = [
        Migration("auth.1-api-keys", """
            CREATE TABLE api_keys (
                id TEXT PRIMARY KEY,
                name TEXT NOT NULL,
                subject TEXT NOT NULL,
                role TEXT NOT NULL CHECK (role IN ('admin', 'operator', 'viewer')),
                kind TEXT NOT NULL,
                token_sha256 BLOB NOT NULL UNIQUE,
                created_at INTEGER NOT NULL,
                last_used_at INTEGER,
                revoked_at INTEGER
            );
            CREATE INDEX api_keys_by_subject ON api_keys (subject);
            """),
        Migration("runs.1", """
            CREATE TABLE runs (
                id TEXT PRIMARY KEY,
                agent_id TEXT NOT NULL,
                session_id TEXT NOT NULL,
                trigger TEXT NOT NULL,
                status TEXT NOT NULL,
                started_at INTEGER NOT NULL,
                finished_at INTEGER,
                error TEXT,
                delivery_id TEXT
            );
            CREATE INDEX runs_by_agent ON runs (agent_id, started_at);
            CREATE TABLE schedule_state (
                agent_id TEXT PRIMARY KEY,
                last_fire_at INTEGER NOT NULL
            );
            """),
        Migration("runs.2-subject", """
            ALTER TABLE runs ADD COLUMN subject TEXT NOT NULL DEFAULT 'owner';
            CREATE INDEX runs_by_session ON runs (session_id);
            """),
        Migration("runs.3-note", "ALTER TABLE runs ADD COLUMN note TEXT;"),
        Migration("household.1", """
            CREATE TABLE household_members (
                subject TEXT PRIMARY KEY,
                name TEXT NOT NULL,
                created_at INTEGER NOT NULL
            );
            CREATE TABLE pairing_codes (
                code_sha256 BLOB PRIMARY KEY,
                subject TEXT NOT NULL,
                role TEXT NOT NULL,
                created_by_key TEXT,
                created_at INTEGER NOT NULL,
                expires_at INTEGER NOT NULL,
                redeemed_at INTEGER,
                redeemed_key TEXT
            );
            """),
        Migration("memory.1", """
            CREATE TABLE memory_facts (
                id TEXT PRIMARY KEY,
                subject TEXT NOT NULL,
                text TEXT NOT NULL,
                source TEXT NOT NULL,
                created_at INTEGER NOT NULL
            );
            CREATE INDEX memory_facts_by_subject ON memory_facts (subject, created_at);
            """),
        // The original's fact: category, agent scope, status, expiry, last change; and the change feed phones sync.
        Migration("memory.2-categories-and-sync", """
            ALTER TABLE memory_facts ADD COLUMN category TEXT NOT NULL DEFAULT 'preference';
            ALTER TABLE memory_facts ADD COLUMN agent_id TEXT NOT NULL DEFAULT '';
            ALTER TABLE memory_facts ADD COLUMN status TEXT NOT NULL DEFAULT 'active';
            ALTER TABLE memory_facts ADD COLUMN expires_at INTEGER;
            ALTER TABLE memory_facts ADD COLUMN updated_at INTEGER;
            UPDATE memory_facts SET updated_at = created_at;
            CREATE TABLE memory_fact_changes (
                cursor INTEGER PRIMARY KEY AUTOINCREMENT,
                subject TEXT NOT NULL,
                fact_id TEXT NOT NULL,
                agent_id TEXT NOT NULL,
                event TEXT NOT NULL
            );
            CREATE INDEX memory_fact_changes_by_subject ON memory_fact_changes (subject, cursor);
            INSERT INTO memory_fact_changes (subject, fact_id, agent_id, event) SELECT subject, id, '', 'created' FROM memory_facts ORDER BY created_at;
            """),
        // Each change keeps the fact as it was then, for GET /memory/facts/:id/history; earlier changes take the fact's
        // current state, the best that is known of them.
        Migration("memory.3-history", """
            ALTER TABLE memory_fact_changes ADD COLUMN content TEXT NOT NULL DEFAULT '';
            ALTER TABLE memory_fact_changes ADD COLUMN category TEXT NOT NULL DEFAULT '';
            ALTER TABLE memory_fact_changes ADD COLUMN status TEXT NOT NULL DEFAULT '';
            ALTER TABLE memory_fact_changes ADD COLUMN actor TEXT NOT NULL DEFAULT '';
            ALTER TABLE memory_fact_changes ADD COLUMN changed_at INTEGER NOT NULL DEFAULT 0;
            UPDATE memory_fact_changes SET
                content = COALESCE((SELECT text FROM memory_facts f WHERE f.id = fact_id), ''),
                category = COALESCE((SELECT category FROM memory_facts f WHERE f.id = fact_id), ''),
                status = COALESCE((SELECT status FROM memory_facts f WHERE f.id = fact_id), ''),
                actor = subject,
                changed_at = COALESCE((SELECT updated_at FROM memory_facts f WHERE f.id = fact_id), 0);
            CREATE INDEX memory_fact_changes_by_fact ON memory_fact_changes (fact_id, cursor);
            """),
        Migration("approvals.1", """
            CREATE TABLE approvals (
                call_id TEXT PRIMARY KEY,
                subject TEXT NOT NULL,
                agent_id TEXT NOT NULL,
                agent_name TEXT NOT NULL,
                session_id TEXT NOT NULL,
                tool TEXT NOT NULL,
                arguments TEXT NOT NULL,
                state TEXT NOT NULL CHECK (state IN ('pending', 'approved', 'denied', 'expired')),
                decided_by TEXT,
                decided_at INTEGER,
                created_at INTEGER NOT NULL,
                expires_at INTEGER NOT NULL
            );
            CREATE INDEX approvals_by_subject ON approvals (subject, state, created_at);
            """),
        Migration("triggers.1", """
            CREATE TABLE trigger_fires (
                agent_id TEXT NOT NULL,
                device_id TEXT NOT NULL,
                fired_at INTEGER NOT NULL,
                PRIMARY KEY (agent_id, device_id)
            );
            """),
        Migration("idempotency.1", """
            CREATE TABLE idempotency_log (
                scope TEXT NOT NULL,
                idempotency_key TEXT NOT NULL,
                method TEXT NOT NULL,
                path TEXT NOT NULL,
                status INTEGER NOT NULL,
                content_type TEXT,
                body BLOB NOT NULL,
                created_at INTEGER NOT NULL,
                PRIMARY KEY (scope, idempotency_key)
            );
            """),
        // Answers are sealed from now on; plain ones of routes that mint secrets are dropped (their replay
        // protection ends, but no key or code stays readable on disk).
        Migration("idempotency.2-sealed", """
            ALTER TABLE idempotency_log ADD COLUMN sealed INTEGER NOT NULL DEFAULT 0;
            DELETE FROM idempotency_log WHERE path IN ('/admin/api-keys', '/api/v1/pairing/tokens', '/pairing/tokens', '/api/v1/pairing/redeem', '/pairing/redeem');
            """),
        Migration("relaycarriage.1", """
            CREATE TABLE relay_mailbox (id INTEGER PRIMARY KEY CHECK (id = 1), url TEXT NOT NULL, mailbox_id TEXT NOT NULL, bearer TEXT NOT NULL);
            CREATE TABLE relay_devices (
                device_id TEXT PRIMARY KEY, subject TEXT NOT NULL, secret BLOB NOT NULL,
                last_seq INTEGER NOT NULL DEFAULT 0, registered INTEGER NOT NULL DEFAULT 0
            );
            """),
        // A revoked phone is marked at once (nothing more goes down for it) and forgotten once the relay has
        // removed its place, bearer and held items.
        Migration("relaycarriage.2-revoked", "ALTER TABLE relay_devices ADD COLUMN revoked INTEGER NOT NULL DEFAULT 0;"),
        // What a call waits for after its effect (`approval:<id>`, `run:<id>`…), so a retry after a crash rebuilds its answer.
        Migration("idempotency.3-resume", "ALTER TABLE idempotency_log ADD COLUMN resume TEXT;"),
        // Who minted each key: the subject whose credential asked (for a pairing code's key, the code's maker). Keys
        // from before are null unless a kept pairing code still names its maker's key.
        Migration("auth.2-minted-by", """
            ALTER TABLE api_keys ADD COLUMN minted_by TEXT;
            ALTER TABLE pairing_codes ADD COLUMN created_by_subject TEXT;
            UPDATE pairing_codes SET created_by_subject = (SELECT CASE k.subject WHEN '' THEN 'owner' ELSE k.subject END FROM api_keys k WHERE k.id = pairing_codes.created_by_key);
            UPDATE api_keys SET minted_by = (SELECT c.created_by_subject FROM pairing_codes c WHERE c.redeemed_key = api_keys.id);
            """),
        // What happened during a run beyond its start and end (a provider's call retried), for the run's page.
        Migration("runs.3-events", """
            CREATE TABLE run_events (run_id TEXT NOT NULL, at INTEGER NOT NULL, kind TEXT NOT NULL, detail TEXT NOT NULL);
            CREATE INDEX run_events_run ON run_events (run_id, at);
            """),
        // The web console's sign-ins: a session is the SHA-256 of its cookie's 32 random bytes (never the bytes),
        // the subject and role it acts as and the key that signed in (NULL for a one-time code); a code is an HMAC
        // under a key kept beside the database, since six digits hash back in a million tries.
        Migration("console.1-sessions", """
            CREATE TABLE console_sessions (
                id TEXT PRIMARY KEY,
                token_sha256 BLOB NOT NULL UNIQUE,
                subject TEXT NOT NULL,
                role TEXT NOT NULL CHECK (role IN ('admin', 'operator', 'viewer')),
                key_id TEXT,
                created_at INTEGER NOT NULL,
                last_seen_at INTEGER NOT NULL,
                expires_at INTEGER NOT NULL,
                revoked_at INTEGER
            );
            CREATE INDEX console_sessions_by_key ON console_sessions (key_id);
            CREATE TABLE console_codes (
                code_hmac BLOB PRIMARY KEY,
                subject TEXT NOT NULL,
                role TEXT NOT NULL CHECK (role IN ('admin', 'operator', 'viewer')),
                created_at INTEGER NOT NULL,
                expires_at INTEGER NOT NULL,
                used_at INTEGER
            );
            """),
        // Each scheduled fire, once: the row is written in the transaction that records the run it starts, so of
        // several gateways on one database (or a restart racing its own replay) exactly one runs it.
        Migration("runs.4-fires", """
            CREATE TABLE schedule_fires (
                agent_id TEXT NOT NULL,
                fire_at INTEGER NOT NULL,
                run_id TEXT NOT NULL,
                PRIMARY KEY (agent_id, fire_at)
            );
            """),
        // A person's waiting approvals counted before each ask from the index alone: an approval nobody waited on
        // stays `pending` past its expiry, and the count must not read those rows (nor their arguments).
        Migration("approvals.2-pending-by-expiry", "CREATE INDEX approvals_waiting ON approvals (subject, state, expires_at);"),
        // Each person's memory feed floor: the newest cursor whose tombstones housekeeping has compacted away.
        Migration("memory.4-feed-floors", "CREATE TABLE memory_feed_floors (subject TEXT PRIMARY KEY, cursor INTEGER NOT NULL);"),
    ]

    /// The whole database of a gateway: the mobile channel's tables, then the gateway's. A duplicate id is an error
    /// here, before anything is opened.
    public static func migrator() throws(MigrationError) -> DatabaseMigrator {
        var migrator = DatabaseMigrator()
        try migrator.register(MobileSchema.migrations)
        try migrator.register(migrations)
        try migrator.register(ChannelOutboxSchema.migrations)
        try migrator.register(SQLiteChannelInboundStore.migrations)
        return migrator
    }
}
