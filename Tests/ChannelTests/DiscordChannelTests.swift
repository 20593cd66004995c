import ChannelAPI
import ChannelSupport
import Discord
import Foundation
import GatewayTestSupport
import JSON
import Testing

/// The Discord channel against the REST stand-in: Create Message over TLS, 2000-character pieces in order, a retry
/// that continues from the first undelivered piece, Discord's JSON errors and rate limits, `to` and `channels.discord`.
@Suite("Discord channel")
struct DiscordChannelTests {
    let secrets = [DiscordStandIn.token, "MTEwMDAwMDAwMDAwMDAwMTAw.GwrongOne.notTheBotTokenAtAll0000"]

    func channel(_ standIn: DiscordStandIn, token: String = "Bot " + DiscordStandIn.token, extra: [String: ChannelSetting] = [:]) throws -> any OutboundChannel {
        var values: [String: ChannelSetting] = ["enabled": .bool(true), "token": .string(token), "api_url": .string(standIn.apiURL),
                                                "ca_file": .string(standIn.caFile), "timeout_seconds": .number(2)]
        values.merge(extra) { $1 }
        let made = try DiscordChannelFactory().make(ChannelSettings(kind: "discord", values: values))
        try #require(made.count == 1)
        return made[0]
    }

    func send(_ text: String, to: String = DiscordStandIn.channel, id: String = UUID().uuidString, attempt: Int = 1) -> ChannelSend {
        ChatTestKit.send(text, to: to, channel: "discord", id: id, attempt: attempt)
    }

    @Test("a message is one Create Message: Bot token (with or without the prefix in config), a DiscordBot user agent, JSON {content}")
    func happyPath() async throws {
        let standIn = try await DiscordStandIn.start()
        for token in ["Bot " + DiscordStandIn.token, DiscordStandIn.token] {
            let discord = try channel(standIn, token: token)
            #expect(discord.name == "discord")
            let outcome = await discord.attempt(send("The weekly report is ready."))
            let request = try #require(try await standIn.requests().last)
            #expect(request["method"] == "POST")
            #expect(request["path"] == .string("/api/v10/channels/\(DiscordStandIn.channel)/messages"))
            #expect(request["http_version"] == "2")
            #expect(request["headers"]?["authorization"] == .string("Bot \(DiscordStandIn.token)"))
            #expect(request["headers"]?["content-type"]?.stringValue?.hasPrefix("application/json") == true)
            #expect(request["user_agent_ok"] == true)
            let body = try ChatTestKit.body(request)
            #expect(ChatTestKit.keys(body) == ["content"])
            #expect(body["content"] == "The weekly report is ready.")
            // The Message object Discord documents: its id is a snowflake, in the channel we named, by the bot.
            let message = try #require(request["response"])
            let id = try #require(message["id"]?.stringValue)
            #expect(id.allSatisfy(\.isNumber) && (17...20).contains(id.count))
            #expect(message["channel_id"] == .string(DiscordStandIn.channel))
            #expect(message["author"]?["bot"] == true)
            #expect(message["content"] == "The weekly report is ready.")
            #expect(outcome == .delivered(remoteID: id))
        }
        #expect(try await standIn.messages().count == 2)
    }

    @Test("4,500 characters go as three messages, in order, each at most 2000 characters")
    func splitting() async throws {
        let standIn = try await DiscordStandIn.start()
        let discord = try channel(standIn)
        let text = ChatTestKit.paragraphs(totalCharacters: 4500)
        let outcome = await discord.attempt(send(text))
        let contents = try await standIn.messages().map { $0["content"]?.stringValue ?? "" }
        #expect(contents.count == 3)
        #expect(contents == MessageText.split(text, limit: 2000))
        #expect(contents.allSatisfy { $0.unicodeScalars.count <= 2000 && !$0.isEmpty })
        // In order, and nothing but the blank lines at the breaks lost.
        #expect(contents.joined(separator: "\n\n") == text)
        let ids = try await standIn.messages().compactMap { $0["id"]?.stringValue }
        #expect(outcome == .delivered(remoteID: ids.joined(separator: ",")))
    }

    @Test("a 429 on piece 2 is a retry after Discord's retry_after; the retry sends pieces 2 and 3 only")
    func retryContinuesFromTheFailedPiece() async throws {
        // A bucket roomy enough for the seven messages here (the bucket test has its own).
        let standIn = try await DiscordStandIn.start(bucketLimit: 20)
        let discord = try channel(standIn)
        let text = ChatTestKit.paragraphs(totalCharacters: 4500)
        let pieces = MessageText.split(text, limit: 2000)
        try #require(pieces.count == 3)
        try await standIn.script([[:], ["status": 429, "retry_after": 0.25]])
        let id = UUID().uuidString
        let first = await discord.attempt(send(text, id: id))
        #expect(first == .retry(after: .milliseconds(250),
                                reason: "Discord answered 429: You are being rate limited. (user rate limit) (piece 2 of 3; 1 delivered before it)"))
        #expect(try await standIn.messages().map { $0["content"]?.stringValue ?? "" } == [pieces[0]])

        let second = await discord.attempt(send(text, id: id, attempt: 2))
        let requests = try await standIn.requests()
        let sent = try requests.map { try ChatTestKit.body($0)["content"]?.stringValue ?? "" }
        #expect(sent == [pieces[0], pieces[1], pieces[1], pieces[2]])
        #expect(requests.map { $0["status"]?.numberValue } == [200, 429, 200, 200])
        let messages = try await standIn.messages()
        #expect(messages.map { $0["content"]?.stringValue ?? "" } == pieces)
        #expect(second == .delivered(remoteID: messages.compactMap { $0["id"]?.stringValue }.joined(separator: ",")))

        // Another send with the same text but its own id starts from the first piece.
        _ = await discord.attempt(send(text))
        #expect(try await standIn.messages().count == 6)
    }

    @Test("the per-channel bucket: an empty bucket mid-message holds the rest for X-RateLimit-Reset-After, then goes on from there")
    func bucket() async throws {
        // A window far longer than the test: the bucket refills only when the test says so, so a loaded machine
        // cannot see it refill between attempts (it did, once, in CI with a 3 s window).
        let standIn = try await DiscordStandIn.start(bucketLimit: 2, bucketWindow: 600)
        let discord = try channel(standIn)
        let text = ChatTestKit.paragraphs(totalCharacters: 4500)
        let pieces = MessageText.split(text, limit: 2000)
        let id = UUID().uuidString
        let first = await discord.attempt(send(text, id: id))
        let wait = try #require(ChatTestKit.retryAfter(first))
        // The hold is the bucket's X-RateLimit-Reset-After: most of the 600 s window is still to run.
        #expect(wait > .seconds(500) && wait <= .seconds(600))
        #expect(ChatTestKit.reason(first)?.contains("after piece 2 of 3") == true)
        // It stopped without earning a 429.
        #expect(try await standIn.requests().map { $0["status"]?.numberValue } == [200, 200])

        // Before the bucket refills, the bucket's own 429 (Retry-After and the body's float) is a retry from piece 3.
        let early = await discord.attempt(send(text, id: id, attempt: 2))
        let earlyWait = try #require(ChatTestKit.retryAfter(early))
        #expect(earlyWait > .seconds(500) && earlyWait <= .seconds(600))
        #expect(ChatTestKit.reason(early)?.contains("429: You are being rate limited.") == true)
        #expect(ChatTestKit.reason(early)?.contains("piece 3 of 3") == true)

        try await standIn.refillBuckets()
        let last = await discord.attempt(send(text, id: id, attempt: 3))
        #expect(ChatTestKit.remoteID(last)?.split(separator: ",").count == 3)
        #expect(try await standIn.messages().map { $0["content"]?.stringValue ?? "" } == pieces)
        #expect(try await standIn.requests().map { $0["status"]?.numberValue } == [200, 200, 429, 200])
    }

    @Test("Discord's refusals are rejected with its message and code; 429 and 5xx are retried")
    func refusals() async throws {
        let standIn = try await DiscordStandIn.start(bucketLimit: 0)
        let discord = try channel(standIn)

        let wrongToken = try channel(standIn, token: "MTEwMDAwMDAwMDAwMDAwMTAw.GwrongOne.notTheBotTokenAtAll0000")
        let unauthorized = await wrongToken.attempt(send("hi"))
        #expect(unauthorized == .rejected(reason: "Discord answered 401: 401: Unauthorized"))

        let unknown = await discord.attempt(send("hi", to: "1100000000000000099"))
        #expect(unknown == .rejected(reason: "Discord answered 404: Unknown Channel (code 10003)"))

        try await standIn.channels([["id": "1100000000000000003", "access": false], ["id": "1100000000000000004", "send": false]])
        #expect(await discord.attempt(send("hi", to: "1100000000000000003")) == .rejected(reason: "Discord answered 403: Missing Access (code 50001)"))
        #expect(await discord.attempt(send("hi", to: "1100000000000000004")) == .rejected(reason: "Discord answered 403: Missing Permissions (code 50013)"))

        try await standIn.script([["error": "invalid_form_body"]])
        #expect(await discord.attempt(send("hi")) == .rejected(reason: "Discord answered 400: Invalid Form Body (code 50035): content: Must be 2000 or fewer in length."))

        try await standIn.script([["error": "unknown_channel"]])
        #expect(await discord.attempt(send("hi")) == .rejected(reason: "Discord answered 404: Unknown Channel (code 10003)"))

        // A global limit: the body's float retry_after wins over the header's whole seconds.
        try await standIn.script([["status": 429, "retry_after": 2.5, "global": true]])
        let global = await discord.attempt(send("hi"))
        #expect(global == .retry(after: .milliseconds(2500), reason: "Discord answered 429: You are being rate limited. (global rate limit)"))

        for status in [500, 502, 503] {
            try await standIn.script([["status": .number(Double(status))]])
            let outcome = await discord.attempt(send("hi"))
            #expect(outcome == .retry(after: nil, reason: "Discord answered \(status): \(status): Internal Server Error"))
        }
        #expect(ChatTestKit.remoteID(await discord.attempt(send("still here"))) != nil)
        for outcome in [unauthorized, unknown, global] { ChatTestKit.expectNoSecret(outcome, secrets) }
    }

    @Test("a refusal mid-message is final and says how far it got")
    func refusalMidMessage() async throws {
        let standIn = try await DiscordStandIn.start(bucketLimit: 0)
        let discord = try channel(standIn)
        let text = ChatTestKit.paragraphs(totalCharacters: 4500)
        try await standIn.script([[:], ["error": "missing_permissions"]])
        let id = UUID().uuidString
        let outcome = await discord.attempt(send(text, id: id))
        #expect(outcome == .rejected(reason: "Discord answered 403: Missing Permissions (code 50013) (piece 2 of 3; 1 delivered before it)"))
        // Nothing is remembered for a send that ended: were it attempted again, it would start over.
        _ = await discord.attempt(send(text, id: id, attempt: 2))
        #expect(try await standIn.messages().count == 4)
    }

    @Test("a request Discord never answers, and a Discord that is gone, are retried")
    func hungAndUnreachable() async throws {
        let standIn = try await DiscordStandIn.start()
        let discord = try channel(standIn, extra: ["timeout_seconds": .number(1)])
        try await standIn.script([["hang": true]])
        let hung = await discord.attempt(send("hi"))
        #expect(ChatTestKit.isRetry(hung))
        #expect(ChatTestKit.reason(hung)?.hasPrefix("could not reach Discord") == true)
        try await standIn.reset()
        standIn.stop()
        let gone = await discord.attempt(send("hi"))
        #expect(ChatTestKit.isRetry(gone))
        #expect(ChatTestKit.reason(gone)?.hasPrefix("could not reach Discord") == true)
        ChatTestKit.expectNoSecret(hung, secrets)
        ChatTestKit.expectNoSecret(gone, secrets)
    }

    @Test("`to` is a channel snowflake, 17 to 20 digits")
    func destinations() {
        let discord = DiscordChannel(configuration: DiscordConfiguration(id: "discord", token: DiscordStandIn.token))
        for good in ["11000000000000000", "1100000000000000001", "12345678901234567890"] {
            #expect(throws: Never.self) { try discord.validate(destination: good) }
        }
        for bad in ["1100000000000000", "123456789012345678901", "#general", "general", "<#1100000000000000001>", "", " 1100000000000000001",
                    "1100000000000000001 ", "११००००००००००००००००१"] {
            #expect(throws: DestinationError.self) { try discord.validate(destination: bad) }
        }
    }

    @Test("channels.discord: enabled, token with or without Bot, bots with the original's ids, api_url, ca_file; errors name the key")
    func configuration() throws {
        let factory = DiscordChannelFactory()
        #expect(factory.kind == "discord")
        func problem(_ values: [String: ChannelSetting]) -> String? {
            do { _ = try factory.make(ChannelSettings(kind: "discord", values: values)); return nil } catch { return error.description }
        }
        let on = ChannelSetting.bool(true)
        let token = ChannelSetting.string(DiscordStandIn.token)
        #expect(try factory.make(ChannelSettings(kind: "discord", values: ["enabled": .bool(false), "token": token])).isEmpty)
        #expect(try factory.make(ChannelSettings(kind: "discord", values: ["token": token])).isEmpty)

        let single = try factory.configurations(ChannelSettings(kind: "discord", values: ["enabled": on, "token": .string("Bot \(DiscordStandIn.token)"),
                                                                                          "app_id": .string("1100000000000000100")]))
        #expect(single == [DiscordConfiguration(id: "discord", token: DiscordStandIn.token)])
        #expect(single.first?.apiURL == "https://discord.com/api/v10")

        let bots = try factory.configurations(ChannelSettings(kind: "discord", values: [
            "enabled": on, "api_url": .string("https://proxy.example/api/v10"), "ca_file": .string("/etc/ca.pem"),
            "bots": .list([.map(["token": token, "agent_id": .string("helper")]), .map(["token": .string("bot  other.token"), "agent_id": .string("Finance.Bot")])]),
        ]))
        #expect(bots.map(\.id) == ["discord", "discord-Finance-Bot"])
        #expect(bots.map(\.token) == [DiscordStandIn.token, "other.token"])
        #expect(bots.allSatisfy { $0.apiURL == "https://proxy.example/api/v10" && $0.caFile == "/etc/ca.pem" })

        #expect(problem(["enabled": on]) == "channels.discord.token: is required")
        #expect(problem(["enabled": on, "token": .string("Bot ")]) == "channels.discord.token: is required (only the 'Bot ' prefix is there)")
        #expect(problem(["enabled": on, "token": .string("")]) == "channels.discord.token: is required")
        #expect(problem(["enabled": on, "token": .string("Bot two words")])
                == "channels.discord.token: must be the bot token from the Developer Portal (Bot → Reset Token), optionally after 'Bot '")
        #expect(problem(["enabled": on, "token": token, "api_url": .string("discord.com")])
                == "channels.discord.api_url: must be an http:// or https:// URL, got 'discord.com'")
        #expect(problem(["enabled": on, "bots": .list([.map(["agent_id": .string("helper")])])]) == "channels.discord.bots[0].token: is required")
        #expect(problem(["enabled": on, "bots": .list([.map(["token": token]), .map(["token": token])])])
                == "channels.discord.bots[1].agent_id: is required for every bot after the first (its channel id is discord-<agent_id>)")
        #expect(problem(["enabled": on, "bots": .list([.string("x")])]) == "channels.discord.bots[0]: must be a mapping")
    }
}
