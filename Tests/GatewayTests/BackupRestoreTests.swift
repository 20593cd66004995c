import Foundation
import Glibc
import GatewayTestSupport
import SQLite
import Testing

/// `soulacy backup` / `soulacy restore` on the real binary, while a gateway process is writing (issue 29).
@Suite("Backup and restore", .serialized)
struct BackupRestoreTests {
    func mode(_ path: String) -> mode_t {
        var info = stat()
        return stat(path, &info) == 0 ? info.st_mode & 0o777 : 0o7777
    }

    /// Every line of the owner's inbox, through the API's own paging.
    func inbox(_ gateway: GatewayProcess, key: String) async throws -> Set<String> {
        var ids: Set<String> = []
        var cursor: String?
        repeat {
            let page = try await gateway.call("GET", "/api/v1/mobile/deliveries?limit=200" + (cursor.map { "&cursor=\($0)" } ?? ""), key: key)
            guard page.status == 200 else { throw TestFailure("inbox answered \(page.status): \(page.json)") }
            for line in page.json["deliveries"]?.arrayValue ?? [] { if let id = line["id"]?.stringValue { ids.insert(id) } }
            cursor = page.json["next_cursor"]?.stringValue
        } while cursor != nil
        return ids
    }

    /// Test lines titled `prefix N` sent one after another; the ids the gateway acknowledged (201).
    func acknowledgedLines(_ gateway: GatewayProcess, key: String, prefix: String, count: Int) async -> Set<String> {
        var acknowledged: Set<String> = []
        for index in 0..<count {
            guard let sent = try? await gateway.call("POST", "/api/v1/channels/mobile/test", key: key, json: ["title": .string("\(prefix) \(index)")]),
                  sent.status == 201, let id = sent.json["delivery_id"]?.stringValue else { continue }
            acknowledged.insert(id)
        }
        return acknowledged
    }

    func process(_ directory: String) throws -> GatewayProcess {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        return try GatewayProcess(directory: directory)
    }

    func pin(_ output: String) -> String? {
        guard let range = output.range(of: "certificate pin ") else { return nil }
        return String(output[range.upperBound...].prefix { $0.isHexDigit })
    }

    @Test("a backup taken during a burst of deliveries restores into a fresh directory that serves the same inbox, keys and pin; owner-only throughout")
    func backupDuringBurst() async throws {
        let root = TestGateway.makeTemporaryDirectory()
        let source = try process(root + "/source")
        let key = try #require(try await source.start())
        #expect(mode(source.dataDirectory) == 0o700 && mode(source.dataDirectory + "/soulacy.db") == 0o600, "data directory and database are owner-only")

        // Lines acknowledged before the backup starts must all be in it; lines written during it may or may not.
        let before = await acknowledgedLines(source, key: key, prefix: "before", count: 40)
        #expect(before.count == 40)
        let burst = Task { await acknowledgedLines(source, key: key, prefix: "during", count: 300) }
        try await Task.sleep(for: .milliseconds(100))
        let backupDirectory = root + "/backup"
        let taken = try await Task.detached { try runProgramBlocking(RepositoryPaths.soulacyBinary, ["backup", "--data", source.dataDirectory, backupDirectory]) }.value
        let during = await burst.value
        #expect(taken.status == 0, "\(taken.output)")
        #expect(mode(backupDirectory) == 0o700)
        for file in try FileManager.default.subpathsOfDirectory(atPath: backupDirectory) {
            var isDirectory: ObjCBool = false
            _ = FileManager.default.fileExists(atPath: backupDirectory + "/" + file, isDirectory: &isDirectory)
            #expect(mode(backupDirectory + "/" + file) == (isDirectory.boolValue ? 0o700 : 0o600), "\(file) is not owner-only")
        }
        #expect(FileManager.default.fileExists(atPath: backupDirectory + "/tls/gateway.crt"), "the TLS identity is in the backup")
        let check = try Connection(path: backupDirectory + "/soulacy.db", readOnly: true).query("PRAGMA integrity_check").first?.string("integrity_check")
        #expect(check == "ok")

        // Into somewhere that is not empty: refused, and nothing there is touched.
        let occupied = root + "/occupied/data"
        try FileManager.default.createDirectory(atPath: occupied, withIntermediateDirectories: true)
        try "keep".write(toFile: occupied + "/note", atomically: true, encoding: .utf8)
        let refused = try await runProgram(RepositoryPaths.soulacyBinary, ["restore", backupDirectory, "--data", occupied])
        #expect(refused.status != 0 && refused.output.contains("not empty"), "\(refused.output)")
        #expect(try String(contentsOfFile: occupied + "/note", encoding: .utf8) == "keep")

        let restoredRoot = root + "/restored"
        let restored = try await runProgram(RepositoryPaths.soulacyBinary, ["restore", backupDirectory, "--data", restoredRoot + "/data"])
        #expect(restored.status == 0, "\(restored.output)")
        let copy = try process(restoredRoot)
        #expect(try await copy.start() == nil, "a restored gateway has its keys: no new admin key is minted")
        defer { copy.terminate() }
        // The same admin key works, the same certificate is pinned, and the inbox is the backup's snapshot.
        let lines = try await inbox(copy, key: key)
        #expect(before.isSubset(of: lines), "lines acknowledged before the backup are missing: \(before.subtracting(lines).count)")
        #expect(lines.isSubset(of: before.union(during)), "the restored inbox has lines nobody wrote")
        #expect(pin(copy.output) != nil && pin(copy.output) == pin(source.output), "\(copy.output)")
        // The source kept serving throughout and still has everything it acknowledged.
        let all = try await inbox(source, key: key)
        #expect(before.union(during).isSubset(of: all))
        source.terminate()
    }

    @Test("on PostgreSQL: a backup during a burst (pg_dump beside the data directory) restores into an empty database and a new directory that serve the same inbox, key and pin; a database with tables is refused, so is a SQLite restore of it; no password is printed")
    func backupOnPostgres() async throws {
        let database = try await PostgresCluster.shared().makeDatabase()
        let target = try await PostgresCluster.shared().makeDatabase()
        let password = String(database.url.split(separator: "@")[0].split(separator: ":").last ?? "")
        #expect(password.count >= 8)
        let root = TestGateway.makeTemporaryDirectory()
        try FileManager.default.createDirectory(atPath: root + "/source", withIntermediateDirectories: true)
        let source = try GatewayProcess(directory: root + "/source", environment: ["SOULACY_DATABASE_URL": database.url])
        let key = try #require(try await source.start())
        let before = await acknowledgedLines(source, key: key, prefix: "before", count: 40)
        #expect(before.count == 40)
        let burst = Task { await acknowledgedLines(source, key: key, prefix: "during", count: 200) }
        try await Task.sleep(for: .milliseconds(100))
        let environment = ProcessInfo.processInfo.environment.merging(["SOULACY_DATABASE_URL": database.url]) { $1 }
        let backup = root + "/backup"
        let taken = try await runProgram(RepositoryPaths.soulacyBinary, ["backup", "--data", source.dataDirectory, backup], environment: environment)
        let during = await burst.value
        #expect(taken.status == 0, "\(taken.output)")
        #expect(!taken.output.contains(password), "the backup printed the database password")
        #expect(FileManager.default.fileExists(atPath: backup + "/soulacy.pgdump") && FileManager.default.fileExists(atPath: backup + "/tls/gateway.crt"),
                "\((try? FileManager.default.subpathsOfDirectory(atPath: backup)) ?? [])")
        #expect(mode(backup + "/soulacy.pgdump") == 0o600 && mode(backup) == 0o700)

        // Not into the database it came from (it has tables), and not as a SQLite gateway.
        let intoFull = try await runProgram(RepositoryPaths.soulacyBinary, ["restore", backup, "--data", root + "/r0"], environment: environment)
        #expect(intoFull.status != 0 && intoFull.output.contains("already has tables") && !intoFull.output.contains(password), "\(intoFull.output)")
        #expect(!FileManager.default.fileExists(atPath: root + "/r0/relay-secrets.key"), "nothing restored beside a refused database")
        let asSQLite = try await runProgram(RepositoryPaths.soulacyBinary, ["restore", backup, "--data", root + "/r1"],
                                           environment: ProcessInfo.processInfo.environment.filter { $0.key != "SOULACY_DATABASE_URL" })
        #expect(asSQLite.status != 0 && asSQLite.output.contains("PostgreSQL"), "\(asSQLite.output)")

        let restoreEnvironment = ProcessInfo.processInfo.environment.merging(["SOULACY_DATABASE_URL": target.url]) { $1 }
        let restored = try await runProgram(RepositoryPaths.soulacyBinary, ["restore", backup, "--data", root + "/restored/data"], environment: restoreEnvironment)
        #expect(restored.status == 0 && !restored.output.contains(password), "\(restored.output)")
        let copy = try GatewayProcess(directory: root + "/restored", environment: ["SOULACY_DATABASE_URL": target.url])
        #expect(try await copy.start() == nil, "a restored gateway has its owner: no new admin key is minted")
        defer { copy.terminate() }
        let lines = try await inbox(copy, key: key)
        #expect(before.isSubset(of: lines), "lines acknowledged before the backup are missing: \(before.subtracting(lines).count)")
        #expect(lines.isSubset(of: before.union(during)), "the restored inbox has lines nobody wrote")
        #expect(pin(copy.output) != nil && pin(copy.output) == pin(source.output), "\(copy.output)")
        // The restored database takes new lines (its sequences carried over).
        let after = try await copy.call("POST", "/api/v1/channels/mobile/test", key: key, json: ["title": "after the restore"])
        #expect(after.status == 201, "\(after.json)")
        source.terminate()
    }

    @Test("a damaged backup is refused naming the file; a backup never writes into a non-empty directory; a missing database is named")
    func refusals() async throws {
        let root = TestGateway.makeTemporaryDirectory()
        let source = try process(root + "/source")
        _ = try await source.start()
        source.terminate()
        let occupied = root + "/occupied"
        try FileManager.default.createDirectory(atPath: occupied, withIntermediateDirectories: true)
        try "x".write(toFile: occupied + "/x", atomically: true, encoding: .utf8)
        let intoOccupied = try await runProgram(RepositoryPaths.soulacyBinary, ["backup", "--data", source.dataDirectory, occupied])
        #expect(intoOccupied.status != 0 && intoOccupied.output.contains("not empty"), "\(intoOccupied.output)")
        let noDatabase = try await runProgram(RepositoryPaths.soulacyBinary, ["backup", "--data", root + "/nowhere", root + "/b0"])
        #expect(noDatabase.status != 0 && noDatabase.output.contains("no gateway database"), "\(noDatabase.output)")

        let backup = root + "/b1"
        #expect(try await runProgram(RepositoryPaths.soulacyBinary, ["backup", "--data", source.dataDirectory, backup]).status == 0)
        let certificate = backup + "/tls/gateway.crt"
        var bytes = try Array(Data(contentsOf: URL(fileURLWithPath: certificate)))
        bytes[bytes.count / 2] ^= 0x01
        try Data(bytes).write(to: URL(fileURLWithPath: certificate))
        let damaged = try await runProgram(RepositoryPaths.soulacyBinary, ["restore", backup, "--data", root + "/r1"])
        #expect(damaged.status != 0 && damaged.output.contains("tls/gateway.crt") && damaged.output.contains("does not match"), "\(damaged.output)")
        #expect(!FileManager.default.fileExists(atPath: root + "/r1/soulacy.db"), "nothing is restored from a damaged backup")
    }
}

extension BackupRestoreTests {
    @Test("a data directory from before owner-only files (a 0644 database, a 0755 directory) is tightened at start")
    func upgradeTightens() async throws {
        let root = TestGateway.makeTemporaryDirectory()
        let gateway = try process(root)
        _ = try await gateway.start()
        gateway.terminate()
        chmod(gateway.dataDirectory, 0o755)
        chmod(gateway.dataDirectory + "/soulacy.db", 0o644)
        _ = try await gateway.start()
        defer { gateway.terminate() }
        #expect(mode(gateway.dataDirectory) == 0o700 && mode(gateway.dataDirectory + "/soulacy.db") == 0o600)
        #expect(mode(gateway.dataDirectory + "/soulacy.db-wal") == 0o600, "the WAL takes the database's mode")
    }
}
