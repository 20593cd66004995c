import ChannelAPI
import ChannelTesting
import Email
import Foundation
import GatewayTestSupport
import JSON
import Testing

/// The email channel against a real SMTP submission server (aiosmtpd, STARTTLS then AUTH) and a real Dovecot.
@Suite("Email channel")
struct EmailChannelTests {
    static let from = "Soulacy Gateway <\(SMTPStandIn.user)>"

    static func settings(_ values: [String: ChannelSetting]) -> ChannelSettings {
        ChannelSettings(kind: "email", values: values)
    }

    static func channel(_ standIn: SMTPStandIn, _ extra: [String: ChannelSetting] = [:]) throws -> any OutboundChannel {
        var values: [String: ChannelSetting] = [
            "host": .string("127.0.0.1"), "port": .number(Double(standIn.tlsPort)), "username": .string(SMTPStandIn.user),
            "password": .string(SMTPStandIn.password), "from": .string(from), "ca_file": .string(standIn.caFile),
            "timeout_seconds": .number(5),
        ]
        values.merge(extra) { $1 }
        let channels = try EmailChannelFactory().make(settings(values))
        #expect(channels.count == 1 && channels[0].name == "email")
        return channels[0]
    }

    static func send(id: String = "send-\(UUID().uuidString.lowercased())", to: String = "Alice Example <alice@example.test>",
                     parts: [String] = ["Your daily summary."], metadata: [String: String] = [:], attempt: Int = 1) -> ChannelSend {
        ChannelSend(id: id, channel: "email", destination: to,
                    output: Output(agentID: "daily", agentName: "Daily", sessionID: "s1", parts: parts, metadata: metadata),
                    attempt: attempt, createdAt: Date(timeIntervalSince1970: 1_796_300_000))
    }

    static func reason(_ outcome: ChannelSendOutcome) -> String? {
        switch outcome {
        case .delivered: nil
        case .retry(_, let reason), .rejected(let reason), .failed(let reason): reason
        }
    }

    static func expectNoSecret(_ outcome: ChannelSendOutcome, _ secrets: [String] = [SMTPStandIn.password, "wrong-password-123"]) {
        let text = reason(outcome) ?? ""
        for secret in secrets { #expect(!text.contains(secret)) }
    }

    // MARK: Delivery

    @Test("a message goes over STARTTLS with AUTH: headers, a stable Message-ID, a body that round-trips (non-ASCII, leading dots)")
    func delivered() async throws {
        let standIn = try await SMTPStandIn.start()
        defer { standIn.stop() }
        let channel = try Self.channel(standIn)
        let body = "Héllo wörld — ✓ 日本語\n.a line starting with a dot\n..and two\n." + String(repeating: "long line ", count: 30) + "end "
        let send = Self.send(id: "run-42.out-1", to: "Alice Example <alice@example.test>, bob@example.test",
                             parts: ["Summary", body], metadata: ["subject": "Résumé für heute ✓"])
        let outcome = await channel.attempt(send)
        #expect(outcome == .delivered(remoteID: "<run-42.out-1@soulacy>"))

        let messages = try await standIn.messages()
        try #require(messages.count == 1)
        let message = messages[0]
        #expect(message["tls"] == true)
        #expect(message["implicit_tls"] == false)
        #expect(message["auth_user"]?.stringValue == SMTPStandIn.user)
        #expect(message["mail_from"]?.stringValue == SMTPStandIn.user)
        #expect(message["rcpt_tos"]?.arrayValue?.compactMap(\.stringValue) == ["alice@example.test", "bob@example.test"])
        #expect(message["message_id"]?.stringValue == "<run-42.out-1@soulacy>")
        #expect(message["subject"]?.stringValue == "Résumé für heute ✓")
        #expect(message["from"]?.stringValue == Self.from)
        #expect(message["to"]?.stringValue == "Alice Example <alice@example.test>, bob@example.test")
        // The text/plain part decoded by Python's email package: the joined parts, in MIME's canonical CRLF form.
        #expect(message["body"]?.stringValue?.replacingOccurrences(of: "\r\n", with: "\n") == "Summary\n\n" + body + "\n")
        let headers = try #require(message["headers"]?.objectValue)
        #expect(headers["MIME-Version"]?.arrayValue?.first?.stringValue == "1.0")
        #expect(headers["Date"]?.arrayValue?.first?.stringValue == "Thu, 03 Dec 2026 12:13:20 +0000")
        let raw = try #require(message["raw"]?.stringValue)
        #expect(raw.contains("Content-Type: text/plain; charset=UTF-8\r\n"))
        #expect(raw.contains("Content-Transfer-Encoding: quoted-printable\r\n"))
        #expect(raw.contains("Subject: =?UTF-8?B?"))
        // CRLF everywhere, no line over 998 octets (76 with quoted-printable).
        #expect(!raw.replacingOccurrences(of: "\r\n", with: "").contains("\n"))
        #expect(raw.components(separatedBy: "\r\n").allSatisfy { $0.utf8.count <= 998 })

        // A retry of the same send carries the same Message-ID: a receiver can drop the duplicate.
        var again = send
        again.attempt = 2
        #expect(await channel.attempt(again) == .delivered(remoteID: "<run-42.out-1@soulacy>"))
        let ids = try await standIn.messages().compactMap { $0["message_id"]?.stringValue }
        #expect(ids == ["<run-42.out-1@soulacy>", "<run-42.out-1@soulacy>"])
    }

    @Test("implicit TLS (smtps, as on port 465) delivers too")
    func implicitTLS() async throws {
        let standIn = try await SMTPStandIn.start()
        defer { standIn.stop() }
        let channel = try Self.channel(standIn, ["port": .number(Double(standIn.smtpsPort)), "tls": .string("implicit")])
        #expect(await channel.attempt(Self.send(id: "implicit-1")) == .delivered(remoteID: "<implicit-1@soulacy>"))
        let messages = try await standIn.messages()
        #expect(messages.count == 1 && messages.first?["implicit_tls"] == true)
        #expect(messages.first?["subject"]?.stringValue == "Soulacy update")
    }

    @Test("a server that does not offer STARTTLS gets neither the password nor the message")
    func starttlsRequired() async throws {
        let server = PlaintextSMTPServer()
        try await server.start()
        defer { server.stop() }
        let channel = try EmailChannelFactory().make(Self.settings([
            "host": "127.0.0.1", "port": .number(Double(server.port)), "username": .string(SMTPStandIn.user), "password": .string(SMTPStandIn.password),
        ]))[0]
        let outcome = await channel.attempt(Self.send())
        guard case .failed(let reason) = outcome else {
            Issue.record("expected failed, got \(outcome)")
            return
        }
        #expect(reason.contains("does not offer STARTTLS"))
        Self.expectNoSecret(outcome)
        #expect(server.seen().isEmpty, "the server saw: \(server.seen())")

        // Asked for in so many words (`tls: none`, a relay on the same host), and with no password: it goes.
        let plain = try EmailChannelFactory().make(Self.settings(["host": "127.0.0.1", "port": .number(Double(server.port)), "tls": "none", "from": "a@b.c"]))[0]
        #expect(await plain.attempt(Self.send(id: "a b@c")) == .delivered(remoteID: "<a-b-c@soulacy>"))
        #expect(server.seen().count == 1 && server.seen()[0].contains("data"))
    }

    // MARK: Refusals

    @Test("a wrong password is rejected with SMTP 535, and the password is in no reason")
    func badPassword() async throws {
        let standIn = try await SMTPStandIn.start()
        defer { standIn.stop() }
        let channel = try Self.channel(standIn, ["password": "wrong-password-123"])
        let outcome = await channel.attempt(Self.send())
        guard case .rejected(let reason) = outcome else {
            Issue.record("expected rejected, got \(outcome)")
            return
        }
        #expect(reason.hasPrefix("SMTP 535: authentication failed"))
        Self.expectNoSecret(outcome)
        let attempts = try await standIn.authAttempts()
        #expect(attempts.count == 1 && attempts.first?["success"] == false && attempts.first?["tls"] == true)
        #expect(try await standIn.messages().isEmpty)
    }

    @Test("4xx replies are tried again; 5xx are refused for good, with the server's words",
          arguments: [("mail", 451, "4.3.0 Try again later", true), ("rcpt", 452, "4.2.2 Mailbox full", true), ("data", 451, "4.3.0 Local error", true),
                      ("rcpt", 550, "5.1.1 No such user here", false), ("mail", 553, "5.1.8 Sender rejected", false), ("data", 554, "5.7.1 Message refused", false)])
    func scriptedReplies(stage: String, code: Int, message: String, transient: Bool) async throws {
        let standIn = try await SMTPStandIn.start()
        defer { standIn.stop() }
        let channel = try Self.channel(standIn)
        try await standIn.scriptReply(stage: stage, code: code, message: message)
        let outcome = await channel.attempt(Self.send(id: "scripted"))
        let reason = try #require(Self.reason(outcome))
        if transient {
            guard case .retry = outcome else { Issue.record("expected retry, got \(outcome)"); return }
        } else {
            guard case .rejected = outcome else { Issue.record("expected rejected, got \(outcome)"); return }
        }
        #expect(reason.hasPrefix("SMTP \(code)"))
        #expect(reason.contains(message))
        if stage == "rcpt" { #expect(reason.contains("RCPT")) }
        Self.expectNoSecret(outcome)
        #expect(try await standIn.messages().isEmpty)
        // The script is used up: the next attempt of the same send goes through.
        #expect(await channel.attempt(Self.send(id: "scripted", attempt: 2)) == .delivered(remoteID: "<scripted@soulacy>"))
    }

    @Test("UIDs past 32 bits (a broken server's) are no message, so the next UID cannot overflow; the rest come lowest first, a batch at a time")
    func uidsInRange() {
        let answer = Array("* SEARCH 7 18446744073709551615 4294967296 3 4294967295 12\r\nA1 OK SEARCH completed\r\n".utf8)
        #expect(IMAPPoller.newUIDs(in: answer, from: 4) == [7, 12, 4_294_967_295])
        let many = Array(("* SEARCH " + (1...40).map(String.init).joined(separator: " ") + "\r\n").utf8)
        #expect(IMAPPoller.newUIDs(in: many, from: 1) == Array(1...25))
    }

    @Test("no server listening, or one that never answers in time: try again")
    func unreachable() async throws {
        let standIn = try await SMTPStandIn.start()
        let channel = try Self.channel(standIn, ["timeout_seconds": 1])
        try await standIn.script([["stage": "mail", "delay_ms": 3000]])
        let slow = await channel.attempt(Self.send())
        guard case .retry(_, let slowReason) = slow else { Issue.record("expected retry, got \(slow)"); return }
        #expect(slowReason.contains("did not answer within"))
        standIn.stop()
        let outcome = await channel.attempt(Self.send())
        guard case .retry(_, let reason) = outcome else { Issue.record("expected retry, got \(outcome)"); return }
        #expect(reason.contains("could not reach SMTP server 127.0.0.1:\(standIn.tlsPort)"))
        Self.expectNoSecret(outcome)
    }

    @Test("a line break in the subject cannot add a header; one in `to` is refused at load and at send")
    func headerInjection() async throws {
        let standIn = try await SMTPStandIn.start()
        defer { standIn.stop() }
        let channel = try Self.channel(standIn)
        let injected = Self.send(id: "inject", to: "alice@example.test", metadata: ["subject": "Hello\r\nBcc: evil@attacker.test\r\n\r\nbody"])
        #expect(await channel.attempt(injected) == .delivered(remoteID: "<inject@soulacy>"))
        let message = try #require(try await standIn.messages().first)
        #expect(message["rcpt_tos"]?.arrayValue?.compactMap(\.stringValue) == ["alice@example.test"])
        #expect(message["headers"]?["Bcc"] == nil)
        let subject = try #require(message["subject"]?.stringValue)
        #expect(!subject.contains("\n") && !subject.contains("\r") && subject.hasPrefix("Hello") && subject.contains("Bcc: evil@attacker.test"))

        for to in ["alice@example.test\r\nBcc: evil@attacker.test", "alice@example.test\nevil@attacker.test", "Eve <eve@attacker.test>\r\nX: y"] {
            #expect(throws: DestinationError.self) { try channel.validate(destination: to) }
            let outcome = await channel.attempt(Self.send(to: to))
            guard case .failed(let reason) = outcome else { Issue.record("expected failed, got \(outcome)"); continue }
            #expect(reason.contains("line break"))
        }
        #expect(try await standIn.messages().count == 1)
    }

    // MARK: Configuration

    @Test("the original's keys and defaults")
    func configurationDefaults() throws {
        let smtp = try EmailConfiguration(Self.settings(["host": "smtp.example.com", "username": "me@example.com", "password": "pw"])).smtp
        #expect(smtp.port == 587 && smtp.security == .starttls && smtp.subject == "Soulacy update" && smtp.timeout == .seconds(20))
        #expect(smtp.from == MailAddress(address: "me@example.com"))
        let implicit = try EmailConfiguration(Self.settings(["host": "smtp.example.com", "port": 465, "from": "\"Soulacy, the gateway\" <me@example.com>"])).smtp
        #expect(implicit.security == .implicit && implicit.from == MailAddress(name: "Soulacy, the gateway", address: "me@example.com"))
        #expect(try EmailConfiguration(Self.settings(["host": "h", "tls": "implicit", "from": "a@b.c"])).smtp.port == 465)
        #expect(try EmailConfiguration(Self.settings(["host": "h", "port": "2525", "tls": "STARTTLS", "from": "a@b.c", "subject": "Hi\nthere"])).smtp.subject == "Hi there")
        #expect(try EmailConfiguration(Self.settings(["host": "h", "tls": "none", "from": "a@b.c"])).smtp.security == .none)

        let file = TestGateway.makeTemporaryDirectory() + "/smtp-password"
        try "secret from a file\n".write(toFile: file, atomically: true, encoding: .utf8)
        #expect(try EmailConfiguration(Self.settings(["host": "h", "from": "a@b.c", "password_file": .string(file)])).smtp.password == "secret from a file")

        // The inbound side: only with agent_id and imap_host; IMAP credentials default to the SMTP ones.
        #expect(try EmailConfiguration(Self.settings(["host": "h", "from": "a@b.c", "imap_host": "imap.example.com"])).imap == nil)
        let imap = try #require(try EmailConfiguration(Self.settings(["host": "h", "username": "me@example.com", "password": "pw", "imap_host": "imap.example.com", "agent_id": "inbox"])).imap)
        #expect(imap.port == 993 && imap.security == .implicit && imap.mailbox == "INBOX" && imap.username == "me@example.com" && imap.password == "pw")
        let factory = EmailChannelFactory()
        #expect(try factory.makePollers(Self.settings(["host": "h", "from": "a@b.c"])).isEmpty)
        #expect(try factory.makePollers(Self.settings(["host": "h", "from": "a@b.c", "imap_host": "i", "agent_id": "x"])).map(\.channel) == ["email"])
    }

    @Test("config errors name channels.email.<key>", arguments: [
        ([String: ChannelSetting](), "channels.email.host: is required"),
        (["host": "h"], "channels.email.from: is required when there is no username"),
        (["host": "h", "username": "AKIAXXXX"], "channels.email.username: 'AKIAXXXX' is not an email address"),
        (["host": "h", "from": "not an address"], "channels.email.from: 'not an address' is not an email address"),
        (["host": "h", "from": "a@b.c", "tls": "maybe"], "channels.email.tls: must be starttls, implicit or none, got 'maybe'"),
        (["host": "h", "from": "a@b.c", "port": 70000], "channels.email.port: must be a whole number from 1 to 65535"),
        (["host": "smtp://h:25", "from": "a@b.c"], "channels.email.host: must be a host name or IP address"),
        (["host": "h", "from": "a@b.c", "tls": "none", "password": "pw"], "channels.email.password: is never sent without TLS"),
        (["host": "h", "from": "a@b.c", "password_file": "/nonexistent/pw"], "channels.email.password_file: cannot read '/nonexistent/pw'"),
        (["host": "h", "from": "a@b.c", "password": "pw", "password_file": "/x"], "channels.email.password_file: cannot be set together with password"),
        (["host": "h", "from": "a@b.c", "timeout_seconds": 0], "channels.email.timeout_seconds: must be a whole number from 1 to 600"),
        (["host": "h", "from": "a@b.c", "default_output_to": "bob@"], "channels.email.default_output_to: 'bob@' is not an email address"),
        (["host": "h", "from": "a@b.c", "imap_host": "i", "agent_id": "x", "imap_tls": "sometimes"], "channels.email.imap_tls: must be starttls, implicit or none"),
    ] as [([String: ChannelSetting], String)])
    func configurationErrors(values: [String: ChannelSetting], expected: String) {
        do {
            _ = try EmailChannelFactory().make(Self.settings(values))
            Issue.record("expected \(expected)")
        } catch {
            #expect(error.description.hasPrefix(expected), "\(error.description)")
            #expect(!error.description.contains("pw\""))
        }
    }

    @Test("`to`: one address or a list, names allowed; empty borrows default_output_to")
    func destinations() throws {
        let channel = try EmailChannelFactory().make(Self.settings(["host": "h", "from": "a@b.c"]))[0]
        for good in ["bob@example.com", "Bob <bob@example.com>", "\"Smith, Bob\" <bob@example.com>, carol@example.org", "x+tag@[192.168.1.1]", " a@b.c ,"] {
            #expect(throws: Never.self) { try channel.validate(destination: good) }
        }
        for bad in ["", "bob", "bob@", "@example.com", "bob@@example.com", "bob@exa mple.com", "Bob <bob@example.com", "a@b.c, nope", "bo..b@example.com", "\"open <a@b.c>"] {
            #expect(throws: DestinationError.self, "\(bad)") { try channel.validate(destination: bad) }
        }
        let withDefault = try EmailChannelFactory().make(Self.settings(["host": "h", "from": "a@b.c", "default_output_to": "ops@example.com"]))[0]
        #expect(throws: Never.self) { try withDefault.validate(destination: "") }
    }

    // MARK: IMAP

    static func poller(_ imap: IMAPStandIn, log: Log = Log(), password: String = IMAPStandIn.password) throws -> any InboundPoller {
        let pollers = try EmailChannelFactory(log: log).makePollers(settings([
            "host": "127.0.0.1", "from": .string(from), "agent_id": "inbox-agent", "imap_host": "127.0.0.1",
            "imap_port": .number(Double(imap.tlsPort)), "imap_username": .string(IMAPStandIn.user), "imap_password": .string(password),
            "ca_file": .string(imap.caFile), "timeout_seconds": 10,
        ]))
        return try #require(pollers.first)
    }

    @Test("new mail comes back once, decoded; our own mail and a changed UIDVALIDITY are handled")
    func imapPolling() async throws {
        let imap = try await IMAPStandIn.start()
        defer { imap.stop() }
        let logs = MemoryLogHandler()
        let poller = try Self.poller(imap, log: Log(minimum: .debug, handler: logs))
        #expect(poller.channel == "email")

        try await imap.append(["from": "Old <old@example.test>", "subject": "before", "body": "mail that was there first"])
        let first = try await poller.poll(after: nil, timeout: .zero)
        #expect(first.messages.isEmpty)  // a first poll starts at UIDNEXT: old mail is left alone
        let cursor = try #require(first.cursor)

        let plain = try await imap.append(["from": "=?UTF-8?Q?J=C3=BCrgen_M=C3=BCller?= <juergen@example.test>", "subject": "Frage",
                                           "body": "Wie wird das Wetter? ✓\n.dot line\n", "headers": ["Reply-To": "Replies <replies@example.test>"]])
        try await imap.append(["from": .string(Self.from), "subject": "our own reply", "body": "from the gateway itself"])
        let multipart = """
        From: "Carol, C." <carol@example.test>\r
        To: agent@soulacy.test\r
        Subject: multipart\r
        MIME-Version: 1.0\r
        Content-Type: multipart/mixed; boundary="outer"\r
        \r
        --outer\r
        Content-Type: multipart/alternative; boundary=inner\r
        \r
        --inner\r
        Content-Type: text/plain; charset="iso-8859-1"\r
        Content-Transfer-Encoding: quoted-printable\r
        \r
        Caf=E9 at noon? This line is long enough that it needs a soft break here =\r
        and goes on.\r
        --inner\r
        Content-Type: text/html\r
        \r
        <p>Caf&eacute;</p>\r
        --inner--\r
        --outer\r
        Content-Type: text/plain\r
        Content-Disposition: attachment; filename=notes.txt\r
        \r
        not the body\r
        --outer--\r

        """
        let second = try await imap.append(raw: multipart)
        // A vacation reply (RFC 3834) is a robot's: passed over like our own mail.
        try await imap.append(raw: "From: Dave <dave@example.test>\r\nSubject: Out of office\r\nAuto-Submitted: auto-replied\r\n\r\nI am away.\r\n")
        let base64 = try await imap.append(raw: "From: erin@example.test\r\nSubject: =?UTF-8?B?w5xiZXI=?=\r\nMIME-Version: 1.0\r\n"
            + "Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: base64\r\n\r\n"
            + Data("Grüße aus Köln\r\nzweite Zeile".utf8).base64EncodedString(options: .lineLength64Characters) + "\r\n")
        let subjectOnly = try await imap.append(raw: "From: frank@example.test\r\nSubject: =?UTF-8?Q?Wetter_morgen=3F?=\r\n\r\n\r\n")

        let batch = try await poller.poll(after: cursor, timeout: .zero)
        try #require(batch.messages.count == 4, "\(batch.messages)")
        let (a, b) = (batch.messages[0], batch.messages[1])
        #expect(a.id == "\(plain.uidValidity):\(plain.uid)")
        #expect(a.senderID == "juergen@example.test" && a.senderName == "Jürgen Müller" && a.replyTo == "replies@example.test")
        #expect(a.text == "Wie wird das Wetter? ✓\n.dot line" && a.isDirect)
        #expect(b.id == "\(second.uidValidity):\(second.uid)")
        #expect(b.senderID == "carol@example.test" && b.senderName == "Carol, C." && b.replyTo == "carol@example.test")
        #expect(b.text == "Café at noon? This line is long enough that it needs a soft break here and goes on.")
        #expect(batch.messages[2].id == "\(base64.uidValidity):\(base64.uid)" && batch.messages[2].text == "Grüße aus Köln\nzweite Zeile")
        #expect(batch.messages[2].senderID == "erin@example.test" && batch.messages[2].senderName == nil)
        // No body: the subject is the request.
        #expect(batch.messages[3].id == "\(subjectOnly.uidValidity):\(subjectOnly.uid)" && batch.messages[3].text == "Wetter morgen?")
        #expect(batch.cursor == "\(subjectOnly.uidValidity):\(subjectOnly.uid + 1)")

        // Polling again from the new cursor: nothing, however long it waits.
        let again = try await poller.poll(after: batch.cursor, timeout: .milliseconds(200))
        #expect(again.messages.isEmpty && again.cursor == batch.cursor)

        // The mailbox was rebuilt (another UIDVALIDITY): start over at its UIDNEXT, and say so.
        let rebuilt = try await poller.poll(after: "\(plain.uidValidity + 1):2", timeout: .zero)
        #expect(rebuilt.messages.isEmpty && rebuilt.cursor == batch.cursor)
        #expect(logs.lines.contains { $0.contains("changed its UIDVALIDITY") })
        // No log line carries mail text or a password.
        #expect(!logs.lines.contains { $0.contains("Wetter") || $0.contains(IMAPStandIn.password) })
        let logins = try await imap.logins()
        #expect(logins.contains { $0["user"]?.stringValue == IMAPStandIn.user && $0["tls"] == true })
    }

    @Test("a refused IMAP login is an error without the password in it")
    func imapBadPassword() async throws {
        let imap = try await IMAPStandIn.start()
        defer { imap.stop() }
        let poller = try Self.poller(imap, password: "wrong-imap-password")
        do {
            _ = try await poller.poll(after: nil, timeout: .zero)
            Issue.record("expected an error")
        } catch {
            #expect("\(error)".contains("IMAP"))
            #expect(!"\(error)".contains("wrong-imap-password"))
        }
    }
}

// Config blocks written as YAML would give them.
extension ChannelSetting: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral {
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int) { self = .number(Double(value)) }
}
