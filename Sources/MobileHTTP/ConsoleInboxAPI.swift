import APIKit
import ChannelAPI
import Foundation
import Identity
import Mobile

/// The console's inbox, devices and live updates (docs/console-api.md): each line's path to each phone, the phones
/// with their last wake-up, a test push answered with the service's own answer, and server-sent events about the
/// caller's own data. Scoped as the inbox is: a person sees their own lines and phones (an admin, every phone).
public struct ConsoleInboxAPI: Sendable {
    public static let defaultPageSize = 50
    public static let maximumPageSize = 100
    /// Lines looked at for one page when filters drop most of them; the page then ends early with `next_before`.
    static let scanBudget = 1000

    let store: MobileStorage
    let transports: WakeTransportRegistry
    let clock: any WallClock
    /// Between comment lines on an idle event stream (proxies close a silent connection).
    let keepAlive: Duration
    /// Bytes an event stream may hold unsent before its writer waits for the browser.
    let streamBufferLimit: Int

    public init(store: MobileStorage, transports: WakeTransportRegistry, clock: any WallClock = SystemWallClock(), keepAlive: Duration = .seconds(15),
                streamBufferLimit: Int = 64 * 1024) {
        self.store = store
        self.transports = transports
        self.clock = clock
        self.keepAlive = keepAlive
        self.streamBufferLimit = streamBufferLimit
    }

    public var routes: [Route] {
        var console = RouteGroup("/api/v1/console", role: .viewer)
        console.get("/deliveries", summary: "The caller's lines, newest first, each with its phones' states", handler: listDeliveries)
        console.get("/deliveries/:id", summary: "One line and each of the caller's phones' timelines", handler: getDelivery)
        console.get("/devices", summary: "The caller's phones (an admin's: every phone) with token state and last wake-up", handler: listDevices)
        console.post("/devices/:id/test-push", role: .operator, summary: "Send one generic wake-up now and answer with the service's answer",
                     handler: testPush)
        console.get("/events", summary: "Server-sent events about the caller's lines, phones, approvals and agents", handler: events)
        return console.routes
    }

    // MARK: Inbox

    /// The query of `GET /console/deliveries`, each field checked and named when wrong.
    struct LineQuery {
        var agentID: String?
        var deviceID: String?
        var state: DeliveryState?
        var idPrefix: String?
        var limit = ConsoleInboxAPI.defaultPageSize
        var before: Int64?

        init(_ query: [String: String]) throws(APIError) {
            // As openapi.yaml states them: free text without control characters, trimmed, blank meaning no filter;
            // numbers and the state exactly as written, empty meaning the default.
            func text(_ name: String, maximum: Int) throws(APIError) -> String? {
                guard let raw = query[name] else { return nil }
                guard raw.unicodeScalars.count <= maximum else { throw APIError.invalidField(name, "is longer than \(maximum) characters") }
                guard !raw.unicodeScalars.contains(where: { $0.value < 0x20 }) else { throw APIError.invalidField(name, "holds a control character") }
                let value = SchemaWhitespace.trim(raw)
                return value.isEmpty ? nil : value
            }
            func exact(_ name: String) -> String? { query[name].flatMap { $0.isEmpty ? nil : $0 } }
            agentID = try text("agent", maximum: 128)
            deviceID = try text("device", maximum: DeviceRegistration.maximumIDLength)
            idPrefix = try text("q", maximum: 64)
            if let state = exact("state") {
                guard let known = DeliveryState.all.first(where: { $0.rawValue == state }) else {
                    throw APIError.invalidField("state", "must be one of \(DeliveryState.all.map(\.rawValue).sorted().joined(separator: ", "))")
                }
                self.state = known
            }
            if let text = exact("limit") {
                guard text.utf8.allSatisfy({ (0x30...0x39).contains($0) }), let n = Int(text), (1...ConsoleInboxAPI.maximumPageSize).contains(n),
                      text.first != "0" else {
                    throw APIError.invalidField("limit", "must be a number from 1 to \(ConsoleInboxAPI.maximumPageSize)")
                }
                limit = n
            }
            if let text = exact("before") {
                guard text.utf8.count <= 18, text.first != "0", text.utf8.allSatisfy({ (0x30...0x39).contains($0) }), let n = Int64(text), n > 0 else {
                    throw APIError.invalidField("before", "is not a next_before this gateway returned")
                }
                before = n
            }
        }
    }

    @Sendable func listDeliveries(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let query = try LineQuery(request.query)
        let devices = Dictionary(try await store.devices.list(subject: caller.subject).map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
        if let named = query.deviceID, devices[named] == nil {
            throw APIError(status: 404, code: "not_found", message: "device not found", field: "device")
        }
        let filtered = query.deviceID != nil || query.state != nil
        var page: [ConsoleLine] = []
        var cursor = query.before
        var scanned = 0
        var next: Int64?
        // Without filters a page is one read; with them, lines are read in batches until the page is full, the
        // lines run out, or the scan budget is spent (then `next_before` says where to go on).
        while true {
            let batchSize = filtered ? 100 : query.limit + 1
            let batch = try await store.inbox.consoleLines(subject: caller.subject, agentID: query.agentID, idPrefix: query.idPrefix, before: cursor, limit: batchSize)
            var unread = false
            for line in try await store.timelines.consoleTimelines(batch, devices: devices.mapValues(\.createdAt)) {
                if page.count == query.limit {
                    unread = true
                    break
                }
                scanned += 1
                cursor = line.delivery.seq
                if Self.matches(line, query) { page.append(line) }
            }
            let exhausted = batch.count < batchSize && !unread
            if exhausted { break }
            if unread || page.count == query.limit || scanned >= Self.scanBudget {
                next = cursor
                break
            }
        }
        return .json(LineList(deliveries: page.map { LineView($0, devices: devices, body: false) }, nextBefore: Nullable(next.map { String($0) })))
    }

    static func matches(_ line: ConsoleLine, _ query: LineQuery) -> Bool {
        if let device = query.deviceID {
            guard let timeline = line.devices.first(where: { $0.deviceID == device }) else { return false }
            if let state = query.state { return timeline.state == state }
            return true
        }
        if let state = query.state { return line.state == state }
        return true
    }

    @Sendable func getDelivery(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let id = request.parameter("id")
        // Someone else's line and no line are the same answer.
        guard let line = try await store.inbox.delivery(id: id, subject: caller.subject, deviceID: nil) else {
            throw APIError(status: 404, code: "not_found", message: "delivery not found", field: "id")
        }
        let devices = Dictionary(try await store.devices.list(subject: caller.subject).map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
        guard let timeline = try await store.timelines.consoleTimelines([line], devices: devices.mapValues(\.createdAt)).first else {
            throw APIError(status: 404, code: "not_found", message: "delivery not found", field: "id")
        }
        return .json(LineDetail(delivery: LineView(timeline, devices: devices, body: true),
                                devices: timeline.devices.map { DeviceSteps($0, device: devices[$0.deviceID]) }))
    }
}

// MARK: Answers, in docs/console-api.md's field names

extension ConsoleInboxAPI {
    struct LineList: Encodable {
        var deliveries: [LineView]
        var nextBefore: Nullable<String>
        enum CodingKeys: String, CodingKey { case deliveries, nextBefore = "next_before" }
    }

    struct LineView: Encodable {
        struct DeviceState: Encodable {
            var deviceID, deviceName, platform, state: String
            enum CodingKeys: String, CodingKey { case platform, state, deviceID = "device_id", deviceName = "device_name" }
        }
        var id, agentID, agentName, title, state: String
        var createdAt: Timestamp
        var devices: [DeviceState]
        var body: String?

        init(_ line: ConsoleLine, devices known: [String: Device], body: Bool) {
            let d = line.delivery
            id = d.id
            agentID = d.agentID
            agentName = d.agentName
            title = d.title
            state = line.state.rawValue
            createdAt = Timestamp(d.createdAt)
            devices = line.devices.map { timeline in
                let device = known[timeline.deviceID]
                return DeviceState(deviceID: timeline.deviceID, deviceName: device?.name ?? timeline.deviceID,
                                   platform: device?.platform.rawValue ?? "", state: timeline.state.rawValue)
            }
            self.body = body ? d.body : nil
        }

        enum CodingKeys: String, CodingKey {
            case id, title, state, devices, body
            case agentID = "agent_id", agentName = "agent_name", createdAt = "created_at"
        }
    }

    struct LineDetail: Encodable {
        var delivery: LineView
        var devices: [DeviceSteps]
    }

    struct DeviceSteps: Encodable {
        var deviceID, deviceName, platform: String
        var timeline: [Step]

        init(_ timeline: DeviceTimeline, device: Device?) {
            deviceID = timeline.deviceID
            deviceName = device?.name ?? timeline.deviceID
            platform = device?.platform.rawValue ?? ""
            self.timeline = timeline.steps.map(Step.init)
        }

        enum CodingKeys: String, CodingKey { case platform, timeline, deviceID = "device_id", deviceName = "device_name" }
    }

    /// `{"at", "kind", "transport"?, "status"?, "reason"?, "service_id"?, "latency_ms"?, "next_attempt_at"?}`.
    struct Step: Encodable {
        var at: Timestamp
        var kind: String
        var transport: String?
        var status: Int?
        var reason: String?
        var serviceID: String?
        var latencyMS: Int64?
        var nextAttemptAt: Timestamp?

        init(_ event: DeliveryEvent) {
            at = Timestamp(event.at)
            kind = event.kind.rawValue
            transport = event.transport
            status = event.status
            reason = event.reason
            serviceID = event.serviceID
            latencyMS = event.latencyMilliseconds
            nextAttemptAt = event.nextAttemptAt.map(Timestamp.init)
        }

        enum CodingKeys: String, CodingKey {
            case at, kind, transport, status, reason
            case serviceID = "service_id", latencyMS = "latency_ms", nextAttemptAt = "next_attempt_at"
        }
    }
}
