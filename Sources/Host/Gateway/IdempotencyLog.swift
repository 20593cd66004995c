import ChannelAPI
import Foundation
import HTTPServer
import Identity
import SQLite
import Synchronization

/// Answers a replayed mutating call from its log: one key per intent, whichever path (Wi-Fi, tailnet, relay)
/// carried it, across restarts. The first answer is kept with its status and body; 5xx answers are not kept,
/// so a retry after a failure really runs again.
public final class IdempotencyLog: Sendable {
    public static let header = "idempotency-key"
    public static let migrations: [Migration] = [
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
    ]

    let database: DatabasePool
    let clock: any WallClock
    private let inFlight = Mutex<Set<String>>([])

    public init(database: DatabasePool, clock: any WallClock = SystemWallClock()) throws {
        self.database = database
        self.clock = clock
        try database.migrate(Self.migrations)
    }

    /// Forgets answers recorded before `cutoff`: a retry after that is applied again.
    @discardableResult
    public func forget(before cutoff: Date) throws -> Int {
        try database.deleteInBatches(from: "idempotency_log", where: "created_at < ?", arguments: [cutoff.sqliteMillis])
    }

    static func isMutating(_ method: String) -> Bool { ["POST", "PUT", "PATCH", "DELETE"].contains(method) }

    /// Runs `handle` once per (caller, key); a replay gets the stored answer with `Idempotent-Replayed: true`.
    /// `principal` is asked only for a mutating call that carries a key (reads pay nothing here).
    public func answer(_ request: HTTPRequest, principal: @autoclosure () -> Principal?, handle: @Sendable (HTTPRequest) async -> HTTPResponse) async -> HTTPResponse {
        guard Self.isMutating(request.method), let key = request.header(Self.header), let principal = principal() else { return await handle(request) }
        guard (1...200).contains(key.utf8.count), key.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F }) else {
            return APIError.invalidField("Idempotency-Key", "must be 1 to 200 visible ASCII characters").response
        }
        // The key is the phone's (its API key), not the person's: two phones never collide.
        let scope = principal.keyID
        let slot = scope + "\u{0}" + key
        while !inFlight.withLock({ $0.insert(slot).inserted }) {
            try? await Task.sleep(for: .milliseconds(10))
        }
        defer { _ = inFlight.withLock { $0.remove(slot) } }
        if let stored = try? database.read({ db in
            try db.query("SELECT method, path, status, content_type, body FROM idempotency_log WHERE scope = ? AND idempotency_key = ?", scope, key).first
        }) {
            guard stored.string("method") == request.method, stored.string("path") == request.path else {
                return APIError.conflict("Idempotency-Key: this key was used for \(stored.string("method") ?? "") \(stored.string("path") ?? ""); use a new key for a new intent",
                                         code: "idempotency_key_reused").response
            }
            var headers = [("Idempotent-Replayed", "true")]
            if let type = stored.string("content_type") { headers.append(("Content-Type", type)) }
            return HTTPResponse(status: Int(stored.int("status") ?? 200), headers: headers, body: stored.blob("body") ?? [])
        }
        let response = await handle(request)
        if response.status < 500 {
            // Not recorded (the disk is full, say): a retry is applied again, as a call without a key would be.
            _ = try? database.transaction { db in
                try db.run("INSERT OR IGNORE INTO idempotency_log (scope, idempotency_key, method, path, status, content_type, body, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                           scope, key, request.method, request.path, response.status, response.header("content-type"), response.body,
                           clock.now().sqliteMillis)
            }
        }
        return response
    }
}
