import Crypto
import Foundation
import SQLite

/// What the relay carriage keeps: the gateway's mailbox at the relay, and each enrolled phone's pairing secret,
/// registration and the last inbox line sent to it. The two secrets (each phone's pairing secret, the mailbox's
/// bearer) are kept sealed (AES-256-GCM) under a key that lives in a file beside the database, never in it: the
/// database alone gives neither back.
struct RelayCarriageStore: Sendable {
    struct Device: Sendable {
        let id: String
        let subject: String
        let secret: [UInt8]
        let lastSeq: Int64
        let registered: Bool
        let revoked: Bool
    }

    let database: DatabasePool
    /// The sealing key, from the key file (see `SealingKeyFile`).
    let key: [UInt8]

    /// Opens the store and seals any secret an earlier version kept in the clear.
    init(database: DatabasePool, key: [UInt8]) throws {
        self.database = database
        self.key = key
        try sealLegacySecrets()
    }

    static let mailboxHeader = "soulacy relay mailbox bearer v1"
    static func secretHeader(_ deviceID: String) -> String { "soulacy relay pairing secret v1 " + deviceID }

    func mailbox(url: String) throws -> (id: String, bearer: String)? {
        try database.read { db in
            guard let row = try db.query("SELECT mailbox_id, bearer FROM relay_mailbox WHERE id = 1 AND url = ?", url).first,
                  let id = row.string("mailbox_id"), let sealed = row.string("bearer"),
                  let bearer = try? SealedBox.open(sealed, key: key, header: Self.mailboxHeader) else { return nil }
            return (id, String(decoding: bearer, as: UTF8.self))
        }
    }

    func saveMailbox(url: String, id: String, bearer: String) throws {
        let sealed = try SealedBox.seal(Array(bearer.utf8), key: key, header: Self.mailboxHeader)
        try database.transaction { db in
            try db.run("INSERT OR REPLACE INTO relay_mailbox (id, url, mailbox_id, bearer) VALUES (1, ?, ?, ?)", url, id, sealed)
        }
    }

    /// A phone's place, its records starting after inbox line `after`.
    func enroll(deviceID: String, subject: String, secret: [UInt8], after: Int64) throws {
        let sealed = Array(try SealedBox.seal(secret, key: key, header: Self.secretHeader(deviceID)).utf8)
        try database.transaction { db in
            try db.run("INSERT OR REPLACE INTO relay_devices (device_id, subject, secret, last_seq, registered) VALUES (?, ?, ?, ?, 0)", deviceID, subject, sealed, after)
        }
    }

    private func open(_ stored: [UInt8], deviceID: String) -> [UInt8]? {
        try? SealedBox.open(String(decoding: stored, as: UTF8.self), key: key, header: Self.secretHeader(deviceID))
    }

    /// Earlier versions kept the 32-byte pairing secrets and the mailbox bearer in the clear: seal them in place.
    private func sealLegacySecrets() throws {
        let sealedAny = try database.transaction { db -> Bool in
            var sealedAny = false
            for row in try db.query("SELECT device_id, secret FROM relay_devices") {
                guard let id = row.string("device_id"), let stored = row.blob("secret"), stored.count == 32 else { continue }
                let sealed = Array(try SealedBox.seal(stored, key: key, header: Self.secretHeader(id)).utf8)
                try db.run("UPDATE relay_devices SET secret = ? WHERE device_id = ?", sealed, id)
                sealedAny = true
            }
            if let bearer = try db.query("SELECT bearer FROM relay_mailbox WHERE id = 1").first?.string("bearer"),
               (try? SealedBox.open(bearer, key: key, header: Self.mailboxHeader)) == nil, bearer.utf8.count == 43, Base64URL.decode(bearer) != nil {
                try db.run("UPDATE relay_mailbox SET bearer = ? WHERE id = 1", try SealedBox.seal(Array(bearer.utf8), key: key, header: Self.mailboxHeader))
                sealedAny = true
            }
            return sealedAny
        }
        // The clear versions are still in the WAL's older frames until it is emptied.
        if sealedAny { try database.write { try $0.checkpointAndTruncate() } }
    }

    func markRegistered(_ deviceID: String) throws {
        try database.transaction { db in try db.run("UPDATE relay_devices SET registered = 1 WHERE device_id = ?", deviceID) }
    }

    func markRevoked(_ deviceID: String) throws {
        try database.transaction { db in try db.run("UPDATE relay_devices SET revoked = 1 WHERE device_id = ? AND revoked = 0", deviceID) }
    }

    /// Forgets a revoked phone (once the relay has dropped it too).
    func forgetRevoked(_ deviceID: String) throws {
        try database.transaction { db in try db.run("DELETE FROM relay_devices WHERE device_id = ? AND revoked = 1", deviceID) }
    }

    func devices() throws -> [Device] {
        try database.read { db in
            try db.query("SELECT * FROM relay_devices").compactMap { row in
                guard let id = row.string("device_id"), let stored = row.blob("secret"), let secret = open(stored, deviceID: id),
                      let subject = row.string("subject") else { return nil }
                return Device(id: id, subject: subject, secret: secret, lastSeq: row.int("last_seq") ?? 0,
                              registered: row.bool("registered") == true, revoked: row.bool("revoked") == true)
            }
        }
    }

    func secret(deviceID: String) throws -> [UInt8]? {
        try database.read { db in try db.query("SELECT secret FROM relay_devices WHERE device_id = ?", deviceID).first?.blob("secret") }
            .flatMap { open($0, deviceID: deviceID) }
    }

    /// The last inbox line sent to the phone.
    func advance(_ deviceID: String, to seq: Int64) throws {
        try database.transaction { db in try db.run("UPDATE relay_devices SET last_seq = ? WHERE device_id = ?", seq, deviceID) }
    }
}
