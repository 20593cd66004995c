import Crypto
import Foundation
import HTTPServer
import Identity

/// The relay's HTTP routes. The gateway authenticates with its mailbox bearer, each phone with its own;
/// the relay compares SHA-256 hashes in constant time and never sees a key that opens anything.
public struct MailboxAPI: Sendable {
    public let store: MailboxStore
    /// Larger down items are stored as a too_large marker; larger commands are refused with 413.
    public let maximumItemBytes: Int

    public init(store: MailboxStore, maximumItemBytes: Int = 256 * 1024) {
        self.store = store
        self.maximumItemBytes = maximumItemBytes
    }

    public var router: Router {
        var router = Router()
        let base = "/v1/mailboxes/:mb"
        router.add(.GET, "/health", access: .open) { _ in .json(["ok": true, "service": "soulacy-relay"]) }
        router.add(.POST, "/v1/mailboxes", access: .open, handler: createMailbox)
        router.add(.PUT, "\(base)/devices/:dev", access: .open, handler: putDevice)
        router.add(.DELETE, "\(base)/devices/:dev", access: .open, handler: deleteDevice)
        router.add(.POST, "\(base)/devices/:dev/items", access: .open, handler: postItem)
        router.add(.GET, "\(base)/devices/:dev/items", access: .open, handler: items)
        router.add(.POST, "\(base)/devices/:dev/ack", access: .open, handler: ack)
        router.add(.POST, "\(base)/devices/:dev/commands", access: .open, handler: postCommand)
        router.add(.PUT, "\(base)/devices/:dev/carriage", access: .open, handler: carriage)
        router.add(.GET, "\(base)/commands", access: .open, handler: heldCommands)
        router.add(.POST, "\(base)/commands/:dev/:id/applied", access: .open, handler: applied)
        return router
    }

    static func bearer(_ request: HTTPRequest) -> String? {
        guard let header = request.header("authorization"), header.lowercased().hasPrefix("bearer ") else { return nil }
        return String(header.dropFirst(7))
    }

    private func requireGateway(_ request: HTTPRequest) throws(APIError) -> String {
        let mailbox = request.parameter("mb")
        guard let presented = Self.bearer(request), let expected = (try? store.mailboxSecret(mailbox)) ?? nil,
              SecureBytes.constantTimeEqual(SHA256.hash(presented), expected) else {
            throw APIError.unauthorized("not this mailbox's bearer")
        }
        return mailbox
    }

    private func requirePhone(_ request: HTTPRequest) throws(APIError) -> (String, String) {
        let mailbox = request.parameter("mb"), device = request.parameter("dev")
        guard let presented = Self.bearer(request), let expected = (try? store.deviceSecret(mailbox: mailbox, device: device)) ?? nil,
              SecureBytes.constantTimeEqual(SHA256.hash(presented), expected) else {
            throw APIError.unauthorized("not this phone's bearer")
        }
        return (mailbox, device)
    }

    static func hash(_ text: String, field: String) throws(APIError) -> [UInt8] {
        guard let bytes = Hex.decode(text), bytes.count == 32 else { throw APIError.invalidField(field, "must be 64 hex digits (a SHA-256)") }
        return bytes
    }

    @Sendable func createMailbox(_ request: HTTPRequest) async throws -> HTTPResponse {
        let body = try JSONObject(body: request.body)
        let id = try store.createMailbox(secretSHA256: try Self.hash(try body.string("secret_sha256"), field: "secret_sha256"))
        return .json(["mailbox_id": .string(id)], status: 201)
    }

    @Sendable func putDevice(_ request: HTTPRequest) async throws -> HTTPResponse {
        let mailbox = try requireGateway(request)
        let body = try JSONObject(body: request.body)
        let cursor = Int64(try body.optionalInteger("cursor", in: 0...Int(Int32.max)) ?? 0)
        try store.putDevice(mailbox: mailbox, device: request.parameter("dev"), secretSHA256: try Self.hash(try body.string("secret_sha256"), field: "secret_sha256"), cursor: cursor)
        return .noContent
    }

    @Sendable func deleteDevice(_ request: HTTPRequest) async throws -> HTTPResponse {
        try store.deleteDevice(mailbox: try requireGateway(request), device: request.parameter("dev"))
        return .noContent
    }

    @Sendable func postItem(_ request: HTTPRequest) async throws -> HTTPResponse {
        let mailbox = try requireGateway(request)
        let device = request.parameter("dev")
        guard store.carriageOn(mailbox: mailbox, device: device) else {
            return .json(["stored": false, "reason": "carriage off"])
        }
        let body = try JSONObject(body: request.body)
        let ciphertext = try body.string("ciphertext")
        let tooLarge = ciphertext.utf8.count > maximumItemBytes
        let n = try store.appendItem(mailbox: mailbox, device: device, ciphertext: tooLarge ? nil : ciphertext, tooLarge: tooLarge)
        return .json(["stored": true, "n": .number(Double(n)), "too_large": .bool(tooLarge)], status: 201)
    }

    @Sendable func items(_ request: HTTPRequest) async throws -> HTTPResponse {
        let (mailbox, device) = try requirePhone(request)
        guard let after = Int64(request.query["after"] ?? "0"), after >= 0 else { throw APIError.invalidField("after", "must be a sequence number") }
        let list = try store.items(mailbox: mailbox, device: device, after: after).map { item -> JSONValue in
            item.tooLarge ? ["n": .number(Double(item.n)), "too_large": true] : ["n": .number(Double(item.n)), "ciphertext": .string(item.ciphertext ?? "")]
        }
        return .json(["items": .array(list), "inbox_online": .bool(store.isOnline(mailbox: mailbox))])
    }

    @Sendable func ack(_ request: HTTPRequest) async throws -> HTTPResponse {
        let (mailbox, device) = try requirePhone(request)
        let body = try JSONObject(body: request.body)
        guard let through = try body.optionalInteger("through", in: 0...Int(Int32.max)) ?? body.optionalInteger("cursor", in: 0...Int(Int32.max)) else {
            throw APIError.missingField("through")
        }
        try store.ack(mailbox: mailbox, device: device, through: Int64(through))
        return .noContent
    }

    @Sendable func postCommand(_ request: HTTPRequest) async throws -> HTTPResponse {
        let (mailbox, device) = try requirePhone(request)
        guard store.carriageOn(mailbox: mailbox, device: device) else {
            throw APIError.conflict("the relay is off for this phone; nothing is held", code: "carriage_off")
        }
        let body = try JSONObject(body: request.body)
        let id = try body.string("id", maxLength: 200)
        let ciphertext = try body.string("ciphertext")
        guard ciphertext.utf8.count <= maximumItemBytes else {
            throw APIError(status: 413, code: "too_large", message: "ciphertext: commands are at most \(maximumItemBytes) bytes", field: "ciphertext")
        }
        let queued = try store.holdCommand(mailbox: mailbox, device: device, id: id, ciphertext: ciphertext)
        return .json(["queued": .bool(queued), "inbox_online": .bool(store.isOnline(mailbox: mailbox))], status: queued ? 202 : 200)
    }

    @Sendable func carriage(_ request: HTTPRequest) async throws -> HTTPResponse {
        let (mailbox, device) = try requirePhone(request)
        let body = try JSONObject(body: request.body)
        guard let on = try body.optionalBool("on") else { throw APIError.missingField("on") }
        let cursor = try body.optionalInteger("cursor", in: 0...Int(Int32.max)).map(Int64.init)
        try store.setCarriage(mailbox: mailbox, device: device, on: on, cursor: cursor)
        return .noContent
    }

    @Sendable func heldCommands(_ request: HTTPRequest) async throws -> HTTPResponse {
        let mailbox = try requireGateway(request)
        try store.touch(mailbox: mailbox)
        let list = try store.heldCommands(mailbox: mailbox).map { c -> JSONValue in
            ["device_id": .string(c.device), "id": .string(c.id), "ciphertext": .string(c.ciphertext)]
        }
        return .json(["commands": .array(list)])
    }

    @Sendable func applied(_ request: HTTPRequest) async throws -> HTTPResponse {
        try store.applied(mailbox: try requireGateway(request), device: request.parameter("dev"), id: request.parameter("id"))
        return .noContent
    }
}
