import Crypto
import Foundation
import JSON
import HTTPClient
import RelayProtocol

/// Where a phone can reach its gateway, from the pairing link and the redemption.
public struct GatewayPaths: Sendable {
    /// The same-Wi-Fi listener and the SHA-256 (hex) of its certificate: nothing else is trusted there.
    public var lan: (url: String, fingerprint: String)?
    /// Any tailnet address of the gateway.
    public var tailnet: String?
    public var relay: RelayEndpoint?

    public init(lan: (url: String, fingerprint: String)? = nil, tailnet: String? = nil, relay: RelayEndpoint? = nil) {
        self.lan = lan
        self.tailnet = tailnet
        self.relay = relay
    }
}

public struct RelayEndpoint: Sendable {
    public var url: String
    public var mailboxID: String
    public var deviceID: String
    public var secret: [UInt8]
    public init(url: String, mailboxID: String, deviceID: String, secret: [UInt8]) {
        self.url = url
        self.mailboxID = mailboxID
        self.deviceID = deviceID
        self.secret = secret
    }
}

public enum InboxPath: String, Sendable { case lan, tailnet, relay }

/// The gateway's answer to one call, however it travelled.
public struct DoorAnswer: Sendable {
    public let status: Int
    public let body: [UInt8]
    public let replayed: Bool
    /// The body as JSON (nil when it is not).
    public var json: JSONValue? { try? JSONValue.parse(body) }
}

public enum SendOutcome: Sendable {
    case answered(DoorAnswer, via: InboxPath)
    /// Waiting at the relay for the gateway: "Sent. Waiting for your computer."
    case held(id: String)
    /// No path answers and there is no relay to hold it.
    case unreachable
}

public enum Settlement: Sendable, Equatable {
    case sent(status: Int)
    /// Refused by the gateway, in the person's words, never the door's text.
    case refused(words: String)
}

/// A phone's view of its gateway: the three paths in order (Wi-Fi pinned, tailnet, relay), one idempotency key per
/// intent across a change of path, and held sends that settle exactly once when the gateway returns.
public actor GatewayClient {
    public private(set) var paths: GatewayPaths
    let token: String
    let probeTimeout: Duration
    let readBack: Duration
    private let lanClient: HTTP2Client?
    private let plainClient: HTTP2Client
    private let relayClient: HTTP2Client
    private var current: InboxPath?
    private var relayCursor: Int64 = 0
    private var held: [String: (method: String, path: String, body: Data?)] = [:]
    private var settled: [String: Settlement] = [:]
    private var records: [RelayRecord] = []

    /// `relayCAFile`: trust for a self-hosted relay whose certificate comes from a private CA.
    public init(paths: GatewayPaths, token: String, probeTimeout: Duration = .seconds(3), readBack: Duration = .seconds(15), relayCAFile: String? = nil) {
        self.paths = paths
        let plain = HTTP2Client()
        plainClient = plain
        relayClient = relayCAFile.map { HTTP2Client(configuration: HTTP2ClientConfiguration(caFile: $0)) } ?? plain
        self.token = token
        self.probeTimeout = probeTimeout
        self.readBack = readBack
        lanClient = paths.lan.flatMap { Hex.decode($0.fingerprint) }.map { HTTP2Client(configuration: HTTP2ClientConfiguration(pinnedPublicKeySHA256: $0)) }
    }

    public var path: InboxPath? { current }

    /// A new tailnet address learned later (the Wi-Fi address and its pin come only from a pairing QR).
    public func update(tailnet: String?) {
        paths.tailnet = tailnet
        current = nil
    }
    public var pendingSends: [String] { held.keys.sorted() }

    private func direct(_ path: InboxPath) -> (HTTP2Client, String)? {
        switch path {
        case .lan: return paths.lan.flatMap { lan in lanClient.map { ($0, lan.url) } }
        case .tailnet: return paths.tailnet.map { (plainClient, $0) }
        case .relay: return nil
        }
    }

    /// Asks the Wi-Fi and the tailnet at once (3 s each) and takes the first in that order; else the relay.
    @discardableResult
    public func probe() async -> InboxPath? {
        let timeout = probeTimeout
        let candidates = [InboxPath.lan, .tailnet].compactMap { p in direct(p).map { (p, $0.0, $0.1) } }
        let healthy = await withTaskGroup(of: InboxPath?.self) { group in
            for (path, client, base) in candidates {
                group.addTask {
                    let answer = try? await client.send(ClientRequest(method: "GET", url: base + "/health", timeout: timeout))
                    return answer?.status == 200 ? path : nil
                }
            }
            var found: Set<InboxPath> = []
            for await p in group { if let p { found.insert(p) } }
            return found
        }
        current = healthy.contains(.lan) ? .lan : healthy.contains(.tailnet) ? .tailnet : (paths.relay != nil ? .relay : nil)
        return current
    }

    /// Sends one intent. The same `idempotencyKey` goes on every attempt and every path.
    /// `body` is the request's JSON text, if it has one.
    public func send(method: String, path: String, body: Data? = nil, idempotencyKey: String = UUID().uuidString.lowercased()) async -> SendOutcome {
        for attempt in 0..<2 {
            let chosen: InboxPath? = if let current, attempt == 0 { current } else { await probe() }
            guard let chosen else { return .unreachable }
            if chosen == .relay { return await sendThroughRelay(id: idempotencyKey, method: method, path: path, body: body) }
            if let answer = await sendDirect(chosen, method: method, path: path, body: body, key: idempotencyKey) {
                return .answered(answer, via: chosen)
            }
            current = nil  // no answer on this path: choose again, same key
        }
        return .unreachable
    }

    private func sendDirect(_ path: InboxPath, method: String, path target: String, body: Data?, key: String) async -> DoorAnswer? {
        guard let (client, base) = direct(path) else { return nil }
        var headers = [("authorization", "Bearer \(token)"), ("idempotency-key", key)]
        if body != nil { headers.append(("content-type", "application/json")) }
        guard let response = try? await client.send(ClientRequest(method: method, url: base + target, headers: headers, body: body.map(Array.init) ?? [], timeout: .seconds(5))) else {
            return nil
        }
        return DoorAnswer(status: response.status, body: response.body, replayed: response.headers["idempotent-replayed"] == "true")
    }

    private func relayCall(_ method: String, _ suffix: String, json: [String: JSONValue]? = nil) async throws -> (Int, [UInt8]) {
        guard let relay = paths.relay else { throw URLError(.badURL) }
        let keys = try RelayKeys(secret: relay.secret, deviceID: relay.deviceID)
        let body = json.map { JSONValue.object($0).serializedBytes() }
        let response = try await relayClient.send(ClientRequest(method: method, url: "\(relay.url)/v1/mailboxes/\(relay.mailboxID)/devices/\(relay.deviceID)\(suffix)",
                                                                headers: [("authorization", "Bearer \(keys.bearer)"), ("content-type", "application/json")],
                                                                body: body ?? [], timeout: .seconds(5)))
        return (response.status, response.body)
    }

    private func sendThroughRelay(id: String, method: String, path: String, body: Data?) async -> SendOutcome {
        guard let relay = paths.relay, let keys = try? RelayKeys(secret: relay.secret, deviceID: relay.deviceID) else { return .unreachable }
        let command = RelayCommand(id: id, method: method, path: path, body: body.flatMap { try? JSONValue.parse(Array($0)) },
                                   credential: IdempotencyCredential.encoded(bearer: token))
        guard let sealed = try? RelayEnvelope.seal(command, kind: .command, key: keys.up),
              let (status, _) = try? await relayCall("POST", "/commands", json: ["id": .string(id), "ciphertext": .string(sealed)]), status == 202 || status == 200 else {
            return .unreachable
        }
        held[id] = (method, path, body)
        // Read our own result back for a while (0.25 s doubling to 4 s); after that the send counts as held.
        var wait = Duration.milliseconds(250)
        let deadline = ContinuousClock.now + readBack
        while ContinuousClock.now < deadline {
            try? await Task.sleep(for: min(wait, deadline - ContinuousClock.now))
            wait = min(wait * 2, .seconds(4))
            await readRelay()
            if let answer = results[id] {
                held[id] = nil
                return .answered(answer, via: .relay)
            }
        }
        return .held(id: id)
    }

    private var results: [String: DoorAnswer] = [:]

    /// Reads new items from the relay (results and records) and acknowledges them.
    public func readRelay() async {
        // The relay answers a page at a time: read until a page comes back empty, so a long backlog arrives whole.
        while await readRelayPage() > 0 {}
    }

    /// Reads and acknowledges one page of items; returns how many it held.
    private func readRelayPage() async -> Int {
        guard let relay = paths.relay, let keys = try? RelayKeys(secret: relay.secret, deviceID: relay.deviceID),
              let (status, body) = try? await relayCall("GET", "/items?after=\(relayCursor)"), status == 200 else { return 0 }
        var last = relayCursor
        let items = (try? JSONCoding.decode(MailboxItemPage.self, from: Data(body)))?.items ?? []
        for item in items {
            last = max(last, item.n)
            if item.tooLarge == true {
                records.append(RelayRecord(seq: nil, id: nil, tooLarge: true, fields: [:], delivery: nil))
                continue
            }
            guard let sealed = item.ciphertext else { continue }
            if let result = try? RelayEnvelope.open(sealed, as: RelayResult.self, kind: .result, key: keys.down) {
                let bytes = result.bodyB64.flatMap { Data(base64Encoded: $0) }.map(Array.init) ?? Array((result.error ?? "").utf8)
                results[result.id] = DoorAnswer(status: result.status, body: bytes, replayed: result.replayed == true)
            } else if let line = try? RelayEnvelope.open(sealed, as: RelayLine.self, kind: .record, key: keys.down) {
                let fields = line.record?.objectValue ?? [:]
                let delivery = line.record.flatMap { try? JSONValueDecoder().decode(SoulacyAPI.Delivery.self, from: $0) }
                records.append(RelayRecord(seq: line.seq, id: line.id, tooLarge: line.tooLarge == true,
                                           fields: fields.compactMapValues(\.stringValue), delivery: delivery))
            }
        }
        guard last > relayCursor else { return 0 }
        relayCursor = last
        _ = try? await relayCall("POST", "/ack", json: ["through": .number(Double(last))])
        return items.count
    }

    /// Inbox lines that came down through the relay (or too_large markers for ones to read over a direct path).
    public func relayRecords() -> [RelayRecord] { records }

    /// Settles every held send once: by its result from the relay or, when a direct path answers and no result came
    /// (the relay is off), by sending it again directly with its own key; the door answers from its log.
    public func settleHeld() async -> [String: Settlement] {
        await readRelay()
        for (id, send) in held {
            var answer = results[id]
            if answer == nil, let path = await probe(), path != .relay {
                answer = await sendDirect(path, method: send.method, path: send.path, body: send.body, key: id)
            }
            guard let answer else { continue }
            held[id] = nil
            settled[id] = Self.settlement(answer)
        }
        return settled
    }

    static func settlement(_ answer: DoorAnswer) -> Settlement {
        let object = answer.json
        if answer.status < 300, object?["already_decided"] == true, let state = object?["state"]?.stringValue {
            return .refused(words: "Not sent. That approval was already \(state) on your computer.")
        }
        switch answer.status {
        case 200..<300: return .sent(status: answer.status)
        case 401: return .refused(words: "Not sent. This phone is no longer paired.")
        case 403: return .refused(words: "Not sent. This phone may not do that.")
        case 404, 410: return .refused(words: "Not sent. That is no longer on your computer.")
        case 409: return .refused(words: "Not sent. That changed on your computer. Look again.")
        case 413: return .refused(words: "Not sent. It is too large to go through the relay.")
        default: return .refused(words: "Not sent. Your computer could not take it.")
        }
    }

    /// Gives the relay this phone's APNs token, so new items wake it (a generic alert with a sealed payload).
    public func registerRelayPush(token: String, environment: String = "production") async -> Bool {
        guard let (status, _) = try? await relayCall("PUT", "/apns", json: ["token": .string(token), "environment": .string(environment)]) else { return false }
        return status == 204
    }

    /// Turns the relay off (nothing is held for this phone any more, and what was held is dropped) or on again.
    public func setRelay(on: Bool) async -> Bool {
        guard let (status, _) = try? await relayCall("PUT", "/carriage", json: on ? ["on": true, "cursor": .number(Double(relayCursor))] : ["on": false]) else { return false }
        return status == 204
    }
}

/// One inbox line as it came down through the relay; `tooLarge` lines are read over a direct path.
public struct RelayRecord: Sendable {
    public let seq: Int64?
    public let id: String?
    public let tooLarge: Bool
    /// The line's text fields (title, body, agent_name, …).
    public let fields: [String: String]
    /// The whole line, in the same shape as the inbox list's items (nil for a too_large marker).
    public let delivery: SoulacyAPI.Delivery?
}
