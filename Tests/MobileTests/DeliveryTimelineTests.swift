import ChannelAPI
import ChannelTesting
import Foundation
import GatewayTestSupport
import APIKit
import Mobile
import SQLite
import Testing

/// "Where did my notification get stuck?": each line's path to each phone through the gateway's console routes,
/// driven end to end through the real HTTP API and the APNs stand-in.
@Suite("Delivery timelines", .serialized)
struct DeliveryTimelineTests {
    static let token = String(repeating: "7c", count: 32)
    static let quickRetries = RetryPolicy(initialDelay: 0.2, maximumDelay: 1)

    /// A line for the owner's phones through the channel's test route; its id.
    static func sendLine(_ gw: TestGateway, to: String = "user:owner") async throws -> String {
        let sent = try await gw.request("POST", "/api/v1/channels/mobile/test", json: ["to": .string(to)])
        guard sent.status == 201, let id = sent.json["delivery_id"]?.stringValue else { throw TestFailure("no line: \(sent.status) \(sent.text)") }
        return id
    }

    static func detail(_ gw: TestGateway, _ id: String, key: String? = nil) async throws -> TestResponse {
        try await gw.request("GET", "/api/v1/console/deliveries/\(id)", key: .some(key))
    }

    /// One phone's timeline of a line, as the console reads it.
    static func timeline(_ gw: TestGateway, _ id: String, device: String = "phone") async throws -> [JSONValue] {
        let devices = try await detail(gw, id).json["devices"]?.arrayValue ?? []
        return devices.first { $0["device_id"]?.stringValue == device }?["timeline"]?.arrayValue ?? []
    }

    static func kinds(_ steps: [JSONValue]) -> [String] { steps.compactMap { $0["kind"]?.stringValue } }

    /// An answer's RFC 3339 time (with milliseconds, as every route writes one).
    static func date(_ value: JSONValue?) -> Date? {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return value?.stringValue.flatMap(formatter.date(from:))
    }

    /// Waits until every wake-up of the line is settled (the dispatcher's own loop may hold one mid-attempt).
    static func settled(_ gw: TestGateway, _ id: String) async throws -> Bool {
        try await eventually { try await gw.gateway.mobileStore.outbox.entries(deliveryID: id).allSatisfy { $0.state != .pending } }
    }

    static func outboxState(_ gw: TestGateway, _ id: String) async throws -> OutboxEntry.State? {
        try await gw.gateway.mobileStore.outbox.entries(deliveryID: id).first?.state
    }

    @Test("through APNs: stored → queued (apns) → attempt (200, its apns-id, latency) → sent → fetched → read")
    func happyPath() async throws {
        let standIn = try await APNsStandIn.start()
        defer { standIn.stop() }
        try await withTestGateway(environment: standIn.environment, retryPolicy: Self.quickRetries) { (gw) async throws in
            try await gw.registerDevice(id: "phone", key: nil, token: Self.token)
            let id = try await Self.sendLine(gw)
            #expect(try await eventually { try await Self.outboxState(gw, id) == .sent })
            #expect(Self.kinds(try await Self.timeline(gw, id)) == ["stored", "queued", "attempt", "sent"])
            let listed = try await gw.request("GET", "/api/v1/console/deliveries").json["deliveries"]?.arrayValue?.first
            #expect(listed?["id"]?.stringValue == id && listed?["state"] == "sent" && listed?["devices"]?[0]?["state"] == "sent")

            // The phone reads its inbox (the hot route): the fetched step is written a moment later, in the background.
            #expect(try await gw.request("GET", "/api/v1/mobile/deliveries?device_id=phone").status == 200)
            #expect(try await eventually { Self.kinds(try await Self.timeline(gw, id)).last == "fetched" })
            #expect(try await gw.request("POST", "/api/v1/mobile/deliveries/\(id)/read", json: ["device_id": "phone"]).status == 200)

            let answer = try await Self.detail(gw, id)
            #expect(answer.status == 200)
            #expect(answer.json["delivery"]?["id"]?.stringValue == id && answer.json["delivery"]?["body"] == "The mobile channel works.")
            #expect(answer.json["delivery"]?["state"] == "read")
            let device = try #require(answer.json["devices"]?.arrayValue?.first)
            #expect(device["device_name"] == "Phone phone" && device["platform"] == "ios")
            let steps = device["timeline"]?.arrayValue ?? []
            #expect(Self.kinds(steps) == ["stored", "queued", "attempt", "sent", "fetched", "read"])
            #expect(steps[1]["transport"] == "apns")
            let attempt = steps[2]
            let sentRequest = try #require(try await standIn.requests().first)
            let apnsID = try #require(sentRequest["headers"]?["apns-id"]?.stringValue)
            #expect(attempt["status"] == 200 && attempt["transport"] == "apns")
            #expect(attempt["service_id"]?.stringValue == apnsID)
            #expect((attempt["latency_ms"]?.numberValue ?? -1) >= 0)
            #expect(attempt["reason"]?.stringValue == nil)
            // Times go in order, each an RFC 3339 string.
            let times = steps.compactMap { $0["at"]?.stringValue }
            #expect(times.count == 6 && times == times.sorted() && times.allSatisfy { $0.hasSuffix("Z") })
            #expect(try await gw.request("GET", "/api/v1/console/deliveries?state=read").json["deliveries"]?.arrayValue?.count == 1)
            #expect(try await gw.request("GET", "/api/v1/console/deliveries?state=sent").json["deliveries"]?.arrayValue?.isEmpty == true)
        }
    }

    @Test("storing a line writes no timeline row for a phone it wakes; the pending wake-up reads as queued; its first settle records it")
    func storeWritesNothingExtra() async throws {
        let recorder = RecordingTransport(name: "recording")
        let f = try PushDispatcherTests.fixture(transport: recorder)
        try PushDispatcherTests.register(f.store, "on")
        try PushDispatcherTests.register(f.store, "tokenless", token: nil)
        let receipt = try await f.channel.deliver(PushDispatcherTests.output(), to: "all")
        let rows = try f.store.database.read { db in try db.query("SELECT kind, device_id, reason FROM mobile_delivery_events") }
        #expect(rows.map { [$0.string("kind"), $0.string("device_id"), $0.string("reason")] } == [["skipped", "tokenless", "no push token"]])
        let line = try #require(try f.store.delivery(id: receipt.deliveryID, subject: "owner", deviceID: nil))
        let devices = Dictionary(uniqueKeysWithValues: try f.store.devices.list(subject: "owner").map { ($0.id, $0.createdAt) })
        let before = try #require(try await f.store.storage.timelines.consoleTimelines([line], devices: devices).first)
        #expect(before.devices.map(\.deviceID) == ["on", "tokenless"])
        #expect(before.devices[0].steps.map(\.kind) == [.stored, .queued] && before.devices[0].state == .queued)
        #expect(before.devices[1].steps.map(\.kind) == [.stored, .skipped] && before.state == .skipped)
        await f.dispatcher.drain()
        let after = try #require(try await f.store.storage.timelines.consoleTimelines([line], devices: devices).first)
        #expect(after.devices[0].steps.map(\.kind) == [.stored, .queued, .attempt, .sent])
        #expect(after.devices[0].steps[1].transport == "recording" && after.devices[0].steps[1].at == before.devices[0].steps[1].at)
    }

    @Test("a 410 Unregistered is an attempt and token_rejected; the device shows its token cleared and why")
    func tokenRejected() async throws {
        let standIn = try await APNsStandIn.start()
        defer { standIn.stop() }
        try await withTestGateway(environment: standIn.environment, retryPolicy: Self.quickRetries) { (gw) async throws in
            try await gw.registerDevice(id: "phone", key: nil, token: Self.token)
            try await standIn.control("POST", "/control/unregister", json: ["token": .string(Self.token)])
            let id = try await Self.sendLine(gw)
            #expect(try await eventually { try await Self.outboxState(gw, id) == .failed })
            let steps = try await Self.timeline(gw, id)
            #expect(Self.kinds(steps) == ["stored", "queued", "attempt", "token_rejected"])
            #expect(steps[2]["status"] == 410 && steps[2]["reason"] == "Unregistered")
            #expect(steps[3]["reason"]?.stringValue?.contains("Unregistered") == true)
            #expect(try await Self.detail(gw, id).json["delivery"]?["state"] == "token_rejected")

            let device = try #require(try await gw.request("GET", "/api/v1/console/devices").json["devices"]?.arrayValue?.first)
            #expect(device["id"] == "phone" && device["token"] == "cleared")
            #expect(device["token_cleared_reason"]?.stringValue?.contains("410 Unregistered") == true)
            #expect(device["last_wake"]?["outcome"] == "token_rejected" && device["last_wake"]?["status"] == 410)
            #expect(device["last_wake"]?["transport"] == "apns")

            // The next line gets no wake-up at all: its timeline says so.
            let next = try await Self.sendLine(gw)
            let skipped = try await Self.timeline(gw, next)
            #expect(Self.kinds(skipped) == ["stored", "skipped"])
            #expect(skipped.last?["reason"] == "no push token")
            // Registering a fresh token makes it present again.
            try await gw.registerDevice(id: "phone", key: nil, token: String(repeating: "8d", count: 32))
            #expect(try await gw.request("GET", "/api/v1/console/devices").json["devices"]?[0]?["token"] == "present")
        }
    }

    @Test("429 with Retry-After is an attempt and retry_scheduled (next attempt at); a 500 retries too, then it is sent")
    func retries() async throws {
        let standIn = try await APNsStandIn.start()
        defer { standIn.stop() }
        try await withTestGateway(environment: standIn.environment, retryPolicy: Self.quickRetries) { (gw) async throws in
            try await gw.registerDevice(id: "phone", key: nil, token: Self.token)
            try await standIn.script([["status": 429, "reason": "TooManyRequests", "retry_after": 30]])
            let waiting = try await Self.sendLine(gw)
            #expect(try await eventually { Self.kinds(try await Self.timeline(gw, waiting)).last == "retry_scheduled" })
            let steps = try await Self.timeline(gw, waiting)
            #expect(Self.kinds(steps) == ["stored", "queued", "attempt", "retry_scheduled"])
            #expect(steps[2]["status"] == 429 && steps[2]["reason"] == "TooManyRequests")
            let at = try #require(Self.date(steps[3]["at"]))
            let next = try #require(Self.date(steps[3]["next_attempt_at"]))
            #expect(next.timeIntervalSince(at) >= 29)
            #expect(try await Self.detail(gw, waiting).json["delivery"]?["state"] == "retrying")
            let retrying = try await gw.request("GET", "/api/v1/console/deliveries?state=retrying&device=phone").json["deliveries"]?.arrayValue ?? []
            #expect(retrying.map { $0["id"]?.stringValue } == [waiting])

            try await standIn.script([["status": 500, "reason": "InternalServerError"]])
            let id = try await Self.sendLine(gw)
            #expect(try await eventually { try await Self.outboxState(gw, id) == .sent })
            let path = try await Self.timeline(gw, id)
            #expect(Self.kinds(path) == ["stored", "queued", "attempt", "retry_scheduled", "attempt", "sent"])
            #expect(path[2]["status"] == 500 && path[2]["reason"] == "InternalServerError" && path[4]["status"] == 200)
            #expect(path[3]["next_attempt_at"]?.stringValue != nil)
        }
    }

    @Test("scoping: another person's line is 404, their device is no filter, and each sees only their own phones")
    func scoping() async throws {
        try await withTestGateway { (gw) async throws in
            try await gw.registerDevice(id: "phone", key: nil, token: Self.token)
            let priya = try await gw.mintKey(subject: "priya", role: "operator")
            try await gw.registerDevice(id: "priya-phone", key: priya, token: String(repeating: "1e", count: 32))
            let owners = try await Self.sendLine(gw, to: "user:owner")
            let hers = try await Self.sendLine(gw, to: "user:priya")
            let everyone = try await Self.sendLine(gw, to: "all")

            #expect(try await Self.detail(gw, owners, key: priya).status == 404)
            #expect(try await Self.detail(gw, owners, key: priya).errorCode == "not_found")
            #expect(try await Self.detail(gw, "dlv_nothing", key: priya).status == 404)
            let listed = try await gw.request("GET", "/api/v1/console/deliveries", key: .some(priya)).json["deliveries"]?.arrayValue ?? []
            #expect(listed.compactMap { $0["id"]?.stringValue } == [everyone, hers])
            // A line to everyone shows each person only their own phones.
            let shared = try await Self.detail(gw, everyone, key: priya).json
            #expect(shared["devices"]?.arrayValue?.compactMap { $0["device_id"]?.stringValue } == ["priya-phone"])
            #expect(try await Self.detail(gw, everyone).json["devices"]?.arrayValue?.compactMap { $0["device_id"]?.stringValue } == ["phone"])
            let byDevice = try await gw.request("GET", "/api/v1/console/deliveries?device=phone", key: .some(priya))
            #expect(byDevice.status == 404 && byDevice.errorField == "device")
            #expect(try await gw.request("GET", "/api/v1/console/deliveries?q=\(owners)", key: .some(priya)).json["deliveries"]?.arrayValue?.isEmpty == true)
            #expect(try await gw.request("GET", "/api/v1/console/deliveries?q=\(String(owners.prefix(12)))").json["deliveries"]?.arrayValue?
                .contains { $0["id"]?.stringValue == owners } == true)

            // Devices: a person's own; an admin's view is every phone.
            let hersOnly = try await gw.request("GET", "/api/v1/console/devices", key: .some(priya)).json["devices"]?.arrayValue ?? []
            #expect(hersOnly.compactMap { $0["id"]?.stringValue } == ["priya-phone"])
            let all = try await gw.request("GET", "/api/v1/console/devices").json["devices"]?.arrayValue ?? []
            #expect(Set(all.compactMap { $0["id"]?.stringValue }) == ["phone", "priya-phone"])
            #expect(all.first { $0["id"] == "priya-phone" }?["subject"] == "priya")
            // A test push only to one's own phone; a viewer may not send one at all.
            let foreign = try await gw.request("POST", "/api/v1/console/devices/phone/test-push", key: .some(priya))
            #expect(foreign.status == 404 && foreign.errorCode == "not_found")
            let sam = try await gw.mintKey(subject: "sam", role: "viewer")
            #expect(try await gw.request("POST", "/api/v1/console/devices/phone/test-push", key: .some(sam)).status == 403)
            // A device id used again by someone else does not bring them the earlier registration's steps.
            try await gw.registerDevice(id: "old-phone", key: nil, token: String(repeating: "2f", count: 32))
            let before = try await Self.sendLine(gw, to: "all")
            #expect(try await Self.settled(gw, before))
            #expect(Self.kinds(try await Self.timeline(gw, before, device: "old-phone")) == ["stored", "queued", "skipped"])
            #expect(try await gw.request("DELETE", "/api/v1/mobile/devices/old-phone").status == 204)
            try await Task.sleep(for: .milliseconds(5))
            try await gw.registerDevice(id: "old-phone", key: priya, token: String(repeating: "3a", count: 32))
            let reused = try await Self.detail(gw, before, key: priya).json["devices"]?.arrayValue?.compactMap { $0["device_id"]?.stringValue }
            #expect(reused == ["priya-phone"])
            // Bad filters are refused naming the field.
            for (query, field) in [("state=lost", "state"), ("limit=0", "limit"), ("limit=101", "limit"), ("before=-3", "before"), ("agent=a%01b", "agent")] {
                let refused = try await gw.request("GET", "/api/v1/console/deliveries?\(query)")
                #expect(refused.status == 400 && refused.errorField == field, "\(query): \(refused.text)")
            }
        }
    }

    @Test("filters and paging: agent, state, q, limit and next_before walk every line once")
    func paging() async throws {
        try await withTestGateway { (gw) async throws in
            try await gw.registerDevice(id: "phone", key: nil, token: Self.token)
            var ids: [String] = []
            for _ in 0..<5 { ids.append(try await Self.sendLine(gw)) }
            var seen: [String] = []
            var before: String?
            repeat {
                let page = try await gw.request("GET", "/api/v1/console/deliveries?limit=2" + (before.map { "&before=\($0)" } ?? "")).json
                seen += page["deliveries"]?.arrayValue?.compactMap { $0["id"]?.stringValue } ?? []
                before = page["next_before"]?.stringValue
            } while before != nil && seen.count < 10
            #expect(seen == ids.reversed())
            #expect(try await gw.request("GET", "/api/v1/console/deliveries?agent=mobile-test").json["deliveries"]?.arrayValue?.count == 5)
            #expect(try await gw.request("GET", "/api/v1/console/deliveries?agent=echo").json["deliveries"]?.arrayValue?.isEmpty == true)
            // No push service here: every wake-up is skipped, and the line says so.
            for id in ids { #expect(try await Self.settled(gw, id)) }
            #expect(try await gw.request("GET", "/api/v1/console/deliveries?state=skipped&limit=100").json["deliveries"]?.arrayValue?.count == 5)
            #expect(try await gw.request("GET", "/api/v1/console/deliveries?q=\(ids[2])").json["deliveries"]?.arrayValue?
                .compactMap { $0["id"]?.stringValue } == [ids[2]])
        }
    }

    @Test("fetched is recorded once per phone and line, a whole page in one background transaction")
    func fetchedOnceBatched() async throws {
        try await withTestGateway { (gw) async throws in
            try await gw.registerDevice(id: "phone", key: nil, token: Self.token)
            var ids: [String] = []
            for _ in 0..<5 { ids.append(try await Self.sendLine(gw)) }
            let fetches = gw.gateway.mobileStore.fetches
            let database = gw.gateway.mobileStore.database
            @Sendable func fetchedRows() throws -> Int {
                try database.read { Int(try $0.query("SELECT COUNT(*) AS n FROM mobile_delivery_events WHERE kind = 'fetched'").first?.int("n") ?? 0) }
            }
            let flushesBefore = fetches.flushCount
            #expect(try await gw.request("GET", "/api/v1/mobile/deliveries?device_id=phone").json["deliveries"]?.arrayValue?.count == 5)
            // Noted in memory by the answer itself and written afterwards, the whole page in one flush (a loaded
            // machine may have flushed already by the time this looks).
            let pending = fetches.pendingCount
            let rows = try fetchedRows()
            #expect((pending == 5 && rows == 0) || (pending == 0 && rows == 5), "pending \(pending), rows \(rows)")
            #expect(try await eventually { try fetchedRows() == 5 })
            // The count goes up just after the commit that made the rows visible.
            #expect(await eventually { fetches.flushCount == flushesBefore + 1 })
            // Reading again (the list, a single line, a cached page) notes nothing more and writes nothing more.
            for _ in 0..<3 { _ = try await gw.request("GET", "/api/v1/mobile/deliveries?device_id=phone") }
            _ = try await gw.request("GET", "/api/v1/mobile/deliveries/\(ids[0])?device_id=phone")
            #expect(fetches.pendingCount == 0)
            await fetches.flush()
            #expect(fetches.flushCount == flushesBefore + 1)
            #expect(try fetchedRows() == 5)
            // The caller's feed across phones is no phone's fetch.
            let tablet = "tablet"
            try await gw.registerDevice(id: tablet, key: nil)
            _ = try await gw.request("GET", "/api/v1/mobile/deliveries")
            #expect(fetches.pendingCount == 0)
            // A second phone fetching one line records its own step, once.
            _ = try await gw.request("GET", "/api/v1/mobile/deliveries/\(ids[1])?device_id=\(tablet)")
            _ = try await gw.request("GET", "/api/v1/mobile/deliveries/\(ids[1])?device_id=\(tablet)")
            await fetches.flush()
            #expect(try fetchedRows() == 6)
            #expect(Self.kinds(try await Self.timeline(gw, ids[1], device: tablet)) == ["stored", "fetched"])
        }
    }

    @Test("a test push answers with the service's own answer, and a rejected token is cleared as the outbox clears it")
    func testPush() async throws {
        let standIn = try await APNsStandIn.start()
        defer { standIn.stop() }
        try await withTestGateway(environment: standIn.environment) { (gw) async throws in
            try await gw.registerDevice(id: "phone", key: nil, token: Self.token)
            let answer = try await gw.request("POST", "/api/v1/console/devices/phone/test-push")
            #expect(answer.status == 200, "\(answer.text)")
            #expect(answer.json["outcome"] == "delivered" && answer.json["transport"] == "apns" && answer.json["status"] == 200)
            let received = try #require(try await standIn.requests().first)
            #expect(answer.json["service_id"]?.stringValue == received["headers"]?["apns-id"]?.stringValue)
            #expect((answer.json["latency_ms"]?.numberValue ?? -1) >= 0)
            // Generic words only; no line was written for it.
            #expect(received["body"]?.stringValue?.contains("A test notification from your gateway.") == true)
            #expect(try await gw.gateway.mobileStore.outbox.entries().isEmpty)
            let device = try #require(try await gw.request("GET", "/api/v1/console/devices").json["devices"]?.arrayValue?.first)
            #expect(device["last_wake"]?["outcome"] == "delivered" && device["last_wake"]?["status"] == 200)

            try await standIn.control("POST", "/control/unregister", json: ["token": .string(Self.token)])
            let rejected = try await gw.request("POST", "/api/v1/console/devices/phone/test-push")
            #expect(rejected.json["outcome"] == "token_rejected" && rejected.json["status"] == 410 && rejected.json["reason"] == "Unregistered")
            let cleared = try #require(try await gw.request("GET", "/api/v1/console/devices").json["devices"]?.arrayValue?.first)
            #expect(cleared["token"] == "cleared" && cleared["token_cleared_reason"]?.stringValue?.contains("Unregistered") == true)
            let none = try await gw.request("POST", "/api/v1/console/devices/phone/test-push")
            #expect(none.status == 409 && none.errorCode == "no_push_token" && none.errorField == "id")
        }
    }

    @Test("without a push service for the platform, a test push is 409 no_transport; Live Activity tokens are counted")
    func noTransport() async throws {
        try await withTestGateway { (gw) async throws in
            try await gw.registerDevice(id: "phone", key: nil, token: Self.token)
            let refused = try await gw.request("POST", "/api/v1/console/devices/phone/test-push")
            #expect(refused.status == 409 && refused.errorCode == "no_transport")
            let activity = try await gw.request("POST", "/api/v1/mobile/activities", json: [
                "device_id": "phone", "agent_id": "echo", "session_id": "s1", "token": .string(String(repeating: "ab", count: 40)),
            ])
            #expect(activity.status == 201, "\(activity.text)")
            let device = try #require(try await gw.request("GET", "/api/v1/console/devices").json["devices"]?.arrayValue?.first)
            #expect(device["live_activity_tokens"] == 1 && device["last_wake"] == .null && device["token"] == "present")
            #expect(device["environment"] == "production" && device["notifications_enabled"] == true && device["platform"] == "ios")
        }
    }
}
