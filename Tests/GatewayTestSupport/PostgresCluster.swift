import Foundation
import Glibc
import PostgreSQL

/// A throwaway PostgreSQL cluster of the test process: Debian's server binaries, `initdb` into a temporary
/// directory, `pg_ctl start` with its unix socket in that directory and TCP on a private port of 127.0.0.1. One per
/// test process, started on first use and stopped at exit; every test takes a fresh database of it
/// (`makeDatabase()`). TLS is on (a self-signed certificate made by the openssl CLI): a URL with `sslmode=require`
/// connects over it, the plain URLs say `sslmode=disable`.
///
/// PostgreSQL refuses to run as root: when the tests do (CI), the cluster belongs to the system user `soulacy-pg`
/// (created if missing) and its commands run through `runuser`.
public final class PostgresCluster: Sendable {
    public static let superuser = "soulacy"
    public static let systemUser = "soulacy-pg"
    public let port: UInt16
    public let directory: String
    /// The superuser's password (random per cluster; tests of a wrong password need the right one to differ from).
    public let password: String
    private let admin: PostgresPool

    /// The test process's cluster, started on the first call.
    public static func shared() async throws -> PostgresCluster {
        try await startup.value
    }

    private static let startup = Task<PostgresCluster, any Error> {
        try await onOwnThread { try PostgresCluster.startBlocking() }
    }

    private init(port: UInt16, directory: String, password: String) throws {
        self.port = port
        self.directory = directory
        self.password = password
        admin = try PostgresPool(url: "postgres://\(Self.superuser):\(password)@127.0.0.1:\(port)/postgres?sslmode=disable", size: 2,
                                 applicationName: "soulacy-test-admin")
    }

    /// A new empty database (`t_<random>`), owned by the superuser.
    public func makeDatabase() async throws -> PostgresTestDatabase {
        let name = "t_" + String(UInt64.random(in: 0...UInt64.max), radix: 16)
        try await admin.withConnection { db in try db.execute("CREATE DATABASE \(name)") }
        return PostgresTestDatabase(name: name, port: port, password: password)
    }

    // MARK: Start and stop

    /// Where this process's cluster lives: derived from the pid alone, so the exit handler needs no state.
    static func directory(for pid: Int32) -> String {
        FileManager.default.temporaryDirectory.appendingPathComponent("soulacy-pg-\(pid)").path
    }

    private static func startBlocking() throws -> PostgresCluster {
        let binaries = try serverBinaries()
        removeStaleClusters()
        let directory = directory(for: getpid())
        let files = FileManager.default
        try? files.removeItem(atPath: directory)
        try files.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let password = (0..<2).map { _ in String(UInt64.random(in: 0...UInt64.max), radix: 16) }.joined()
        try password.write(toFile: directory + "/pwfile", atomically: false, encoding: .utf8)
        try run("/usr/bin/openssl", ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                                     "-keyout", directory + "/server.key", "-out", directory + "/server.crt", "-days", "3",
                                     "-subj", "/CN=127.0.0.1"], in: directory)
        chmod(directory + "/server.key", 0o600)
        let owner = try clusterOwner()
        if let owner { try changeOwner(of: directory, to: owner) }
        // --no-sync: nothing of a throwaway cluster needs to survive a power cut, and it saves seconds.
        try run(binaries + "/initdb", ["-D", directory + "/data", "-U", superuser, "--pwfile=" + directory + "/pwfile",
                                       "--auth-local=trust", "--auth-host=scram-sha-256", "--encoding=UTF8", "--no-locale",
                                       "--no-sync", "--no-instructions"], in: directory, as: owner)
        atexit { PostgresCluster.stopAtExit() }
        var lastLog = ""
        for _ in 1...3 {
            let port = freePort()
            // fsync, synchronous commit and full-page writes are off: the cluster is thrown away, speed matters.
            let settings = """
                port = \(port)
                listen_addresses = '127.0.0.1'
                unix_socket_directories = '\(directory)'
                fsync = off
                synchronous_commit = off
                full_page_writes = off
                max_connections = 300
                shared_buffers = 32MB
                ssl = on
                ssl_cert_file = '\(directory)/server.crt'
                ssl_key_file = '\(directory)/server.key'
                log_min_messages = warning
                """
            let autoConf = directory + "/data/postgresql.auto.conf"
            try settings.write(toFile: autoConf, atomically: false, encoding: .utf8)
            if let owner { try changeOwner(of: autoConf, to: owner) }
            let log = directory + "/postgres.log"
            try? files.removeItem(atPath: log)
            do {
                try run(binaries + "/pg_ctl", ["-D", directory + "/data", "-l", log, "-w", "-t", "60", "start"], in: directory, as: owner)
                return try PostgresCluster(port: port, directory: directory, password: password)
            } catch {
                lastLog = ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "") + "\n\(error)"
                // Another socket of the parallel suite took the port between the choice and the bind: a new one.
                guard lastLog.contains("already in use") else { break }
            }
        }
        throw TestFailure("the PostgreSQL test cluster did not start:\n\(lastLog)")
    }

    /// Immediate shutdown (SIGQUIT to the postmaster) and the directory removed: nothing in it is worth a clean stop.
    private static func stopAtExit() {
        let directory = directory(for: getpid())
        stopPostmaster(in: directory)
        try? FileManager.default.removeItem(atPath: directory)
    }

    private static func stopPostmaster(in directory: String) {
        guard let pidFile = try? String(contentsOfFile: directory + "/data/postmaster.pid", encoding: .utf8),
              let line = pidFile.split(separator: "\n").first, let pid = Int32(line) else { return }
        if kill(pid, SIGQUIT) == 0 { waitUntilEnded(pid, limit: .seconds(5)) }
    }

    /// Clusters of test processes that died without their exit handler (a crash, SIGKILL): stopped and removed.
    private static func removeStaleClusters() {
        let base = FileManager.default.temporaryDirectory.path
        for name in (try? FileManager.default.contentsOfDirectory(atPath: base)) ?? [] where name.hasPrefix("soulacy-pg-") {
            guard let pid = Int32(name.dropFirst("soulacy-pg-".count)), kill(pid, 0) != 0, errno == ESRCH else { continue }
            stopPostmaster(in: base + "/" + name)
            try? FileManager.default.removeItem(atPath: base + "/" + name)
        }
    }

    /// `pg_config --bindir` (Debian's libpq-dev answers /usr/lib/postgresql/<major>/bin), else the newest installed
    /// server under /usr/lib/postgresql.
    private static func serverBinaries() throws -> String {
        let files = FileManager.default
        if files.isExecutableFile(atPath: "/usr/bin/pg_config"),
           let answer = try? run("/usr/bin/pg_config", ["--bindir"], in: files.temporaryDirectory.path) {
            let directory = answer.trimmingCharacters(in: .whitespacesAndNewlines)
            if files.isExecutableFile(atPath: directory + "/initdb") { return directory }
        }
        if files.isExecutableFile(atPath: "/usr/lib/postgresql/15/bin/initdb") { return "/usr/lib/postgresql/15/bin" }
        let majors = ((try? files.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? []).compactMap(Int.init).sorted()
        if let newest = majors.last(where: { files.isExecutableFile(atPath: "/usr/lib/postgresql/\($0)/bin/initdb") }) {
            return "/usr/lib/postgresql/\(newest)/bin"
        }
        throw TestFailure("no PostgreSQL server binaries (initdb, pg_ctl): install Debian's postgresql package (scripts/install-deps --test)")
    }

    /// The unprivileged user that owns the cluster when the tests run as root (nil: run as the current user).
    private static func clusterOwner() throws -> (uid: uid_t, gid: gid_t)? {
        guard geteuid() == 0 else { return nil }
        if let entry = getpwnam(systemUser) { return (entry.pointee.pw_uid, entry.pointee.pw_gid) }
        // Another test process may create it at the same moment: only its absence afterwards is a failure.
        _ = try? run("/usr/sbin/useradd", ["--system", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin",
                                          "--user-group", systemUser], in: "/")
        guard let entry = getpwnam(systemUser) else { throw TestFailure("could not create the system user \(systemUser) to run PostgreSQL as") }
        return (entry.pointee.pw_uid, entry.pointee.pw_gid)
    }

    private static func changeOwner(of path: String, to owner: (uid: uid_t, gid: gid_t)) throws {
        var paths = [path]
        if let enumerator = FileManager.default.enumerator(atPath: path) {
            paths += enumerator.compactMap { $0 as? String }.map { path + "/" + $0 }
        }
        for item in paths where lchown(item, owner.uid, owner.gid) != 0 {
            throw TestFailure("chown \(item): \(String(cString: strerror(errno)))")
        }
    }

    /// Runs a program to its end (output to a file, never a pipe the server it starts could inherit) and returns
    /// what it printed; a non-zero exit is a failure with that output. `as` runs it as the cluster's owner.
    @discardableResult
    private static func run(_ path: String, _ arguments: [String], in directory: String, as owner: (uid: uid_t, gid: gid_t)? = nil) throws -> String {
        let process = TestProcess()
        if owner != nil {
            process.executableURL = URL(fileURLWithPath: "/usr/sbin/runuser")
            process.arguments = ["-u", systemUser, "--", path] + arguments
        } else {
            process.executableURL = URL(fileURLWithPath: path)
            process.arguments = arguments
        }
        // A directory the owner may enter (the test process's may be root's own).
        process.currentDirectoryURL = URL(fileURLWithPath: directory)
        var environment = ProcessInfo.processInfo.environment
        environment["LC_ALL"] = "C"
        process.environment = environment
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("soulacy-pg-run-\(UUID().uuidString).log").path
        _ = FileManager.default.createFile(atPath: output, contents: nil)
        defer { try? FileManager.default.removeItem(atPath: output) }
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: output))
        process.standardOutput = handle
        process.standardError = handle
        process.standardInput = FileHandle.nullDevice
        try launch(process)
        let status = exitStatus(of: process)
        try? handle.close()
        let printed = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
        guard status == 0 else {
            throw TestFailure("\(([path] + arguments).joined(separator: " ")) exited with \(status.map(String.init) ?? "an unknown status"):\n\(printed)")
        }
        return printed
    }

    /// Waits for the program's end through /proc, not `waitUntilExit()`: Foundation was seen here not to reap a
    /// `runuser` whose grandchild (the postmaster) lives on, and the wait never ended. Foundation's status if it
    /// reaped the child, else the child is reaped here.
    private static func exitStatus(of process: TestProcess) -> Int32? {
        let pid = process.processIdentifier
        waitUntilEnded(pid)
        let deadline = ContinuousClock.now + .seconds(2)
        while process.isRunning, ContinuousClock.now < deadline { usleep(5_000) }
        if !process.isRunning { return process.terminationStatus }
        var status: Int32 = 0
        guard waitpid(pid, &status, 0) == pid else { return nil }
        return status & 0x7f == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
    }
}

/// One test's database on the shared cluster, as URLs.
public struct PostgresTestDatabase: Sendable {
    public let name: String
    public let port: UInt16
    let password: String

    /// Over TCP without TLS.
    public var url: String { url(password: password) }
    /// Over TCP with TLS required (the server's certificate is self-signed; `require` checks none).
    public var tlsURL: String { url(password: password, sslmode: "require") }

    /// The URL with another password (a wrong one, for the failure tests).
    public func url(password: String, sslmode: String = "disable") -> String {
        "postgres://\(PostgresCluster.superuser):\(password)@127.0.0.1:\(port)/\(name)?sslmode=\(sslmode)"
    }
}
