import Mobile
import APIKit
import ChannelAPI
import Crypto
import Foundation
import Identity

/// The phone-facing routes under /api/v1/mobile and the channel test route.
public struct MobileAPI: Sendable {
    public static let defaultPageSize = 100
    public static let maximumPageSize = 200

    let storage: MobileStorage
    let channel: MobileChannel
    let liveActivities: LiveActivityPublisher?
    let inboxPages = InboxPageCache()
    let inboxLines = InboxLineCache()

    public init(storage: MobileStorage, channel: MobileChannel, liveActivities: LiveActivityPublisher? = nil) {
        self.storage = storage
        self.channel = channel
        self.liveActivities = liveActivities
    }

    /// The inbox GET: answered on the server thread where the engine reads on the calling thread (SQLite), else async.
    var listDeliveriesRoute: Route {
        let summary = "The caller's inbox, newest first"
        if let immediate = storage.inbox as? any ImmediateInboxReads {
            return Route.answeredAtOnce(.GET, "/api/v1/mobile/deliveries", role: .viewer, summary: summary) { request, caller in
                try listDeliveries(request, caller: caller, reading: immediate)
            }
        }
        return Route(.GET, "/api/v1/mobile/deliveries", role: .viewer, summary: summary, handler: listDeliveries)
    }

    public var routes: [Route] {
        [
            Route(.POST, "/api/v1/mobile/devices", role: .viewer, summary: "Register or update this phone", handler: registerDevice),
            Route(.GET, "/api/v1/mobile/devices", role: .viewer, summary: "The caller's registered phones", handler: listDevices),
            Route(.DELETE, "/api/v1/mobile/devices/:id", role: .viewer, summary: "Remove one of the caller's phones", handler: deleteDevice),
            listDeliveriesRoute,
            Route(.GET, "/api/v1/mobile/deliveries/:id", role: .viewer, summary: "One inbox line with its full content", handler: getDelivery),
            Route(.POST, "/api/v1/mobile/deliveries/:id/read", role: .viewer, summary: "Mark a line read on one phone", handler: markRead),
            Route(.POST, "/api/v1/channels/mobile/test", access: .role(.admin), summary: "Send a test line through the mobile channel", handler: sendTest),
            Route(.POST, "/api/v1/mobile/activities", role: .viewer, summary: "Report a Live Activity's update token", handler: registerActivity),
        ]
    }

    /// Phones one person may register: each delivery to them writes a row and queues a wake-up per phone, so an
    /// unbounded count is a cost any key could multiply.
    public static let maximumDevicesPerPerson = 50

    /// Refuses a new device (409 `too_many_devices`, naming `field`) when the person has `maximumDevicesPerPerson`;
    /// an update of one of theirs always passes.
    public static func ensureRoom(forDevice id: String, subject: String, in devices: any DeviceRegistry, field: String) async throws {
        guard try await devices.device(id: id) == nil, try await devices.list(subject: subject).count >= maximumDevicesPerPerson else { return }
        throw APIError(status: 409, code: "too_many_devices",
                       message: "\(maximumDevicesPerPerson) devices are registered to you; remove one (DELETE /api/v1/mobile/devices/:id) first", field: field)
    }

    @Sendable func registerDevice(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let registration = try DeviceRegistration(json: JSONObject(body: request.body))
        try await Self.ensureRoom(forDevice: registration.id, subject: caller.subject, in: storage.devices, field: "id")
        return try await storage.transactions.answer { session in
            let created: Bool
            do {
                created = try storage.devices.register(registration, subject: caller.subject, keyID: caller.keyID, in: session)
            } catch DeviceOwnershipError.ownedByAnotherSubject {
                throw APIError(status: 403, code: "device_owned_by_another_user", message: "device is registered to another user", field: "id")
            }
            // 201 for a new and an updated device alike, as the original answers; `created` tells them apart.
            return .json(DeviceRegistered(deviceID: registration.id, created: created), status: 201)
        }
    }

    @Sendable func listDevices(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        return .json(["devices": try await storage.devices.list(subject: caller.subject).map(DeviceView.init)])
    }

    @Sendable func deleteDevice(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        // 204 always, as the original: an unknown or foreign id deletes nothing and says nothing about who has it.
        return try await storage.transactions.answer { session in
            _ = try storage.devices.deleteDevice(id: request.parameter("id"), subject: caller.subject, in: session)
            return .noContent
        }
    }

    /// An optional `device_id`: nil when absent, else the caller's own device.
    private func ownDevice(_ id: String?, caller: Principal) async throws -> String? {
        if let id { _ = try await storage.devices.ownedDevice(id, subject: caller.subject) }
        return id
    }

    /// What an inbox GET asks for: its page's cache key.
    private static func pageKey(_ request: HTTPRequest, caller: Principal) throws -> InboxPageCache.Key {
        // As the original: a limit that is not a number from 1 to 200 means the default 100 (never an error).
        var limit = Self.defaultPageSize
        if let text = request.query["limit"], let n = Int(text), (1...Self.maximumPageSize).contains(n) { limit = n }
        var cursor: Int64?
        if let text = request.query["cursor"] {
            guard let n = Int64(text), n > 0 else { throw APIError.invalidField("cursor", "is not a cursor this gateway returned") }
            cursor = n
        }
        // As the original reads it: an empty (or blank) device_id is no device_id, the caller's feed across phones.
        let deviceID = request.query["device_id"].map(SchemaWhitespace.trim).flatMap { $0.isEmpty ? nil : $0 }
        return InboxPageCache.Key(subject: caller.subject, deviceID: deviceID, cursor: cursor, limit: limit)
    }

    /// A page rendered since the last write to this person's inbox is still the answer; the device check it passed holds too.
    private func cachedPage(_ key: InboxPageCache.Key) -> (page: InboxPageCache.Page?, generation: UInt64) {
        let generation = storage.inbox.inboxGenerations.generation(of: key.subject)
        return (inboxPages.page(for: key, generation: generation), generation)
    }

    private func respond(_ request: HTTPRequest, page: InboxPageCache.Page, key: InboxPageCache.Key) -> HTTPResponse {
        // That phone now holds these lines: noted in memory once per rendered page, written later in the background.
        if let deviceID = key.deviceID, page.claimFetchNote() { storage.fetches.note(deviceID: deviceID, subject: key.subject, deliveryIDs: page.deliveryIDs) }
        let headers = [("ETag", page.etag), ("Cache-Control", "private, no-cache")]
        if request.alreadyHas(etag: page.etag) { return HTTPResponse(status: 304, headers: headers) }
        return HTTPResponse(status: 200, headers: [("Content-Type", "application/json")] + headers, body: page.body)
    }

    /// The inbox GET on the server thread (an engine that reads on the calling thread).
    func listDeliveries(_ request: HTTPRequest, caller: Principal, reading inbox: any ImmediateInboxReads) throws -> HTTPResponse {
        let key = try Self.pageKey(request, caller: caller)
        let (cached, generation) = cachedPage(key)
        let page = try cached ?? {
            if let deviceID = key.deviceID { try inbox.checkOwnershipNow(of: deviceID, subject: caller.subject) }
            let rendered = render(try inbox.deliveriesNow(subject: caller.subject, deviceID: key.deviceID, before: key.cursor, limit: key.limit))
            return inboxPages.store(rendered.body, etag: rendered.etag, deliveryIDs: rendered.ids, for: key, generation: generation)
        }()
        return respond(request, page: page, key: key)
    }

    /// The inbox GET, async (an engine over the network).
    @Sendable func listDeliveries(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let key = try Self.pageKey(request, caller: caller)
        let (cached, generation) = cachedPage(key)
        if let cached { return respond(request, page: cached, key: key) }
        let deviceID = try await ownDevice(key.deviceID, caller: caller)
        let rendered = render(try await storage.inbox.deliveries(subject: caller.subject, deviceID: deviceID, before: key.cursor, limit: key.limit))
        return respond(request, page: inboxPages.store(rendered.body, etag: rendered.etag, deliveryIDs: rendered.ids, for: key, generation: generation), key: key)
    }

    /// The page's body, bytes as `JSONWriter` would write them (keys sorted), from each line's kept fragments with
    /// the reader's read state between; and its validator: a SHA-256 over each line's digest and read state and the
    /// page's own fields, which names these bytes as surely as a hash of all of them.
    func render(_ page: InboxPage) -> (body: [UInt8], etag: String, ids: [String]) {
        let lines = page.items.map(inboxLines.line(for:))
        var body: [UInt8] = []
        body.reserveCapacity(64 + lines.reduce(0) { $0 + $1.bytes + 48 })
        var validated: [UInt8] = []
        validated.reserveCapacity(16 + lines.count * 80)
        body.append(contentsOf: #"{"deliveries":["#.utf8)
        for (index, (line, delivery)) in zip(lines, page.items).enumerated() {
            if index > 0 { body.append(UInt8(ascii: ",")) }
            body += line.head
            let readState = body.count
            DeliveryView.writeReadState(delivery.readAt, into: &body)
            validated += line.digest
            validated.append(UInt8(body.count - readState))
            validated += body[readState...]
            body += line.tail
        }
        let fields = body.count
        body.append(contentsOf: #"],"next_cursor":"#.utf8)
        if page.hasMore, let last = page.items.last {
            JSONValue.writeString(String(last.seq), into: &body)
        } else {
            body.append(contentsOf: "null".utf8)
        }
        body.append(contentsOf: #","unread_count":"#.utf8)
        body.append(contentsOf: String(page.unreadCount).utf8)
        body.append(UInt8(ascii: "}"))
        validated += body[fields...]
        let etag = "\"" + Hex.encode(Array(SHA256.hash(validated).prefix(16))) + "\""
        return (body, etag, page.items.map(\.id))
    }

    @Sendable func getDelivery(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        // As the original: one line is always read as one phone sees it (its read_at is that phone's receipt).
        guard let named = request.query["device_id"].map(SchemaWhitespace.trim), !named.isEmpty else { throw APIError.missingField("device_id") }
        let deviceID = try await ownDevice(named, caller: caller)
        guard let delivery = try await storage.inbox.delivery(id: request.parameter("id"), subject: caller.subject, deviceID: deviceID) else {
            throw APIError(status: 404, code: "not_found", message: "delivery not found", field: "id")
        }
        if let deviceID { storage.fetches.note(deviceID: deviceID, subject: caller.subject, deliveryIDs: [delivery.id]) }
        // How each of the caller's phones was woken for this line (never other people's).
        let own = Set(try await storage.devices.list(subject: caller.subject).map(\.id))
        let wakeUps = try await storage.outbox.entries(deliveryID: delivery.id).filter { own.contains($0.deviceID) }.map(DeliveryView.WithWakeUps.WakeUp.init)
        // The single line as the original sends it (no presentation), plus how each of the caller's phones was woken.
        return .json(DeliveryView.WithWakeUps(view: DeliveryView(delivery), wakeUps: wakeUps))
    }

    /// `POST …/deliveries/:id/read`: which phone read it (else `?device_id=`).
    struct ReadReceipt: Decodable {
        var deviceID: String?
        enum CodingKeys: String, CodingKey { case deviceID = "device_id" }
    }

    @Sendable func markRead(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let body = try request.decode(ReadReceipt.self, allowEmpty: true)
        guard let deviceID = try await ownDevice(body.deviceID ?? request.query["device_id"], caller: caller) else {
            throw APIError.missingField("device_id")
        }
        return try await storage.transactions.answer { session in
            guard try storage.inbox.markRead(deliveryID: request.parameter("id"), deviceID: deviceID, subject: caller.subject, in: session) else {
                throw APIError(status: 404, code: "not_found", message: "delivery not found", field: "id")
            }
            return .json(["read": true])
        }
    }

    /// `POST /api/v1/channels/mobile/test`: where the test line goes, and what it says.
    struct TestLine: Decodable {
        var to: String?
        var title: String?
        var body: String?
    }

    @Sendable func sendTest(_ request: HTTPRequest) async throws -> HTTPResponse {
        let body = try request.decode(TestLine.self, allowEmpty: true)
        let to = body.to ?? "all"
        let destination: Destination
        do {
            destination = try Destination(parsing: to)
        } catch {
            throw APIError.invalidField("to", error.description)
        }
        let output = Output(agentID: "mobile-test", agentName: "Soulacy", sessionID: "test-" + UUID().uuidString.lowercased(),
                            title: try body.title.limited(to: 200, field: "title") ?? "Test from Soulacy",
                            parts: [try body.body.limited(to: 4000, field: "body") ?? "The mobile channel works."],
                            metadata: ["trigger": "test"])
        // The line and its answer commit together, so a retry after a crash gets this answer, not a second line.
        let dispatcher = channel.dispatcher
        return try await storage.transactions.answer { session in
            let stored = try storage.inbox.insertDelivery(output, destination: destination, in: session)
            if stored.wakeUps > 0, let dispatcher { storage.transactions.afterCommit { dispatcher.poke() } }
            return .json(TestDelivered(deliveryID: stored.id, destination: to, recipients: stored.recipients.count), status: 201)
        }
    }

    /// `POST /api/v1/mobile/activities`: a Live Activity's update token, as the original app reports it.
    struct ActivityToken: Decodable {
        var deviceID: String?
        var agentID: String?
        var sessionID: String?
        var token: String?
        var environment: String?

        enum CodingKeys: String, CodingKey {
            case deviceID = "device_id"
            case agentID = "agent_id"
            case sessionID = "session_id"
            case token
            case environment
        }
    }

    @Sendable func registerActivity(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let body = try request.decode(ActivityToken.self)
        // As the original: every field trimmed; the three names required together; the token lower-cased.
        let deviceID = SchemaWhitespace.trim(try body.deviceID.limited(to: DeviceRegistration.maximumIDLength, field: "device_id") ?? "")
        let agentID = SchemaWhitespace.trim(try body.agentID.limited(to: 64, field: "agent_id") ?? "")
        let sessionID = SchemaWhitespace.trim(try body.sessionID.limited(to: 128, field: "session_id") ?? "")
        for (field, value) in [("device_id", deviceID), ("agent_id", agentID), ("session_id", sessionID)] where value.isEmpty {
            throw APIError(status: 400, code: "missing_field", message: "device_id, agent_id and session_id are required", field: field)
        }
        let token = SchemaWhitespace.trim(try body.token.limited(to: 2048, field: "token") ?? "").lowercased()
        guard DeviceRegistration.liveStartTokenHexLength.contains(token.utf8.count), token.utf8.count % 2 == 0, Hex.decode(token) != nil else {
            throw APIError.invalidField("token", "must be the activity's push token as 32 to 512 hex characters")
        }
        let device: Device
        do {
            device = try await storage.devices.ownedDevice(deviceID, subject: caller.subject)
        } catch DeviceError.notYours {
            throw APIError(status: 403, code: "unknown_device", message: "device is registered to another user", field: "device_id")
        }
        guard device.platform == .ios else {
            // A well-formed request about a device whose platform cannot have it: a conflict with that device.
            throw APIError(status: 409, code: "wrong_platform", message: "device_id: Live Activities are an iOS feature; they are never sent to Android devices", field: "device_id")
        }
        // As the original: development is kept, anything else is production.
        let environment: WakeTarget.Environment = SchemaWhitespace.trim(try body.environment.limited(to: 64, field: "environment") ?? "") == "development" ? .development : .production
        guard let liveActivities else { throw APIError.unavailable("Live Activities are not enabled on this gateway") }
        return try await storage.transactions.answer { session in
            try liveActivities.tokens.register(deviceID: device.id, sessionID: sessionID, agentID: agentID, token: token, environment: environment, now: Date(),
                                               in: session)
            return .json(ActivityRegistered(runKey: LiveActivityPublisher.runKey(agentID: agentID, sessionID: sessionID), deviceID: device.id,
                                            sessionID: sessionID), status: 201)
        }
    }
}

extension DeviceError: HTTPResponseError {
    /// 403 as the original answers a device that is unknown or someone else's; 400 for none named.
    public var apiError: APIError {
        switch self {
        case .missing(let field): APIError.missingField(field)
        case .notYours(_, let field): APIError(status: 403, code: "unknown_device", message: description, field: field)
        }
    }
}

// MARK: Answers, in the original's field names

extension MobileAPI {
    /// A registered phone as its person sees it (never its push token).
    struct DeviceView: Encodable {
        var id, name, platform, bundleID: String
        var pushEnvironment: Nullable<String>
        var hasPushToken, notificationsEnabled, liveActivities: Bool
        var capabilities: [String]
        var createdAt, updatedAt: Timestamp

        init(_ device: Device) {
            id = device.id
            name = device.name
            platform = device.platform.rawValue
            bundleID = device.bundleID
            pushEnvironment = Nullable(device.pushEnvironment?.rawValue)
            hasPushToken = device.pushToken != nil
            notificationsEnabled = device.notificationsEnabled
            liveActivities = device.liveStartToken != nil
            capabilities = device.capabilities.sorted()
            createdAt = Timestamp(device.createdAt)
            updatedAt = Timestamp(device.updatedAt)
        }

        enum CodingKeys: String, CodingKey {
            case id, name, platform, capabilities
            case bundleID = "bundle_id", pushEnvironment = "push_environment", hasPushToken = "has_push_token"
            case notificationsEnabled = "notifications_enabled", liveActivities = "live_activities", createdAt = "created_at", updatedAt = "updated_at"
        }
    }

    /// 201 for a new and an updated device alike, as the original answers; `created` tells them apart.
    struct DeviceRegistered: Encodable {
        var registered = true
        var deviceID: String
        var created: Bool

        enum CodingKeys: String, CodingKey {
            case registered, created
            case deviceID = "device_id"
        }
    }

    struct TestDelivered: Encodable {
        var delivered = true
        var deliveryID, destination: String
        var recipients: Int

        enum CodingKeys: String, CodingKey {
            case delivered, destination, recipients
            case deliveryID = "delivery_id"
        }
    }

    struct ActivityRegistered: Encodable {
        var registered = true
        var runKey, deviceID, sessionID: String

        enum CodingKeys: String, CodingKey {
            case registered
            case runKey = "run_key", deviceID = "device_id", sessionID = "session_id"
        }
    }
}
