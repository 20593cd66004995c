import ChannelAPI
import Crypto
import Foundation
import Glibc
import JSON
import SQLite

/// What went wrong taking or restoring a backup, in words that say what to do.
public struct DataBackupError: Error, Sendable, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}

/// Online, consistent copies of a gateway's data directory, and their restore.
///
/// The database is copied with `VACUUM INTO` inside one read transaction: a snapshot of one commit, taken while the
/// gateway goes on writing (WAL lets a reader and the writer work side by side), never a torn copy of the file
/// and its WAL. Every other file of the directory (the TLS identity, the relay-secrets key, the keys channels and
/// transports keep) is copied beside it, and a manifest records each file's SHA-256 so a restore notices a damaged
/// backup. Everything written is owner-only: files 0600, directories 0700.
public enum DataBackup {
    public static let databaseName = "soulacy.db"
    public static let manifestName = "MANIFEST.json"

    /// One file of a backup, as the manifest lists it.
    public struct Entry: Codable, Sendable, Equatable {
        public var path: String
        public var bytes: Int
        public var sha256: String
    }

    public struct Manifest: Codable, Sendable {
        public var format = 1
        public var version: String
        public var takenAt: String
        public var files: [Entry]
        /// `postgresql` for a gateway on PostgreSQL (its database as a `pg_dump` archive); absent for SQLite.
        public var engine: String?

        init(version: String, takenAt: String, files: [Entry]) {
            self.version = version
            self.takenAt = takenAt
            self.files = files
        }

        enum CodingKeys: String, CodingKey {
            case format, version, files, engine
            case takenAt = "taken_at"
        }
    }

    /// Copies `dataDirectory` into `destination`, a directory that must not exist yet (or be empty).
    @discardableResult
    public static func take(dataDirectory: String, to destination: String, now: Date = Date()) throws(DataBackupError) -> Manifest {
        let database = dataDirectory + "/" + databaseName
        guard FileManager.default.fileExists(atPath: database) else {
            throw DataBackupError("no gateway database at \(database); --data names the gateway's data directory")
        }
        try prepareEmptyDirectory(destination)
        var files: [Entry] = []
        do {
            // The snapshot first: its read transaction pins one commit for the whole copy.
            let connection = try Connection(path: database, readOnly: true)
            let target = destination + "/" + databaseName
            try connection.vacuum(into: target)
            chmod(target, 0o600)
            let check = try Connection(path: target, readOnly: true).integrityCheck()
            guard check == "ok" else { throw DataBackupError("the copy of the database failed its integrity check: \(check)") }
            try syncFile(target)
            files.append(try entry(destination, databaseName))
        } catch let error as DataBackupError {
            throw error
        } catch {
            throw DataBackupError("cannot copy the database \(database): \(error)")
        }
        for relative in try otherFiles(in: dataDirectory) {
            try copy(dataDirectory + "/" + relative, to: destination + "/" + relative)
            files.append(try entry(destination, relative))
        }
        let manifest = Manifest(version: GatewayVersion.current, takenAt: now.formatted(.iso8601), files: files.sorted { $0.path < $1.path })
        try write(manifest, to: destination + "/" + manifestName)
        try syncFile(destination)
        return manifest
    }

    /// Restores a backup into `dataDirectory`, which must not exist yet (or be empty): a restore never mixes two
    /// gateways' files. Every file is checked against the manifest, and the database against SQLite's integrity check.
    @discardableResult
    public static func restore(from backup: String, into dataDirectory: String) throws(DataBackupError) -> Manifest {
        let manifest = try verified(backup)
        guard manifest.engine == nil else {
            throw DataBackupError("the backup in \(backup) is of a gateway on PostgreSQL: set SOULACY_DATABASE_URL to a new, empty database to restore it into")
        }
        guard manifest.files.contains(where: { $0.path == databaseName }) else { throw DataBackupError("the backup in \(backup) holds no \(databaseName)") }
        try prepareEmptyDirectory(dataDirectory)
        for file in manifest.files {
            try copy(backup + "/" + file.path, to: dataDirectory + "/" + file.path)
        }
        do {
            let check = try Connection(path: dataDirectory + "/" + databaseName, readOnly: true).integrityCheck()
            guard check == "ok" else { throw DataBackupError("the restored database failed its integrity check: \(check)") }
        } catch let error as DataBackupError {
            throw error
        } catch {
            throw DataBackupError("cannot open the restored database: \(error)")
        }
        try syncFile(dataDirectory)
        return manifest
    }

    /// The backup's manifest, once every file it lists is found unchanged (its size and SHA-256) inside the backup.
    static func verified(_ backup: String) throws(DataBackupError) -> Manifest {
        let manifest: Manifest
        do {
            manifest = try JSONDecoder().decode(Manifest.self, from: Data(contentsOf: URL(fileURLWithPath: backup + "/" + manifestName)))
        } catch {
            throw DataBackupError("\(backup) is not a soulacy backup (its \(manifestName) cannot be read: \(error.localizedDescription))")
        }
        for file in manifest.files {
            guard !file.path.hasPrefix("/"), !file.path.split(separator: "/").contains("..") else {
                throw DataBackupError("the manifest names a path outside the backup: \(file.path)")
            }
            let found = try entry(backup, file.path)
            guard found == file else { throw DataBackupError("\(file.path) in the backup does not match its manifest (damaged or changed)") }
        }
        return manifest
    }

    /// A directory to write into: absent (made 0700) or empty; anything else is refused.
    static func prepareEmptyDirectory(_ path: String) throws(DataBackupError) {
        let files = FileManager.default
        var isDirectory: ObjCBool = false
        if files.fileExists(atPath: path, isDirectory: &isDirectory) {
            guard isDirectory.boolValue else { throw DataBackupError("\(path) exists and is not a directory") }
            let contents = (try? files.contentsOfDirectory(atPath: path)) ?? ["?"]
            guard contents.isEmpty else { throw DataBackupError("\(path) is not empty; give a new directory (nothing in it is touched)") }
            chmod(path, 0o700)
        } else {
            do {
                try files.createDirectory(atPath: path, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            } catch {
                throw DataBackupError("cannot create \(path): \(error.localizedDescription)")
            }
        }
    }

    /// Every regular file under the data directory but the live database's own files, relative, sorted.
    static func otherFiles(in dataDirectory: String) throws(DataBackupError) -> [String] {
        let skipped: Set<String> = [databaseName, databaseName + "-wal", databaseName + "-shm", databaseName + "-journal"]
        guard let walker = FileManager.default.enumerator(atPath: dataDirectory) else { throw DataBackupError("cannot read \(dataDirectory)") }
        var result: [String] = []
        while let relative = walker.nextObject() as? String {
            var info = stat()
            guard lstat(dataDirectory + "/" + relative, &info) == 0, info.st_mode & S_IFMT == S_IFREG, !skipped.contains(relative) else { continue }
            result.append(relative)
        }
        return result.sorted()
    }

    static func copy(_ source: String, to target: String) throws(DataBackupError) {
        let directory = (target as NSString).deletingLastPathComponent
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            let bytes = try Data(contentsOf: URL(fileURLWithPath: source))
            guard FileManager.default.createFile(atPath: target, contents: bytes, attributes: [.posixPermissions: 0o600]) else {
                throw DataBackupError("cannot write \(target)")
            }
            chmod(target, 0o600)
            try syncFile(target)
        } catch let error as DataBackupError {
            throw error
        } catch {
            throw DataBackupError("cannot copy \(source) to \(target): \(error.localizedDescription)")
        }
    }

    static func entry(_ root: String, _ relative: String) throws(DataBackupError) -> Entry {
        guard let bytes = FileManager.default.contents(atPath: root + "/" + relative) else { throw DataBackupError("cannot read \(root)/\(relative)") }
        return Entry(path: relative, bytes: bytes.count, sha256: Hex.encode(SHA256.hash(Array(bytes))))
    }

    static func write(_ manifest: Manifest, to path: String) throws(DataBackupError) {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        guard let data = try? encoder.encode(manifest), FileManager.default.createFile(atPath: path, contents: data, attributes: [.posixPermissions: 0o600]) else {
            throw DataBackupError("cannot write \(path)")
        }
        try syncFile(path)
    }

    /// A backup that returned is on disk: each file and its directory are synced.
    static func syncFile(_ path: String) throws(DataBackupError) {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw DataBackupError("cannot open \(path) to sync it") }
        defer { close(fd) }
        guard fsync(fd) == 0 else { throw DataBackupError("cannot sync \(path) to disk (errno \(errno))") }
    }
}

/// Data directories made before files were owner-only (the database was created 0644): tightened at start, so
/// an upgrade does not leave keys readable by others.
enum DataDirectoryPermissions {
    static func tighten(_ dataDirectory: String, log: Log) {
        var tightened: [String] = []
        func tighten(_ path: String, to mode: mode_t) {
            var info = stat()
            guard lstat(path, &info) == 0, info.st_mode & S_IFMT != S_IFLNK, info.st_mode & 0o077 != 0 else { return }
            if chmod(path, mode) == 0 { tightened.append((path as NSString).lastPathComponent) }
        }
        tighten(dataDirectory, to: 0o700)
        for name in ["soulacy.db", "soulacy.db-wal", "soulacy.db-shm", "relay-secrets.key"] { tighten(dataDirectory + "/" + name, to: 0o600) }
        tighten(dataDirectory + "/tls", to: 0o700)
        if !tightened.isEmpty { log.info("data directory: made \(tightened.joined(separator: ", ")) owner-only") }
    }
}
