import APIKit
import Foundation
import Mobile

/// The channels a Soulacy user configures in the gateway config's `channels:` block, for tests that run one shape
/// over every one of them (an outage, a kill -9, the service's refusals) instead of eight copies.
public enum BuiltInChannel: String, CaseIterable, Sendable {
    case telegram, slack, discord, whatsapp, email, teams, googleChat = "google_chat", webhook
}

/// One built-in channel's stand-in and how a gateway reaches it: the `channels:` block, a destination the service
/// knows and one it does not, the texts it accepted, and the refusals it can be made to give, each in the service's
/// own shape (its status, its error body, its rate-limit answer).
public final class ChannelService: @unchecked Sendable {
    /// Which credentials a gateway config carries: the service's, or ones it refuses (a bad token, password or secret).
    public enum Credentials: Sendable { case valid, wrong }

    /// Whether the stand-in enforces the service's own throughput limits (Discord's bucket, Teams' 4 a second,
    /// Google Chat's 60 a minute). A burst test turns them off: it is about a kill, not about pacing.
    public enum Limits: Sendable { case documented, off }

    /// What a gateway is given for one channel.
    public struct Setup: Sendable {
        /// The whole gateway config (`channels:` with this channel's block).
        public let gatewayConfig: String
        /// A `to` the service delivers to.
        public let destination: String
        /// A `to` the service refuses as unknown (after `prepareUnknownDestination()`).
        public let unknownDestination: String
    }

    /// Words of the service's own answers that the reason recorded on the run must carry.
    public struct Reasons: Sendable {
        public let badCredentials: [String]
        public let unknownDestination: [String]
        public let rateLimited: [String]
    }

    public let kind: BuiltInChannel
    public let standIn: StandInProcess
    private let webhookSecret: String

    /// Retries quick enough that an output waits seconds, not minutes, once its service is back.
    public static let quickRetries = RetryPolicy(initialDelay: 0.5, maximumDelay: 2)

    /// A Teams webhook whose channel was removed (`/control/remove-channel`): Teams answers 200 with a buried 400.
    static let teamsRemovedChannelPath = "/webhookb2/6f3d5a1e-0000-4000-8000-00000000a001@72f988bf-0000-4000-8000-00000000b002/IncomingWebhook/"
        + "0deadc0de0de4c1e9f0a7b3c5d2e1f00/1c2d3e4f-0000-4000-8000-00000000c003"
    /// A webhook id Teams never issued (a mistyped or forged URL).
    static let teamsUnknownPath = "/webhookb2/00000000-0000-4000-8000-000000000000@72f988bf-0000-4000-8000-00000000b002/IncomingWebhook/"
        + "ffffffffffffffffffffffffffffffff/1c2d3e4f-0000-4000-8000-00000000c003"

    public static func start(_ kind: BuiltInChannel, limits: Limits = .documented) async throws -> ChannelService {
        let standIn: StandInProcess
        switch kind {
        case .telegram: standIn = try await TelegramStandIn.start()
        case .slack: standIn = try await SlackStandIn.start()
        case .discord: standIn = limits == .off ? try await DiscordStandIn.start(bucketLimit: 0) : try await DiscordStandIn.start()
        case .whatsapp: standIn = try await WhatsAppStandIn.start()
        case .email: standIn = try await SMTPStandIn.start()
        case .teams, .googleChat:
            standIn = try await IncomingWebhookStandIn.start(arguments: limits == .off ? ["--teams-per-second", "0", "--google-per-minute", "0"] : [])
        case .webhook:
            let secret = WebhookReceiverStandIn.makeSecret()
            return ChannelService(kind: kind, standIn: try await WebhookReceiverStandIn.start(secrets: [secret]), webhookSecret: secret)
        }
        return ChannelService(kind: kind, standIn: standIn, webhookSecret: "")
    }

    init(kind: BuiltInChannel, standIn: StandInProcess, webhookSecret: String) {
        self.kind = kind
        self.standIn = standIn
        self.webhookSecret = webhookSecret
    }

    /// The channel id SOUL.yaml names in `output: {channel: …}`.
    public var channel: String { kind.rawValue }

    /// The gateway config and destinations, with the service's credentials or with ones it refuses.
    public func setup(_ credentials: Credentials = .valid) -> Setup {
        let good = credentials == .valid
        let ca = standIn.caFile
        let block: String
        var destination = "", unknown = ""
        switch kind {
        case .telegram:
            block = """
                token: "\(good ? TelegramStandIn.token : "123456:ABC-wrong_telegram_token_000000000000")"
                api_url: "\(standIn.baseURL)"
                """
            destination = String(TelegramStandIn.privateChat)
            unknown = "999999999"
        case .slack:
            block = """
                bot_token: "\(good ? SlackStandIn.botToken : "xoxb-9999999999-9999999999-wrongSlackBotToken")"
                api_url: "\(standIn.baseURL)/api"
                """
            destination = SlackStandIn.general
            unknown = "C0NOSUCH99"
        case .discord:
            block = """
                token: "\(good ? DiscordStandIn.token : "MTEwMDAwMDAwMDAwMDAwMTAw.Gwrong.discordBotTokenThatIsNotValid")"
                api_url: "\(standIn.baseURL)/api/v10"
                """
            destination = DiscordStandIn.channel
            unknown = "1100000000000000099"
        case .whatsapp:
            block = """
                phone_number_id: "\(WhatsAppStandIn.phoneNumberID)"
                access_token: "\(good ? WhatsAppStandIn.token : "EAAGwrongWhatsAppAccessToken000000000000000")"
                api_url: "\(standIn.baseURL)"
                """
            destination = WhatsAppStandIn.allowedRecipient
            unknown = "15550000000"
        case .email:
            block = """
                host: 127.0.0.1
                port: \(standIn.tlsPort)
                username: "\(SMTPStandIn.user)"
                password: "\(good ? SMTPStandIn.password : "wrong-smtp-password-123")"
                from: "Soulacy Gateway <\(SMTPStandIn.user)>"
                timeout_seconds: 5
                """
            destination = "alice@example.test"
            unknown = "nobody@example.test"
        case .teams:
            let url = standIn.baseURL + (good ? IncomingWebhookStandIn.teamsPath : Self.teamsUnknownPath)
            block = "webhook_url: \"\(url)\""
            destination = url
            unknown = standIn.baseURL + Self.teamsRemovedChannelPath
        case .googleChat:
            let webhooks = standIn as! IncomingWebhookStandIn
            let url = good ? webhooks.googleChatURL() : webhooks.googleChatURL(token: "wrong-google-chat-token-0000000000000000")
            block = "webhook_url: \"\(url)\""
            destination = url
            unknown = webhooks.googleChatURL(space: "AAAAnosuchspace")
        case .webhook:
            let receiver = standIn as! WebhookReceiverStandIn
            let secret = good ? webhookSecret : WebhookReceiverStandIn.makeSecret()
            block = """
                endpoints:
                  reports: {url: "\(receiver.url())", secret: "\(secret)"}
                  gone: {url: "\(receiver.url("/hooks/gone"))", secret: "\(secret)"}
                """
            destination = "reports"
            unknown = "gone"
        }
        let indented = block.split(separator: "\n").map { "    " + $0 }.joined(separator: "\n")
        let config = """
            channels:
              \(channel):
                enabled: true
                ca_file: "\(ca)"
            \(indented)
            """
        return Setup(gatewayConfig: config, destination: destination, unknownDestination: unknown)
    }

    /// A SOUL.yaml of agents that each deliver what they print to this channel (`to` theirs), run by the API.
    /// The default command prints the run's input, so each run's text is the test's own.
    public func soul(_ agents: [(id: String, to: String)], command: String = #"["/bin/cat"]"#) -> String {
        "agents:\n" + agents.map { agent in
            """
              - id: \(agent.id)
                name: \(agent.id.capitalized)
                enabled: true
                trigger: cron
                schedule:
                  cron: "0 0 1 1 *"
                  output: {channel: \(channel), to: "\(agent.to)"}
                runner:
                  command: \(command)
            """
        }.joined(separator: "\n")
    }

    /// Whatever the stand-in needs so that `unknownDestination` is refused: most services know their chats already.
    public func prepareUnknownDestination() async throws {
        switch kind {
        case .email:
            // What a submission server answers for a mailbox that does not exist (RFC 5321 §4.2.2, 550 5.1.1).
            try await (standIn as! SMTPStandIn).scriptReply(stage: "rcpt", code: 550, message: "5.1.1 <nobody@example.test>: Recipient address rejected: User unknown")
        case .teams:
            try await standIn.control("POST", "/control/remove-channel", json: ["teams": .string(Self.teamsRemovedChannelPath)])
        case .webhook:
            try await (standIn as! WebhookReceiverStandIn).setDefault(status: 404, path: "/hooks/gone")
        case .telegram, .slack, .discord, .whatsapp, .googleChat:
            break
        }
    }

    /// The next send is answered with the service's rate limit (its 429, or SMTP's "try again later").
    public func scriptRateLimit(retryAfter seconds: Int) async throws {
        switch kind {
        case .telegram, .slack, .discord, .webhook:
            try await standIn.script([["status": 429, "retry_after": .number(Double(seconds))]])
        case .whatsapp:
            try await standIn.script([["status": 429]])  // 130429 "Rate limit hit"
        case .email:
            try await (standIn as! SMTPStandIn).scriptReply(stage: "mail", code: 451, message: "4.7.500 Server busy. Please try again later")
        case .teams:
            try await standIn.script([["status": 429, "service": "teams"]])
        case .googleChat:
            try await standIn.script([["status": 429, "service": "google_chat"]])
        }
    }

    /// Whether the service's rate-limit answer says how long to wait (`retry_after`, `Retry-After`); the others
    /// document only "back off".
    public var announcesRetryAfter: Bool {
        switch kind {
        case .telegram, .slack, .discord, .webhook: true
        case .whatsapp, .email, .teams, .googleChat: false
        }
    }

    public var expectedReasons: Reasons {
        switch kind {
        case .telegram:
            Reasons(badCredentials: ["Telegram answered 401", "Unauthorized"], unknownDestination: ["Telegram answered 400", "chat not found"],
                    rateLimited: ["Telegram answered 429", "Too Many Requests: retry after"])
        case .slack:
            Reasons(badCredentials: ["Slack answered invalid_auth"], unknownDestination: ["Slack answered channel_not_found"],
                    rateLimited: ["Slack answered 429", "ratelimited"])
        case .discord:
            Reasons(badCredentials: ["Discord answered 401", "Unauthorized"], unknownDestination: ["Discord answered 404", "Unknown Channel (code 10003)"],
                    rateLimited: ["Discord answered 429", "You are being rate limited."])
        case .whatsapp:
            Reasons(badCredentials: ["WhatsApp answered 401", "Invalid OAuth access token", "code 190"],
                    unknownDestination: ["WhatsApp answered 400", "Recipient phone number not in allowed list", "code 131030"],
                    rateLimited: ["WhatsApp answered 429", "code 130429"])
        case .email:
            Reasons(badCredentials: ["SMTP 535", "authentication failed"], unknownDestination: ["SMTP 550", "User unknown"],
                    rateLimited: ["SMTP 451", "Server busy"])
        case .teams:
            Reasons(badCredentials: ["Teams answered 404", "Webhook not found or deleted."],
                    unknownDestination: ["Teams answered 200 but", "Microsoft Teams endpoint returned HTTP error 400"],
                    rateLimited: ["Teams answered 429", "HTTP error 429"])
        case .googleChat:
            Reasons(badCredentials: ["Google Chat answered 401", "UNAUTHENTICATED"], unknownDestination: ["Google Chat answered 404", "NOT_FOUND"],
                    rateLimited: ["Google Chat answered 429", "RESOURCE_EXHAUSTED"])
        case .webhook:
            Reasons(badCredentials: ["answered 401", "signature verification failed"], unknownDestination: ["answered 404"],
                    rateLimited: ["answered 429"])
        }
    }

    /// Every secret either gateway config holds: none may show in a reason.
    public var secrets: [String] {
        switch kind {
        case .telegram: [TelegramStandIn.token, "123456:ABC-wrong_telegram_token_000000000000"]
        case .slack: [SlackStandIn.botToken, "xoxb-9999999999-9999999999-wrongSlackBotToken"]
        case .discord: [DiscordStandIn.token, "MTEwMDAwMDAwMDAwMDAwMTAw.Gwrong.discordBotTokenThatIsNotValid"]
        case .whatsapp: [WhatsAppStandIn.token, "EAAGwrongWhatsAppAccessToken000000000000000"]
        case .email: [SMTPStandIn.password, "wrong-smtp-password-123"]
        case .teams: ["4b0c1f5e2d6a4c1e9f0a7b3c5d2e1f00", "ffffffffffffffffffffffffffffffff"]
        case .googleChat: [IncomingWebhookStandIn.googleKey, IncomingWebhookStandIn.googleToken, "wrong-google-chat-token-0000000000000000"]
        case .webhook: [webhookSecret, String(webhookSecret.dropFirst("whsec_".count))]
        }
    }

    /// The texts the service accepted (delivered to the chat, mailbox or endpoint), oldest first, since it last started.
    public func received() async throws -> [String] {
        switch kind {
        case .telegram, .slack:
            try await standIn.control("GET", "/control/messages")["messages"]?.arrayValue?.compactMap { $0["text"]?.stringValue } ?? []
        case .discord:
            try await standIn.control("GET", "/control/messages")["messages"]?.arrayValue?.compactMap { $0["content"]?.stringValue } ?? []
        case .whatsapp, .email:
            try await standIn.control("GET", "/control/messages")["messages"]?.arrayValue?.compactMap { $0["body"]?.stringValue } ?? []
        case .teams, .googleChat:
            try await standIn.control("GET", "/control/messages")["messages"]?.arrayValue?
                .filter { $0["service"]?.stringValue == (kind == .teams ? "teams" : "google_chat") }
                .compactMap { $0["json"]?["text"]?.stringValue } ?? []
        case .webhook:
            // Only deliveries whose signatures verified and that the receiver took count as received.
            try await (standIn as! WebhookReceiverStandIn).deliveries()
                .filter { $0["verified"] == true && $0["status"]?.numberValue == 200 }
                .compactMap { $0["body"]?.stringValue }
        }
    }

    /// How many accepted texts contain `token`.
    public func receivedCount(containing token: String) async throws -> Int {
        try await received().filter { $0.contains(token) }.count
    }

    /// When each request of the service's send API arrived (Unix seconds), oldest first; nil for SMTP, whose
    /// stand-in records only the messages it took.
    public func requestTimes() async throws -> [Double]? {
        guard kind != .email else { return nil }
        return try await standIn.requests().compactMap { $0["time"]?.numberValue }
    }

    /// The service goes away for good.
    public func stop() { standIn.stop() }

    /// The service goes down: its ports refuse connections until `restart()`.
    public func goDown() { standIn.stopHoldingPorts() }

    /// The service comes back on the same address.
    public func restart() async throws { try await standIn.restart() }

    /// Every answer of the service waits this long first (to keep sends in flight).
    public func delay(milliseconds: Int) async throws { try await standIn.delay(milliseconds: milliseconds) }
}
