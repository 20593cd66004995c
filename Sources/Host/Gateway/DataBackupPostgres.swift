import Foundation
import PostgreSQL
import PostgresStores
import Subprocess

/// Backups of a gateway on PostgreSQL: the database as one `pg_dump` archive (custom format, one consistent
/// snapshot taken while the nodes go on writing), beside a copy of the data directory, which on PostgreSQL holds
/// the gateway's identity (the TLS certificate phones pin, the key that seals relay secrets, the console code key,
/// the Web Push keys) that the database alone cannot give back. The manifest lists both with their SHA-256.
///
/// `pg_dump` and `pg_restore` (Debian's `postgresql-client`) get the connection through libpq's environment
/// variables, so the password is never on a command line; what they print is shown with it replaced.
public enum DataBackupPostgres {
    public static let dumpName = "soulacy.pgdump"

    /// Dumps the database at `url` and copies `dataDirectory` into `destination` (new or empty).
    @discardableResult
    public static func take(url: String, dataDirectory: String, to destination: String, now: Date = Date()) async throws(DataBackupError) -> DataBackup.Manifest {
        let environment = try connection(url)
        try DataBackup.prepareEmptyDirectory(destination)
        let dump = destination + "/" + dumpName
        try await run(["pg_dump", "--format=custom", "--no-owner", "--no-privileges", "--file", dump], environment: environment, url: url,
                      doing: "dump the database")
        chmod(dump, 0o600)
        // The archive reads back, and it is a gateway's: its table of contents names the migrations table.
        let contents = try await run(["pg_restore", "--list", dump], environment: environment, url: url, doing: "read the dump back")
        guard contents.contains("soulacy_migrations") else {
            throw DataBackupError("the database at \(PostgresURL.redacted(url)) holds no soulacy_migrations table: SOULACY_DATABASE_URL must name the gateway's database")
        }
        try DataBackup.syncFile(dump)
        var files = [try DataBackup.entry(destination, dumpName)]
        for relative in try DataBackup.otherFiles(in: dataDirectory) {
            try DataBackup.copy(dataDirectory + "/" + relative, to: destination + "/" + relative)
            files.append(try DataBackup.entry(destination, relative))
        }
        var manifest = DataBackup.Manifest(version: GatewayVersion.current, takenAt: now.formatted(.iso8601), files: files.sorted { $0.path < $1.path })
        manifest.engine = "postgresql"
        try DataBackup.write(manifest, to: destination + "/" + DataBackup.manifestName)
        try DataBackup.syncFile(destination)
        return manifest
    }

    /// Restores a backup `take` made: the data directory's files into `dataDirectory` (new or empty) and the
    /// database into the one at `url`, which must hold no table yet. All of the dump or none of it (one transaction).
    @discardableResult
    public static func restore(from backup: String, into dataDirectory: String, url: String) async throws(DataBackupError) -> DataBackup.Manifest {
        let environment = try connection(url)
        let manifest = try DataBackup.verified(backup)
        guard manifest.files.contains(where: { $0.path == dumpName }) else { throw DataBackupError("the backup in \(backup) holds no \(dumpName)") }
        let tables: Int
        do {
            let pool = try PostgresPool(url: url, size: 1, applicationName: "soulacy-restore")
            defer { pool.close() }
            tables = try await PostgresGatewaySchema.inspect(pool).tables
        } catch {
            throw DataBackupError("cannot look into the database at \(PostgresURL.redacted(url)): \(error)")
        }
        guard tables == 0 else {
            throw DataBackupError("the database at \(PostgresURL.redacted(url)) already has tables; restore into a new, empty database (CREATE DATABASE …)")
        }
        try DataBackup.prepareEmptyDirectory(dataDirectory)
        for file in manifest.files where file.path != dumpName {
            try DataBackup.copy(backup + "/" + file.path, to: dataDirectory + "/" + file.path)
        }
        try await run(["pg_restore", "--no-owner", "--no-privileges", "--exit-on-error", "--single-transaction",
                       "--dbname", environment["PGDATABASE"] ?? "", backup + "/" + dumpName], environment: environment, url: url,
                      doing: "restore the database")
        try DataBackup.syncFile(dataDirectory)
        return manifest
    }

    /// libpq's environment for `url`, on top of this process's PATH (and nothing else of it: no stray PG* setting).
    static func connection(_ url: String) throws(DataBackupError) -> [String: String] {
        do {
            var environment = try PostgresURL.environment(for: url)
            environment["PATH"] = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
            return environment
        } catch {
            throw DataBackupError("SOULACY_DATABASE_URL: \(error)")
        }
    }

    /// Runs one of PostgreSQL's programs; its standard output, or an error with what it said (password replaced).
    @discardableResult
    static func run(_ argv: [String], environment: [String: String], url: String, doing what: String) async throws(DataBackupError) -> String {
        let process: Subprocess
        do { process = try Subprocess.spawn(SubprocessCommand(argv: argv, environment: environment)) } catch {
            throw DataBackupError("cannot \(what): \(argv[0]) could not be started (\(error)); install Debian's postgresql-client")
        }
        process.standardInput.close()
        async let output = process.standardOutput.readAll(limit: 64 << 20, stopAtLimit: true)
        async let errors = process.standardError.readAll(limit: 64 << 10, stopAtLimit: true)
        let (out, err) = await (output, errors)
        let status = await process.waitForExit()
        let password = environment["PGPASSWORD"] ?? ""
        func scrubbed(_ bytes: [UInt8]) -> String {
            let text = String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            return password.isEmpty ? text : text.replacingOccurrences(of: password, with: "***")
        }
        guard status == .exited(0) else {
            throw DataBackupError("cannot \(what) (\(argv[0]) \(status) against \(PostgresURL.redacted(url))): \(scrubbed(err.bytes))")
        }
        return scrubbed(out.bytes)
    }
}
