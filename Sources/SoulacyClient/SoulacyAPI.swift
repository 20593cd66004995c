import Foundation
import JSON
import Crypto
import HTTPClient

/// The original Soulacy app's calls, typed: the same routes, field names and types as the app reads them
/// (SOULACY-CONTRACT.md), carried over whichever path `GatewayClient` chose (Wi-Fi, tailnet or relay).
public struct SoulacyAPI: Sendable {
    public let client: GatewayClient

    public init(client: GatewayClient) { self.client = client }

    // MARK: Wire models (the app's names)

    /// Every refusal: `error` is the text to show.
    public struct Refusal: Error, Decodable, Sendable, CustomStringConvertible {
        public var status: Int = 0
        public let error: String
        public let code: String?
        public let field: String?
        public var description: String { "\(status): \(error)" }
        enum CodingKeys: String, CodingKey { case error, code, field }
    }

    public struct Part: Codable, Sendable, Equatable {
        public let type: String
        public let text: String?
        public let mime_type: String?
        public let url: String?
    }

    public struct Delivery: Decodable, Sendable {
        public let id: String
        public let destination: String
        public let agent_id: String
        public let session_id: String
        public let title: String
        public let body: String
        public let parts: [Part]?
        public let metadata: [String: String]?
        public let created_at: String
        public let read_at: String?
        /// How to show the line (inbox list items only).
        public let presentation: Presentation?
    }

    /// The original's presentation: a headline, a summary and typed blocks (markdown, metrics, comparison, chart,
    /// timeline, links, checklist); a client shows a kind it does not know as its text.
    public struct Presentation: Decodable, Sendable {
        public let headline: String?
        public let summary: String?
        public let blocks: [Block]

        public struct Block: Decodable, Sendable {
            public let kind: String
            public let title: String?
            public let text: String?
            public let items: [Item]?
            public let columns: [String]?
            public let rows: [[String]]?
            public let numeric: [String]?
            public let best: Best?
            public let chart: Chart?
        }
        public struct Item: Decodable, Sendable {
            public let label: String?, value: String?, hint: String?, at: String?, title: String?, detail: String?, url: String?
            public let done: Bool?
        }
        public struct Best: Decodable, Sendable { public let column: String; public let row: Int }
        public struct Chart: Decodable, Sendable {
            public let type: String
            public let x: [String]
            public let series: [Series]
        }
        public struct Series: Decodable, Sendable { public let name: String; public let values: [Double] }
    }

    public struct Inbox: Decodable, Sendable {
        public let deliveries: [Delivery]
        public let unread_count: Int
    }

    public struct Pairing: Decodable, Sendable {
        public let paired: Bool
        public let token: String
        public let key_id: String
        public let subject: String
        public let role: String
        public let display_name: String
        public let fingerprint: String
    }

    public struct ChatReply: Decodable, Sendable {
        public let reply: String
        public let parts: [Part]
        public let session_id: String
        public let run_id: String
        public let response_id: String
        public let spoken_reply: String?
    }

    /// One server-sent event of `/chat/stream`.
    public struct StreamEvent: Sendable, Equatable {
        public let event: String?
        public let data: String
    }

    public struct Fact: Decodable, Sendable {
        public let id: String
        public let owner: String
        public let agent_id: String
        public let category: String
        public let content: String
        public let status: String
        public let source: String
        public let created_at: String
        public let updated_at: String
        public let expires_at: String?
    }

    public struct FactChange: Decodable, Sendable {
        public let cursor: Int
        public let fact_id: String
        public let event: String
        public let deleted: Bool
        public let fact: Fact?
    }

    public struct FactSync: Decodable, Sendable {
        public let changes: [FactChange]
        public let next_cursor: Int
        public let has_more: Bool
        public let reset: Bool
    }

    public struct Approval: Decodable, Sendable {
        public let call_id: String
        public let tool: String
        public let reason: String?
        public let agent_id: String?
        public let session_id: String?
        public let created_at: String
    }

    public struct Decision: Decodable, Sendable {
        public let ok: Bool
        public let approved: Bool
    }

    public struct Agent: Decodable, Sendable {
        public let id: String
        public let name: String
        public let description: String
        public let trigger: String
        public let enabled: Bool
    }

    public struct Agents: Decodable, Sendable {
        public let agents: [Agent]
        public let count: Int
    }

    public struct Triggered: Decodable, Sendable {
        public let result: String
        public let delivered: Bool
    }

    // MARK: Calls

    /// A pairing QR's link, as the original app reads it: host:port is the gateway, `pair` the code, `fp` the pin of
    /// the gateway's key (empty when the link is not pinned).
    public struct PairingLink: Sendable, Equatable {
        public let gateway: String
        public let code: String
        public let pin: String

        /// `https://host:port/mobile?pair=CODE&fp=PIN` (or an unpinned `<base>/mobile?pair=CODE`); nil for anything else.
        public init?(_ link: String) {
            guard let url = URLComponents(string: link), let scheme = url.scheme, scheme == "https" || scheme == "http", let host = url.host,
                  url.path.hasSuffix("/mobile"), let code = url.queryItems?.first(where: { $0.name == "pair" })?.value, !code.isEmpty else { return nil }
            let pin = url.queryItems?.first(where: { $0.name == "fp" })?.value ?? ""
            guard pin.isEmpty || (scheme == "https" && pin.count == 64 && Hex.decode(pin) != nil) else { return nil }
            let hostText = host.contains(":") ? "[\(host)]" : host
            gateway = "\(scheme)://\(hostText)" + (url.port.map { ":\($0)" } ?? "") + String(url.path.dropLast("/mobile".count))
            self.code = code
            self.pin = pin
        }
    }

    /// Pairs from a QR link: over TLS pinned to the link's key when it carries one (names are ignored, the key
    /// decides), as the original app does. The answer's `fingerprint` is the pin to keep for the same-Wi-Fi path.
    public static func pair(link: PairingLink, name: String = "iPhone") async throws -> Pairing {
        let configuration = link.pin.isEmpty ? HTTP2ClientConfiguration() : HTTP2ClientConfiguration(pinnedPublicKeySHA256: Hex.decode(link.pin))
        return try await redeem(code: link.code, gateway: link.gateway, name: name, configuration: configuration)
    }

    /// Redeems a pairing code at `gateway` (no key yet): the original's answer, or its refusal (401 `reason`).
    public static func redeem(code: String, gateway: String, name: String = "iPhone", caFile: String? = nil) async throws -> Pairing {
        try await redeem(code: code, gateway: gateway, name: name, configuration: HTTP2ClientConfiguration(caFile: caFile))
    }

    static func redeem(code: String, gateway: String, name: String, configuration: HTTP2ClientConfiguration) async throws -> Pairing {
        let http = HTTP2Client(configuration: configuration)
        let body = JSONValue.object(["code": .string(code), "name": .string(name)]).serializedBytes()
        let response = try await http.send(ClientRequest(method: "POST", url: gateway + "/api/v1/pairing/redeem",
                                                         headers: [("content-type", "application/json")], body: body))
        guard response.status == 200 else {
            struct Unpaired: Decodable { let reason: String? ; let error: String? }
            let unpaired = try? JSONCoding.decode(Unpaired.self, from: Data(response.body))
            var refusal = Refusal(error: unpaired?.reason ?? unpaired?.error ?? "the gateway answered \(response.status)", code: nil, field: nil)
            refusal.status = response.status
            throw refusal
        }
        return try JSONCoding.decode(Pairing.self, from: Data(response.body))
    }

    public func register(deviceID: String, name: String, pushToken: String?, environment: String = "production", liveStartToken: String? = nil) async throws {
        var body: [String: JSONValue] = ["id": .string(deviceID), "name": .string(name), "push_environment": .string(environment),
                                         "notifications_enabled": .bool(pushToken != nil)]
        if let pushToken { body["push_token"] = .string(pushToken) }
        if let liveStartToken { body["live_start_token"] = .string(liveStartToken) }
        struct Registered: Decodable { let registered: Bool }
        _ = try await call("POST", "/api/v1/mobile/devices", body, as: Registered.self)
    }

    public func inbox(deviceID: String, limit: Int = 100) async throws -> Inbox {
        try await call("GET", "/api/v1/mobile/deliveries?device_id=\(escape(deviceID))&limit=\(limit)", as: Inbox.self)
    }

    public func markRead(_ deliveryID: String, deviceID: String) async throws {
        struct Read: Decodable { let read: Bool }
        _ = try await call("POST", "/api/v1/mobile/deliveries/\(escape(deliveryID))/read", ["device_id": .string(deviceID)], as: Read.self)
    }

    /// `sessionID` continues a conversation; `voice` asks for `spoken_reply` too.
    public func chat(agentID: String, text: String, sessionID: String? = nil, voice: Bool = false) async throws -> ChatReply {
        var body: [String: JSONValue] = ["agent_id": .string(agentID), "text": .string(text)]
        if let sessionID { body["session_id"] = .string(sessionID) }
        if voice { body["response_mode"] = "voice" }
        return try await call("POST", "/api/v1/chat", body, as: ChatReply.self)
    }

    /// `/chat/stream`'s events (read to their end: the relay carries whole answers), `\n` in data turned back into newlines.
    public func chatStream(agentID: String, text: String) async throws -> [StreamEvent] {
        let answer = try await raw("POST", "/api/v1/chat/stream", ["agent_id": .string(agentID), "text": .string(text)])
        var events: [StreamEvent] = []
        var name: String?
        let text = String(String.UnicodeScalarView(String(decoding: answer, as: UTF8.self).unicodeScalars.filter { $0 != "\r" }))
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("event: ") { name = String(line.dropFirst(7)) }
            if line.hasPrefix("data: ") {
                events.append(StreamEvent(event: name, data: line.dropFirst(6).replacingOccurrences(of: "\\n", with: "\n")))
                name = nil
            }
        }
        return events
    }

    public func remember(_ content: String, category: String? = nil) async throws -> Fact {
        struct Answer: Decodable { let fact: Fact }
        var body: [String: JSONValue] = ["content": .string(content)]
        if let category { body["category"] = .string(category) }
        return try await call("POST", "/api/v1/memory/facts", body, as: Answer.self).fact
    }

    public func syncFacts(since cursor: Int) async throws -> FactSync {
        try await call("GET", "/api/v1/memory/facts/sync?since=\(cursor)", as: FactSync.self)
    }

    public func approvals() async throws -> [Approval] {
        struct List: Decodable { let approvals: [Approval] }
        return try await call("GET", "/api/v1/approvals", as: List.self).approvals
    }

    public func decide(_ callID: String, approve: Bool) async throws -> Decision {
        try await call("POST", "/api/v1/approvals/\(escape(callID))/\(approve ? "approve" : "deny")", as: Decision.self)
    }

    public func agents(surface: String? = nil) async throws -> Agents {
        try await call("GET", "/api/v1/agents" + (surface.map { "?surface=\(escape($0))" } ?? ""), as: Agents.self)
    }

    public func trigger(_ agentID: String) async throws -> Triggered {
        try await call("POST", "/api/v1/agents/\(escape(agentID))/trigger", as: Triggered.self)
    }

    // MARK: Plumbing

    func escape(_ text: String) -> String { text.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed.subtracting(CharacterSet(charactersIn: "/?&="))) ?? text }

    private func raw(_ method: String, _ path: String, _ body: [String: JSONValue]? = nil) async throws -> [UInt8] {
        let data = body.map { Data(JSONValue.object($0).serializedBytes()) }
        switch await client.send(method: method, path: path, body: data) {
        case .answered(let answer, _):
            guard (200..<300).contains(answer.status) else {
                var refusal = (try? JSONCoding.decode(Refusal.self, from: Data(answer.body)))
                    ?? Refusal(error: "the gateway answered \(answer.status)", code: nil, field: nil)
                refusal.status = answer.status
                throw refusal
            }
            return answer.body
        case .held(let id):
            throw Refusal(status: 202, error: "sent through the relay and held until the gateway is back (\(id))", code: "held", field: nil)
        default:
            throw Refusal(status: 0, error: "the gateway cannot be reached on any path", code: "unreachable", field: nil)
        }
    }

    private func call<T: Decodable>(_ method: String, _ path: String, _ body: [String: JSONValue]? = nil, as type: T.Type) async throws -> T {
        try JSONCoding.decode(T.self, from: Data(try await raw(method, path, body)))
    }
}
