import APNs
import Crypto
import Foundation
import Glibc
import APIKit
import Lifecycle
import PostgreSQL
import RelayMailbox
import RelayMailboxStores

/// `soulacy-relay (--data DIR | --database-url URL) [--listen ADDR:PORT] [--tls-cert PEM --tls-key PEM]`: the
/// end-to-end encrypted mailbox, deployable on its own. Everything it keeps is sealed; TLS also hides who talks to
/// which mailbox. On PostgreSQL (`--database-url` or `SOULACY_RELAY_DATABASE_URL`), several relay processes behind
/// one address serve the same mailboxes.
@main
struct RelayCommand {
    static func main() async {
        // Everything the relay writes (its database, its WAL) is owner-only.
        umask(0o077)
        var options: [String: String] = [:]
        var args = Array(CommandLine.arguments.dropFirst())
        while args.count >= 2, args[0].hasPrefix("--") {
            options[String(args[0].dropFirst(2))] = args[1]
            args.removeFirst(2)
        }
        // The URL may carry a password: the environment keeps it out of the process list, and it is never printed.
        let databaseURL = options["database-url"] ?? ProcessInfo.processInfo.environment["SOULACY_RELAY_DATABASE_URL"].flatMap { $0.isEmpty ? nil : $0 }
        guard args.isEmpty, options["data"] != nil || databaseURL != nil else {
            FileHandle.standardError.write(Data("""
                usage: soulacy-relay (--data DIR | --database-url postgres://…) [--listen ADDR:PORT] [--max-item-bytes N] [--database-pool-size N] [--tls-cert PEM --tls-key PEM]
                (SOULACY_RELAY_DATABASE_URL may stand for --database-url; SOULACY_RELAY_ENROLL_TOKEN, when set, is the
                token a gateway must present to make a mailbox: its SOULACY_RELAY_MAILBOX_TOKEN)

                """.utf8))
            exit(64)
        }
        guard let poolSize = Int(options["database-pool-size"] ?? "4"), (1...64).contains(poolSize) else {
            FileHandle.standardError.write(Data("--database-pool-size must be a whole number from 1 to 64\n".utf8))
            exit(64)
        }
        let listen = options["listen"] ?? "127.0.0.1:8787"
        guard let colon = listen.lastIndex(of: ":"), let port = UInt16(listen[listen.index(after: colon)...]) else {
            FileHandle.standardError.write(Data("--listen must be ADDR:PORT\n".utf8))
            exit(64)
        }
        guard (options["tls-cert"] == nil) == (options["tls-key"] == nil) else {
            FileHandle.standardError.write(Data("--tls-cert and --tls-key go together\n".utf8))
            exit(64)
        }
        do {
            var tls: (keyPEM: String, certificatePEM: String)?
            if let certPath = options["tls-cert"], let keyPath = options["tls-key"] {
                // The key is a secret: refused if others can read it, like the APNs key.
                let key = try SecretFile.read(keyPath, variable: "--tls-key")
                guard let certificate = try? String(contentsOfFile: certPath, encoding: .utf8), certificate.contains("BEGIN CERTIFICATE") else {
                    FileHandle.standardError.write(Data("--tls-cert: \(certPath) is not a readable PEM certificate\n".utf8))
                    exit(64)
                }
                tls = (key, certificate)
            }
            // With SOULACY_MOBILE_APNS_* set, the relay wakes phones for new items (a generic alert, sealed payload).
            let push = try APNsConfiguration.fromEnvironment(ProcessInfo.processInfo.environment).map { try APNsTransport(configuration: $0) }
            var configuration = HTTPServerConfiguration(host: String(listen[..<colon]), port: port, maximumBodyBytes: 4 << 20, tls: tls)
            let store: any MailboxStore
            if let databaseURL {
                guard PostgresURL.isPostgresURL(databaseURL) else {
                    FileHandle.standardError.write(Data("--database-url must be a postgres:// or postgresql:// URL\n".utf8))
                    exit(64)
                }
                store = try await PostgresMailboxStore.open(url: databaseURL, poolSize: poolSize)
            } else {
                let data = options["data"] ?? "."
                try FileManager.default.createDirectory(atPath: data, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
                let sqlite = try SQLiteMailboxStore(path: data + "/relay.db")
                // The mailbox's handlers are SQLite work: they run on the database's own threads, off the cooperative pool.
                configuration.handlerExecutor = sqlite.database.executor
                store = sqlite
            }
            // A secret: from the environment (a service's EnvironmentFile), never the process list, never printed.
            let enrollToken = ProcessInfo.processInfo.environment["SOULACY_RELAY_ENROLL_TOKEN"].flatMap { $0.isEmpty ? nil : $0 }
            if enrollToken == nil, !["127.0.0.1", "::1", "[::1]", "localhost"].contains(String(listen[..<colon])) {
                let warning = "soulacy-relay: warning: anyone who reaches \(listen) can make a mailbox and store items in it; set "
                    + "SOULACY_RELAY_ENROLL_TOKEN (and the gateways' SOULACY_RELAY_MAILBOX_TOKEN) to keep mailboxes for your gateways\n"
                FileHandle.standardError.write(Data(warning.utf8))
            }
            let api = MailboxAPI(store: store, maximumItemBytes: Int(options["max-item-bytes"] ?? "") ?? 256 * 1024, push: push, enrollToken: enrollToken)
            let server = Responder(router: api.router).server(configuration)
            try server.start()
            print("soulacy-relay is listening on \(tls == nil ? "http" : "https")://\(String(listen[..<colon])):\(server.port)")
            fflush(nil)
            // Under systemd (Type=notify): ready once listening, keep-alives while the mailbox database answers.
            let systemd = SystemdNotifier()
            systemd.ready(status: "listening on \(listen)")
            let watchdog = Task { await systemd.runWatchdog { (try? await store.checkReadable()) != nil } }
            // SIGTERM/SIGINT: stop taking connections, let requests in flight finish, close the database, exit 0.
            let report: @Sendable (String) -> Void = { FileHandle.standardError.write(Data("soulacy-relay: \($0)\n".utf8)) }
            try await ServiceGroup(services: [("listener", OnShutdown { systemd.stopping(); await server.stop() })], report: report).run()
            watchdog.cancel()
            store.close()
            report("stopped")
        } catch {
            FileHandle.standardError.write(Data("soulacy-relay: \(error)\n".utf8))
            exit(1)
        }
    }
}
