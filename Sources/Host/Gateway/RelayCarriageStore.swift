import Foundation
import SQLite

/// What the relay carriage keeps: the gateway's mailbox at the relay, and each enrolled phone's pairing secret,
/// registration and the last inbox line sent to it.
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

    func mailbox(url: String) throws -> (id: String, bearer: String)? {
        try database.read { db in
            guard let row = try db.query("SELECT mailbox_id, bearer FROM relay_mailbox WHERE id = 1 AND url = ?", url).first,
                  let id = row.string("mailbox_id"), let bearer = row.string("bearer") else { return nil }
            return (id, bearer)
        }
    }

    func saveMailbox(url: String, id: String, bearer: String) throws {
        try database.transaction { db in
            try db.run("INSERT OR REPLACE INTO relay_mailbox (id, url, mailbox_id, bearer) VALUES (1, ?, ?, ?)", url, id, bearer)
        }
    }

    /// A phone's place, its records starting after inbox line `after`.
    func enroll(deviceID: String, subject: String, secret: [UInt8], after: Int64) throws {
        try database.transaction { db in
            try db.run("INSERT OR REPLACE INTO relay_devices (device_id, subject, secret, last_seq, registered) VALUES (?, ?, ?, ?, 0)", deviceID, subject, secret, after)
        }
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
                guard let id = row.string("device_id"), let secret = row.blob("secret"), let subject = row.string("subject") else { return nil }
                return Device(id: id, subject: subject, secret: secret, lastSeq: row.int("last_seq") ?? 0,
                              registered: row.bool("registered") == true, revoked: row.bool("revoked") == true)
            }
        }
    }

    func secret(deviceID: String) throws -> [UInt8]? {
        try database.read { db in try db.query("SELECT secret FROM relay_devices WHERE device_id = ?", deviceID).first?.blob("secret") }
    }

    /// The last inbox line sent to the phone.
    func advance(_ deviceID: String, to seq: Int64) throws {
        try database.transaction { db in try db.run("UPDATE relay_devices SET last_seq = ? WHERE device_id = ?", seq, deviceID) }
    }
}
