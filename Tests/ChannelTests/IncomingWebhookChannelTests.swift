import ChannelAPI
import Foundation
import GatewayTestSupport
import JSON
import Testing
import Webhooks

/// Teams and Google Chat incoming webhooks against a stand-in that checks what Microsoft and Google check.
@Suite("Incoming webhook channels", .serialized)
struct IncomingWebhookChannelTests {
    func output(_ parts: [String] = ["All green.", "Next run at 06:00."]) -> Output {
        Output(agentID: "nightly", agentName: "Nightly checks", sessionID: "s1", parts: parts)
    }

    func send(_ output: Output, to: String = "", id: String = UUID().uuidString, attempt: Int = 1) -> ChannelSend {
        ChannelSend(id: id, channel: "teams", destination: to, output: output, attempt: attempt, createdAt: Date())
    }

    func teams(_ values: [String: ChannelSetting]) throws -> any OutboundChannel {
        try #require(try TeamsChannelFactory().make(ChannelSettings(kind: "teams", values: values)).first)
    }

    func googleChat(_ values: [String: ChannelSetting]) throws -> any OutboundChannel {
        try #require(try GoogleChatChannelFactory().make(ChannelSettings(kind: "google_chat", values: values)).first)
    }

    func refusal(_ channel: any OutboundChannel, _ to: String) -> String? {
        do {
            try channel.validate(destination: to)
            return nil
        } catch {
            return error.description
        }
    }

    func configError(_ factory: any ChannelFactory, _ values: [String: ChannelSetting]) -> ChannelConfigError? {
        do {
            _ = try factory.make(ChannelSettings(kind: factory.kind, values: values))
            return nil
        } catch {
            return error
        }
    }

    /// A body of about `bytes` bytes in paragraphs, with quotes and newlines that JSON escapes.
    func longBody(bytes: Int) -> String {
        var text = ""
        var n = 0
        while text.utf8.count < bytes {
            text += "Paragraph \(n): \"quoted\" façade — " + String(repeating: "word ", count: 60) + "\n\n"
            n += 1
        }
        return text.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    // MARK: Teams

    @Test("Teams: a MessageCard with summary, title and text, answered \"1\"")
    func teamsHappyPath() async throws {
        let standIn = try await IncomingWebhookStandIn.start(arguments: ["--teams-per-second", "0"])
        defer { standIn.stop() }
        let channel = try teams(["webhook_url": .string(standIn.teamsURL), "title": .string("Nightly"), "ca_file": .string(standIn.caFile)])
        #expect(await channel.attempt(send(output())) == .delivered(remoteID: nil))
        let message = try #require(try await standIn.messages().first)
        #expect(message["service"] == "teams")
        #expect(message["kind"] == "message_card")
        #expect(message["json"] == ["@type": "MessageCard", "@context": "https://schema.org/extensions", "summary": "Nightly", "title": "Nightly",
                                    "text": "All green.\n\nNext run at 06:00."])
        // Without `title`, the output's own title; `url` is an alias of webhook_url.
        let untitled = try teams(["url": .string(standIn.teamsURL), "ca_file": .string(standIn.caFile)])
        #expect(await untitled.attempt(send(output())) == .delivered(remoteID: nil))
        #expect(try await standIn.messages().last?["json"]?["title"] == "Result from nightly")
    }

    @Test("Teams: `to` is empty or a URL on the configured host; other hosts and plain http are refused")
    func teamsDestinations() throws {
        let channel = try teams(["webhook_url": .string("https://contoso.webhook.office.com/webhookb2/a/IncomingWebhook/b/c")])
        #expect(refusal(channel, "") == nil)
        #expect(refusal(channel, "https://CONTOSO.webhook.office.com/webhookb2/other/IncomingWebhook/d/e") == nil)
        #expect(refusal(channel, "https://evil.example.com/webhookb2/x")?.contains("may only change the path on the configured host (contoso.webhook.office.com)") == true)
        #expect(refusal(channel, "http://contoso.webhook.office.com/webhookb2/x")?.contains("https://") == true)
        #expect(refusal(channel, "general")?.contains("not an absolute https:// URL") == true)
    }

    @Test("Teams: a body over 28 KB goes out as several cards, each accepted, none repeated after a partial failure")
    func teamsSplitting() async throws {
        let standIn = try await IncomingWebhookStandIn.start(arguments: ["--teams-per-second", "0"])
        defer { standIn.stop() }
        let channel = try teams(["webhook_url": .string(standIn.teamsURL), "title": .string("Report"), "ca_file": .string(standIn.caFile)])
        let body = longBody(bytes: 70_000)
        try await standIn.script([[:], ["status": 503, "service": "teams"]])
        let first = send(output([body]))
        guard case .retry(_, let reason) = await channel.attempt(first) else { Issue.record("a 503 is worth a retry"); return }
        #expect(reason.contains("Teams answered 503"))
        #expect(reason.contains("(message 2 of 3)"))
        var second = first
        second.attempt = 2
        #expect(await channel.attempt(second) == .delivered(remoteID: nil))
        let messages = try await standIn.messages()
        #expect(messages.count == 3)
        #expect(messages.compactMap { $0["json"]?["title"]?.stringValue } == ["Report (1/3)", "Report (2/3)", "Report (3/3)"])
        let squeeze = { (s: String) in s.filter { !$0.isWhitespace } }
        #expect(squeeze(messages.compactMap { $0["json"]?["text"]?.stringValue }.joined()) == squeeze(body))
        let sizes = try await standIn.requests().filter { $0["status"] == 200 }.compactMap { $0["body_length"]?.numberValue }
        #expect(sizes.count == 3 && sizes.allSatisfy { $0 <= 28 * 1024 })
    }

    @Test("Teams: a deleted webhook and a removed channel's buried 400 are rejected with Teams' words, 429 and 5xx and a hang are retried")
    func teamsRefusals() async throws {
        let standIn = try await IncomingWebhookStandIn.start(arguments: ["--teams-per-second", "0"])
        defer { standIn.stop() }
        // The short timeout only where the hang is: an answered request must not lose a race with a loaded machine.
        let channel = try teams(["webhook_url": .string(standIn.teamsURL), "ca_file": .string(standIn.caFile), "timeout_seconds": .number(30)])
        let impatient = try teams(["webhook_url": .string(standIn.teamsURL), "ca_file": .string(standIn.caFile), "timeout_seconds": .number(1)])
        try await standIn.script([["status": 429], ["status": 500], ["hang": true]])
        guard case .retry(_, let throttled) = await channel.attempt(send(output())) else { Issue.record("429 is worth a retry"); return }
        #expect(throttled.contains("Teams answered 429"))
        guard case .retry = await channel.attempt(send(output())) else { Issue.record("500 is worth a retry"); return }
        guard case .retry(nil, let hung) = await impatient.attempt(send(output())) else { Issue.record("a timeout is worth a retry"); return }
        #expect(hung.contains("could not reach Teams"))
        try await standIn.delete(teams: IncomingWebhookStandIn.teamsPath)
        let gone = await channel.attempt(send(output()))
        #expect(gone == .rejected(reason: "Teams answered 404: Webhook not found or deleted."))
        // A webhook whose channel was removed answers 200 with the 400 in its text: refused, not delivered.
        try await standIn.control("POST", "/control/remove-channel", json: ["teams": .string(IncomingWebhookStandIn.teamsPath)])
        guard case .rejected(let buried) = await channel.attempt(send(output())) else { Issue.record("a 200 reporting a 400 is a refusal"); return }
        #expect(buried.hasPrefix("Teams answered 200 but: Webhook message delivery failed with error: Microsoft Teams endpoint returned HTTP error 400"))
        #expect(try await standIn.messages().isEmpty)
        // Nothing to say is not sent.
        guard case .failed = await channel.attempt(send(output([""]))) else { Issue.record("an empty output cannot be sent"); return }
    }

    @Test("Teams and Google Chat config errors name the key")
    func configErrors() {
        #expect(configError(TeamsChannelFactory(), [:])?.description == "channels.teams.webhook_url: is required (or its aliases url, default_output_to)")
        #expect(configError(TeamsChannelFactory(), ["webhook_url": .string("http://contoso.webhook.office.com/x")])?.field == "channels.teams.webhook_url")
        #expect(configError(TeamsChannelFactory(), ["default_output_to": .string("not a url")])?.field == "channels.teams.default_output_to")
        #expect(configError(TeamsChannelFactory(), ["webhook_url": .string("https://x.example/h"), "timeout_seconds": .string("soon")])?.field == "channels.teams.timeout_seconds")
        #expect(configError(GoogleChatChannelFactory(), [:])?.field == "channels.google_chat.webhook_url")
        #expect(configError(GoogleChatChannelFactory(), ["url": .string("chat.googleapis.com/v1/spaces/x")])?.field == "channels.google_chat.url")
        #expect(configError(TeamsChannelFactory(), ["default_output_to": .string("https://contoso.webhook.office.com/x")]) == nil)
    }

    // MARK: Google Chat

    @Test("Google Chat: {\"text\": \"<prefix>\\n\\n<body>\"}, the created message's name as the remote id")
    func googleHappyPath() async throws {
        let standIn = try await IncomingWebhookStandIn.start()
        defer { standIn.stop() }
        let channel = try googleChat(["webhook_url": .string(standIn.googleChatURL()), "prefix": .string("🌙 Nightly"), "ca_file": .string(standIn.caFile)])
        guard case .delivered(let remoteID?) = await channel.attempt(send(output())) else { Issue.record("expected a delivery with the message name"); return }
        #expect(remoteID.hasPrefix("spaces/AAAAsoulacy/messages/"))
        let message = try #require(try await standIn.messages().first)
        #expect(message["space"] == "AAAAsoulacy")
        #expect(message["json"] == ["text": "🌙 Nightly\n\nAll green.\n\nNext run at 06:00."])
        #expect(message["name"]?.stringValue == remoteID)
    }

    @Test("Google Chat: a body over 32,000 bytes goes out as several messages, each within the limit")
    func googleSplitting() async throws {
        let standIn = try await IncomingWebhookStandIn.start()
        defer { standIn.stop() }
        let channel = try googleChat(["default_output_to": .string(standIn.googleChatURL()), "prefix": .string("Report"), "ca_file": .string(standIn.caFile)])
        let body = longBody(bytes: 70_000)
        guard case .delivered(let remoteID?) = await channel.attempt(send(output([body]))) else { Issue.record("expected a delivery"); return }
        let messages = try await standIn.messages()
        #expect(messages.count == 3)
        #expect(messages.first?["name"]?.stringValue == remoteID)
        let texts = messages.compactMap { $0["json"]?["text"]?.stringValue }
        #expect(texts.first?.hasPrefix("Report\n\nParagraph 0:") == true)
        let squeeze = { (s: String) in s.filter { !$0.isWhitespace } }
        #expect(squeeze(texts.joined()) == squeeze("Report" + body))
        let sizes = try await standIn.requests().compactMap { $0["body_length"]?.numberValue }
        #expect(sizes.count == 3 && sizes.allSatisfy { $0 <= 32_000 })
        #expect(try await standIn.requests().allSatisfy { $0["status"] == 200 })
    }

    @Test("Google Chat: a bad key, a bad token and a deleted space are rejected with Google's message and no key or token")
    func googleRefusals() async throws {
        let standIn = try await IncomingWebhookStandIn.start()
        defer { standIn.stop() }
        let wrongKey = "AIzaSyWRONGKEY0000000000000000000000000"
        let wrongToken = "wrong-token-0000000000000000000000000000"
        let badKey = try googleChat(["webhook_url": .string(standIn.googleChatURL(key: wrongKey)), "ca_file": .string(standIn.caFile)])
        let badToken = try googleChat(["webhook_url": .string(standIn.googleChatURL(token: wrongToken)), "ca_file": .string(standIn.caFile)])
        let good = try googleChat(["webhook_url": .string(standIn.googleChatURL()), "ca_file": .string(standIn.caFile), "timeout_seconds": .number(30)])
        let impatient = try googleChat(["webhook_url": .string(standIn.googleChatURL()), "ca_file": .string(standIn.caFile), "timeout_seconds": .number(1)])
        var reasons: [String] = []
        let keyOutcome = await badKey.attempt(send(output()))
        #expect(keyOutcome == .rejected(reason: "Google Chat answered 400: INVALID_ARGUMENT: API key not valid. Please pass a valid API key."))
        let tokenOutcome = await badToken.attempt(send(output()))
        guard case .rejected(let tokenReason) = tokenOutcome else { Issue.record("a bad token is final"); return }
        #expect(tokenReason.hasPrefix("Google Chat answered 401: UNAUTHENTICATED: Request had invalid authentication credentials."))
        reasons.append(tokenReason)
        try await standIn.script([["status": 429, "service": "google_chat"], ["status": 503, "service": "google_chat"], ["hang": true, "service": "google_chat"]])
        guard case .retry(_, let exhausted) = await good.attempt(send(output())) else { Issue.record("429 is worth a retry"); return }
        #expect(exhausted == "Google Chat answered 429: RESOURCE_EXHAUSTED: Resource has been exhausted (e.g. check quota).")
        guard case .retry(_, let unavailable) = await good.attempt(send(output())) else { Issue.record("503 is worth a retry"); return }
        #expect(unavailable.contains("UNAVAILABLE"))
        guard case .retry(nil, let hung) = await impatient.attempt(send(output())) else { Issue.record("a timeout is worth a retry"); return }
        reasons += [exhausted, unavailable, hung]
        try await standIn.delete(google: IncomingWebhookStandIn.googleSpace)
        guard case .rejected(let notFound) = await good.attempt(send(output())) else { Issue.record("a deleted space is final"); return }
        #expect(notFound == "Google Chat answered 404: NOT_FOUND: Requested entity was not found.")
        reasons.append(notFound)
        standIn.stop()
        guard case .retry(_, let refused) = await good.attempt(send(output())) else { Issue.record("no connection is worth a retry"); return }
        reasons.append(refused)
        for reason in reasons {
            for secret in [IncomingWebhookStandIn.googleKey, IncomingWebhookStandIn.googleToken, wrongKey, wrongToken, "key=", "token="] {
                #expect(!reason.contains(secret), "\(reason)")
            }
        }
    }

    @Test("Google Chat: `to` may change only the path on the configured host")
    func googleDestinations() throws {
        let channel = try googleChat(["webhook_url": .string("https://chat.googleapis.com/v1/spaces/AAA/messages?key=k&token=t")])
        #expect(refusal(channel, "") == nil)
        #expect(refusal(channel, "https://chat.googleapis.com/v1/spaces/BBB/messages?key=k2&token=t2") == nil)
        #expect(refusal(channel, "https://chat.example.com/v1/spaces/BBB/messages")?.contains("only change the path on the configured host (chat.googleapis.com)") == true)
    }
}
