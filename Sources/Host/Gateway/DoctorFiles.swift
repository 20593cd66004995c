import Foundation
import Glibc
import SQLite

/// The doctor's look at the data directory: who owns what and who may read it, and the database's health. Nothing
/// here writes: modes are read with lstat, the database through a read-only connection.
enum DoctorFiles {
    /// What the gateway keeps in its data directory, to say what an offender is.
    static let knownFiles: [String: String] = [
        "soulacy.db": "the database", "soulacy.db-wal": "the database's write-ahead log", "soulacy.db-shm": "the database's shared-memory index",
        "tls/gateway.key": "the TLS private key", "tls/gateway.crt": "the TLS certificate",
        "relay-secrets.key": "the key that seals the relay pairing secrets",
        "webpush-vapid-key.pem": "the Web Push VAPID key", "webpush-subscriptions.key": "the key that seals browsers' push subscriptions",
    ]
    /// More offenders than this are counted, not listed.
    static let listedOffenders = 40

    static func userName(_ uid: uid_t) -> String {
        guard let entry = getpwuid(uid), let name = entry.pointee.pw_name else { return "uid \(uid)" }
        return String(cString: name)
    }

    static func octal(_ mode: mode_t) -> String { "0" + String(mode & 0o7777, radix: 8) }

    /// The data directory 0700 and everything in it owner-only (files 0600, directories 0700), all owned by `userID`.
    static func permissions(dataDirectory: String, userID: uid_t) -> [DoctorFinding] {
        let check = "permissions"
        let me = userName(userID)
        var info = stat()
        guard stat(dataDirectory, &info) == 0 else {
            return [DoctorFinding(.fail, check, "no data directory at \(dataDirectory): \(String(cString: strerror(errno)))",
                                  fix: "--data must name the directory `soulacy serve --data` uses (the default is .soulacy)")]
        }
        guard info.st_mode & S_IFMT == S_IFDIR else {
            return [DoctorFinding(.fail, check, "\(dataDirectory) is not a directory", fix: "--data must name the gateway's data directory")]
        }
        var offenders: [DoctorFinding] = []
        func judge(_ path: String, _ info: stat, directory: Bool) {
            let relative = path == dataDirectory ? "" : String(path.dropFirst(dataDirectory.count + 1))
            let what = relative.isEmpty ? "the data directory" : knownFiles[relative] ?? (directory ? "a directory" : "a file")
            let quoted = shellQuoted(path)
            if info.st_uid != userID {
                offenders.append(DoctorFinding(.fail, check, "\(path) (\(what)) is owned by \(userName(info.st_uid)), not by \(me), who runs this",
                                               fix: "run soulacy doctor as the user the gateway runs as, or: chown \(me) \(quoted)"))
            }
            let mode = info.st_mode & 0o7777
            let wanted: mode_t = directory ? 0o700 : 0o600
            if mode & 0o077 != 0 {
                let who = mode & 0o007 != 0 ? "everyone on this machine" : "its group"
                offenders.append(DoctorFinding(.fail, check, "\(path) (\(what)) has mode \(octal(mode)): \(who) may \(directory ? "list and enter" : "read") it",
                                               fix: "chmod \(String(wanted, radix: 8)) \(quoted)"))
            } else if mode & wanted != wanted {
                // Owner-only but not usable by the gateway (a key made read-only is fine; a database it cannot write is not).
                let needsWrite = directory || relative.hasPrefix("soulacy.db")
                if needsWrite || mode & 0o400 == 0 {
                    offenders.append(DoctorFinding(.fail, check, "\(path) (\(what)) has mode \(octal(mode)): the gateway cannot \(directory ? "use" : needsWrite ? "write" : "read") it",
                                                   fix: "chmod \(String(wanted, radix: 8)) \(quoted)"))
                }
            }
        }
        judge(dataDirectory, info, directory: true)
        var files = 0, directories = 0, warnings: [DoctorFinding] = []
        if let walker = FileManager.default.enumerator(atPath: dataDirectory) {
            while let relative = walker.nextObject() as? String {
                let path = dataDirectory + "/" + relative
                var entry = stat()
                guard lstat(path, &entry) == 0 else { continue }
                switch entry.st_mode & S_IFMT {
                case S_IFDIR:
                    directories += 1
                    judge(path, entry, directory: true)
                case S_IFREG:
                    files += 1
                    judge(path, entry, directory: false)
                case S_IFLNK:
                    warnings.append(DoctorFinding(.warn, check, "\(path) is a symbolic link (not followed; the gateway makes none)",
                                                  fix: "put the file itself there, owner-only, or remove the link"))
                default:
                    warnings.append(DoctorFinding(.warn, check, "\(path) is neither a file nor a directory (the gateway makes none)"))
                }
            }
        } else {
            return [DoctorFinding(.fail, check, "cannot list \(dataDirectory)", fix: "run soulacy doctor as the user the gateway runs as")]
        }
        var findings = Array(offenders.prefix(listedOffenders))
        if offenders.count > listedOffenders {
            findings.append(DoctorFinding(.fail, check, "and \(offenders.count - listedOffenders) more like these",
                                          fix: "chmod -R go-rwx \(shellQuoted(dataDirectory)) and chown -R \(me) \(shellQuoted(dataDirectory))"))
        }
        findings += warnings
        if offenders.isEmpty {
            findings.insert(DoctorFinding(.ok, check, "\(dataDirectory): mode \(octal(info.st_mode)), owned by \(me); its \(files) file(s) and "
                                              + "\(directories) directory(ies) are all owner-only"), at: 0)
        }
        return findings
    }

    /// A path as a shell takes it in a fix line, quoted only when it needs to be.
    static func shellQuoted(_ path: String) -> String {
        let plain = CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+:@%")
        if !path.isEmpty, path.unicodeScalars.allSatisfy(plain.contains) { return path }
        return "'" + path.replacingOccurrences(of: "'", with: "'\\''") + "'"
    }

    /// `PRAGMA integrity_check` on a read-only connection, and the schema's migrations against this binary's list.
    static func database(dataDirectory: String) -> [DoctorFinding] {
        let path = dataDirectory + "/" + DataBackup.databaseName
        let restore = "stop the gateway and restore the latest backup into a new directory (soulacy restore BACKUP --data NEW_DIR), "
            + "or salvage what is readable with: sqlite3 \(shellQuoted(path)) .recover"
        guard FileManager.default.fileExists(atPath: path) else {
            return [DoctorFinding(.fail, "database", "no database at \(path)",
                                  fix: "--data must name the gateway's data directory; a new one gets its database at the first soulacy serve")]
        }
        // Read-only: a running gateway's WAL is read as it stands, and nothing is checkpointed or changed.
        let connection: Connection
        do { connection = try Connection(path: path, readOnly: true) } catch {
            return [DoctorFinding(.fail, "database", "cannot open \(path): \(error.message)", fix: restore)]
        }
        defer { connection.close() }
        var findings: [DoctorFinding] = []
        do {
            let result = try connection.integrityCheck()
            if result == "ok" {
                let megabytes = (try? connection.databaseBytes()).map { String(format: ", %.1f MB", Double($0) / 1_048_576) } ?? ""
                findings.append(DoctorFinding(.ok, "database", "\(path): PRAGMA integrity_check ok\(megabytes)"))
            } else {
                let lines = result.split(separator: "\n")
                let shown = lines.prefix(3).joined(separator: "; ") + (lines.count > 3 ? "; and \(lines.count - 3) more" : "")
                findings.append(DoctorFinding(.fail, "database", "\(path) fails SQLite's integrity check: \(shown)", fix: restore))
            }
        } catch {
            return [DoctorFinding(.fail, "database", "\(path) cannot be read: \(error.message)", fix: restore)]
        }
        findings.append(migrations(connection, path: path))
        return findings
    }

    static func migrations(_ connection: Connection, path: String) -> DoctorFinding {
        let migrator: DatabaseMigrator
        do { migrator = try GatewaySchema.migrator() } catch {
            return DoctorFinding(.fail, "migrations", "this soulacy's own migrations are inconsistent: \(error)")
        }
        let status: MigrationStatus
        do {
            guard let found = try migrator.status(connection) else {
                return DoctorFinding(.fail, "migrations", "\(path) has no schema_migrations table: it is not a soulacy database, or its first start failed",
                                     fix: "--data must name the gateway's data directory")
            }
            status = found
        } catch {
            return DoctorFinding(.fail, "migrations", "cannot read schema_migrations: \(error.message)")
        }
        return migrationsFinding(missing: status.missing, unknown: status.unknown, total: migrator.migrations.count,
                                 newerFix: "run the newer soulacy again, or restore a backup this version took",
                                 olderFix: "restart the gateway with this soulacy (a backup first: soulacy backup --data DIR DEST)")
    }

    /// What the database's migrations say, on either engine: some unknown to this binary (a newer one wrote it) is a
    /// FAIL, some not applied yet a WARN (the next start applies them).
    static func migrationsFinding(missing: [String], unknown: [String], total: Int, newerFix: String, olderFix: String) -> DoctorFinding {
        if !unknown.isEmpty {
            return DoctorFinding(.fail, "migrations", "the database has \(unknown.count) migration(s) this soulacy (\(GatewayVersion.current)) does not know "
                                 + "(\(unknown.prefix(5).joined(separator: ", "))): a newer soulacy wrote it", fix: newerFix)
        }
        if !missing.isEmpty {
            return DoctorFinding(.warn, "migrations", "\(missing.count) of \(total) migrations not applied yet "
                                 + "(\(missing.prefix(5).joined(separator: ", "))\(missing.count > 5 ? ", …" : "")): the next soulacy serve applies them",
                                 fix: olderFix)
        }
        return DoctorFinding(.ok, "migrations", "all \(total) migrations applied")
    }
}
