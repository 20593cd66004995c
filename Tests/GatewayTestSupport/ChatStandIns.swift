import APIKit
import Foundation

/// The Slack Web API stand-in: chat.postMessage with Slack's `ok`/`error` answers, 429 with Retry-After on demand.
public final class SlackStandIn: StandInProcess, @unchecked Sendable {
    public static let botToken = "xoxb-1111111111-2222222222-standinSlackBotToken"
    /// Accepted too, so a test can revoke one bot's token without touching the other's.
    public static let secondBotToken = "xoxb-3333333333-4444444444-standinSecondBotToken"
    /// The default channels: the bot is a member of both.
    public static let general = "C0SOULACY1"
    public static let alerts = "C0SOULACY2"

    public static func start() async throws -> SlackStandIn {
        let standIn = SlackStandIn(directory: TestGateway.makeTemporaryDirectory())
        try await standIn.start()
        return standIn
    }

    init(directory: String) {
        super.init(script: "slack_standin.py", directory: directory, arguments: ["--token", Self.botToken, "--token", Self.secondBotToken])
    }

    /// The Web API base a channel's `api_url` names.
    public var apiURL: String { baseURL + "/api" }

    /// What chat.postMessage accepted, in order: `{"channel", "ts", "text", "blocks", "params"}`.
    public func messages() async throws -> [JSONValue] {
        try await control("GET", "/control/messages")["messages"]?.arrayValue ?? []
    }

    /// Adds or changes channels: `{"id", "name", "member", "archived"}`.
    public func channels(_ channels: [JSONValue]) async throws {
        try await control("POST", "/control/channels", json: ["channels": .array(channels)])
    }

    /// That token answers `token_revoked` from now on.
    public func revoke(_ token: String) async throws {
        try await control("POST", "/control/revoke", json: ["token": .string(token)])
    }

    /// Forgets requests, messages, script and injected state; releases a hung request.
    public func reset() async throws {
        try await control("POST", "/control/reset")
    }
}

/// The Discord REST stand-in: Create Message with Discord's JSON errors, a per-channel rate-limit bucket and its headers.
public final class DiscordStandIn: StandInProcess, @unchecked Sendable {
    public static let token = "MTEwMDAwMDAwMDAwMDAwMTAw.GstandIn.discordBotTokenForTests0123"
    public static let channel = "1100000000000000001"
    public static let otherChannel = "1100000000000000002"

    /// `bucketLimit` messages per `bucketWindow` seconds per channel (0 turns the bucket off).
    public static func start(bucketLimit: Int = 5, bucketWindow: Double = 5) async throws -> DiscordStandIn {
        let standIn = DiscordStandIn(directory: TestGateway.makeTemporaryDirectory(), bucketLimit: bucketLimit, bucketWindow: bucketWindow)
        try await standIn.start()
        return standIn
    }

    init(directory: String, bucketLimit: Int, bucketWindow: Double) {
        super.init(script: "discord_standin.py", directory: directory,
                   arguments: ["--token", Self.token, "--bucket-limit", String(bucketLimit), "--bucket-window", String(bucketWindow)])
    }

    /// The REST base with its version, as a channel's `api_url` names it.
    public var apiURL: String { baseURL + "/api/v10" }

    /// The Message objects Create Message made, in order.
    public func messages() async throws -> [JSONValue] {
        try await control("GET", "/control/messages")["messages"]?.arrayValue ?? []
    }

    /// Ends every channel's bucket window now, as if its reset time had come.
    public func refillBuckets() async throws {
        try await control("POST", "/control/bucket/refill")
    }

    /// Adds or changes channels: `{"id", "access", "send"}`.
    public func channels(_ channels: [JSONValue]) async throws {
        try await control("POST", "/control/channels", json: ["channels": .array(channels)])
    }

    public func reset() async throws {
        try await control("POST", "/control/reset")
    }
}

/// The WhatsApp Cloud API stand-in: POST /v{version}/{phone_number_id}/messages with Graph's error objects.
public final class WhatsAppStandIn: StandInProcess, @unchecked Sendable {
    public static let token = "EAAGstandInWhatsAppAccessToken0123456789abcdef"
    public static let phoneNumberID = "106540352242922"
    /// The only recipient the test business number may message.
    public static let allowedRecipient = "15551234567"

    public static func start() async throws -> WhatsAppStandIn {
        let standIn = WhatsAppStandIn(directory: TestGateway.makeTemporaryDirectory())
        try await standIn.start()
        return standIn
    }

    init(directory: String) {
        super.init(script: "whatsapp_standin.py", directory: directory,
                   arguments: ["--token", Self.token, "--phone-number-id", Self.phoneNumberID, "--allowed-recipient", Self.allowedRecipient])
    }

    /// Graph's base, as a channel's `api_url` names it (the version and phone number id follow).
    public var apiURL: String { baseURL }

    /// What the API accepted, in order: `{"id", "phone_number_id", "to", "body", "preview_url", "json"}`.
    public func messages() async throws -> [JSONValue] {
        try await control("GET", "/control/messages")["messages"]?.arrayValue ?? []
    }

    /// Closes (or opens) the 24-hour customer service window for a recipient: closed answers 131047.
    public func window(to recipient: String, open: Bool) async throws {
        try await control("POST", "/control/window", json: ["to": .string(recipient), "open": .bool(open)])
    }

    /// The access token answers 190 "Session has expired" from now on.
    public func expireToken() async throws {
        try await control("POST", "/control/expire", json: [:])
    }

    public func reset() async throws {
        try await control("POST", "/control/reset")
    }
}
