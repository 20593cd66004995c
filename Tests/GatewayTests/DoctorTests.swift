import APIKit
import Crypto
import Foundation
import Gateway
import GatewayTestSupport
import Glibc
import SQLite
import Testing

/// `soulacy doctor` on the real binary (issue 29): a data directory made by a real gateway start, the stand-ins of
/// every service with a dry call, and the real relay mailbox.
@Suite("Doctor", .serialized)
struct DoctorTests {
    /// The doctor's own environment: nothing of the test process's, no ~/.soulacy/config.yaml.
    func environment(_ extra: [String: String] = [:]) -> [String: String] {
        ["PATH": "/usr/bin:/bin", "HOME": TestGateway.makeTemporaryDirectory()].merging(extra) { $1 }
    }

    func doctor(_ arguments: [String], environment: [String: String]) async throws -> (status: Int32, output: String) {
        try await runProgram(RepositoryPaths.soulacyBinary, ["doctor"] + arguments, environment: environment)
    }

    /// The report's line for one check, with its fix line when it has one.
    func line(_ output: String, _ check: String) -> String? {
        let lines = output.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        guard let index = lines.firstIndex(where: { $0.dropFirst(6).hasPrefix(check + ":") }) else { return nil }
        let fix = index + 1 < lines.count && lines[index + 1].hasPrefix("      fix: ") ? "\n" + lines[index + 1] : ""
        return lines[index] + fix
    }

    /// A data directory as `soulacy serve` leaves it, with one delivery in its database.
    func madeByAGateway() async throws -> GatewayProcess {
        let root = TestGateway.makeTemporaryDirectory()
        let gateway = try GatewayProcess(directory: root)
        let key = try #require(try await gateway.start())
        let sent = try await gateway.call("POST", "/api/v1/channels/mobile/test", key: key, json: ["title": "doctor"])
        #expect(sent.status == 201)
        return gateway
    }

    func contents(_ path: String) -> Data { FileManager.default.contents(atPath: path) ?? Data() }

    @Test("a real gateway's data directory is healthy (exit 0, read-only); a loosened mode and a corrupted database each give exit 1 naming them")
    func dataDirectory() async throws {
        let gateway = try await madeByAGateway()
        let data = gateway.dataDirectory
        let env = environment()

        // While the gateway serves: the live WAL database reads fine, read-only.
        let live = try await doctor(["--data", data, "--config", gateway.configPath], environment: env)
        #expect(live.status == 0, "\(live.output)")
        #expect(line(live.output, "permissions")?.hasPrefix("OK") == true, "\(live.output)")
        #expect(line(live.output, "database")?.contains("integrity_check ok") == true, "\(live.output)")
        #expect(line(live.output, "migrations")?.hasPrefix("OK") == true, "\(live.output)")
        #expect(line(live.output, "agents")?.hasPrefix("OK") == true, "\(live.output)")
        #expect(live.output.contains("healthy"))
        #expect(gateway.terminate() == 0)

        // Stopped: the doctor changes nothing in the database.
        let database = data + "/soulacy.db"
        let before = contents(database)
        let quiet = try await doctor(["--data", data], environment: env)
        #expect(quiet.status == 0, "\(quiet.output)")
        #expect(contents(database) == before, "the doctor never writes the database")

        // A key readable by everyone and a directory others may enter: each named with the chmod that fixes it.
        let key = data + "/tls/gateway.key"
        chmod(key, 0o644)
        chmod(data, 0o755)
        let loose = try await doctor(["--data", data], environment: env)
        #expect(loose.status == 1, "\(loose.output)")
        let keyLine = try #require(loose.output.split(separator: "\n").firstIndex { $0.contains("FAIL") && $0.contains(key) }.map { index in
            loose.output.split(separator: "\n")[index...].prefix(2).joined(separator: "\n")
        }, "\(loose.output)")
        #expect(keyLine.contains("0644") && keyLine.contains("the TLS private key") && keyLine.contains("fix: chmod 600 \(key)"), "\(keyLine)")
        #expect(loose.output.contains("fix: chmod 700 \(data)\n") || loose.output.hasSuffix("fix: chmod 700 \(data)"), "\(loose.output)")
        #expect(!loose.output.contains("OK    permissions"))
        chmod(key, 0o600)
        chmod(data, 0o700)
        #expect(try await doctor(["--data", data], environment: env).status == 0)

        // The schema against this binary's migrations: one not applied yet is a warning, one it does not know a problem.
        let connection = try Connection(path: database)
        _ = try connection.run("DELETE FROM schema_migrations WHERE id = 'runs.3-events'")
        let behind = try await doctor(["--data", data], environment: env)
        #expect(behind.status == 0 && line(behind.output, "migrations")?.hasPrefix("WARN") == true
                && line(behind.output, "migrations")?.contains("runs.3-events") == true, "\(behind.output)")
        _ = try connection.run("INSERT INTO schema_migrations (id, applied_at) VALUES ('runs.3-events', 1), ('future.1-from-a-newer-soulacy', 2)")
        let ahead = try await doctor(["--data", data], environment: env)
        #expect(ahead.status == 1 && line(ahead.output, "migrations")?.hasPrefix("FAIL") == true
                && line(ahead.output, "migrations")?.contains("future.1-from-a-newer-soulacy") == true, "\(ahead.output)")
        _ = try connection.run("DELETE FROM schema_migrations WHERE id = 'future.1-from-a-newer-soulacy'")

        // A damaged page: SQLite's integrity check fails it, and the fix says how to get back.
        try connection.checkpointAndTruncate()
        connection.close()
        let handle = try #require(FileHandle(forUpdatingAtPath: database))
        try handle.seek(toOffset: 4096)
        handle.write(Data(repeating: 0xA5, count: 4096 * 3))
        try handle.close()
        let corrupt = try await doctor(["--data", data], environment: env)
        #expect(corrupt.status == 1, "\(corrupt.output)")
        let databaseLine = try #require(line(corrupt.output, "database"), "\(corrupt.output)")
        #expect(databaseLine.hasPrefix("FAIL") && databaseLine.contains(database), "\(databaseLine)")
        #expect(databaseLine.contains("integrity check") || databaseLine.contains("malformed"), "\(databaseLine)")
        #expect(databaseLine.contains("soulacy restore"), "\(databaseLine)")

        // Not a data directory at all.
        let missing = try await doctor(["--data", data + "-nowhere"], environment: env)
        #expect(missing.status == 1 && missing.output.contains("no data directory at \(data)-nowhere"), "\(missing.output)")
    }

    @Test("on PostgreSQL: the database a gateway runs on is OK (server, migrations, one node); an empty database FAILs naming migrations; a wrong password FAILs without printing it")
    func postgres() async throws {
        let database = try await PostgresCluster.shared().makeDatabase()
        let empty = try await PostgresCluster.shared().makeDatabase()
        let root = TestGateway.makeTemporaryDirectory()
        let gateway = try GatewayProcess(directory: root, environment: ["SOULACY_DATABASE_URL": database.url])
        _ = try await gateway.start()
        defer { gateway.terminate() }

        let running = try await doctor(["--data", gateway.dataDirectory], environment: environment(["SOULACY_DATABASE_URL": database.url]))
        #expect(running.status == 0, "\(running.output)")
        #expect(line(running.output, "database")?.hasPrefix("OK") == true && running.output.contains("PostgreSQL 1"), "\(running.output)")
        #expect(line(running.output, "migrations")?.hasPrefix("OK    migrations: all") == true, "\(running.output)")
        #expect(line(running.output, "nodes")?.contains("1 gateway node(s)") == true, "\(running.output)")
        #expect(!running.output.contains("soulacy.db"), "a PostgreSQL gateway's doctor looked for a SQLite file: \(running.output)")

        let unmigrated = try await doctor(["--data", gateway.dataDirectory], environment: environment(["SOULACY_DATABASE_URL": empty.url]))
        #expect(unmigrated.status == 1 && line(unmigrated.output, "migrations")?.hasPrefix("FAIL") == true, "\(unmigrated.output)")

        let wrong = "wrong-pass-7781"
        let refused = try await doctor(["--data", gateway.dataDirectory], environment: environment(["SOULACY_DATABASE_URL": database.url(password: wrong)]))
        #expect(refused.status == 1 && line(refused.output, "database")?.hasPrefix("FAIL") == true, "\(refused.output)")
        #expect(!refused.output.contains(wrong), "the doctor printed the password")
    }

    @Test("against the stand-ins: a good configuration is OK with nothing delivered, a wrong key FAILs with the service's reason, no secret is printed")
    func services() async throws {
        let apns = try await APNsStandIn.start()
        let fcm = try await FCMStandIn.start()
        let relay = RelayServerProcess()
        try await relay.start()
        var channels: [ChannelService] = []
        for kind in [BuiltInChannel.telegram, .slack, .discord, .email, .webhook] {
            channels.append(try await ChannelService.start(kind))
        }
        let gateway = try await madeByAGateway()
        #expect(gateway.terminate() == 0)
        let root = TestGateway.makeTemporaryDirectory()

        /// One gateway config with every channel's block.
        func gatewayConfig(_ credentials: ChannelService.Credentials) throws -> (path: String, text: String) {
            let blocks = channels.map { $0.setup(credentials).gatewayConfig.split(separator: "\n").dropFirst().joined(separator: "\n") }
            // A sidecar has no dry call: its command and environment are what can be checked.
            let sidecar = credentials == .valid ? "/bin/cat" : root + "/no-such-sidecar"
            let text = "channels:\n" + blocks.joined(separator: "\n") + "\n  sidecars:\n    - channel: chatops\n      command: \"\(sidecar)\"\n"
            let path = root + "/config-\(credentials == .valid ? "good" : "wrong").yaml"
            try text.write(toFile: path, atomically: true, encoding: .utf8)
            return (path, text)
        }

        // Good: every service answers its dry call and takes the credentials.
        let good = try gatewayConfig(.valid)
        let goodEnvironment = environment(apns.environment.merging(fcm.environment) { $1 }.merging(["SOULACY_RELAY_MAILBOX_URL": relay.url]) { $1 })
        let healthy = try await doctor(["--data", gateway.dataDirectory, "--gateway-config", good.path], environment: goodEnvironment)
        #expect(healthy.status == 0, "\(healthy.output)")
        for (check, words) in [("apns", "provider token (team \(APNsStandIn.teamID), key \(APNsStandIn.keyID)) is accepted"),
                               ("fcm", "access token for \(FCMStandIn.clientEmail) is accepted"),
                               ("relay mailbox", "GET /health answered ok"),
                               ("channel telegram", "getMe: the token is accepted"),
                               ("channel slack", "auth.test: the token is accepted"),
                               ("channel discord", "GET /users/@me: the token is accepted"),
                               ("channel email", "AUTH accepted for \(SMTPStandIn.user)"),
                               ("channel webhook", "no dry call"),
                               ("channel chatops", "sidecar /bin/cat is executable"),
                               ("clock", "within 30 s of")] {
            let found = line(healthy.output, check)
            #expect(found?.hasPrefix("OK") == true && found?.contains(words) == true, "\(check): \(found ?? "no line")\n\(healthy.output)")
        }
        #expect(line(healthy.output, "clock")?.contains("APNs production") == true && line(healthy.output, "clock")?.contains("FCM") == true)

        // Dry means dry: APNs refused the impossible token after the provider token, FCM only validated, nothing reached a chat or a mailbox.
        let apnsRequests = try await apns.requests()
        #expect(!apnsRequests.isEmpty && apnsRequests.allSatisfy { $0["reason"]?.stringValue == "BadDeviceToken" }, "\(apnsRequests)")
        let fcmRequests = try await fcm.requests()
        #expect(!fcmRequests.isEmpty && fcmRequests.allSatisfy { $0["validate_only"] == true }, "\(fcmRequests)")
        for channel in channels {
            #expect(try await channel.received().isEmpty, "\(channel.kind) received a message")
        }

        // Wrong: a key id the key is not, another service account's key, and each channel's refused credentials.
        let otherKey = root + "/other-sa-key.pem"
        try await runProgram("/usr/bin/openssl", ["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", otherKey])
        var account = try #require(try JSONValue.parse(Array(contents(fcm.credentialsFile))).objectValue)
        account["private_key"] = .string(try String(contentsOfFile: otherKey, encoding: .utf8))
        let wrongCredentials = root + "/wrong-service-account.json"
        try JSONValue.object(account).serialized().write(toFile: wrongCredentials, atomically: true, encoding: .utf8)
        chmod(wrongCredentials, 0o600)
        let wrong = try gatewayConfig(.wrong)
        let wrongEnvironment = goodEnvironment.merging(["SOULACY_MOBILE_APNS_KEY_ID": "WRONGKEY12", "SOULACY_MOBILE_FCM_CREDENTIALS_FILE": wrongCredentials,
                                                        "SOULACY_RELAY_MAILBOX_URL": "http://127.0.0.1:\(freePort())"]) { $1 }
        let refused = try await doctor(["--data", gateway.dataDirectory, "--gateway-config", wrong.path], environment: wrongEnvironment)
        #expect(refused.status == 1, "\(refused.output)")
        for (check, words) in [("apns", "403 InvalidProviderToken"), ("fcm", "invalid_grant"), ("relay mailbox", "unreachable"),
                               ("channel telegram", "Unauthorized"), ("channel slack", "invalid_auth"), ("channel discord", "401: Unauthorized"),
                               ("channel email", "535"), ("channel chatops", "is not an executable file")] {
            let found = line(refused.output, check)
            #expect(found?.hasPrefix("FAIL") == true && found?.contains(words) == true && found?.contains("fix: ") == true,
                    "\(check): \(found ?? "no line")\n\(refused.output)")
        }
        #expect(line(refused.output, "apns")?.contains("SOULACY_MOBILE_APNS_KEY_ID") == true)

        // No secret in either report: the tokens, passwords and secrets configured, the keys, and what was minted from them.
        var secrets = [TelegramStandIn.token, SlackStandIn.botToken, DiscordStandIn.token, SMTPStandIn.password]
        for text in [good.text, wrong.text] {
            for key in ["token", "bot_token", "password", "secret"] {
                let pattern = try NSRegularExpression(pattern: "\\b\(key): \"([^\"]+)\"")
                for match in pattern.matches(in: text, range: NSRange(text.startIndex..., in: text)) {
                    secrets.append(String(text[Range(match.range(at: 1), in: text)!]))
                }
            }
        }
        for pem in [apns.keyFile, otherKey] {
            secrets += try String(contentsOfFile: pem, encoding: .utf8).split(separator: "\n").filter { !$0.hasPrefix("-----") }.map(String.init)
        }
        #expect(secrets.count > 12)
        for output in [healthy.output, refused.output] {
            for secret in secrets { #expect(!output.contains(secret), "a secret was printed: \(secret.prefix(6))…") }
            // Minted credentials: Google access tokens, provider JWTs and OAuth assertions.
            #expect(!output.contains("ya29.") && !output.contains("eyJ"), "\(output)")
        }
    }

    @Test("the clock: over 30 s off a service whose credentials are time-bound is a FAIL, off another a WARN; HTTP dates in all three forms")
    func clock() {
        let now = Date(timeIntervalSince1970: 1_750_000_000)
        func reading(_ service: String, skew: TimeInterval, bound: Bool) -> ServiceClockReading {
            ServiceClockReading(service: service, serviceDate: now.addingTimeInterval(-skew), localDate: now, credentialsAreTimeBound: bound)
        }
        let apns = Doctor.clock([reading("APNs production", skew: 45, bound: true), reading("Telegram", skew: 2, bound: false)])
        #expect(apns.status == .fail && apns.message.contains("45 s ahead of APNs production's") && apns.message.contains("APNs and FCM refuse"), "\(apns)")
        #expect(apns.fix?.contains("timedatectl set-ntp true") == true)
        let behind = Doctor.clock([reading("FCM", skew: -90, bound: true)])
        #expect(behind.status == .fail && behind.message.contains("90 s behind FCM's"), "\(behind)")
        let chat = Doctor.clock([reading("Slack", skew: 40, bound: false)])
        #expect(chat.status == .warn && chat.message.contains("40 s ahead of Slack's"), "\(chat)")
        let fine = Doctor.clock([reading("APNs production", skew: 29, bound: true), reading("FCM", skew: -1, bound: true)])
        #expect(fine.status == .ok && fine.message.contains("APNs production, FCM"), "\(fine)")
        #expect(Doctor.clock([]).status == .warn)

        // RFC 9110 §5.6.7's example instant in its three forms.
        let expected = Date(timeIntervalSince1970: 784_111_777)
        for text in ["Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994"] {
            #expect(ServiceClockReading.httpDate(text) == expected, "\(text)")
        }
        #expect(ServiceClockReading.httpDate("yesterday") == nil)
    }
}
