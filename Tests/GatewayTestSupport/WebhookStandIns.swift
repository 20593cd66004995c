import APIKit
import Crypto
import Foundation

/// The webhook receiver (`webhook_receiver.py`): verifies every delivery with the independent `standardwebhooks`
/// package and Soulacy's `X-Soulacy-Signature` with its own function, answers as scripted, records everything.
public final class WebhookReceiverStandIn: StandInProcess, @unchecked Sendable {
    public let secrets: [String]

    /// A fresh Standard Webhooks secret: `whsec_` + base64 of 32 random bytes.
    public static func makeSecret() -> String {
        "whsec_" + Data(SecureBytes.random(count: 32)).base64EncodedString()
    }

    /// With `secrets` (each verifies a delivery; the first also checks the Soulacy signature unless `soulacySecret`).
    public static func start(secrets: [String], soulacySecret: String? = nil, acceptUnverified: Bool = false) async throws -> WebhookReceiverStandIn {
        let standIn = WebhookReceiverStandIn(directory: TestGateway.makeTemporaryDirectory(), secrets: secrets, soulacySecret: soulacySecret,
                                             acceptUnverified: acceptUnverified)
        try await standIn.start()
        return standIn
    }

    init(directory: String, secrets: [String], soulacySecret: String?, acceptUnverified: Bool) {
        self.secrets = secrets
        var arguments = secrets.flatMap { ["--secret", $0] }
        if let soulacySecret { arguments += ["--soulacy-secret", soulacySecret] }
        if acceptUnverified { arguments.append("--accept-unverified") }
        super.init(script: "webhook_receiver.py", directory: directory, arguments: arguments)
    }

    /// `https://127.0.0.1:<port>/<path>`.
    public func url(_ path: String = "/hooks/soulacy") -> String { baseURL + path }

    /// Every delivery in order, with `standard`/`soulacy` verification results, `verified`, `duplicate`, `status`.
    public func deliveries() async throws -> [JSONValue] {
        try await control("GET", "/control/deliveries")["deliveries"]?.arrayValue ?? []
    }

    /// The answer when no scripted step is queued (for one path, or every path).
    public func setDefault(status: Int, path: String? = nil, retryAfter: Int? = nil) async throws {
        var body: [String: JSONValue] = ["status": .number(Double(status))]
        if let path { body["path"] = .string(path) }
        if let retryAfter { body["retry_after"] = .number(Double(retryAfter)) }
        try await control("POST", "/control/default", json: .object(body))
    }
}

/// Microsoft Teams' and Google Chat's incoming webhooks (`incoming_webhook_standin.py`) on one TLS port.
public final class IncomingWebhookStandIn: StandInProcess, @unchecked Sendable {
    /// The stand-in's default Teams webhook path and Google Chat space, key and token.
    public static let teamsPath = "/webhookb2/6f3d5a1e-0000-4000-8000-00000000a001@72f988bf-0000-4000-8000-00000000b002/IncomingWebhook/"
        + "4b0c1f5e2d6a4c1e9f0a7b3c5d2e1f00/1c2d3e4f-0000-4000-8000-00000000c003"
    public static let googleSpace = "AAAAsoulacy"
    public static let googleKey = "AIzaSyDdI0hCZtE6vySjMm-WEfRq3CPzqKqqsHI"
    public static let googleToken = "soulacy-google-chat-token-0123456789abcdef"

    public static func start(arguments: [String] = []) async throws -> IncomingWebhookStandIn {
        let standIn = IncomingWebhookStandIn(directory: TestGateway.makeTemporaryDirectory(), arguments: arguments)
        try await standIn.start()
        return standIn
    }

    init(directory: String, arguments: [String]) {
        super.init(script: "incoming_webhook_standin.py", directory: directory, arguments: arguments)
    }

    public var teamsURL: String { baseURL + Self.teamsPath }

    public func googleChatURL(space: String = googleSpace, key: String = googleKey, token: String = googleToken) -> String {
        "\(baseURL)/v1/spaces/\(space)/messages?key=\(key)&token=\(token)"
    }

    /// What each service accepted: {"service", "webhook"|"space", "json", ...}.
    public func messages() async throws -> [JSONValue] {
        try await control("GET", "/control/messages")["messages"]?.arrayValue ?? []
    }

    /// Makes a Teams webhook (`teams:` path) or a Google Chat space (`google:` space) answer 404 from now on.
    public func delete(teams path: String? = nil, google space: String? = nil) async throws {
        var body: [String: JSONValue] = [:]
        if let path { body["teams"] = .string(path) }
        if let space { body["google"] = .string(space) }
        try await control("POST", "/control/delete", json: .object(body))
    }
}
