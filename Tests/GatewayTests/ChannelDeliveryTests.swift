import ChannelAPI
import ChannelTesting
import Foundation
import Gateway
import Mobile
import GatewayTestSupport
import APIKit
import SQLite
import Testing

/// Every channel through the one durable hand-off, from SOUL.yaml agents, configured the way Soulacy users already
/// configure them (`channels:` in the gateway config), to local stand-ins of the services.
@Suite("Channel delivery", .serialized)
struct ChannelDeliveryTests {
    static let quickRetries = RetryPolicy(initialDelay: 0.2, maximumDelay: 0.5)

    static func agent(_ id: String, channel: String, to: String, command: String = "echo \\\"report for $SOULACY_AGENT_ID\\\"") -> String {
        """
        agents:
          - id: \(id)
            name: \(id.capitalized)
            enabled: true
            trigger: cron
            schedule:
              cron: "0 0 1 1 *"
              output: {channel: \(channel), to: "\(to)"}
            runner:
              command: ["/bin/sh", "-c", "\(command)"]
        """
    }

    func outputs(_ gw: TestGateway, run: JSONValue) async throws -> [JSONValue] {
        let id = try #require(run["id"]?.stringValue)
        return try await gw.request("GET", "/api/v1/runs/\(id)").json["outputs"]?.arrayValue ?? []
    }

    func waitForState(_ gw: TestGateway, run: JSONValue, _ states: Set<String>) async throws -> JSONValue? {
        let deadline = ContinuousClock.now + .seconds(20)
        var last: JSONValue?
        while ContinuousClock.now < deadline {
            last = try await outputs(gw, run: run).first
            if last?["state"]?.stringValue.map(states.contains) == true { return last }
            try await Task.sleep(for: .milliseconds(50))
        }
        return last
    }

    @Test("a webhook output from a SOUL.yaml agent: recorded with the run, signed and verified by an independent receiver, its state on the run")
    func webhookDelivered() async throws {
        let secret = WebhookReceiverStandIn.makeSecret()
        let receiver = try await WebhookReceiverStandIn.start(secrets: [secret])
        defer { receiver.stop() }
        let config = """
            channels:
              webhook:
                enabled: true
                ca_file: \(receiver.caFile)
                endpoints:
                  reports: {url: "\(receiver.url())", secret: "\(secret)"}
            """
        try await withTestGateway(config: Self.agent("brief", channel: "webhook", to: "reports"), retryPolicy: Self.quickRetries, gatewayConfig: config) { gw in
            let run = try await gw.runAgent("brief", input: "")
            #expect(run["status"] == "succeeded", "\(run)")
            let output = try #require(try await waitForState(gw, run: run, ["delivered"]))
            #expect(output["channel"] == "webhook" && output["destination"] == "reports" && output["attempts"] == 1)
            let deliveries = try await receiver.deliveries()
            #expect(deliveries.count == 1)
            let delivery = try #require(deliveries.first)
            #expect(delivery["verified"] == true && delivery["standard"]?["verified"] == true, "\(delivery)")
            #expect(delivery["headers"]?["webhook-id"] == output["id"])
            let body = try JSONValue.parse(Array((delivery["body"]?.stringValue ?? "").utf8))
            #expect(body["agent_id"] == "brief" && body["parts"]?[0]?["text"]?.stringValue?.contains("report for") == true)
            // The run is its person's: another person learns nothing of it.
            let priya = try await gw.mintKey(subject: "priya", role: "viewer")
            #expect(try await gw.request("GET", "/api/v1/runs/\(run["id"]!.stringValue!)", key: .some(priya)).status == 404)
        }
    }

    @Test("the service down, then back: the output waits and is delivered once, with the same id; a refusal ends rejected with the service's words")
    func downThenBackAndRejected() async throws {
        let secret = WebhookReceiverStandIn.makeSecret()
        let receiver = try await WebhookReceiverStandIn.start(secrets: [secret])
        defer { receiver.stop() }
        try await receiver.setDefault(status: 503)
        let config = """
            channels:
              webhook:
                enabled: true
                ca_file: \(receiver.caFile)
                endpoints:
                  reports: {url: "\(receiver.url())", secret: "\(secret)"}
                  gone: {url: "\(receiver.url("/hooks/gone"))", secret: "\(secret)"}
            """
        let agents = Self.agent("brief", channel: "webhook", to: "reports") + "\n" + Self.agent("old", channel: "webhook", to: "gone").replacingOccurrences(of: "agents:\n", with: "")
        try await withTestGateway(config: agents, retryPolicy: Self.quickRetries, gatewayConfig: config) { gw in
            let run = try await gw.runAgent("brief", input: "")
            #expect(try await eventually { try await receiver.deliveries().count >= 3 }, "retried while the service is down")
            let waiting = try #require(try await outputs(gw, run: run).first)
            #expect(waiting["state"] == "pending" && waiting["last_reason"]?.stringValue?.contains("503") == true, "\(waiting)")
            try await receiver.setDefault(status: 200)
            let delivered = try #require(try await waitForState(gw, run: run, ["delivered"]))
            let ids = Set(try await receiver.deliveries().compactMap { $0["headers"]?["webhook-id"]?.stringValue })
            #expect(ids == [delivered["id"]!.stringValue!], "every attempt carries the one delivery id")
            #expect((delivered["attempts"]?.numberValue ?? 0) >= 3)

            try await receiver.setDefault(status: 410, path: "/hooks/gone")
            let refused = try await gw.runAgent("old", input: "")
            let rejected = try #require(try await waitForState(gw, run: refused, ["rejected"]))
            #expect(rejected["last_reason"]?.stringValue?.contains("410") == true, "\(rejected)")
            let reason = rejected["last_reason"]?.stringValue ?? ""
            #expect(reason.contains(secret) == false)
            // The console's health page names the endpoint its service said is gone (by its config name, never its
            // URL or secret); the one that works is not listed.
            let health = try await gw.request("GET", "/api/v1/console/health").json
            let webhook = try #require(health["channels"]?.arrayValue?.first { $0["name"] == "webhook" }, "\(health)")
            let disabled = webhook["disabled_endpoints"]?.arrayValue ?? []
            #expect(disabled.map { $0["endpoint"]?.stringValue } == ["gone"], "\(webhook)")
            #expect(disabled.first?["reason"]?.stringValue?.contains("410") == true && disabled.first?["since"]?.stringValue != nil, "\(webhook)")
            let text = health.serialized()
            #expect(!text.contains(secret) && !text.contains("/hooks/gone"), "\(text)")
            // Channels that never disable an endpoint carry no list.
            #expect(health["channels"]?.arrayValue?.first { $0["name"] == "mobile" }?["disabled_endpoints"] == nil)
        }
    }

    @Test("email: mail that arrives over IMAP runs the mailbox's agent in email-<sender> and its reply goes back to the sender over SMTP, once across a restart")
    func emailInAndOut() async throws {
        let smtp = try await SMTPStandIn.start()
        defer { smtp.stop() }
        let imap = try await IMAPStandIn.start()
        defer { imap.stop() }
        // One ca_file for the block: the two stand-ins' certificates in one bundle, as a site's own CA would be.
        let directory = TestGateway.makeTemporaryDirectory()
        let bundle = directory + "/mail-ca.pem"
        try (String(contentsOfFile: smtp.caFile, encoding: .utf8) + "\n" + String(contentsOfFile: imap.caFile, encoding: .utf8))
            .write(toFile: bundle, atomically: true, encoding: .utf8)
        let config = """
            channels:
              email:
                enabled: true
                host: 127.0.0.1
                port: \(smtp.tlsPort)
                username: "\(SMTPStandIn.user)"
                password: "\(SMTPStandIn.password)"
                from: "Soulacy Gateway <\(SMTPStandIn.user)>"
                ca_file: "\(bundle)"
                timeout_seconds: 10
                agent_id: helper
                imap_host: 127.0.0.1
                imap_port: \(imap.tlsPort)
                imap_username: "\(IMAPStandIn.user)"
                imap_password: "\(IMAPStandIn.password)"
                imap_check_seconds: 1
            """
        let agents = """
            agents:
              - id: helper
                name: Helper
                enabled: true
                trigger: channel
                channels: [email]
                runner:
                  command: ["/bin/sh", "-c", "echo \\"$SOULACY_SESSION_ID: you said: $(cat)\\""]
            """
        let sender = "carol@example.test"
        @Sendable func replies() async throws -> [JSONValue] {
            try await smtp.messages().filter { $0["rcpt_tos"]?.arrayValue?.compactMap(\.stringValue) == [sender] }
        }
        try await withTestGateway(config: agents, directory: directory, retryPolicy: Self.quickRetries, gatewayConfig: config) { gw in
            // The poller's first round starts at UIDNEXT (mail already there is left alone): mail comes after it.
            #expect(try await eventually(timeout: .seconds(30)) { try await imap.logins().count >= 2 }, "the poller logged in twice")
            try await imap.append(["from": .string("Carol <\(sender)>"), "subject": "lunch", "body": "is noon fine?"])
            #expect(try await eventually(timeout: .seconds(30)) { try await !replies().isEmpty }, "a reply reached the sender")
            let reply = try #require(try await replies().first)
            let body = reply["body"]?.stringValue ?? ""
            #expect(body.contains("email-\(sender): you said:") && body.contains("is noon fine?"), "\(body)")
            #expect(reply["tls"] == true && reply["auth_user"]?.stringValue == SMTPStandIn.user)
        }
        // A stopped gateway checks the mailbox no more (its poll, waiting between checks, ends with it): a check
        // left running would log in again every second, and at the process's exit run TLS code on its own.
        // A check already in its exchange finishes unheard: counted from once the count held for 2 s (a check that
        // a loaded machine slowed may log in late; one left running never lets it hold).
        var afterStop = try await imap.logins().count
        for _ in 0..<10 {
            try await Task.sleep(for: .seconds(2))
            let now = try await imap.logins().count
            if now == afterStop { break }
            afterStop = now
        }
        try await Task.sleep(for: .seconds(3))
        #expect(try await imap.logins().count == afterStop, "the mailbox was checked after the gateway stopped")
        // A restart polls from the stored cursor: the mail is neither lost nor answered twice.
        try await withTestGateway(config: agents, directory: directory, retryPolicy: Self.quickRetries, gatewayConfig: config) { _ in
            let before = try await imap.logins().count
            #expect(try await eventually(timeout: .seconds(30)) { try await imap.logins().count >= before + 2 }, "polled again after the restart")
            #expect(try await replies().count == 1)
        }
    }

    @Test("soulacy channel-check -- COMMAND: the example sidecar passes every rule (exit 0); the broken one is flagged rule by rule (exit 1)")
    func channelCheckCommand() async throws {
        let examples = RepositoryPaths.root + "/examples/channels/file-sidecar/"
        let directory = TestGateway.makeTemporaryDirectory()
        // The example writes its outbox in the working directory by default: keep it in a temporary one.
        let environment = ["PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": directory, "FILE_SIDECAR_OUTBOX": directory + "/outbox.ndjson",
                           "FILE_SIDECAR_INBOX": directory + "/inbox.txt"]
        let good = try await runProgram(RepositoryPaths.soulacyBinary, ["channel-check", "--", "python3", examples + "file_sidecar.py"], environment: environment)
        let lines = good.output.split(separator: "\n")
        #expect(good.status == 0, "\(good.output)")
        #expect(lines.filter { $0.hasPrefix("PASS ") }.count >= 5 && !lines.contains { $0.hasPrefix("FAIL ") }, "\(good.output)")
        let broken = try await runProgram(RepositoryPaths.soulacyBinary, ["channel-check", "--", "python3", examples + "broken_sidecar.py"], environment: environment)
        #expect(broken.status == 1, "\(broken.output)")
        #expect(broken.output.contains("FAIL hello") && broken.output.contains("FAIL shutdown"), "\(broken.output)")
        let usage = try await runProgram(RepositoryPaths.soulacyBinary, ["channel-check"], environment: environment)
        #expect(usage.status == 64 && usage.output.contains("usage: soulacy channel-check -- COMMAND"), "\(usage.output)")
    }

    @Test("telegram from a SOUL.yaml agent, and a message to the agent's bot answered in that chat, taken once across a restart")
    func telegramOutAndIn() async throws {
        let telegram = try await TelegramStandIn.start()
        defer { telegram.stop() }
        let config = """
            channels:
              telegram:
                enabled: true
                token: "\(TelegramStandIn.token)"
                agent_id: helper
                api_url: \(telegram.baseURL)
                ca_file: \(telegram.caFile)
            """
        let agents = """
            agents:
              - id: brief
                name: Brief
                enabled: true
                trigger: cron
                schedule:
                  cron: "0 0 1 1 *"
                  output: {channel: telegram, to: "\(TelegramStandIn.privateChat)"}
                runner:
                  command: ["/bin/sh", "-c", "echo morning brief"]
              - id: helper
                name: Helper
                enabled: true
                trigger: channel
                channels: [telegram]
                runner:
                  command: ["/bin/sh", "-c", "echo \\"you said: $(cat)\\""]
            """
        let directory = TestGateway.makeTemporaryDirectory()
        try await withTestGateway(config: agents, directory: directory, retryPolicy: Self.quickRetries, gatewayConfig: config) { gw in
            let run = try await gw.runAgent("brief", input: "")
            _ = try #require(try await waitForState(gw, run: run, ["delivered"]))
            #expect(try await telegram.messages().contains { $0["text"] == "morning brief" && $0["chat"]?["id"]?.numberValue == Double(TelegramStandIn.privateChat) })
            try await telegram.inject([TelegramStandIn.message("what is on today?", chat: TelegramStandIn.privateChat, type: "private", from: 99)])
            #expect(try await eventually(timeout: .seconds(20)) { try await telegram.messages().contains { $0["text"]?.stringValue == "you said: what is on today?" } })
        }
        // A restart asks from the stored offset: the message is neither lost nor answered twice.
        try await withTestGateway(config: agents, directory: directory, retryPolicy: Self.quickRetries, gatewayConfig: config) { gw in
            try await Task.sleep(for: .seconds(1))
            let replies = try await telegram.messages().filter { $0["text"]?.stringValue == "you said: what is on today?" }
            #expect(replies.count == 1)
            let taken = try gw.gateway.database.read { try $0.query("SELECT COUNT(*) AS n FROM channel_inbound").first?.int("n") }
            #expect(taken == 1)
        }
    }

    @Test("soulacy check knows the configured channels: telegram is valid when configured, a warning otherwise; a broken block is an error naming its key")
    func checkKnowsChannels() async throws {
        let directory = TestGateway.makeTemporaryDirectory()
        let soul = directory + "/SOUL.yaml"
        try Self.agent("brief", channel: "telegram", to: "424242").write(toFile: soul, atomically: true, encoding: .utf8)
        let configured = directory + "/configured.yaml"
        try "channels:\n  telegram:\n    enabled: true\n    token: \"1:abc\"\n".write(toFile: configured, atomically: true, encoding: .utf8)
        let empty = directory + "/empty.yaml"
        try "channels: {}\n".write(toFile: empty, atomically: true, encoding: .utf8)
        let broken = directory + "/broken.yaml"
        try "channels:\n  telegram:\n    enabled: true\n".write(toFile: broken, atomically: true, encoding: .utf8)

        let ok = try await runProgram(RepositoryPaths.soulacyBinary, ["check", soul, "--gateway-config", configured])
        #expect(ok.status == 0 && !ok.output.contains("telegram") || ok.output.contains("delivers to telegram"), "\(ok.output)")
        let unconfigured = try await runProgram(RepositoryPaths.soulacyBinary, ["check", soul, "--gateway-config", empty])
        #expect(unconfigured.status == 0 && unconfigured.output.contains("warning"), "\(unconfigured.output)")
        let refused = try await runProgram(RepositoryPaths.soulacyBinary, ["check", soul, "--gateway-config", broken])
        #expect(refused.status != 0 && refused.output.contains("channels.telegram.token"), "\(refused.output)")
    }
}
