import ChannelAPI
import Crypto
import Foundation
import RelayProtocol
import APIKit
import Identity

/// The relay's HTTP routes. The gateway authenticates with its mailbox bearer, each phone with its own;
/// the relay compares SHA-256 hashes in constant time and never sees a key that opens anything.
public struct MailboxAPI: Sendable {
    public let store: any MailboxStore
    /// Larger down items are stored as a too_large marker; larger commands are refused with 413.
    public let maximumItemBytes: Int
    /// Wakes phones for new items when the relay has APNs credentials; the push carries only a sealed payload.
    public let push: (any WakeTransport)?
    /// The SHA-256 of the enrollment token a gateway must present to make a mailbox; nil lets anyone make one
    /// (a relay on a private network). A relay on the internet sets it: mailboxes are storage for whoever has one.
    let enrollTokenSHA256: [UInt8]?
    /// Items waiting for one phone, and commands one phone holds for the gateway: past this an append is refused
    /// (507) until the phone reads and acknowledges, or the gateway applies what is held.
    public let maximumPendingItems: Int
    /// Wake-ups each mailbox may ask this relay to send: its push credentials serve every gateway, and a service
    /// that throttles one sender throttles them all.
    let pushes: RequestRateLimiter
    /// A page of items is at most this many bytes of ciphertext, as items may be large (at least one item).
    public static let pageBytes = 4 << 20
    /// A phone's id in a mailbox.
    public static let maximumDeviceIDLength = 128
    /// Phones one mailbox may hold: a household's, with room to spare (a gateway allows 50 per person), 1,000 by default.
    public let maximumDevices: Int

    /// `pushesPerMinute`: wake-ups one mailbox may send a minute (all of them at once, then one every 60/N s).
    public init(store: any MailboxStore, maximumItemBytes: Int = 256 * 1024, push: (any WakeTransport)? = nil, enrollToken: String? = nil,
                maximumPendingItems: Int = 1000, pushesPerMinute: Int = 600, maximumDevices: Int = 1_000) {
        self.maximumDevices = maximumDevices
        self.pushes = RequestRateLimiter(perMinute: pushesPerMinute)
        self.store = store
        self.maximumItemBytes = maximumItemBytes
        self.push = push
        self.enrollTokenSHA256 = enrollToken.map { SHA256.hash($0) }
        self.maximumPendingItems = maximumPendingItems
    }

    public var router: Router {
        var router = Router()
        let base = "/v1/mailboxes/:mb"
        router.add(.GET, "/health", access: .open) { _ in .json(Health()) }
        router.add(.POST, "/v1/mailboxes", access: .open, handler: createMailbox)
        router.add(.PUT, "\(base)/devices/:dev", access: .open, handler: putDevice)
        router.add(.DELETE, "\(base)/devices/:dev", access: .open, handler: deleteDevice)
        router.add(.POST, "\(base)/devices/:dev/items", access: .open, handler: postItem)
        router.add(.GET, "\(base)/devices/:dev/items", access: .open, handler: items)
        router.add(.POST, "\(base)/devices/:dev/ack", access: .open, handler: ack)
        router.add(.POST, "\(base)/devices/:dev/commands", access: .open, handler: postCommand)
        router.add(.PUT, "\(base)/devices/:dev/carriage", access: .open, handler: carriage)
        router.add(.GET, "\(base)/commands", access: .open, handler: heldCommands)
        router.add(.PUT, "\(base)/devices/:dev/apns", access: .open, handler: putAPNs)
        router.add(.POST, "\(base)/push", access: .open, handler: sendPush)
        router.add(.POST, "\(base)/commands/:dev/:id/applied", access: .open, handler: applied)
        return router
    }

    static func bearer(_ request: HTTPRequest) -> String? {
        guard let header = request.header("authorization"), header.lowercased().hasPrefix("bearer ") else { return nil }
        return String(header.dropFirst(7))
    }

    /// Whether the request's bearer hashes to `expected` (compared in constant time); false without either.
    static func presents(_ request: HTTPRequest, secretSHA256 expected: [UInt8]?) -> Bool {
        guard let presented = bearer(request), let expected else { return false }
        return SecureBytes.constantTimeEqual(SHA256.hash(presented), expected)
    }

    private func requireGateway(_ request: HTTPRequest) async throws -> String {
        let mailbox = request.parameter("mb")
        guard Self.presents(request, secretSHA256: try await store.mailboxSecret(mailbox)) else {
            throw APIError.unauthorized("not this mailbox's bearer")
        }
        return mailbox
    }

    private func requirePhone(_ request: HTTPRequest) async throws -> (String, String) {
        let mailbox = request.parameter("mb"), device = request.parameter("dev")
        guard Self.presents(request, secretSHA256: try await store.deviceSecret(mailbox: mailbox, device: device)) else {
            throw APIError.unauthorized("not this phone's bearer")
        }
        return (mailbox, device)
    }

    static func hash(_ text: String, field: String) throws(APIError) -> [UInt8] {
        guard let bytes = Hex.decode(text), bytes.count == 32 else { throw APIError.invalidField(field, "must be 64 hex digits (a SHA-256)") }
        return bytes
    }

    /// The request bodies of the mailbox's routes.
    struct SecretHash: Decodable {
        var secretSHA256: String
        var cursor: Double?
        enum CodingKeys: String, CodingKey {
            case secretSHA256 = "secret_sha256"
            case cursor
        }
    }

    struct Item: Decodable {
        var ciphertext: String
        var kind: String?
        var seq: Double?
    }

    struct Ack: Decodable {
        var through: Double?
        var cursor: Double?
    }

    struct HeldCommand: Decodable {
        var id: String
        var ciphertext: String
    }

    struct Carriage: Decodable {
        var on: Bool
        var cursor: Double?
    }

    struct APNsToken: Decodable {
        var token: String
        var environment: String?
    }

    struct Push: Decodable {
        var deviceID: String
        var collapseID: String?
        var ciphertext: String?
        enum CodingKeys: String, CodingKey {
            case deviceID = "device_id"
            case collapseID = "collapse_id"
            case ciphertext
        }
    }

    @Sendable func createMailbox(_ request: HTTPRequest) async throws -> HTTPResponse {
        if enrollTokenSHA256 != nil, !Self.presents(request, secretSHA256: enrollTokenSHA256) {
            throw APIError.unauthorized("this relay makes mailboxes only for gateways with its enrollment token (SOULACY_RELAY_MAILBOX_TOKEN)")
        }
        let body = try request.decode(SecretHash.self)
        let id = try await store.createMailbox(secretSHA256: try Self.hash(body.secretSHA256, field: "secret_sha256"))
        return .json(["mailbox_id": id], status: 201)
    }

    @Sendable func putDevice(_ request: HTTPRequest) async throws -> HTTPResponse {
        let mailbox = try await requireGateway(request)
        let device = try request.parameter("dev").limited(to: Self.maximumDeviceIDLength, field: "device")
        let body = try request.decode(SecretHash.self)
        let cursor = Int64(try body.cursor.wholeNumber(in: Self.sequenceRange, field: "cursor") ?? 0)
        if try await store.deviceSecret(mailbox: mailbox, device: device) == nil,
           try await store.deviceCount(mailbox: mailbox, upTo: maximumDevices) >= maximumDevices {
            throw APIError(status: 507, code: "mailbox_full", message: "device: this mailbox holds \(maximumDevices) phones already; remove one first", field: "device")
        }
        try await store.putDevice(mailbox: mailbox, device: device, secretSHA256: try Self.hash(body.secretSHA256, field: "secret_sha256"), cursor: cursor)
        return .noContent
    }

    @Sendable func deleteDevice(_ request: HTTPRequest) async throws -> HTTPResponse {
        try await store.deleteDevice(mailbox: try await requireGateway(request), device: request.parameter("dev"))
        return .noContent
    }

    @Sendable func postItem(_ request: HTTPRequest) async throws -> HTTPResponse {
        let mailbox = try await requireGateway(request)
        let device = request.parameter("dev")
        guard try await store.carriageOn(mailbox: mailbox, device: device) else {
            return .json(Stored(stored: false, reason: "carriage off"))
        }
        let body = try request.decode(Item.self)
        let ciphertext = body.ciphertext
        let kindText = body.kind ?? MailboxItemKind.record.rawValue
        guard let kind = MailboxItemKind(rawValue: kindText) else { throw APIError.invalidField("kind", "must be \"record\" or \"result\", got \"\(kindText)\"") }
        let seq = try body.seq.wholeNumber(in: Self.sequenceRange, field: "seq").map(Int64.init)
        // A phone that stays away does not make the relay's disk the gateway's backlog: the gateway keeps its own
        // lines and tries again once the phone has read these.
        guard try await store.pendingItems(mailbox: mailbox, device: device, upTo: maximumPendingItems) < maximumPendingItems else {
            throw APIError(status: 507, code: "mailbox_full", message: "ciphertext: \(maximumPendingItems) items already wait for this phone", field: "ciphertext")
        }
        let tooLarge = ciphertext.utf8.count > maximumItemBytes
        let item = NewMailboxItem(ciphertext: tooLarge ? nil : ciphertext, tooLarge: tooLarge, kind: kind, seq: seq)
        // The carriage may have been turned off since the check: then nothing was stored.
        guard let n = try await store.appendItem(mailbox: mailbox, device: device, item) else {
            return .json(Stored(stored: false, reason: "carriage off"))
        }
        return .json(Stored(stored: true, n: n, tooLarge: tooLarge), status: 201)
    }

    @Sendable func items(_ request: HTTPRequest) async throws -> HTTPResponse {
        let (mailbox, device) = try await requirePhone(request)
        guard let after = Int64(request.query["after"] ?? "0"), after >= 0 else { throw APIError.invalidField("after", "must be a sequence number") }
        // Items may each be as large as the relay allows: a page holds what fits in `pageBytes` (the phone asks again).
        let limit = min(200, max(1, Self.pageBytes / max(1, maximumItemBytes)))
        let list = try await store.items(mailbox: mailbox, device: device, after: after, limit: limit).map { item in
            item.tooLarge ? MailboxItemPage.Item(n: item.n, tooLarge: true) : MailboxItemPage.Item(n: item.n, ciphertext: item.ciphertext ?? "")
        }
        return .json(MailboxItemPage(items: list, inboxOnline: try await store.isOnline(mailbox: mailbox)))
    }

    @Sendable func ack(_ request: HTTPRequest) async throws -> HTTPResponse {
        let (mailbox, device) = try await requirePhone(request)
        let body = try request.decode(Ack.self)
        // {through: n}: items up to number n were read. {cursor: seq}: records up to the gateway's store
        // sequence seq are had; results stay until read.
        if let through = try body.through.wholeNumber(in: Self.sequenceRange, field: "through") {
            try await store.ack(mailbox: mailbox, device: device, through: Int64(through))
        } else if let cursor = try body.cursor.wholeNumber(in: Self.sequenceRange, field: "cursor") {
            try await store.ack(mailbox: mailbox, device: device, recordsThroughSeq: Int64(cursor))
        } else {
            throw APIError.missingField("through")
        }
        return .noContent
    }

    /// Item numbers and sequences are 64-bit in storage; JSON carries them exactly up to 2^53 - 1.
    static let sequenceRange = 0...(1 << 53) - 1

    @Sendable func postCommand(_ request: HTTPRequest) async throws -> HTTPResponse {
        let (mailbox, device) = try await requirePhone(request)
        guard try await store.carriageOn(mailbox: mailbox, device: device) else {
            throw APIError.conflict("the relay is off for this phone; nothing is held", code: "carriage_off")
        }
        let body = try request.decode(HeldCommand.self)
        let id = try body.id.limited(to: 200, field: "id")
        let ciphertext = body.ciphertext
        guard ciphertext.utf8.count <= maximumItemBytes else {
            throw APIError(status: 413, code: "too_large", message: "ciphertext: commands are at most \(maximumItemBytes) bytes", field: "ciphertext")
        }
        // A phone's held sends wait for its gateway; past the bound the phone keeps them itself and sends them later.
        guard try await store.heldCommandCount(mailbox: mailbox, device: device, upTo: maximumPendingItems) < maximumPendingItems else {
            throw APIError(status: 507, code: "mailbox_full", message: "ciphertext: \(maximumPendingItems) commands from this phone already wait for the gateway",
                           field: "ciphertext")
        }
        let queued = try await store.holdCommand(mailbox: mailbox, device: device, id: id, ciphertext: ciphertext)
        return .json(Queued(queued: queued, inboxOnline: try await store.isOnline(mailbox: mailbox)), status: queued ? 202 : 200)
    }

    @Sendable func carriage(_ request: HTTPRequest) async throws -> HTTPResponse {
        let (mailbox, device) = try await requirePhone(request)
        let body = try request.decode(Carriage.self)
        let on = body.on
        let cursor = try body.cursor.wholeNumber(in: Self.sequenceRange, field: "cursor").map(Int64.init)
        try await store.setCarriage(mailbox: mailbox, device: device, on: on, cursor: cursor)
        return .noContent
    }

    @Sendable func putAPNs(_ request: HTTPRequest) async throws -> HTTPResponse {
        let (mailbox, device) = try await requirePhone(request)
        let body = try request.decode(APNsToken.self)
        let token = try body.token.limited(to: 200, field: "token")
        guard token.utf8.count == 64, Hex.decode(token) != nil else { throw APIError.invalidField("token", "an APNs device token is 64 hex digits") }
        let environment = body.environment ?? "production"
        guard ["production", "development"].contains(environment) else { throw APIError.invalidField("environment", "must be production or development") }
        try await store.setAPNs(mailbox: mailbox, device: device, token: MailboxAPNsToken(token: token, environment: environment))
        return .noContent
    }

    /// POST …/push {device_id, collapse_id, ciphertext}: a generic alert with the sealed payload in a custom key,
    /// cut to fit 4 KB by dropping the payload first. Nothing is sent while the phone's relay is off.
    @Sendable func sendPush(_ request: HTTPRequest) async throws -> HTTPResponse {
        let mailbox = try await requireGateway(request)
        if case .limited(let retryAfter) = pushes.take(key: mailbox) {
            throw APIError.tooManyRequests("this mailbox sent \(pushes.perMinute) wake-ups in the last minute; try again in \(retryAfter) s",
                                           code: "rate_limited", retryAfter: retryAfter)
        }
        let body = try request.decode(Push.self)
        let device = try body.deviceID.limited(to: 200, field: "device_id")
        let collapse = try body.collapseID.limited(to: 64, field: "collapse_id")
        let ciphertext = body.ciphertext
        guard try await store.carriageOn(mailbox: mailbox, device: device) else { return .json(Sent(sent: false, reason: "carriage off")) }
        guard let push else { return .json(Sent(sent: false, reason: "no push service on this relay")) }
        guard let apns = try await store.apns(mailbox: mailbox, device: device) else { return .json(Sent(sent: false, reason: "no APNs token for this phone")) }
        let target = WakeTarget(deviceID: device, platform: .ios, pushToken: apns.token,
                                environment: apns.environment == "development" ? .development : .production, bundleID: "dev.soulacy.ios")
        var signal = WakeSignal(category: .delivery, title: "Soulacy", body: "New in your Inbox", deepLink: "soulacy://inbox", threadID: "relay", collapseID: collapse)
        if let ciphertext, ciphertext.utf8.count <= 3000 { signal.extra["sealed"] = ciphertext }
        switch await push.send(signal, to: target) {
        case .delivered: return .json(Sent(sent: true), status: 202)
        case .tokenRejected(let reason): return .json(Sent(sent: false, reason: reason))
        case .retry(_, let reason), .failed(let reason): return .json(Sent(sent: false, reason: reason), status: 502)
        }
    }

    @Sendable func heldCommands(_ request: HTTPRequest) async throws -> HTTPResponse {
        let mailbox = try await requireGateway(request)
        try await store.touch(mailbox: mailbox)
        return .json(["commands": try await store.heldCommands(mailbox: mailbox).map { HeldView(deviceID: $0.device, id: $0.id, ciphertext: $0.ciphertext) }])
    }

    @Sendable func applied(_ request: HTTPRequest) async throws -> HTTPResponse {
        try await store.applied(mailbox: try await requireGateway(request), device: request.parameter("dev"), id: request.parameter("id"))
        return .noContent
    }
}

// MARK: Answers

extension MailboxAPI {
    struct Health: Encodable {
        var ok = true
        var service = "soulacy-relay"
    }

    /// An item posted for a phone: its number, or why nothing was stored.
    struct Stored: Encodable {
        var stored: Bool
        var n: Int64?
        var tooLarge: Bool?
        var reason: String?

        enum CodingKeys: String, CodingKey {
            case stored, n, reason
            case tooLarge = "too_large"
        }
    }

    struct Queued: Encodable {
        var queued, inboxOnline: Bool

        enum CodingKeys: String, CodingKey {
            case queued
            case inboxOnline = "inbox_online"
        }
    }

    struct Sent: Encodable {
        var sent: Bool
        var reason: String?
    }

    struct HeldView: Encodable {
        var deviceID, id, ciphertext: String

        enum CodingKeys: String, CodingKey {
            case id, ciphertext
            case deviceID = "device_id"
        }
    }
}
