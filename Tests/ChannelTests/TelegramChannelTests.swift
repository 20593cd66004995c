import APIKit
import ChannelAPI
import Foundation
import GatewayTestSupport
import Telegram
import Testing

/// The Telegram channel against the Bot API stand-in over TLS: what sendMessage receives, splitting, each refusal's
/// outcome, the `channels.telegram` block, and getUpdates polling with the original's activation rules.
@Suite("Telegram channel", .serialized)
struct TelegramChannelTests {
    static let token = TelegramStandIn.token

    func settings(_ standIn: TelegramStandIn, _ extra: [String: ChannelSetting] = [:]) -> ChannelSettings {
        var values: [String: ChannelSetting] = ["enabled": .bool(true), "token": .string(Self.token), "api_url": .string(standIn.baseURL),
                                                "ca_file": .string(standIn.caFile)]
        values.merge(extra) { $1 }
        return ChannelSettings(kind: "telegram", values: values)
    }

    func bot(_ standIn: TelegramStandIn, _ extra: [String: ChannelSetting] = [:]) throws -> TelegramBot {
        try #require(try TelegramChannelFactory().bots(settings(standIn, extra)).first)
    }

    func send(_ parts: [String], to destination: String = String(TelegramStandIn.privateChat), id: String = UUID().uuidString, attempt: Int = 1) -> ChannelSend {
        ChannelSend(id: id, channel: "telegram", destination: destination,
                    output: Output(agentID: "brief", agentName: "Brief", sessionID: "s1", parts: parts), attempt: attempt, createdAt: Date())
    }

    /// The sendMessage requests the stand-in received, each body decoded as the Bot API reads it.
    func sendMessageBodies(_ standIn: TelegramStandIn) async throws -> [JSONValue] {
        try await standIn.requests().filter { $0["method_name"] == "sendMessage" }.map { try JSONValue.parse(Array(($0["body"]?.stringValue ?? "").utf8)) }
    }

    /// A reason (or an error) never carries the bot token, which is in every URL.
    func expectNoToken(_ outcome: ChannelSendOutcome, _ token: String = Self.token, sourceLocation: SourceLocation = #_sourceLocation) {
        let reason: String
        switch outcome {
        case .delivered: return
        case .retry(_, let r), .rejected(let r), .failed(let r): reason = r
        }
        #expect(!reason.contains(token), "reason '\(reason)' quotes the token", sourceLocation: sourceLocation)
        #expect(!reason.contains(String(token.split(separator: ":").last!)), sourceLocation: sourceLocation)
    }

    // MARK: Sending

    @Test("a send is POST /bot<token>/sendMessage with an integer chat_id and the plain text, no parse_mode")
    func happyPath() async throws {
        let standIn = try await TelegramStandIn.start()
        defer { standIn.stop() }
        let channel = try bot(standIn).channel
        let outcome = await channel.attempt(send(["Morning brief: *3* items_", "", "Second part (with [brackets])."]))
        #expect(outcome == .delivered(remoteID: "1"))

        let request = try #require(try await standIn.requests().first)
        #expect(request["method"] == "POST")
        #expect(request["path"]?.stringValue == "/bot\(Self.token)/sendMessage")
        #expect(request["status"] == 200)
        #expect(request["headers"]?["content-type"] == "application/json")
        let body = try #require(try await sendMessageBodies(standIn).first)
        #expect(Set(body.objectValue?.keys.map { $0 } ?? []) == ["chat_id", "text"])
        let chatID = try #require(body["chat_id"]?.numberValue)
        #expect(chatID == Double(TelegramStandIn.privateChat) && chatID.rounded() == chatID)
        let raw = request["body"]?.stringValue ?? ""
        #expect(raw.hasPrefix("{\"chat_id\":424242,"))  // a JSON number, not a string
        #expect(body["parse_mode"] == nil)
        #expect(body["text"] == "Morning brief: *3* items_\n\nSecond part (with [brackets]).")
        let message = try #require(try await standIn.messages().first)
        #expect(message["text"] == "Morning brief: *3* items_\n\nSecond part (with [brackets]).")
        #expect(message["entities"] == nil)
        #expect(message["chat"]?["id"]?.numberValue == Double(TelegramStandIn.privateChat))
    }

    /// 100 lines of 100 characters, each with an emoji outside the basic plane: 10,000 characters, 10,100 UTF-16 units.
    static let longText = (0..<100).map { line in
        let head = String(format: "line %03d 😀 ", line)
        return head + String(repeating: "abcdefghij", count: 10).prefix(99 - head.count)
    }.joined(separator: "\n")

    @Test("a 10,000-character output goes as 3 messages of at most 4096 UTF-16 units, in order, that re-join to the text")
    func splitting() async throws {
        #expect(Self.longText.count == 9_999)
        let standIn = try await TelegramStandIn.start()
        defer { standIn.stop() }
        let channel = try bot(standIn).channel
        let outcome = await channel.attempt(send([Self.longText]))
        #expect(outcome == .delivered(remoteID: "3"))
        let messages = try await standIn.messages()
        #expect(messages.count == 3)
        #expect(messages.map { $0["message_id"]?.numberValue } == [1, 2, 3])
        let texts = messages.compactMap { $0["text"]?.stringValue }
        #expect(texts.allSatisfy { $0.utf16.count <= 4096 })
        #expect(texts.joined(separator: "\n") == Self.longText)
        #expect(try await sendMessageBodies(standIn).compactMap { $0["text"]?.stringValue } == texts)
    }

    @Test("a retry after piece 2 of 3 failed sends pieces 2 and 3 only")
    func retryContinues() async throws {
        let standIn = try await TelegramStandIn.start()
        defer { standIn.stop() }
        let channel = try bot(standIn).channel
        try await standIn.script([["delay_ms": 1], ["status": 500]])
        let id = "dlv_split"
        let first = await channel.attempt(send([Self.longText], id: id))
        guard case .retry(nil, let reason) = first else { Issue.record("expected a retry, got \(first)"); return }
        #expect(reason == "piece 2 of 3 (1 delivered): Telegram answered 500: Internal Server Error")
        #expect(try await standIn.messages().count == 1)

        let second = await channel.attempt(send([Self.longText], id: id, attempt: 2))
        #expect(second == .delivered(remoteID: "3"))
        let sent = try await sendMessageBodies(standIn).compactMap { $0["text"]?.stringValue }
        #expect(sent.count == 4)
        #expect(sent[2] == sent[1])  // the second attempt began with the piece that failed
        let messages = try await standIn.messages().compactMap { $0["text"]?.stringValue }
        #expect(messages == [sent[0], sent[2], sent[3]])
        #expect(messages.joined(separator: "\n") == Self.longText)

        // Delivered for good: a new send with the same text starts from the first piece again.
        #expect(await channel.attempt(send([Self.longText])) == .delivered(remoteID: "6"))
    }

    @Test("a bad token is rejected with Telegram's 401 Unauthorized, and the token is in no reason")
    func badToken() async throws {
        let standIn = try await TelegramStandIn.start()
        defer { standIn.stop() }
        let wrong = "999999:WRONG-token_abcdefghijklmnop"
        let channel = try bot(standIn, ["token": .string(wrong)]).channel
        let outcome = await channel.attempt(send(["hello"]))
        #expect(outcome == .rejected(reason: "Telegram answered 401: Unauthorized"))
        expectNoToken(outcome, wrong)
        // A wrong path (the API moved) reads the same way: the bot's URL is not there.
        let moved = try bot(standIn, ["api_url": .string(standIn.baseURL + "/nowhere")]).channel
        let notFound = await moved.attempt(send(["hello"]))
        #expect(notFound == .rejected(reason: "Telegram answered 404: Not Found"))
        expectNoToken(notFound)
    }

    @Test("an unknown chat and a bot the person blocked are rejected with Telegram's description")
    func refusals() async throws {
        let standIn = try await TelegramStandIn.start()
        defer { standIn.stop() }
        let channel = try bot(standIn).channel
        let unknown = await channel.attempt(send(["hello"], to: "777"))
        #expect(unknown == .rejected(reason: "Telegram answered 400: Bad Request: chat not found"))
        try await standIn.block(chatID: TelegramStandIn.privateChat)
        let blocked = await channel.attempt(send(["hello"]))
        #expect(blocked == .rejected(reason: "Telegram answered 403: Forbidden: bot was blocked by the user"))
        try await standIn.script([["error": "migrated", "migrate_to_chat_id": -1009999]])
        let migrated = await channel.attempt(send(["hello"], to: String(TelegramStandIn.groupChat)))
        #expect(migrated == .rejected(reason: "Telegram answered 400: Bad Request: group chat was upgraded to a supergroup chat (it is now chat -1009999: use that id as `to`)"))
        for outcome in [unknown, blocked, migrated] { expectNoToken(outcome) }
        #expect(try await standIn.messages().isEmpty)
    }

    @Test("429 with retry_after 7 is a retry after 7 s; a 5xx is a retry")
    func rateLimitAndServerErrors() async throws {
        let standIn = try await TelegramStandIn.start()
        defer { standIn.stop() }
        let channel = try bot(standIn).channel
        try await standIn.script([["status": 429, "retry_after": 7], ["status": 502]])
        let limited = await channel.attempt(send(["hello"]))
        #expect(limited == .retry(after: .seconds(7), reason: "Telegram answered 429: Too Many Requests: retry after 7"))
        let bad = await channel.attempt(send(["hello"]))
        #expect(bad == .retry(after: nil, reason: "Telegram answered 502: Bad Gateway"))
        #expect(await channel.attempt(send(["hello"])) == .delivered(remoteID: "1"))
        for outcome in [limited, bad] { expectNoToken(outcome) }
    }

    @Test("a hung request gives up after timeout_seconds and is a retry; so is a service that is down")
    func hangAndDown() async throws {
        let standIn = try await TelegramStandIn.start()
        defer { standIn.stop() }
        let channel = try bot(standIn, ["timeout_seconds": .number(1)]).channel
        try await standIn.script([["hang": true]])
        let started = ContinuousClock.now
        let hung = await channel.attempt(send(["hello"]))
        let waited = ContinuousClock.now - started
        #expect(waited >= .milliseconds(900) && waited < .seconds(30))
        guard case .retry(nil, let reason) = hung else { Issue.record("expected a retry, got \(hung)"); return }
        #expect(reason.hasPrefix("could not reach Telegram: "))
        expectNoToken(hung)

        standIn.stop()
        let down = await channel.attempt(send(["hello"]))
        guard case .retry(nil, let downReason) = down else { Issue.record("expected a retry, got \(down)"); return }
        #expect(downReason.hasPrefix("could not reach Telegram: "))
        expectNoToken(down)
    }

    @Test("an output with no text fails without a request; a destination that is no chat id fails")
    func nothingToSend() async throws {
        let standIn = try await TelegramStandIn.start()
        defer { standIn.stop() }
        let channel = try bot(standIn).channel
        #expect(await channel.attempt(send(["", "  \n "])) == .failed(reason: "the output has no text to send to Telegram"))
        guard case .failed(let reason) = await channel.attempt(send(["hi"], to: "@soulacy_test")) else { Issue.record("expected failed"); return }
        #expect(reason.contains("numeric chat ids only"))
        #expect(try await standIn.requests().isEmpty)
    }

    // MARK: Destinations and config

    @Test("`to` is a chat id: an integer, negative for groups and channels; @name is refused with the reason")
    func destinations() throws {
        let channel = try #require(try TelegramChannelFactory().make(ChannelSettings(kind: "telegram", values: ["enabled": .bool(true), "token": .string(Self.token)])).first)
        try channel.validate(destination: "424242")
        try channel.validate(destination: "-1001234567890")
        do {
            try channel.validate(destination: "@soulacy_test")
            Issue.record("@name was accepted")
        } catch {
            #expect(error.description.contains("the original Soulacy sends numeric chat ids only"))
            #expect(error.description.contains("@soulacy_test"))
        }
        for bad in ["", "abc", "0", "12.5", "424242x", "https://t.me/x"] {
            #expect(throws: DestinationError.self, "'\(bad)' was accepted") { try channel.validate(destination: bad) }
        }
    }

    func configError(_ values: [String: ChannelSetting]) -> ChannelConfigError? {
        do {
            _ = try TelegramChannelFactory().bots(ChannelSettings(kind: "telegram", values: values))
            return nil
        } catch {
            return error
        }
    }

    @Test("an update_id at Int64's end (a broken or hostile Bot API server) saturates the cursor instead of trapping")
    func updateIDAtTheEnd() async throws {
        let answer = #"{"ok":true,"result":[{"update_id":9223372036854775807,"message":{"message_id":1,"date":1,"chat":{"id":5,"type":"private"},"from":{"id":5,"is_bot":false,"first_name":"A"},"text":"hi"}}]}"#
        let server = HTTPServer(configuration: HTTPServerConfiguration(host: "127.0.0.1", port: 0),
                                immediate: { _ in HTTPResponse(status: 200, headers: [("content-type", "application/json")], body: Array(answer.utf8)) }) { _ in
            HTTPResponse(status: 200, headers: [("content-type", "application/json")], body: Array(answer.utf8))
        }
        try server.start()
        defer { Task { await server.stop() } }
        let settings = ChannelSettings(kind: "telegram", values: ["enabled": .bool(true), "token": .string(Self.token), "agent_id": "assistant",
                                                                  "api_url": .string("http://127.0.0.1:\(server.port)")])
        let poller = try #require(try TelegramChannelFactory().bots(settings).first?.poller)
        let batch = try await poller.poll(after: "9223372036854775806", timeout: .zero)
        #expect(batch.cursor == "9223372036854775807")
    }

    @Test("a single token is the channel `telegram`; its poller exists only with agent_id and not outbound_only")
    func singleBot() throws {
        let factory = TelegramChannelFactory()
        #expect(factory.kind == "telegram")
        let base: [String: ChannelSetting] = ["enabled": .bool(true), "token": .string(Self.token)]
        let plain = try factory.bots(ChannelSettings(kind: "telegram", values: base))
        #expect(plain.map(\.channel.name) == ["telegram"])
        #expect(plain[0].poller == nil)
        #expect(plain[0].channel.requestTimeout == .seconds(35))

        let withAgent = try factory.bots(ChannelSettings(kind: "telegram", values: base.merging([
            "agent_id": .string("assistant"), "bot_name": .string("Helper"), "default_output_to": .number(-1001234567890),
            "allowed_user_ids": .list([.number(424242), .string("555")]), "allowed_chat_ids": .string("424242, -1001234567890"),
            "ignore_groups": .string("no"), "trigger_phrase": .string("hey bot"),
        ]) { $1 }))
        let poller = try #require(withAgent[0].poller)
        #expect(poller.channel == "telegram" && poller.agentID == "assistant")
        #expect(poller.activation == TelegramActivation(triggerPhrase: "hey bot", ignoreGroups: false,
                                                        allowedChatIDs: ["424242", "-1001234567890"], allowedUserIDs: ["424242", "555"]))
        #expect(withAgent[0].channel.defaultDestination == "-1001234567890")
        #expect(withAgent[0].channel.botName == "Helper")
        #expect(try factory.pollers(ChannelSettings(kind: "telegram", values: base.merging(["agent_id": .string("assistant")]) { $1 })).map(\.channel) == ["telegram"])

        let outbound = try factory.bots(ChannelSettings(kind: "telegram", values: base.merging(["agent_id": .string("assistant"), "outbound_only": .bool(true)]) { $1 }))
        #expect(outbound[0].poller == nil)
        // The original's defaults: groups ignored, the phrase `!soulacy`.
        let defaults = try #require(try factory.bots(ChannelSettings(kind: "telegram", values: base.merging(["agent_id": .string("a")]) { $1 }))[0].poller)
        #expect(defaults.activation == TelegramActivation(triggerPhrase: "!soulacy", ignoreGroups: true))

        #expect(try factory.make(ChannelSettings(kind: "telegram", values: base.merging(["enabled": .bool(false)]) { $1 })).isEmpty)
        #expect(try factory.make(ChannelSettings(kind: "telegram", values: ["token": .string(Self.token)])).isEmpty)
    }

    @Test("bots get soulacy-personal's ids: `telegram` for the top-level token, `telegram-<sanitized agent_id>` (else bot_name, else the row number)")
    func multiBot() throws {
        let factory = TelegramChannelFactory()
        let bots: ChannelSetting = .list([
            .map(["token": .string("111:aaa"), "agent_id": .string("finance.team")]),
            .map(["token": .string("222:bbb"), "bot_name": .string("Ops Bot"), "outbound_only": .bool(true)]),
            .map(["token": .string("333:ccc")]),
        ])
        let withDefault = try factory.bots(ChannelSettings(kind: "telegram", values: ["enabled": .bool(true), "token": .string(Self.token), "bots": bots]))
        #expect(withDefault.map(\.channel.name) == ["telegram", "telegram-finance-team", "telegram-Ops-Bot", "telegram-3"])
        #expect(withDefault.map { $0.poller?.channel } == [nil, "telegram-finance-team", nil, nil])
        #expect(withDefault[1].channel.agentID == "finance.team")

        let rowsOnly = try factory.bots(ChannelSettings(kind: "telegram", values: ["enabled": .bool(true), "bots": .list([
            .map(["token": .string("111:aaa"), "agent_id": .string("assistant")]), .map(["token": .string("222:bbb"), "agent_id": .string("finance")]),
        ])]))
        #expect(rowsOnly.map(\.channel.name) == ["telegram", "telegram-finance"])
        #expect(rowsOnly.map { $0.poller?.channel } == ["telegram", "telegram-finance"])
        #expect(TelegramChannelFactory.sanitizedID("a b/c_d-é") == "a-b-c_d--")
    }

    @Test("config errors name the key, and never quote the token")
    func configErrors() {
        let token: ChannelSetting = .string(Self.token)
        let cases: [([String: ChannelSetting], String)] = [
            (["enabled": .bool(true)], "channels.telegram.token"),
            (["enabled": .bool(true), "token": .string("")], "channels.telegram.token"),
            (["enabled": .bool(true), "bots": .list([.map(["token": .string("111:aaa")]), .map(["agent_id": .string("x")])])], "channels.telegram.bots[1].token"),
            (["enabled": .bool(true), "bots": .list([.string("oops")])], "channels.telegram.bots[0]"),
            (["enabled": .bool(true), "token": token, "default_output_to": .string("@soulacy_test")], "channels.telegram.default_output_to"),
            (["enabled": .bool(true), "token": token, "bots": .list([.map(["token": .string("111:aaa"), "default_output_to": .string("@x")])])], "channels.telegram.bots[0].default_output_to"),
            (["enabled": .bool(true), "token": token, "ignore_groups": .string("maybe")], "channels.telegram.ignore_groups"),
            (["enabled": .bool(true), "token": token, "outbound_only": .string("perhaps")], "channels.telegram.outbound_only"),
            (["enabled": .bool(true), "token": token, "allowed_user_ids": .list([.string("@bob")])], "channels.telegram.allowed_user_ids"),
            (["enabled": .bool(true), "token": token, "allowed_chat_ids": .string("424242, general")], "channels.telegram.allowed_chat_ids"),
            (["enabled": .bool(true), "token": token, "timeout_seconds": .string("soon")], "channels.telegram.timeout_seconds"),
            (["enabled": .bool(true), "token": token, "api_url": .string("api.telegram.org")], "channels.telegram.api_url"),
            (["enabled": .string("sometimes"), "token": token], "channels.telegram.enabled"),
            (["enabled": .bool(true), "token": .string(Self.token + "/../x")], "channels.telegram.token"),
            (["enabled": .bool(true), "token": token, "bots": .list([.map(["token": .string("111:aaa"), "agent_id": .string("a")]), .map(["token": .string("222:bbb"), "agent_id": .string("a")])])],
             "channels.telegram.bots[1].agent_id"),
        ]
        for (values, field) in cases {
            let error = configError(values)
            #expect(error?.field == field, "\(values) gave \(String(describing: error))")
            let text = error.map(\.description) ?? ""
            #expect(!text.contains(Self.token))
        }
        #expect(configError(["enabled": .bool(true), "token": token, "default_output_to": .string("@soulacy_test")])?.problem.contains("numeric chat ids only") == true)
        #expect(configError(["enabled": .bool(true), "token": token, "bots": .list([.map(["token": .string("111:aaa"), "agent_id": .string("a")]), .map(["token": .string("222:bbb"), "agent_id": .string("a")])])])?
            .problem.contains("'telegram-a'") == true)
    }

    // MARK: Polling

    func poller(_ standIn: TelegramStandIn, _ extra: [String: ChannelSetting] = [:]) throws -> TelegramPoller {
        try #require(try bot(standIn, ["agent_id": .string("assistant")].merging(extra) { $1 }).poller)
    }

    @Test("two messages come back from getUpdates; the cursor confirms them, so polling again returns nothing new")
    func polling() async throws {
        let standIn = try await TelegramStandIn.start()
        defer { standIn.stop() }
        let poller = try poller(standIn)
        let ids = try await standIn.inject([
            TelegramStandIn.message("what's on today?", chat: 424242, type: "private", from: 424242, username: "alice"),
            ["text": "and tomorrow?", "chat_id": 424242, "from_id": 424242],
        ])
        #expect(ids.count == 2)
        let batch = try await poller.poll(after: nil, timeout: .seconds(1))
        #expect(batch.messages == [
            InboundMessage(id: String(ids[0]), replyTo: "424242", senderID: "424242", senderName: "alice", text: "what's on today?", isDirect: true),
            InboundMessage(id: String(ids[1]), replyTo: "424242", senderID: "424242", senderName: nil, text: "and tomorrow?", isDirect: true),
        ])
        #expect(batch.cursor == String(ids[1] + 1))
        let request = try #require(try await standIn.requests().last)
        #expect(request["method_name"] == "getUpdates")
        #expect(request["params"]?["allowed_updates"] == ["message"])
        #expect(request["params"]?["timeout"] == 1)
        #expect(request["params"]?["offset"] == nil)

        let again = try await poller.poll(after: batch.cursor, timeout: .zero)
        #expect(again.messages.isEmpty)
        #expect(again.cursor == batch.cursor)
        #expect(try await standIn.pending().isEmpty)
        #expect(try await standIn.requests().last?["params"]?["offset"]?.numberValue == Double(ids[1] + 1))
    }

    @Test("a group message without the phrase is skipped but advances the cursor; with it, the phrase is stripped")
    func activation() async throws {
        let standIn = try await TelegramStandIn.start()
        defer { standIn.stop() }
        let poller = try poller(standIn, ["ignore_groups": .bool(false)])
        let group = TelegramStandIn.groupChat
        let skipped = try await standIn.inject([TelegramStandIn.message("just chatting", chat: group, type: "supergroup", from: 5150, username: "bob")])
        let batch = try await poller.poll(after: nil, timeout: .seconds(1))
        #expect(batch.messages.isEmpty)
        #expect(batch.cursor == String(skipped[0] + 1))
        let empty = try await poller.poll(after: batch.cursor, timeout: .zero)
        #expect(empty.messages.isEmpty && empty.cursor == batch.cursor)
        #expect(try await standIn.pending().isEmpty)

        let ids = try await standIn.inject([
            TelegramStandIn.message("!soulacy   summarize the thread", chat: group, type: "supergroup", from: 5150, username: "bob"),
            TelegramStandIn.message("!soulacy", chat: group, type: "supergroup", from: 5150),
            TelegramStandIn.message("no phrase needed here", chat: 424242, type: "private", from: 424242),
            TelegramStandIn.message("!soulacy stripped in private too", chat: 424242, type: "private", from: 424242),
            TelegramStandIn.message("   ", chat: 424242, type: "private", from: 424242),
            ["edited_message": ["message_id": 1, "chat": ["id": 424242, "type": "private"], "date": 0, "text": "edited"]],
        ])
        let next = try await poller.poll(after: empty.cursor, timeout: .seconds(1))
        #expect(next.messages.map(\.text) == ["summarize the thread", "!soulacy", "no phrase needed here", "stripped in private too"])
        #expect(next.messages.map(\.isDirect) == [false, false, true, true])
        #expect(next.messages.first?.replyTo == String(group))
        #expect(next.messages.first?.senderID == "5150")
        #expect(next.cursor == String(ids[4] + 1))  // the edit is not a `message`: allowed_updates kept it away
        _ = try await poller.poll(after: next.cursor, timeout: .zero)
        #expect(try await standIn.pending().count == 1)  // only the edited_message, never asked for
    }

    @Test("groups are ignored by default; allow-lists keep other chats and people out; skipped updates still move the cursor")
    func allowLists() async throws {
        let standIn = try await TelegramStandIn.start()
        defer { standIn.stop() }
        let ids = try await standIn.inject([
            TelegramStandIn.message("!soulacy hello", chat: TelegramStandIn.groupChat, type: "supergroup", from: 424242),
            TelegramStandIn.message("from a stranger", chat: 99, type: "private", from: 99),
            TelegramStandIn.message("from alice", chat: 424242, type: "private", from: 424242),
        ])
        let batch = try await poller(standIn, ["allowed_user_ids": .list([.number(424242)])]).poll(after: nil, timeout: .seconds(1))
        #expect(batch.messages.map(\.text) == ["from alice"])
        #expect(batch.cursor == String(ids[2] + 1))
        let chats = try await poller(standIn, ["allowed_chat_ids": .string("99")]).poll(after: nil, timeout: .zero)
        #expect(chats.messages.map(\.text) == ["from a stranger"])
    }

    @Test("polling with a bad token throws Telegram's words without the token")
    func pollingErrors() async throws {
        let standIn = try await TelegramStandIn.start()
        defer { standIn.stop() }
        let wrong = "999999:WRONG-token_abcdefghijklmnop"
        let poller = try poller(standIn, ["token": .string(wrong)])
        do {
            _ = try await poller.poll(after: nil, timeout: .zero)
            Issue.record("a bad token polled")
        } catch {
            #expect(String(describing: error) == "Telegram getUpdates answered 401: Unauthorized")
        }
        standIn.stop()
        do {
            _ = try await poller.poll(after: "5", timeout: .zero)
            Issue.record("a stopped service answered")
        } catch {
            #expect(String(describing: error).hasPrefix("could not reach Telegram"))
            #expect(!String(describing: error).contains(wrong))
        }
    }
}
