import Foundation
import Gateway
import PostgreSQL

/// `soulacy backup` and `soulacy restore`: the data directory's online copy and its way back (DataBackup).
extension SoulacyCommand {
    /// The one argument that is not an option (`DEST`, `SRC`), and the options around it.
    static func splitPositional(_ arguments: [String], allowed: Set<String>, name: String) -> (String, [String: String]) {
        var rest = arguments
        guard let index = rest.indices.first(where: { !rest[$0].hasPrefix("--") && ($0 == 0 || !rest[$0 - 1].hasPrefix("--")) }) else {
            fail("\(name) is required\n\(usage)", code: 64)
        }
        let value = rest.remove(at: index)
        return (value, options(rest, allowed: allowed))
    }

    /// The gateway's PostgreSQL URL, as `soulacy serve` reads it (systemd credentials included); nil on SQLite.
    static func databaseURL() -> String? {
        let url = SystemdCredentials.apply(to: ProcessInfo.processInfo.environment)["SOULACY_DATABASE_URL"]
        return url?.isEmpty == false ? url : nil
    }

    static func backup(_ arguments: [String]) async {
        let (destination, opts) = splitPositional(arguments, allowed: ["data"], name: "DEST (a new directory for the backup)")
        let data = opts["data"] ?? ".soulacy"
        do {
            if let url = databaseURL() {
                let manifest = try await DataBackupPostgres.take(url: url, dataDirectory: data, to: destination)
                let bytes = manifest.files.reduce(0) { $0 + $1.bytes }
                print("backup of the gateway on \(PostgresURL.redacted(url)) and of \(data) in \(destination): \(manifest.files.count) files, \(bytes) bytes, "
                      + "the database as one pg_dump archive (read back with pg_restore --list)")
                print("restore it with: SOULACY_DATABASE_URL=postgres://…/NEW_EMPTY_DATABASE soulacy restore \(destination) --data NEW_DIRECTORY")
                return
            }
            let manifest = try DataBackup.take(dataDirectory: data, to: destination)
            let bytes = manifest.files.reduce(0) { $0 + $1.bytes }
            print("backup of \(data) in \(destination): \(manifest.files.count) files, \(bytes) bytes, database checked (PRAGMA integrity_check ok)")
            print("restore it with: soulacy restore \(destination) --data NEW_DIRECTORY")
        } catch {
            fail("soulacy backup: \(error)")
        }
    }

    static func restore(_ arguments: [String]) async {
        let (source, opts) = splitPositional(arguments, allowed: ["data"], name: "SRC (a directory made by soulacy backup)")
        guard let data = opts["data"] else { fail("soulacy restore: --data DIR is required (a new or empty directory)", code: 64) }
        do {
            // A backup made on PostgreSQL goes back into PostgreSQL (the URL names the empty target database).
            if let url = databaseURL(), FileManager.default.fileExists(atPath: source + "/" + DataBackupPostgres.dumpName) {
                let manifest = try await DataBackupPostgres.restore(from: source, into: data, url: url)
                print("restored the backup of \(manifest.takenAt) into \(PostgresURL.redacted(url)) and \(data); start the nodes with that "
                      + "SOULACY_DATABASE_URL and: soulacy serve --data \(data) …")
                return
            }
            let manifest = try DataBackup.restore(from: source, into: data)
            print("restored \(manifest.files.count) files from the backup of \(manifest.takenAt) into \(data); start it with: soulacy serve --data \(data) …")
        } catch {
            fail("soulacy restore: \(error)")
        }
    }
}
