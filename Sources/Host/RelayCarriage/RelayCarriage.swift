import ChannelAPI
import Crypto
import Foundation
import Synchronization
import HTTPClient
import HTTPServer
import JSON
import Household
import Identity
import Mobile
import RelayProtocol

/// The relay mailbox answered a carriage call with a refusal (the round or the enrolment is tried again later).
public struct RelayRefusal: Error, CustomStringConvertible, Sendable {
    public let message: String
    public var description: String { message }
}

/// The gateway's side of the relay mailbox: while online it pulls the phones' sealed commands, applies each once
/// through the same API (the idempotency log answers a replay), posts sealed results, and sends new inbox lines
/// down as sealed records. The relay sees only ciphertext, sequence numbers and cursors.
public actor RelayCarriage {
    /// Down items larger than this go as a too_large marker; the phone reads them over a direct path.
    public static let maximumItemBytes = 192 * 1024

    public struct Enrollment: Sendable {
        public let url: String
        public let mailboxID: String
        public let deviceID: String
        public let secret: [UInt8]
    }

    nonisolated let url: String
    let store: any RelayCarriageStore
    /// The relay's enrollment token, presented only to make the mailbox.
    let enrollToken: String?
    /// This gateway process's name among the nodes on one database: only the node holding the carriage runs rounds.
    nonisolated let node: String
    /// How long a carriage lasts unless renewed (each round renews it): what a dead carrier's phones wait at most.
    nonisolated let carriageLease: Duration
    let client: HTTP2Client
    let mobile: any Inbox
    let keys: any APIKeyStore
    let log: Log
    /// Applies a phone's command as the phone (its principal); the third argument seals the idempotency answer.
    let apply: @Sendable (HTTPRequest, Principal, [UInt8]) async -> HTTPResponse
    private var mailbox: (id: String, bearer: String)?

    /// `store` keeps the phones' pairing secrets and the mailbox's bearer sealed; `node` names this process among the
    /// gateway's nodes on one database.
    public init(url: String, caFile: String?, enrollToken: String? = nil, store: any RelayCarriageStore, node: String = "local", carriageLease: Duration = .seconds(10),
                mobile: any Inbox, keys: any APIKeyStore, log: Log, apply: @escaping @Sendable (HTTPRequest, Principal, [UInt8]) async -> HTTPResponse) {
        self.url = url.hasSuffix("/") ? String(url.dropLast()) : url
        self.enrollToken = enrollToken
        self.store = store
        self.node = node
        self.carriageLease = carriageLease
        self.mobile = mobile
        self.keys = keys
        self.log = log
        self.apply = apply
        client = HTTP2Client(configuration: HTTP2ClientConfiguration(caFile: caFile))
    }

    private func call(_ method: String, _ path: String, bearer: String?, json: JSONValue? = nil) async throws -> (Int, JSONValue) {
        var headers = [("content-type", "application/json")]
        if let bearer { headers.append(("authorization", "Bearer \(bearer)")) }
        let response = try await client.send(ClientRequest(method: method, url: url + path, headers: headers, body: json.map { Array($0.serialized().utf8) } ?? [], timeout: .seconds(10)))
        return (response.status, (try? JSONValue.parse(response.body)) ?? .null)
    }

    /// The mailbox this gateway owns at the relay, created on first use; its bearer stays in the data directory.
    /// One creation at a time: the actor is reentrant at the relay call, and a second caller (a phone enrolled while
    /// the first round makes the mailbox) must wait for that mailbox, not make another one its phone would sit in alone.
    private func ensureMailbox() async throws -> (id: String, bearer: String) {
        if let mailbox { return mailbox }
        if let stored = try await store.mailbox(url: url) {
            mailbox = (stored.id, stored.bearer)
            return (stored.id, stored.bearer)
        }
        if let creating = creatingMailbox { return try await creating.value }
        let creating = Task { try await self.createMailbox() }
        creatingMailbox = creating
        defer { creatingMailbox = nil }
        let created = try await creating.value
        mailbox = created
        return created
    }

    private var creatingMailbox: Task<(id: String, bearer: String), any Error>?

    private func createMailbox() async throws -> (id: String, bearer: String) {
        let bearer = Base64URL.encode(SecureBytes.random(count: 32))
        let (status, body) = try await call("POST", "/v1/mailboxes", bearer: enrollToken, json: ["secret_sha256": .string(Hex.encode(SHA256.hash(bearer)))])
        guard status == 201, let id = body["mailbox_id"]?.stringValue else {
            let hint = status != 401 ? "" : enrollToken == nil ? ": it asks for an enrollment token (SOULACY_RELAY_MAILBOX_TOKEN)" : ": SOULACY_RELAY_MAILBOX_TOKEN is not its token"
            throw RelayRefusal(message: "the relay refused to make a mailbox (\(status))\(hint)")
        }
        // Another node may have saved its mailbox first: every node uses the one kept.
        let kept = try await store.saveMailbox(url: url, RelayMailboxAccess(id: id, bearer: bearer))
        if kept.id != id { _ = try? await call("DELETE", "/v1/mailboxes/\(id)", bearer: bearer) }
        return (kept.id, kept.bearer)
    }

    /// Gives a newly paired phone (its key) a pairing secret and a place in the mailbox.
    public func enroll(keyID: String, subject: String) async throws -> Enrollment {
        let box = try await ensureMailbox()
        let secret = SecureBytes.random(count: 32)
        // New lines start from now: the phone reads what came before over a direct path.
        try await store.enroll(deviceID: keyID, subject: subject, secret: secret, after: try await mobile.latestDeliverySeq())
        try? await register(deviceID: keyID, secret: secret, box: box)
        return Enrollment(url: url, mailboxID: box.id, deviceID: keyID, secret: secret)
    }

    private func register(deviceID: String, secret: [UInt8], box: (id: String, bearer: String)) async throws {
        let keys = try RelayKeys(secret: secret, deviceID: deviceID)
        let (status, _) = try await call("PUT", "/v1/mailboxes/\(box.id)/devices/\(deviceID)", bearer: box.bearer,
                                         json: ["secret_sha256": .string(keys.bearerSHA256), "cursor": 0])
        if status == 204 {
            try await store.markRegistered(deviceID)
        }
    }

    /// A phone's key was revoked: nothing more is sealed for it, and the relay drops its place, its bearer and
    /// what it holds for it (now, or on a later round if the relay cannot be reached).
    public func revoke(keyID: String) async {
        // Marked before anything else, so no round seals another record for it; removed at the relay now, or on
        // a later round if the relay cannot be reached.
        await markRevoked(keyID)
        if let box = try? await ensureMailbox() { await forget(deviceID: keyID, box: box) }
    }

    private func markRevoked(_ deviceID: String) async {
        _ = try? await store.markRevoked(deviceID)
    }

    /// Has the relay remove a revoked phone, and forgets it here once the relay has.
    private func forget(deviceID: String, box: (id: String, bearer: String)) async {
        guard let (status, _) = try? await call("DELETE", "/v1/mailboxes/\(box.id)/devices/\(deviceID)", bearer: box.bearer),
              status == 204 || status == 404 else { return }
        _ = try? await store.forgetRevoked(deviceID)
    }

    /// Runs until cancelled, polling the mailbox twice a second while the gateway is up.
    public func run() async {
        while !Task.isCancelled {
            do { try await tick() } catch { log.warning("relay: \(error)") }
            try? await Task.sleep(for: .milliseconds(500))
        }
    }

    /// One round: register waiting phones, apply held commands, send new records down. Rounds never overlap:
    /// the actor is reentrant at every network call, and two rounds would send the same lines twice.
    public func tick() async throws {
        while roundRunning { await withCheckedContinuation { waitingForRound.append($0) } }
        roundRunning = true
        defer {
            roundRunning = false
            let waiting = waitingForRound
            waitingForRound = []
            waiting.forEach { $0.resume() }
        }
        do {
            try await round()
            lastRound = Date()
            lastFailure = nil
            lastRoundSnapshot.withLock { $0 = lastRound }
        } catch {
            lastFailure = (Date(), "\(error)")
            throw error
        }
    }

    /// How the carriage stands, for the console's health page: when a round last went through, and the last
    /// failure since (the relay's own words, never a secret: bearers and sealed bytes are not in its errors).
    public struct Status: Sendable {
        public var url: String
        public var lastRoundAt: Date?
        public var lastFailureAt: Date?
        public var lastFailure: String?
        public var phones: Int
        /// False on a node standing by while another node of the gateway carries the relay traffic.
        public var carrying: Bool
    }

    public func status() async -> Status {
        Status(url: url, lastRoundAt: lastRound, lastFailureAt: lastFailure?.at, lastFailure: lastFailure?.reason,
               phones: (try? await store.phones().filter { !$0.revoked }.count) ?? 0, carrying: carrying)
    }

    /// Whether this node carried the relay traffic at its last round (one node of a gateway does at a time).
    private var carrying = false

    private var lastRound: Date?
    private nonisolated let lastRoundSnapshot = Mutex<Date?>(nil)
    /// When a round last went through, readable without awaiting the actor (the metrics scrape reads it).
    public nonisolated var lastSuccessfulRound: Date? { lastRoundSnapshot.withLock { $0 } }
    private var lastFailure: (at: Date, reason: String)?

    private var roundRunning = false
    private var waitingForRound: [CheckedContinuation<Void, Never>] = []

    private func round() async throws {
        // One node of a gateway carries at a time: the others stand by, and take over once its lease runs out.
        carrying = try await store.holdCarriage(node: node, lease: carriageLease)
        guard carrying else { return }
        let box = try await ensureMailbox()
        var devices: [RelayPhone] = []
        for device in try await store.phones() {
            // A key revoked by any path (or gone) counts as revoked here too.
            let active = device.revoked ? false : await keys.principal(keyID: device.id) != nil
            if !active {
                await markRevoked(device.id)
                await forget(deviceID: device.id, box: box)
            } else {
                devices.append(device)
            }
        }
        for device in devices where !device.registered {
            try? await register(deviceID: device.id, secret: device.secret, box: box)
        }
        let (status, body) = try await call("GET", "/v1/mailboxes/\(box.id)/commands", bearer: box.bearer)
        guard status == 200 else { throw RelayRefusal(message: "the relay answered \(status) for held commands") }
        for command in body["commands"]?.arrayValue ?? [] {
            guard let device = command["device_id"]?.stringValue, let id = command["id"]?.stringValue, let sealed = command["ciphertext"]?.stringValue else { continue }
            await applyCommand(device: device, id: id, sealed: sealed, box: box)
        }
        for device in devices {
            // A round slower than the lease (a slow relay) would let another node carry alongside: renew as it goes,
            // and stop once the carriage has moved on.
            carrying = try await store.holdCarriage(node: node, lease: carriageLease)
            guard carrying else { return }
            try await sendRecords(deviceID: device.id, subject: device.subject, secret: device.secret, after: device.lastSeq, box: box)
        }
    }

    private func applyCommand(device: String, id: String, sealed: String, box: (id: String, bearer: String)) async {
        guard let secret = try? await store.secret(deviceID: device),
              let keys = try? RelayKeys(secret: secret, deviceID: device) else {
            _ = try? await call("POST", "/v1/mailboxes/\(box.id)/commands/\(device)/\(id)/applied", bearer: box.bearer)
            return
        }
        var result: RelayResult
        let opened: RelayCommand?
        do { opened = try RelayEnvelope.open(sealed, as: RelayCommand.self, kind: .command, key: keys.up) } catch let error as JSONFieldError {
            // Authentic but nested past the limit: the phone hears why, as an API client would.
            log.warning("relay: a command from \(device) was refused: \(error.message)")
            await answer(RelayResult(id: id, status: 400, error: "invalid_json"), device: device, id: id, keys: keys, box: box)
            return
        } catch { opened = nil }
        if let command = opened, command.id == id, let principal = await self.keys.principal(keyID: device) {
            // Empty pieces kept: an empty path ("" or "?x") is a path the router does not know, not a missing element.
            let parts = command.path.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
            var query: [String: String] = [:]
            if parts.count == 2 {
                for pair in parts[1].split(separator: "&") {
                    let kv = pair.split(separator: "=", maxSplits: 1).map { String($0).removingPercentEncoding ?? String($0) }
                    if kv.count == 2 { query[kv[0]] = kv[1] }
                }
            }
            let bodyBytes = command.body?.serializedBytes() ?? []
            // The command's id is its Idempotency-Key: the same intent sent again on any path is applied once.
            let request = HTTPRequest(method: command.method, path: String(parts[0]), query: query,
                                      headers: ["idempotency-key": id, "content-type": "application/json"], body: bodyBytes, remoteAddress: "relay")
            // The mailbox carries whole answers: a streamed one (chat/stream) is read to its end first.
            // Sealed as the same phone's call on any other path is; a phone that sends no credential gets its answers
            // sealed under its relay key (openable through the relay only).
            let sealing = command.credential.flatMap(Base64URL.decode).flatMap { $0.count == 32 ? $0 : nil } ?? keys.up
            let response = await apply(request, principal, sealing).collected()
            result = RelayResult(id: id, status: response.status, contentType: response.header("content-type") ?? "application/json",
                                 bodyB64: Data(response.body).base64EncodedString(),
                                 replayed: response.header("idempotent-replayed") == "true" ? true : nil)
            if response.body.count > Self.maximumItemBytes { result = RelayResult(id: id, status: 413, error: "result_too_large") }
        } else {
            // A command this gateway cannot open or whose phone is unpaired: answered, never applied.
            result = RelayResult(id: id, status: 401, error: "not_openable")
        }
        await answer(result, device: device, id: id, keys: keys, box: box)
    }

    /// Sends a command's result down, then marks the command applied (only once the result is stored).
    private func answer(_ result: RelayResult, device: String, id: String, keys: RelayKeys, box: (id: String, bearer: String)) async {
        if let envelope = try? RelayEnvelope.seal(result, kind: .result, key: keys.down),
           let (status, _) = try? await call("POST", "/v1/mailboxes/\(box.id)/devices/\(device)/items", bearer: box.bearer,
                                             json: ["ciphertext": .string(envelope), "kind": "result"]),
           status == 201 || status == 200 {
            _ = try? await call("POST", "/v1/mailboxes/\(box.id)/commands/\(device)/\(id)/applied", bearer: box.bearer)
        }
    }

    private func sendRecords(deviceID: String, subject: String, secret: [UInt8], after: Int64, box: (id: String, bearer: String)) async throws {
        let keys = try RelayKeys(secret: secret, deviceID: deviceID)
        var previous = after
        // The whole backlog, oldest first, a page at a time: each record's `after` is the one before it, so a
        // phone that sees a gap knows it.
        while true {
            let page = try await mobile.lines(subject: subject, after: previous, limit: 200)
            if page.isEmpty { return }
            guard try await sendPage(page, deviceID: deviceID, keys: keys, previous: &previous, box: box) else { return }
        }
    }

    /// Sends lines down in order; false when the relay stopped taking them (the rest go on a later round).
    private func sendPage(_ page: [Delivery], deviceID: String, keys: RelayKeys, previous: inout Int64, box: (id: String, bearer: String)) async throws -> Bool {
        for delivery in page {
            // A revocation may land while this round waits on the relay: it stops the very next record.
            guard await self.keys.principal(keyID: deviceID) != nil else { return false }
            // The line as the inbox shows it (one delivery view everywhere), without read state: the phone keeps its own.
            let line = try JSONCoding.encoder.encode(DeliveryView(delivery, hasReadState: false))
            let record = line.count > Self.maximumItemBytes
                ? RelayLine(after: previous, seq: delivery.seq, id: delivery.id, record: nil, tooLarge: true)
                : RelayLine(after: previous, seq: delivery.seq, id: delivery.id, record: try JSONValue.parse(Array(line)))
            let envelope = try RelayEnvelope.seal(record, kind: .record, key: keys.down)
            let (status, body) = try await call("POST", "/v1/mailboxes/\(box.id)/devices/\(deviceID)/items", bearer: box.bearer,
                                                json: ["ciphertext": .string(envelope), "kind": "record", "seq": .number(Double(delivery.seq))])
            guard status == 201 || (status == 200 && body["stored"] == false) else { return false }
            if status == 201 {
                // A wake-up through the relay: its payload is sealed too, its collapse id keyed (HMAC) so the relay learns no thread.
                let nudge = try RelayEnvelope.seal(RelayNudge(id: delivery.id, seq: delivery.seq, title: delivery.title), kind: .push, key: keys.down)
                _ = try? await call("POST", "/v1/mailboxes/\(box.id)/push", bearer: box.bearer,
                                    json: ["device_id": .string(deviceID), "collapse_id": .string(String(keys.collapseID(threadID: "delivery-\(delivery.agentID)").prefix(64))),
                                           "ciphertext": .string(nudge)])
            }
            previous = delivery.seq
            try await store.advance(deviceID, to: delivery.seq)
        }
        return true
    }
}
