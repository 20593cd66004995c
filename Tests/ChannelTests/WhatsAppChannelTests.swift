import ChannelAPI
import ChannelSupport
import Foundation
import GatewayTestSupport
import JSON
import Testing
import WhatsApp

/// The WhatsApp channel against the Cloud API stand-in: text messages over TLS, 4096-character pieces as separate
/// messages, Graph's error codes, `to` and `channels.whatsapp`.
@Suite("WhatsApp channel")
struct WhatsAppChannelTests {
    let secrets = [WhatsAppStandIn.token, "EAAGwrongWhatsAppTokenForTests000000000000"]
    let recipient = WhatsAppStandIn.allowedRecipient

    func channel(_ standIn: WhatsAppStandIn, token: String = WhatsAppStandIn.token, extra: [String: ChannelSetting] = [:]) throws -> any OutboundChannel {
        var values: [String: ChannelSetting] = ["enabled": .bool(true), "phone_number_id": .string(WhatsAppStandIn.phoneNumberID),
                                                "access_token": .string(token), "verify_token": .string("verify-me"),
                                                "api_url": .string(standIn.apiURL), "ca_file": .string(standIn.caFile), "timeout_seconds": .number(2)]
        values.merge(extra) { $1 }
        let made = try WhatsAppChannelFactory().make(ChannelSettings(kind: "whatsapp", values: values))
        try #require(made.count == 1)
        return made[0]
    }

    func send(_ text: String, to: String? = nil, id: String = UUID().uuidString, attempt: Int = 1) -> ChannelSend {
        ChatTestKit.send(text, to: to ?? recipient, channel: "whatsapp", id: id, attempt: attempt)
    }

    @Test("a message is one POST /v20.0/<phone_number_id>/messages: Bearer token, the documented text body, delivered with the wamid")
    func happyPath() async throws {
        let standIn = try await WhatsAppStandIn.start()
        let whatsapp = try channel(standIn)
        #expect(whatsapp.name == "whatsapp")
        let outcome = await whatsapp.attempt(send("Your appointment is confirmed for 10:00.", to: "+" + recipient))
        let requests = try await standIn.requests()
        try #require(requests.count == 1)
        let request = requests[0]
        #expect(request["method"] == "POST")
        #expect(request["path"] == .string("/v20.0/\(WhatsAppStandIn.phoneNumberID)/messages"))
        #expect(request["http_version"] == "2")
        #expect(request["headers"]?["authorization"] == .string("Bearer \(WhatsAppStandIn.token)"))
        #expect(request["headers"]?["content-type"]?.stringValue?.hasPrefix("application/json") == true)
        let body = try ChatTestKit.body(request)
        #expect(ChatTestKit.keys(body) == ["messaging_product", "recipient_type", "to", "type", "text"])
        #expect(body["messaging_product"] == "whatsapp")
        #expect(body["recipient_type"] == "individual")
        #expect(body["to"] == .string("+" + recipient))
        #expect(body["type"] == "text")
        #expect(ChatTestKit.keys(body["text"]) == ["preview_url", "body"])
        #expect(body["text"]?["preview_url"] == false)
        #expect(body["text"]?["body"] == "Your appointment is confirmed for 10:00.")
        // The documented answer: messaging_product, contacts[{input, wa_id}], messages[{id}].
        let answer = try #require(request["response"])
        #expect(answer["messaging_product"] == "whatsapp")
        #expect(answer["contacts"]?[0]?["input"] == .string("+" + recipient))
        #expect(answer["contacts"]?[0]?["wa_id"] == .string(recipient))
        let wamid = try #require(answer["messages"]?[0]?["id"]?.stringValue)
        #expect(wamid.hasPrefix("wamid."))
        #expect(outcome == .delivered(remoteID: wamid))
    }

    @Test("api_version chooses the path's version")
    func apiVersion() async throws {
        let standIn = try await WhatsAppStandIn.start()
        let whatsapp = try channel(standIn, extra: ["api_version": .string("21.0")])
        #expect(ChatTestKit.remoteID(await whatsapp.attempt(send("hi"))) != nil)
        #expect(try await standIn.requests().first?["path"] == .string("/v21.0/\(WhatsAppStandIn.phoneNumberID)/messages"))
    }

    @Test("a text over 4096 characters goes as several messages in order; a retry continues from the first undelivered one")
    func splitting() async throws {
        let standIn = try await WhatsAppStandIn.start()
        let whatsapp = try channel(standIn)
        let text = ChatTestKit.paragraphs(totalCharacters: 9000)
        let pieces = MessageText.split(text, limit: 4096)
        try #require(pieces.count == 3)
        let whole = await whatsapp.attempt(send(text))
        let bodies = try await standIn.messages().map { $0["body"]?.stringValue ?? "" }
        #expect(bodies == pieces)
        #expect(bodies.allSatisfy { $0.unicodeScalars.count <= 4096 })
        #expect(bodies.joined(separator: "\n\n") == text)
        #expect(ChatTestKit.remoteID(whole) == (try await standIn.messages()).compactMap { $0["id"]?.stringValue }.joined(separator: ","))

        try await standIn.reset()
        try await standIn.script([[:], [:], ["error": 130429]])
        let id = UUID().uuidString
        let first = await whatsapp.attempt(send(text, id: id))
        #expect(ChatTestKit.isRetry(first))
        #expect(ChatTestKit.reason(first)?.contains("(piece 3 of 3; 2 delivered before it)") == true)
        let second = await whatsapp.attempt(send(text, id: id, attempt: 2))
        #expect(try await standIn.messages().map { $0["body"]?.stringValue ?? "" } == pieces)
        #expect(try await standIn.requests().count == 4)
        #expect(ChatTestKit.remoteID(second)?.split(separator: ",").count == 3)
    }

    @Test("Graph's refusals (190 token, 100 parameter, 131030 recipient, 131047 window) are rejected with Meta's words")
    func refusals() async throws {
        let standIn = try await WhatsAppStandIn.start()
        let whatsapp = try channel(standIn)
        var outcomes: [ChannelSendOutcome] = []
        func expectRejected(_ outcome: ChannelSendOutcome, _ start: String, sourceLocation: SourceLocation = #_sourceLocation) {
            outcomes.append(outcome)
            #expect(ChatTestKit.isRejected(outcome), "\(outcome)", sourceLocation: sourceLocation)
            #expect(ChatTestKit.reason(outcome)?.hasPrefix(start) == true, "\(outcome)", sourceLocation: sourceLocation)
            #expect(ChatTestKit.reason(outcome)?.contains("[fbtrace_id ") == true, sourceLocation: sourceLocation)
        }

        let wrongToken = try channel(standIn, token: "EAAGwrongWhatsAppTokenForTests000000000000")
        expectRejected(await wrongToken.attempt(send("hi")), "WhatsApp answered 401: Invalid OAuth access token - Cannot parse access token (code 190)")

        let otherNumber = try channel(standIn, extra: ["phone_number_id": .string("999999999999999")])
        expectRejected(await otherNumber.attempt(send("hi")),
                       "WhatsApp answered 400: Unsupported post request. Object with ID '999999999999999' does not exist")
        #expect(ChatTestKit.reason(outcomes.last!)?.contains("(code 100, subcode 33)") == true)

        expectRejected(await whatsapp.attempt(send("hi", to: "15559999999")),
                       "WhatsApp answered 400: (#131030) Recipient phone number not in allowed list (code 131030): Recipient phone number not in allowed list: Add recipient")

        try await standIn.window(to: recipient, open: false)
        expectRejected(await whatsapp.attempt(send("hi")),
                       "WhatsApp answered 400: (#131047) Re-engagement message (code 131047): Message failed to send because more than 24 hours have passed")
        try await standIn.window(to: recipient, open: true)

        try await standIn.script([["error": 131026]])
        expectRejected(await whatsapp.attempt(send("hi")), "WhatsApp answered 400: (#131026) Message undeliverable (code 131026)")

        try await standIn.expireToken()
        expectRejected(await whatsapp.attempt(send("hi")), "WhatsApp answered 401: Error validating access token: Session has expired. (code 190, subcode 463)")
        for outcome in outcomes { ChatTestKit.expectNoSecret(outcome, secrets) }
    }

    @Test("rate limits (130429, 80007, 4) and Meta's passing trouble (1, 2, 131000, 5xx) are retried")
    func retries() async throws {
        let standIn = try await WhatsAppStandIn.start()
        let whatsapp = try channel(standIn)
        let cases: [(JSONValue, String)] = [
            (["status": 429], "WhatsApp answered 429: (#130429) Rate limit hit (code 130429)"),
            (["error": 130429], "WhatsApp answered 429: (#130429) Rate limit hit (code 130429)"),
            (["error": 80007], "WhatsApp answered 429: (#80007) Rate limit issues (code 80007)"),
            (["error": 4], "WhatsApp answered 429: (#4) Application request limit reached (code 4)"),
            (["error": 1], "WhatsApp answered 500: (#1) An unknown error occurred (code 1)"),
            (["error": 2], "WhatsApp answered 503: (#2) Service temporarily unavailable (code 2)"),
            (["error": 131000], "WhatsApp answered 500: (#131000) Something went wrong (code 131000)"),
            (["status": 500], "WhatsApp answered 500: (#131000) Something went wrong (code 131000)"),
            (["status": 503], "WhatsApp answered 503: (#2) Service temporarily unavailable (code 2)"),
        ]
        for (step, start) in cases {
            try await standIn.script([step])
            let outcome = await whatsapp.attempt(send("hi"))
            #expect(ChatTestKit.isRetry(outcome), "\(step): \(outcome)")
            #expect(ChatTestKit.reason(outcome)?.hasPrefix(start) == true, "\(step): \(outcome)")
            ChatTestKit.expectNoSecret(outcome, secrets)
        }
        #expect(try await standIn.messages().isEmpty)
        #expect(ChatTestKit.remoteID(await whatsapp.attempt(send("still here"))) != nil)
    }

    @Test("a request Meta never answers, and a Graph that is gone, are retried")
    func hungAndUnreachable() async throws {
        let standIn = try await WhatsAppStandIn.start()
        let whatsapp = try channel(standIn, extra: ["timeout_seconds": .number(1)])
        try await standIn.script([["hang": true]])
        let hung = await whatsapp.attempt(send("hi"))
        #expect(ChatTestKit.isRetry(hung))
        #expect(ChatTestKit.reason(hung)?.hasPrefix("could not reach WhatsApp") == true)
        try await standIn.reset()
        standIn.stop()
        let gone = await whatsapp.attempt(send("hi"))
        #expect(ChatTestKit.isRetry(gone))
        #expect(ChatTestKit.reason(gone)?.hasPrefix("could not reach WhatsApp") == true)
        ChatTestKit.expectNoSecret(hung, secrets)
        ChatTestKit.expectNoSecret(gone, secrets)
    }

    @Test("`to` is a phone number in international format: digits, optionally after +")
    func destinations() {
        let whatsapp = WhatsAppChannel(configuration: WhatsAppConfiguration(phoneNumberID: WhatsAppStandIn.phoneNumberID, accessToken: WhatsAppStandIn.token))
        for good in ["15551234567", "+15551234567", "447700900123", "+4915112345678", "1234567"] {
            #expect(throws: Never.self) { try whatsapp.validate(destination: good) }
        }
        for bad in ["+1 555 123 4567", "1-555-123-4567", "(555) 1234567", "015551234567", "123456", "1234567890123456", "++15551234567",
                    "", "+", "wa:15551234567", "15551234567@s.whatsapp.net"] {
            #expect(throws: DestinationError.self) { try whatsapp.validate(destination: bad) }
        }
    }

    @Test("channels.whatsapp: phone_number_id (a string, or a number here), access_token or token, api_version; errors name the key")
    func configuration() throws {
        let factory = WhatsAppChannelFactory()
        #expect(factory.kind == "whatsapp")
        func settings(_ values: [String: ChannelSetting]) -> ChannelSettings { ChannelSettings(kind: "whatsapp", values: values) }
        func problem(_ values: [String: ChannelSetting]) -> String? {
            do { _ = try factory.make(settings(values)); return nil } catch { return error.description }
        }
        let on = ChannelSetting.bool(true)
        let id = ChannelSetting.string(WhatsAppStandIn.phoneNumberID)
        let token = ChannelSetting.string(WhatsAppStandIn.token)

        #expect(try factory.make(settings(["enabled": .bool(false), "phone_number_id": id, "access_token": token])).isEmpty)
        #expect(try factory.make(settings(["phone_number_id": id, "access_token": token])).isEmpty)

        let plain = try factory.configuration(settings(["enabled": on, "phone_number_id": id, "access_token": token]))
        #expect(plain == WhatsAppConfiguration(phoneNumberID: WhatsAppStandIn.phoneNumberID, accessToken: WhatsAppStandIn.token))
        #expect(plain.id == "whatsapp" && plain.apiVersion == "v20.0" && plain.apiURL == "https://graph.facebook.com")

        // default.yaml's `token`, and an unquoted number (the original would silently skip the channel).
        let fromDefaults = try factory.configuration(settings(["enabled": on, "phone_number_id": .number(106540352242922), "token": token]))
        #expect(fromDefaults.phoneNumberID == WhatsAppStandIn.phoneNumberID)
        #expect(fromDefaults.accessToken == WhatsAppStandIn.token)
        #expect(try factory.configuration(settings(["enabled": on, "phone_number_id": id, "access_token": token, "token": token])).accessToken
                == WhatsAppStandIn.token)
        #expect(try factory.configuration(settings(["enabled": on, "phone_number_id": id, "access_token": token, "api_version": .string("v21.0")])).apiVersion
                == "v21.0")

        #expect(problem(["enabled": on, "access_token": token]) == "channels.whatsapp.phone_number_id: is required")
        #expect(problem(["enabled": on, "phone_number_id": .string("+1 555 123 4567"), "access_token": token])
                == "channels.whatsapp.phone_number_id: must be the Cloud API's phone number id (digits, from WhatsApp Manager → API Setup), not the phone number")
        #expect(problem(["enabled": on, "phone_number_id": .number(1.2345678901234567e19), "access_token": token])?
                .hasSuffix("; quote it, a bare number this long loses digits in YAML") == true)
        #expect(problem(["enabled": on, "phone_number_id": id]) == "channels.whatsapp.access_token: is required (or token, as default.yaml names it)")
        #expect(problem(["enabled": on, "phone_number_id": id, "access_token": token, "token": .string("EAAGsomethingElse")])
                == "channels.whatsapp.access_token: and channels.whatsapp.token are both set and differ; keep access_token")
        #expect(problem(["enabled": on, "phone_number_id": id, "access_token": token, "api_version": .string("latest")])
                == "channels.whatsapp.api_version: must be a Graph API version like v20.0, got 'latest'")
        #expect(problem(["enabled": on, "phone_number_id": id, "access_token": token, "api_version": .string("v21")])
                == "channels.whatsapp.api_version: must be a Graph API version like v20.0, got 'v21'")
        #expect(problem(["enabled": on, "phone_number_id": id, "access_token": token, "api_url": .string("graph.facebook.com")])
                == "channels.whatsapp.api_url: must be an http:// or https:// URL, got 'graph.facebook.com'")
        // No error repeats a token.
        let differing = problem(["enabled": on, "phone_number_id": id, "access_token": token, "token": .string("EAAGsomethingElse")])
        #expect(differing?.contains(WhatsAppStandIn.token) == false && differing?.contains("EAAGsomethingElse") == false)
    }
}
