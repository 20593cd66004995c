import ChannelAPI
import ChannelSupport
import Foundation
import GatewayTestSupport
import JSON
import Slack
import Testing

/// The Slack channel against the Web API stand-in: chat.postMessage over TLS, Slack's `ok: false` codes, splitting
/// at 40,000 characters, `to` and `channels.slack`.
@Suite("Slack channel")
struct SlackChannelTests {
    let secrets = [SlackStandIn.botToken, SlackStandIn.secondBotToken, "xoxb-0000000000-0000000000-wrongStandinToken"]

    func channel(_ standIn: SlackStandIn, token: String = SlackStandIn.botToken, extra: [String: ChannelSetting] = [:]) throws -> any OutboundChannel {
        var values: [String: ChannelSetting] = ["enabled": .bool(true), "bot_token": .string(token), "app_token": .string("xapp-1-A0SOULACY-standin"),
                                                "api_url": .string(standIn.apiURL), "ca_file": .string(standIn.caFile), "timeout_seconds": .number(2)]
        values.merge(extra) { $1 }
        let made = try SlackChannelFactory().make(ChannelSettings(kind: "slack", values: values))
        try #require(made.count == 1)
        return made[0]
    }

    func send(_ text: String, to: String = SlackStandIn.general, id: String = UUID().uuidString, attempt: Int = 1) -> ChannelSend {
        ChatTestKit.send(text, to: to, channel: "slack", id: id, attempt: attempt)
    }

    @Test("a message is one chat.postMessage: Bearer token, JSON {channel, text} with charset, delivered with Slack's ts")
    func happyPath() async throws {
        let standIn = try await SlackStandIn.start()
        let slack = try channel(standIn)
        #expect(slack.name == "slack")
        let outcome = await slack.attempt(send("The weekly report is ready.\n\nThree items need you."))
        let requests = try await standIn.requests()
        try #require(requests.count == 1)
        let request = requests[0]
        #expect(request["method"] == "POST")
        #expect(request["path"] == "/api/chat.postMessage")
        #expect(request["http_version"] == "2")
        #expect(request["headers"]?["authorization"] == .string("Bearer \(SlackStandIn.botToken)"))
        #expect(request["headers"]?["content-type"] == "application/json; charset=utf-8")
        let body = try ChatTestKit.body(request)
        #expect(ChatTestKit.keys(body) == ["channel", "text"])
        #expect(body["channel"] == .string(SlackStandIn.general))
        #expect(body["text"] == "The weekly report is ready.\n\nThree items need you.")
        // Slack's answer, as documented: ok, the channel, the ts; no missing_charset warning.
        let answer = try #require(request["response"])
        #expect(answer["ok"] == true)
        #expect(answer["warning"] == nil)
        let ts = try #require(answer["ts"]?.stringValue)
        #expect(ts.range(of: #"^\d+\.\d{6}$"#, options: .regularExpression) != nil)
        #expect(outcome == .delivered(remoteID: ts))
        let messages = try await standIn.messages()
        #expect(messages.count == 1)
        #expect(messages.first?["channel"] == .string(SlackStandIn.general))
    }

    @Test("a text over 40,000 characters goes as several messages in order, each within Slack's limit")
    func splitting() async throws {
        let standIn = try await SlackStandIn.start()
        let slack = try channel(standIn)
        let text = ChatTestKit.paragraphs(totalCharacters: 85_000, paragraph: 1000)
        let expected = MessageText.split(text, limit: 40_000)
        #expect(expected.count == 3)
        let outcome = await slack.attempt(send(text))
        let texts = try await standIn.messages().map { $0["text"]?.stringValue ?? "" }
        #expect(texts == expected)
        #expect(texts.allSatisfy { $0.unicodeScalars.count <= 40_000 })
        // No msg_too_long: every request was answered ok.
        #expect(try await standIn.requests().allSatisfy { $0["response"]?["ok"] == true })
        let stamps = try await standIn.messages().compactMap { $0["ts"]?.stringValue }
        #expect(outcome == .delivered(remoteID: stamps.joined(separator: ",")))
    }

    @Test("a rate limit on the second piece: the retry sends the second piece on, not the first again")
    func retryContinuesAfterDeliveredPieces() async throws {
        let standIn = try await SlackStandIn.start()
        let slack = try channel(standIn)
        let text = ChatTestKit.paragraphs(totalCharacters: 60_000, paragraph: 1000)
        let pieces = MessageText.split(text, limit: 40_000)
        try #require(pieces.count == 2)
        try await standIn.script([[:], ["status": 429, "retry_after": 3]])
        let id = UUID().uuidString
        let first = await slack.attempt(send(text, id: id))
        #expect(ChatTestKit.retryAfter(first) == .seconds(3))
        #expect(ChatTestKit.reason(first)?.contains("ratelimited") == true)
        #expect(ChatTestKit.reason(first)?.contains("piece 2 of 2") == true)
        let second = await slack.attempt(send(text, id: id, attempt: 2))
        let texts = try await standIn.messages().map { $0["text"]?.stringValue ?? "" }
        #expect(texts == pieces)
        #expect(try await standIn.requests().count == 3)
        #expect(ChatTestKit.remoteID(second)?.split(separator: ",").count == 2)
    }

    @Test("Slack's refusals: auth, the channel, archived are rejected with Slack's code; rate limits and 5xx are retried")
    func refusals() async throws {
        let standIn = try await SlackStandIn.start()
        let slack = try channel(standIn)

        let wrongToken = try channel(standIn, token: "xoxb-0000000000-0000000000-wrongStandinToken")
        let wrong = await wrongToken.attempt(send("hi"))
        #expect(wrong == .rejected(reason: "Slack answered invalid_auth"))

        for code in ["not_authed", "account_inactive", "channel_not_found", "missing_scope"] {
            try await standIn.script([["error": .string(code)]])
            let outcome = await slack.attempt(send("hi"))
            #expect(ChatTestKit.isRejected(outcome), "\(code): \(outcome)")
            #expect(ChatTestKit.reason(outcome)?.contains(code) == true)
            ChatTestKit.expectNoSecret(outcome, secrets)
        }

        let unknown = await slack.attempt(send("hi", to: "C0NOSUCH00"))
        #expect(unknown == .rejected(reason: "Slack answered channel_not_found"))

        try await standIn.channels([["id": "C0OUTSIDE1", "name": "outside", "member": false], ["id": "C0ARCHIVE1", "name": "old", "archived": true]])
        #expect(await slack.attempt(send("hi", to: "C0OUTSIDE1")) == .rejected(reason: "Slack answered not_in_channel"))
        #expect(await slack.attempt(send("hi", to: "C0ARCHIVE1")) == .rejected(reason: "Slack answered is_archived"))

        // A revoked token (the second bot's, so the first still works).
        let second = try channel(standIn, token: SlackStandIn.secondBotToken)
        try await standIn.revoke(SlackStandIn.secondBotToken)
        let revoked = await second.attempt(send("hi"))
        #expect(revoked == .rejected(reason: "Slack answered token_revoked"))

        // HTTP 429 with Retry-After.
        try await standIn.script([["status": 429, "retry_after": 12]])
        let limited = await slack.attempt(send("hi"))
        #expect(limited == .retry(after: .seconds(12), reason: "Slack answered 429: ratelimited"))

        // Slack's own passing trouble, as ok:false codes.
        for code in ["ratelimited", "service_unavailable", "internal_error"] {
            try await standIn.script([["error": .string(code)]])
            let outcome = await slack.attempt(send("hi"))
            #expect(outcome == .retry(after: nil, reason: "Slack answered \(code)"))
        }

        // The edge's 5xx with a text body.
        for status in [500, 503] {
            try await standIn.script([["status": .number(Double(status))]])
            let outcome = await slack.attempt(send("hi"))
            #expect(outcome == .retry(after: nil, reason: "Slack answered \(status): upstream connect error or disconnect/reset before headers"))
        }

        // After all that, a plain send still goes.
        #expect(ChatTestKit.remoteID(await slack.attempt(send("still here"))) != nil)
        for outcome in [wrong, unknown, revoked, limited] { ChatTestKit.expectNoSecret(outcome, secrets) }
    }

    @Test("a request Slack never answers, and a Slack that is gone, are retried")
    func hungAndUnreachable() async throws {
        let standIn = try await SlackStandIn.start()
        let slack = try channel(standIn, extra: ["timeout_seconds": .number(1)])
        try await standIn.script([["hang": true]])
        let started = ContinuousClock.now
        let hung = await slack.attempt(send("hi"))
        #expect(ContinuousClock.now - started < .seconds(30))
        #expect(ChatTestKit.isRetry(hung))
        #expect(ChatTestKit.reason(hung)?.hasPrefix("could not reach Slack") == true)
        try await standIn.reset()
        standIn.stop()
        let gone = await slack.attempt(send("hi"))
        #expect(ChatTestKit.isRetry(gone))
        #expect(ChatTestKit.reason(gone)?.hasPrefix("could not reach Slack") == true)
        ChatTestKit.expectNoSecret(hung, secrets)
        ChatTestKit.expectNoSecret(gone, secrets)
    }

    @Test("an empty output fails without a request")
    func emptyOutput() async throws {
        let standIn = try await SlackStandIn.start()
        let slack = try channel(standIn)
        let outcome = await slack.attempt(send(""))
        #expect(outcome == .failed(reason: "nothing to send: the output has no text"))
        #expect(try await standIn.requests().isEmpty)
    }

    @Test("`to` is a conversation id (C, G, D) or a user id (U, W) for a DM; a name or anything else is refused at load")
    func destinations() throws {
        let slack = SlackChannel(configuration: SlackConfiguration(id: "slack", botToken: SlackStandIn.botToken))
        for good in ["C0SOULACY1", "G01234ABCD", "D0123ABCD9", "U0123ABCDE", "W0123ABCDE", "C0123456789ABCDEF"] {
            #expect(throws: Never.self) { try slack.validate(destination: good) }
        }
        for bad in ["#general", "general", "c0soulacy1", "C01", "", " C0SOULACY1", "C0SOULACY1 ", "X0123ABCDE", "C0SOU-ACY1", "T0123ABCDE"] {
            #expect(throws: DestinationError.self) { try slack.validate(destination: bad) }
        }
        do {
            try slack.validate(destination: "#general")
        } catch {
            #expect(error.description.contains("'#general' is not a conversation id"))
        }
    }

    @Test("channels.slack: enabled, bot_token, app_token, bots with the original's ids, api_url, ca_file; errors name the key")
    func configuration() throws {
        let factory = SlackChannelFactory()
        #expect(factory.kind == "slack")
        func make(_ values: [String: ChannelSetting]) throws(ChannelConfigError) -> [any OutboundChannel] {
            try factory.make(ChannelSettings(kind: "slack", values: values))
        }
        func problem(_ values: [String: ChannelSetting]) -> String? {
            do { _ = try make(values); return nil } catch { return error.description }
        }
        let token = ChannelSetting.string(SlackStandIn.botToken)

        // Off, or not switched on: nothing, whatever else the block holds.
        #expect(try make(["enabled": .bool(false), "bot_token": token]).isEmpty)
        #expect(try make(["bot_token": token]).isEmpty)
        #expect(try make(["enabled": .bool(false)]).isEmpty)

        let single = try factory.configurations(ChannelSettings(kind: "slack", values: ["enabled": .bool(true), "bot_token": token,
                                                                                        "app_token": .string("xapp-1-A0-x")]))
        #expect(single == [SlackConfiguration(id: "slack", botToken: SlackStandIn.botToken, appToken: "xapp-1-A0-x")])

        let bots = try factory.configurations(ChannelSettings(kind: "slack", values: [
            "enabled": .bool(true), "bot_token": .string("xoxb-unused"), "api_url": .string("https://proxy.example/slack/api/"),
            "ca_file": .string("/etc/ca.pem"),
            "bots": .list([.map(["bot_token": token, "agent_id": .string("helper")]),
                           .map(["bot_token": .string(SlackStandIn.secondBotToken), "agent_id": .string("finance")]),
                           .map(["bot_token": token, "agent_id": .string("ops team"), "api_url": .string("https://other.example/api")])]),
        ]))
        #expect(bots.map(\.id) == ["slack", "slack-finance", "slack-ops-team"])
        #expect(bots.map(\.botToken) == [SlackStandIn.botToken, SlackStandIn.secondBotToken, SlackStandIn.botToken])
        #expect(bots.map(\.apiURL) == ["https://proxy.example/slack/api", "https://proxy.example/slack/api", "https://other.example/api"])
        #expect(bots.allSatisfy { $0.caFile == "/etc/ca.pem" })

        let on = ChannelSetting.bool(true)
        #expect(problem(["enabled": on]) == "channels.slack.bot_token: is required")
        #expect(problem(["enabled": on, "bot_token": .string("")]) == "channels.slack.bot_token: is required")
        #expect(problem(["enabled": on, "bot_token": .string("xapp-1-A0-x")])
                == "channels.slack.bot_token: must be a bot token (xoxb-…); this is an app-level token, which belongs in app_token")
        #expect(problem(["enabled": on, "bot_token": token, "app_token": .string("xoxb-2")])
                == "channels.slack.app_token: must be an app-level token (xapp-…)")
        #expect(problem(["enabled": on, "bot_token": token, "api_url": .string("slack.com/api")])
                == "channels.slack.api_url: must be an http:// or https:// URL, got 'slack.com/api'")
        #expect(problem(["enabled": on, "bot_token": token, "timeout_seconds": .number(0)])
                == "channels.slack.timeout_seconds: must be a whole number from 1 to 300, got '0'")
        #expect(problem(["enabled": .string("maybe"), "bot_token": token]) == "channels.slack.enabled: must be true or false, got 'maybe'")
        #expect(problem(["enabled": on, "bots": .list([.map(["agent_id": .string("helper")])])]) == "channels.slack.bots[0].bot_token: is required")
        #expect(problem(["enabled": on, "bots": .list([.map(["bot_token": token]), .map(["bot_token": token])])])
                == "channels.slack.bots[1].agent_id: is required for every bot after the first (its channel id is slack-<agent_id>)")
        #expect(problem(["enabled": on, "bots": .list([.map(["bot_token": token]), .map(["bot_token": token, "agent_id": .string("a")]),
                                                        .map(["bot_token": token, "agent_id": .string("a")])])])
                == "channels.slack.bots[2].agent_id: gives the channel id 'slack-a' a second time")
        #expect(problem(["enabled": on, "bots": .string("xoxb-1")]) == "channels.slack.bots: must be a list")
        // No error repeats a token.
        let wrongKind = problem(["enabled": on, "bot_token": .string("xapp-1-SECRETVALUE")])
        #expect(wrongKind != nil && wrongKind?.contains("SECRETVALUE") == false)
    }
}
