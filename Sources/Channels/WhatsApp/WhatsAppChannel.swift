import ChannelAPI
import ChannelSupport
import Foundation
import HTTPClient
import JSON

/// The WhatsApp Business Cloud API settings, read from `channels.whatsapp`.
public struct WhatsAppConfiguration: Sendable, Equatable {
    /// Always `whatsapp`, as in the original.
    public var id: String
    /// The business phone number's id in the Cloud API (digits), not the number itself.
    public var phoneNumberID: String
    /// The system user's (or the app's temporary) access token: a secret.
    public var accessToken: String
    /// The Graph API version in the path, `v20.0` as the original hard-codes.
    public var apiVersion: String
    /// The Graph base, `https://graph.facebook.com` unless `api_url` says otherwise.
    public var apiURL: String
    public var caFile: String?
    public var timeout: Duration

    public init(id: String = "whatsapp", phoneNumberID: String, accessToken: String, apiVersion: String = "v20.0",
                apiURL: String = "https://graph.facebook.com", caFile: String? = nil, timeout: Duration = .seconds(15)) {
        self.id = id
        self.phoneNumberID = phoneNumberID
        self.accessToken = accessToken
        self.apiVersion = apiVersion
        self.apiURL = apiURL
        self.caFile = caFile
        self.timeout = timeout
    }
}

/// Sends outputs as WhatsApp text messages through the Cloud API, in pieces of at most 4096 characters (the
/// limit of `text.body`), each its own message, in order.
public final class WhatsAppChannel: OutboundChannel {
    public let configuration: WhatsAppConfiguration
    private let client: HTTP2Client
    private let pieces = PieceDelivery()

    /// "Text messages": `text.body` holds at most 4096 characters.
    public static let bodyLimit = 4096

    public init(configuration: WhatsAppConfiguration) {
        self.configuration = configuration
        client = HTTP2Client(configuration: HTTP2ClientConfiguration(caFile: configuration.caFile))
    }

    public var name: String { configuration.id }

    /// A phone number in international format: the country code and number, digits only, optionally after a
    /// `+` (E.164: at most 15 digits). The Cloud API takes it as written.
    public func validate(destination: String) throws(DestinationError) {
        let digits = destination.hasPrefix("+") ? destination.dropFirst() : Substring(destination)
        guard (7...15).contains(digits.count), digits.unicodeScalars.allSatisfy({ ("0"..."9").contains($0) }), digits.first != "0" else {
            throw .invalid("WhatsApp destination '\(destination)' is not a phone number in international format "
                           + "(country code and number, digits only, optionally after '+': 15551234567)")
        }
    }

    public func attempt(_ send: ChannelSend) async -> ChannelSendOutcome {
        let text = MessageText.body(of: send.output)
        let parts = MessageText.split(text, limit: Self.bodyLimit, count: { $0.unicodeScalars.count })
        let outcome = await pieces.send(send, pieces: parts) { piece, _ in
            await self.post(piece, to: send.destination)
        }
        return outcome.redacting([configuration.accessToken])
    }

    private func post(_ body: String, to recipient: String) async -> PieceAnswer {
        let bytes: [UInt8]
        do {
            bytes = Array(try JSONCoding.encoder.encode(TextMessage(to: recipient, body: body)))
        } catch {
            return .stop(.failed(reason: "cannot encode the message for WhatsApp: \(error)"))
        }
        let url = "\(configuration.apiURL)/\(configuration.apiVersion)/\(configuration.phoneNumberID)/messages"
        let request = ClientRequest(method: "POST", url: url,
                                    headers: [("Authorization", "Bearer \(configuration.accessToken)"), ("Content-Type", "application/json")],
                                    body: bytes, timeout: configuration.timeout)
        let response: ClientResponse
        do {
            response = try await client.send(request)
        } catch {
            return .stop(HTTPOutcome.transportFailure(error, service: "WhatsApp"))
        }
        return Self.answer(response)
    }

    /// What an answer to POST /messages means: 200 with `messages[0].id`, else Graph's error object, whose code
    /// says more than the HTTP status (a rate limit may come as 400 from older versions, a token error as 400 or 401).
    static func answer(_ response: ClientResponse) -> PieceAnswer {
        if (200..<300).contains(response.status) {
            let sent = try? JSONCoding.decode(SentMessages.self, from: response.body, what: "WhatsApp's answer")
            return .delivered(remoteID: sent?.messages.first?.id)
        }
        guard let graph = (try? JSONCoding.decode(GraphErrorBody.self, from: response.body, what: "WhatsApp's answer"))?.error else {
            return .stop(HTTPOutcome.classify(response, service: "WhatsApp", detail: HTTPOutcome.excerpt(response.body)))
        }
        let reason = "WhatsApp answered \(response.status): \(graph.summary)"
        switch GraphErrorCode(rawValue: graph.code ?? 0).action(status: response.status) {
        case .retry: return .stop(.retry(after: RetryAfter.parse(response.headers["retry-after"]), reason: reason))
        case .reject: return .stop(.rejected(reason: reason))
        }
    }
}

/// The Cloud API's text message: `{messaging_product, recipient_type, to, type, text: {preview_url, body}}`.
struct TextMessage: Encodable {
    struct Text: Encodable {
        let preview_url = false
        let body: String
    }

    let messaging_product = "whatsapp"
    let recipient_type = "individual"
    let to: String
    let type = "text"
    let text: Text

    init(to: String, body: String) {
        self.to = to
        text = Text(body: body)
    }
}

/// `{"messaging_product": "whatsapp", "contacts": [{"input", "wa_id"}], "messages": [{"id": "wamid…"}]}`.
struct SentMessages: Decodable {
    struct Message: Decodable { let id: String }
    let messages: [Message]
}

/// Graph's error: `{"error": {"message", "type", "code", "error_subcode"?, "error_data": {"details"}?, "fbtrace_id"}}`.
struct GraphErrorBody: Decodable {
    struct GraphError: Decodable {
        struct Data: Decodable { let details: String? }
        let message: String?
        let type: String?
        let code: Int?
        let error_subcode: Int?
        let error_data: Data?
        let fbtrace_id: String?

        /// "(#131030) Recipient phone number not in allowed list (code 131030): <details> [fbtrace_id …]".
        var summary: String {
            var text = message ?? "no message"
            if let code { text += " (code \(code)" + (error_subcode.map { ", subcode \($0)" } ?? "") + ")" }
            if let details = error_data?.details, !details.isEmpty, details != message { text += ": \(details)" }
            if let fbtrace_id { text += " [fbtrace_id \(fbtrace_id)]" }
            return text
        }
    }

    let error: GraphError
}

/// Graph and Cloud API error codes as values ("an open enum"): the ones that mean "later" are named; any other is
/// a refusal, unless the HTTP status says the trouble was Meta's.
public struct GraphErrorCode: RawRepresentable, Sendable, Hashable {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    public static let unknown = GraphErrorCode(rawValue: 1)
    public static let serviceUnavailable = GraphErrorCode(rawValue: 2)
    public static let appRateLimit = GraphErrorCode(rawValue: 4)
    public static let invalidParameter = GraphErrorCode(rawValue: 100)
    public static let accessToken = GraphErrorCode(rawValue: 190)
    public static let businessAccountRateLimit = GraphErrorCode(rawValue: 80007)
    public static let throughputReached = GraphErrorCode(rawValue: 130429)
    public static let recipientNotAllowed = GraphErrorCode(rawValue: 131030)
    public static let reengagementWindow = GraphErrorCode(rawValue: 131047)

    enum Action { case retry, reject }

    /// Meta's "Error codes": rate limits (4, 80007, 130429), temporary trouble (1, 2) and any 5xx or 429 are worth
    /// another try; token (190), parameter (100), recipient (131030), 24-hour window (131047) and the rest are not.
    func action(status: Int) -> Action {
        switch self {
        case .unknown, .serviceUnavailable, .appRateLimit, .businessAccountRateLimit, .throughputReached: return .retry
        case .accessToken, .invalidParameter, .recipientNotAllowed, .reengagementWindow: return .reject
        default: return status == 429 || status >= 500 ? .retry : .reject
        }
    }
}
