import SQLite

/// Every table of the mobile channel (devices, inbox lines, recipients and receipts, the push outbox, Live Activity
/// tokens, device nodes and their commands), as one ordered list: the one file to open to change the inbox schema.
/// Ids never change once shipped and a migration's SQL never changes: add a new one at the end.
public enum MobileSchema {
    public static let migrations: [Migration] = [
        Migration("mobile.1-inbox", """
            CREATE TABLE mobile_devices (
                id TEXT PRIMARY KEY,
                subject TEXT NOT NULL,
                name TEXT NOT NULL,
                platform TEXT NOT NULL CHECK (platform IN ('ios', 'android')),
                bundle_id TEXT NOT NULL,
                push_token TEXT,
                push_environment TEXT,
                notifications_enabled INTEGER NOT NULL,
                live_start_token TEXT,
                created_at INTEGER NOT NULL,
                updated_at INTEGER NOT NULL
            );
            CREATE INDEX mobile_devices_by_subject ON mobile_devices (subject);
            CREATE TABLE mobile_deliveries (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                id TEXT NOT NULL UNIQUE,
                destination TEXT NOT NULL,
                destination_kind TEXT NOT NULL CHECK (destination_kind IN ('all', 'user', 'device')),
                destination_value TEXT NOT NULL,
                agent_id TEXT NOT NULL,
                agent_name TEXT NOT NULL,
                session_id TEXT NOT NULL,
                title TEXT NOT NULL,
                body TEXT NOT NULL,
                parts TEXT NOT NULL,
                metadata TEXT NOT NULL,
                created_at INTEGER NOT NULL
            );
            CREATE INDEX mobile_deliveries_by_destination ON mobile_deliveries (destination_kind, destination_value, seq);
            CREATE TABLE mobile_delivery_recipients (
                delivery_id TEXT NOT NULL REFERENCES mobile_deliveries (id) ON DELETE CASCADE,
                device_id TEXT NOT NULL,
                PRIMARY KEY (delivery_id, device_id)
            );
            CREATE TABLE mobile_receipts (
                delivery_id TEXT NOT NULL REFERENCES mobile_deliveries (id) ON DELETE CASCADE,
                device_id TEXT NOT NULL,
                read_at INTEGER NOT NULL,
                PRIMARY KEY (delivery_id, device_id)
            );
            CREATE INDEX mobile_receipts_by_device ON mobile_receipts (device_id);
            """),
        Migration("mobile.2-push-outbox", """
            CREATE TABLE mobile_push_outbox (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                wake_id TEXT NOT NULL UNIQUE,
                delivery_id TEXT,
                device_id TEXT NOT NULL,
                signal TEXT NOT NULL,
                state TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'sent', 'failed', 'skipped')),
                attempts INTEGER NOT NULL DEFAULT 0,
                next_attempt_at INTEGER NOT NULL,
                expires_at INTEGER NOT NULL,
                lease_owner TEXT,
                lease_until INTEGER,
                transport TEXT,
                outcome TEXT,
                created_at INTEGER NOT NULL,
                finished_at INTEGER
            );
            CREATE INDEX mobile_push_outbox_due ON mobile_push_outbox (state, next_attempt_at);
            CREATE INDEX mobile_push_outbox_by_delivery ON mobile_push_outbox (delivery_id);
            """),
        // Which API key registered a device, so revoking that key unpairs the phone.
        Migration("mobile.3-device-key", "ALTER TABLE mobile_devices ADD COLUMN registered_by_key TEXT"),
        Migration("mobile.4-live-activities", """
            CREATE TABLE mobile_live_activities (
                device_id TEXT NOT NULL,
                session_id TEXT NOT NULL,
                agent_id TEXT NOT NULL,
                token TEXT NOT NULL,
                environment TEXT NOT NULL,
                created_at INTEGER NOT NULL,
                PRIMARY KEY (device_id, session_id)
            );
            CREATE INDEX mobile_live_activities_by_session ON mobile_live_activities (session_id);
            """),
        // What the app has switched on (canvas, …), as a JSON array.
        Migration("mobile.5-capabilities", "ALTER TABLE mobile_devices ADD COLUMN capabilities TEXT NOT NULL DEFAULT '[]'"),
        // A `device:` line belongs to the person who owned the device when it was written: a device id reused
        // by someone else later must not show them the line. (Older lines: the owner of a registration at least
        // as old as the line; lines older than the device's current registration belong to no one.) Receipts go
        // with their device, so the unread count is a difference of two index counts instead of a lookup per line.
        Migration("mobile.6-line-owner", """
            ALTER TABLE mobile_deliveries ADD COLUMN destination_subject TEXT;
            UPDATE mobile_deliveries SET destination_subject = destination_value WHERE destination_kind = 'user';
            UPDATE mobile_deliveries SET destination_subject = (SELECT subject FROM mobile_devices m
                    WHERE m.id = destination_value AND m.created_at <= mobile_deliveries.created_at)
                WHERE destination_kind = 'device';
            DELETE FROM mobile_receipts WHERE device_id NOT IN (SELECT id FROM mobile_devices);
            DELETE FROM mobile_receipts WHERE rowid IN (
                SELECT r.rowid FROM mobile_receipts r
                JOIN mobile_deliveries d ON d.id = r.delivery_id JOIN mobile_devices m ON m.id = r.device_id
                WHERE d.agent_id = 'system' OR (d.destination_kind = 'user' AND d.destination_value <> m.subject)
                   OR (d.destination_kind = 'device' AND (d.destination_value <> m.id OR d.destination_subject IS NOT m.subject)));
            DROP INDEX mobile_deliveries_by_destination;
            CREATE INDEX mobile_deliveries_visible ON mobile_deliveries (destination_kind, destination_value, seq, agent_id, destination_subject);
            """),
        // The first command protocol's table; its rows move into the node queue below (mobile.9).
        Migration("mobile.6-device-commands", """
            CREATE TABLE mobile_device_commands (
                id TEXT PRIMARY KEY,
                device_id TEXT NOT NULL,
                subject TEXT NOT NULL,
                command TEXT NOT NULL,
                params TEXT NOT NULL,
                waits INTEGER NOT NULL,
                state TEXT NOT NULL CHECK (state IN ('queued', 'delivered', 'completed', 'expired')),
                result TEXT,
                created_at INTEGER NOT NULL,
                expires_at INTEGER NOT NULL,
                completed_at INTEGER
            );
            CREATE INDEX mobile_device_commands_by_device ON mobile_device_commands (device_id, state);
            """),
        // Parts as the original app decodes them: objects `{"type": "text", "text": …}`, never bare strings.
        Migration("mobile.7-part-objects", """
            UPDATE mobile_deliveries SET parts = (SELECT json_group_array(json_object('type', 'text', 'text', value)) FROM json_each(mobile_deliveries.parts))
                WHERE json_valid(parts) AND json_type(parts) = 'array' AND json_type(parts, '$[0]') = 'text';
            """),
        Migration("mobile.8-nodes", """
            CREATE TABLE mobile_nodes (
                device_id TEXT PRIMARY KEY,
                subject TEXT NOT NULL,
                name TEXT NOT NULL,
                platform TEXT NOT NULL,
                model TEXT NOT NULL,
                os_version TEXT NOT NULL,
                app_version TEXT NOT NULL,
                capabilities TEXT NOT NULL,
                permissions TEXT NOT NULL,
                updated_at INTEGER NOT NULL
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
                error TEXT,
                created_at INTEGER NOT NULL,
                expires_at INTEGER NOT NULL,
                completed_at INTEGER,
                PRIMARY KEY (device_id, id)
            );
            CREATE INDEX mobile_node_commands_queued ON mobile_node_commands (device_id, status, created_at);
            """),
        // One command protocol: the first one's commands join the node queue (a fetched one is still waiting for
        // its answer, so it is queued again), and devices with the canvas capability become canvas nodes.
        Migration("mobile.9-one-command-queue", """
            INSERT OR IGNORE INTO mobile_node_commands (id, device_id, subject, command, params, status, result, created_at, expires_at, completed_at)
                SELECT id, device_id, subject, command, params, CASE state WHEN 'delivered' THEN 'queued' ELSE state END, result,
                       created_at, expires_at, completed_at FROM mobile_device_commands;
            DROP TABLE mobile_device_commands;
            """),
        // Browsers as devices (Web Push): `web` joins the platforms. SQLite changes a CHECK only by rebuilding the
        // table: every column and the index come back as they were, rows copied whole (nothing references the
        // table, so no foreign key is touched). A browser's push_token is its subscription sealed under the key in
        // the data directory (`WebPushKeys`), never the endpoint or the auth secret in the clear. The INSERT names
        // every column mobile_devices has after mobile.9: a migration adding a column must come after this one.
        Migration("mobile.webpush-1-web-devices", """
            CREATE TABLE mobile_devices_rebuilt (
                id TEXT PRIMARY KEY,
                subject TEXT NOT NULL,
                name TEXT NOT NULL,
                platform TEXT NOT NULL CHECK (platform IN ('ios', 'android', 'web')),
                bundle_id TEXT NOT NULL,
                push_token TEXT,
                push_environment TEXT,
                notifications_enabled INTEGER NOT NULL,
                live_start_token TEXT,
                created_at INTEGER NOT NULL,
                updated_at INTEGER NOT NULL,
                registered_by_key TEXT,
                capabilities TEXT NOT NULL DEFAULT '[]'
            );
            INSERT INTO mobile_devices_rebuilt (id, subject, name, platform, bundle_id, push_token, push_environment, notifications_enabled,
                                                live_start_token, created_at, updated_at, registered_by_key, capabilities)
                SELECT id, subject, name, platform, bundle_id, push_token, push_environment, notifications_enabled,
                       live_start_token, created_at, updated_at, registered_by_key, capabilities FROM mobile_devices;
            DROP TABLE mobile_devices;
            ALTER TABLE mobile_devices_rebuilt RENAME TO mobile_devices;
            CREATE INDEX mobile_devices_by_subject ON mobile_devices (subject);
            """),
        // Each line's path to each phone, append-only: wake-up queued (with its transport), every attempt (the
        // service's status, reason, id and latency), retry scheduled, token rejected, sent, failed, skipped, fetched.
        // Written in the transactions that settle outbox rows (a wake-up's first settle also writes its `queued`, so
        // storing a line writes no more rows than before, but a `skipped` for a phone it cannot wake); `stored` is the
        // line's own row and `read` is mobile_receipts. A row without a delivery is a wake-up for no line (an
        // approval, a command, a test push). A device fetches a line once: the unique index makes a second record a no-op.
        Migration("mobile.10-delivery-events", """
            CREATE TABLE mobile_delivery_events (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                delivery_id TEXT,
                device_id TEXT,
                wake_id TEXT,
                kind TEXT NOT NULL CHECK (kind IN ('stored', 'queued', 'attempt', 'retry_scheduled', 'token_rejected', 'sent',
                                                   'failed', 'skipped', 'fetched')),
                at INTEGER NOT NULL,
                transport TEXT,
                outcome TEXT,
                status INTEGER,
                reason TEXT,
                service_id TEXT,
                latency_ms INTEGER,
                next_attempt_at INTEGER
            );
            CREATE INDEX mobile_delivery_events_by_delivery ON mobile_delivery_events (delivery_id, id);
            CREATE INDEX mobile_delivery_events_wakes_by_device ON mobile_delivery_events (device_id, id)
                WHERE kind IN ('attempt', 'token_rejected');
            CREATE UNIQUE INDEX mobile_delivery_events_fetched_once ON mobile_delivery_events (delivery_id, device_id)
                WHERE kind = 'fetched';
            """),
        // How many times each wake-up was claimed: a settle names the claim it holds, so a holder whose lease ran out
        // and was taken over never settles the row its successor now holds (fencing), even with the same owner name.
        Migration("mobile.11-outbox-claims", "ALTER TABLE mobile_push_outbox ADD COLUMN claims INTEGER NOT NULL DEFAULT 0"),
        // How many lines each feed holds (the System agent's left out, as the inbox leaves them out) and how many
        // lines each phone has read: the unread count becomes a few key lookups instead of a count along a
        // person's whole history, which grew with it (an uncached page at 10^6 lines took twice as long as at
        // 10^3). Kept by triggers in the writing transaction, so a read snapshot's counts agree with its lines. A
        // `device:` line is counted under its owner; other lines under ''. Derived: rebuilt from the rows here, and
        // not copied to PostgreSQL, which counts its own.
        Migration("mobile.12-line-counts", """
            CREATE TABLE mobile_line_counts (
                destination_kind TEXT NOT NULL,
                destination_value TEXT NOT NULL,
                destination_subject TEXT NOT NULL,
                lines INTEGER NOT NULL,
                PRIMARY KEY (destination_kind, destination_value, destination_subject)
            ) WITHOUT ROWID;
            INSERT INTO mobile_line_counts
                SELECT destination_kind, destination_value, CASE destination_kind WHEN 'device' THEN COALESCE(destination_subject, '') ELSE '' END, COUNT(*)
                FROM mobile_deliveries WHERE agent_id <> 'system' GROUP BY 1, 2, 3;
            CREATE TRIGGER mobile_line_counted AFTER INSERT ON mobile_deliveries WHEN NEW.agent_id <> 'system' BEGIN
                INSERT INTO mobile_line_counts VALUES (NEW.destination_kind, NEW.destination_value,
                    CASE NEW.destination_kind WHEN 'device' THEN COALESCE(NEW.destination_subject, '') ELSE '' END, 1)
                    ON CONFLICT DO UPDATE SET lines = lines + 1;
            END;
            CREATE TRIGGER mobile_line_uncounted AFTER DELETE ON mobile_deliveries WHEN OLD.agent_id <> 'system' BEGIN
                UPDATE mobile_line_counts SET lines = lines - 1
                WHERE destination_kind = OLD.destination_kind AND destination_value = OLD.destination_value
                  AND destination_subject = CASE OLD.destination_kind WHEN 'device' THEN COALESCE(OLD.destination_subject, '') ELSE '' END;
            END;
            CREATE TRIGGER mobile_line_recounted AFTER UPDATE OF destination_kind, destination_value, destination_subject, agent_id ON mobile_deliveries BEGIN
                UPDATE mobile_line_counts SET lines = lines - 1
                WHERE OLD.agent_id <> 'system' AND destination_kind = OLD.destination_kind AND destination_value = OLD.destination_value
                  AND destination_subject = CASE OLD.destination_kind WHEN 'device' THEN COALESCE(OLD.destination_subject, '') ELSE '' END;
                INSERT INTO mobile_line_counts SELECT NEW.destination_kind, NEW.destination_value,
                    CASE NEW.destination_kind WHEN 'device' THEN COALESCE(NEW.destination_subject, '') ELSE '' END, 1
                    WHERE NEW.agent_id <> 'system'
                    ON CONFLICT DO UPDATE SET lines = lines + 1;
            END;
            CREATE TABLE mobile_receipt_counts (
                device_id TEXT PRIMARY KEY,
                receipts INTEGER NOT NULL
            ) WITHOUT ROWID;
            INSERT INTO mobile_receipt_counts SELECT device_id, COUNT(*) FROM mobile_receipts GROUP BY device_id;
            CREATE TRIGGER mobile_receipt_counted AFTER INSERT ON mobile_receipts BEGIN
                INSERT INTO mobile_receipt_counts VALUES (NEW.device_id, 1) ON CONFLICT DO UPDATE SET receipts = receipts + 1;
            END;
            CREATE TRIGGER mobile_receipt_uncounted AFTER DELETE ON mobile_receipts BEGIN
                UPDATE mobile_receipt_counts SET receipts = receipts - 1 WHERE device_id = OLD.device_id;
            END;
            """),
        // Each phone's latest wake-up attempt and token rejection, for the console's device list, kept by triggers
        // as the steps are written. It replaces a partial index on the steps by device: with many phones, each
        // settle landed in a leaf page of its own in that index, so a commit of 100 settles wrote about 100 of its
        // pages to the WAL, more the longer the history (after 100,000 settles over 1,000 phones, 6.2 KB of WAL a
        // settle with the index, 1.7 KB with this table). Steps are never updated or deleted, so inserts suffice.
        Migration("mobile.13-device-last-wakes", """
            CREATE TABLE mobile_device_last_wakes (
                device_id TEXT PRIMARY KEY,
                attempt_id INTEGER,
                rejection_id INTEGER
            ) WITHOUT ROWID;
            INSERT INTO mobile_device_last_wakes (device_id, attempt_id, rejection_id)
                SELECT device_id, MAX(CASE kind WHEN 'attempt' THEN id END), MAX(CASE kind WHEN 'token_rejected' THEN id END)
                FROM mobile_delivery_events WHERE kind IN ('attempt', 'token_rejected') AND device_id IS NOT NULL GROUP BY device_id;
            CREATE TRIGGER mobile_device_wake_attempted AFTER INSERT ON mobile_delivery_events
                WHEN NEW.kind = 'attempt' AND NEW.device_id IS NOT NULL BEGIN
                INSERT INTO mobile_device_last_wakes (device_id, attempt_id) VALUES (NEW.device_id, NEW.id)
                    ON CONFLICT (device_id) DO UPDATE SET attempt_id = excluded.attempt_id;
            END;
            CREATE TRIGGER mobile_device_token_rejected AFTER INSERT ON mobile_delivery_events
                WHEN NEW.kind = 'token_rejected' AND NEW.device_id IS NOT NULL BEGIN
                INSERT INTO mobile_device_last_wakes (device_id, rejection_id) VALUES (NEW.device_id, NEW.id)
                    ON CONFLICT (device_id) DO UPDATE SET rejection_id = excluded.rejection_id;
            END;
            DROP INDEX mobile_delivery_events_wakes_by_device;
            """),
        // Housekeeping finds phone commands long expired along an index, never reading the rows (a result may be 1 MiB).
        Migration("mobile.14-commands-by-expiry", "CREATE INDEX mobile_node_commands_by_expiry ON mobile_node_commands (expires_at);"),
    ]
}
