import ChannelAPI
import ChannelTesting
import Foundation
import GatewayTestSupport
import APIKit
import Mobile
import SQLite
import Testing

/// The durable push outbox and its dispatcher, on a real SQLite file with the channel testing kit's transports.
@Suite("Push dispatcher")
struct PushDispatcherTests {
    static let token = String(repeating: "cd", count: 32)
    static let secret = "THE-AGENT-SAID-SOMETHING-PRIVATE"

    struct Fixture {
        let store: MobileStore
        let channel: MobileChannel
        let dispatcher: PushDispatcher
        let clock: ManualClock
        let path: String
    }

    static func fixture(transport: any WakeTransport, path: String? = nil, clock: ManualClock = ManualClock(Date())) throws -> Fixture {
        let file = path ?? TestGateway.makeTemporaryDirectory() + "/soulacy.db"
        let store = try MobileStore(database: try migratedDatabase(file), clock: clock)
        let dispatcher = PushDispatcher(store: store, transports: WakeTransportRegistry([transport]), clock: clock,
                                        policy: RetryPolicy(initialDelay: 10, maximumDelay: 600), log: Log(minimum: .error))
        return Fixture(store: store, channel: MobileChannel(store: store.inbox, dispatcher: dispatcher), dispatcher: dispatcher, clock: clock, path: file)
    }

    static func register(_ store: MobileStore, _ id: String, subject: String = "owner", token: String? = token, notifications: Bool = true, platform: String = "ios") throws {
        var body: [String: JSONValue] = ["id": .string(id), "notifications_enabled": .bool(notifications), "platform": .string(platform)]
        if let token { body["push_token"] = .string(token) }
        try store.devices.register(try DeviceRegistration(json: JSONObject(body)), subject: subject)
    }

    static func output(_ text: String = secret) -> Output {
        Output(agentID: "brief", agentName: "Brief", sessionID: "s1", parts: [text])
    }

    @Test("the delivery and its wake-ups commit together; no push for notifications off or no token, the line all the same")
    func sameTransaction() async throws {
        let recorder = RecordingTransport()
        let f = try Self.fixture(transport: recorder)
        try Self.register(f.store, "on")
        try Self.register(f.store, "off", notifications: false)
        try Self.register(f.store, "tokenless", token: nil)
        let receipt = try await f.channel.deliver(Self.output(), to: "all")
        #expect(receipt.recipientCount == 3)
        let rows = try await f.store.outbox.entries(deliveryID: receipt.deliveryID)
        #expect(rows.map(\.deviceID) == ["on"])
        #expect(rows.first?.state == .pending)
        for device in ["on", "off", "tokenless"] {
            #expect(try f.store.deliveries(subject: "owner", deviceID: device, before: nil, limit: 10).items.count == 1)
        }
        await f.dispatcher.drain()
        #expect(recorder.sent.map(\.target.deviceID) == ["on"])
        #expect(try await f.store.outbox.entries().first?.state == .sent)
    }

    @Test("the wake-up is generic: category, deep link, thread and delivery id; never the output")
    func genericPayload() async throws {
        let recorder = RecordingTransport()
        let f = try Self.fixture(transport: recorder)
        try Self.register(f.store, "on")
        let receipt = try await f.channel.deliver(Self.output(), to: "all")
        await f.dispatcher.drain()
        let signal = try #require(recorder.sent.first?.signal)
        #expect(signal.category == .delivery)
        #expect(signal.deepLink == "soulacy://delivery/\(receipt.deliveryID)")
        #expect(signal.deliveryID == receipt.deliveryID)
        #expect(signal.threadID == "delivery-brief")
        #expect(signal.wakeID != nil)
        let encoded = String(decoding: try JSONEncoder().encode(signal), as: UTF8.self)
        #expect(!encoded.contains(Self.secret))
        // Nor does the outbox keep the output: only the inbox line holds it.
        let raw = try f.store.database.read { db in try db.query("SELECT signal FROM mobile_push_outbox").compactMap { $0.string("signal") } }
        #expect(raw.allSatisfy { !$0.contains(Self.secret) })
    }

    @Test("retries back off exponentially, honour Retry-After, and an acknowledged wake-up is never sent again")
    func retries() async throws {
        let scripted = ScriptedTransport(script: [.retry(after: nil, reason: "503"), .retry(after: .seconds(300), reason: "429"), .delivered])
        let f = try Self.fixture(transport: scripted)
        try Self.register(f.store, "on")
        _ = try await f.channel.deliver(Self.output(), to: "all")

        await f.dispatcher.drain()
        var row = try #require(try await f.store.outbox.entries().first)
        #expect(row.state == .pending && row.attempts == 1)
        let first = row.nextAttemptAt.timeIntervalSince(f.clock.now())
        #expect(first >= 5 && first <= 10)  // upper half of the first 10 s step
        await f.dispatcher.drain()
        #expect(scripted.calls.count == 1)  // not due yet

        f.clock.advance(by: .seconds(11))
        await f.dispatcher.drain()
        row = try #require(try await f.store.outbox.entries().first)
        #expect(row.attempts == 2)
        #expect(row.nextAttemptAt.timeIntervalSince(f.clock.now()) >= 299.99)  // Retry-After (stored to the millisecond) wins over the 20 s step

        f.clock.advance(by: .seconds(301))
        await f.dispatcher.drain()
        row = try #require(try await f.store.outbox.entries().first)
        #expect(row.state == .sent && row.attempts == 3 && row.transport == "scripted")
        f.clock.advance(by: .seconds(3600))
        await f.dispatcher.drain()
        #expect(scripted.calls.count == 3)
    }

    @Test("a rejected token is cleared until the app registers a fresh one; other pending wake-ups for it are skipped")
    func tokenRejected() async throws {
        let scripted = ScriptedTransport(script: [.tokenRejected(reason: "APNs 410 Unregistered")])
        let f = try Self.fixture(transport: scripted)
        try Self.register(f.store, "phone")
        _ = try await f.channel.deliver(Self.output(), to: "all")
        await f.dispatcher.drain()
        #expect(try f.store.devices.device(id: "phone")?.pushToken == nil)
        #expect(try await f.store.outbox.entries().first?.state == .failed)

        // No token: the next line is stored and no wake-up is queued.
        let second = try await f.channel.deliver(Self.output("two"), to: "all")
        #expect(try await f.store.outbox.entries(deliveryID: second.deliveryID).isEmpty)
        // A fresh registration brings pushes back.
        let fresh = String(repeating: "ef", count: 32)
        try Self.register(f.store, "phone", token: fresh)
        _ = try await f.channel.deliver(Self.output("three"), to: "all")
        await f.dispatcher.drain()
        #expect(scripted.calls.last?.target.pushToken == fresh)
        #expect(try f.store.devices.device(id: "phone")?.pushToken == fresh)
    }

    @Test("a rejection for an old token leaves a token registered meanwhile alone")
    func staleRejection() async throws {
        let gate = HoldingTransport()
        let f = try Self.fixture(transport: gate)
        try Self.register(f.store, "phone")
        _ = try await f.channel.deliver(Self.output(), to: "all")
        let sending = Task { await f.dispatcher.drain() }
        #expect(await eventually { gate.heldCount == 1 })
        let fresh = String(repeating: "12", count: 32)
        try Self.register(f.store, "phone", token: fresh)  // the app re-registers while the push is in flight
        gate.answerHeld(with: .tokenRejected(reason: "APNs 410 Unregistered"))
        await sending.value
        #expect(try f.store.devices.device(id: "phone")?.pushToken == fresh)
    }

    @Test("permanent failures and expiry are recorded, and no transport for a platform skips without losing the line")
    func failuresAndSkips() async throws {
        let scripted = ScriptedTransport(platforms: [.ios], script: [.failed(reason: "APNs 400 BadTopic")])
        let f = try Self.fixture(transport: scripted)
        try Self.register(f.store, "ios")
        try Self.register(f.store, "droid", token: "fcm:token", platform: "android")
        let receipt = try await f.channel.deliver(Self.output(), to: "all")
        await f.dispatcher.drain()
        let rows = try await f.store.outbox.entries(deliveryID: receipt.deliveryID)
        #expect(rows.first { $0.deviceID == "ios" }?.state == .failed)
        #expect(rows.first { $0.deviceID == "ios" }?.outcome == "APNs 400 BadTopic")
        #expect(rows.first { $0.deviceID == "droid" }?.state == .skipped)
        #expect(try f.store.deliveries(subject: "owner", deviceID: "droid", before: nil, limit: 5).items.count == 1)

        // A wake-up that cannot get through within its lifetime is recorded as given up.
        let always = ScriptedTransport(fallback: .retry(after: nil, reason: "down"))
        let g = try Self.fixture(transport: always)
        try Self.register(g.store, "ios")
        _ = try await g.channel.deliver(Self.output(), to: "all")
        for _ in 0..<40 {
            await g.dispatcher.drain()
            g.clock.advance(by: .seconds(3600))
        }
        #expect(try await g.store.outbox.entries().first?.state == .failed)
    }

    @Test("wake-ups answered together are settled in shared commits, off the cooperative pool (not one fsync each)")
    func settlesShareCommits() async throws {
        let phones = 40
        let held = HoldingTransport()
        let f = try Self.fixture(transport: held)
        for i in 0..<phones { try Self.register(f.store, "phone-\(i)") }
        _ = try await f.channel.deliver(Self.output(), to: "all")
        let before = f.store.database.changeGeneration
        let dispatching = Task { await f.dispatcher.dispatchDue() }
        #expect(await eventually { held.heldCount == phones })
        held.answerHeld()
        #expect(await dispatching.value == phones)
        let commits = f.store.database.changeGeneration - before
        #expect(try await f.store.outbox.entries().allSatisfy { $0.state == .sent })
        // One for the claim, then the 40 settles in a few group commits (40 alone, each with its fsync, before).
        #expect(commits <= 12, "\(commits) commits for \(phones) settles")
    }

    @Test("two dispatchers on one database send each wake-up exactly once (leases)")
    func leases() async throws {
        let recorder = RecordingTransport()
        let f = try Self.fixture(transport: recorder)
        let second = try Self.fixture(transport: recorder, path: f.path, clock: f.clock)
        for i in 0..<5 { try Self.register(f.store, "d\(i)", token: String(repeating: String(i), count: 64)) }
        for i in 0..<40 { _ = try await f.channel.deliver(Self.output("n\(i)"), to: "all") }
        async let a: Void = f.dispatcher.drain()
        async let b: Void = second.dispatcher.drain()
        _ = await (a, b)
        let wakeIDs = recorder.sent.compactMap(\.signal.wakeID)
        #expect(wakeIDs.count == 200)
        #expect(Set(wakeIDs).count == 200)
        #expect(try await f.store.outbox.counts() == [.sent: 200])
    }

    @Test("leases left by a process that died are released on start")
    func abandonedLeases() async throws {
        let recorder = RecordingTransport()
        let f = try Self.fixture(transport: recorder)
        try Self.register(f.store, "on")
        _ = try await f.channel.deliver(Self.output(), to: "all")
        // A lease held by a process id that does not exist on this host.
        let host = PushDispatcher.leaseOwnerName().split(separator: "|")[0]
        _ = try await f.store.outbox.claimDue(owner: "\(host)|999999|dead", now: f.clock.now(), lease: 3600, limit: 10)
        await f.dispatcher.drain()
        #expect(recorder.sent.isEmpty)
        #expect(try await f.store.outbox.releaseAbandonedLeases(ownOwner: f.dispatcher.owner) == 1)
        await f.dispatcher.drain()
        #expect(recorder.sent.count == 1)
    }
}

/// A transport whose answer the test gives while the send is in flight.
@Suite("Outbox encoding")
struct OutboxEncodingTests {
    @Test("the hand-written signal JSON reads back as the same WakeSignal through JSONDecoder")
    func roundTrip() throws {
        var signal = WakeSignal(kind: .background, category: .approval, title: "T \"q\"", body: "B\nline", deepLink: "soulacy://approval/c1",
                                threadID: "t", timeSensitive: true, deliveryID: "dlv_1", extra: ["tool": "pay", "é": "ü"],
                                priority: .low, expiresAt: Date(timeIntervalSince1970: 1_800_000_000.5), collapseID: "c1")
        signal.wakeID = nil
        let text = try OutboxText.encode(signal)
        #expect(try JSONDecoder().decode(WakeSignal.self, from: Data(text.utf8)) == signal)
        let plain = WakeSignal.delivery(id: "dlv_2", agentID: "a")
        #expect(try JSONDecoder().decode(WakeSignal.self, from: Data(try OutboxText.encode(plain).utf8)) == plain)
    }

    @Test("the claim reads what the outbox writes directly, as JSONDecoder reads it; other JSON goes to the decoder")
    func canonicalReading() throws {
        var random = SystemRandomNumberGenerator()
        let words = ["a", "\"", "\\", "/", "\n", "\u{1}", "é", "😀", "{", ":", ","]
        func text() -> String { (0..<Int.random(in: 0...6, using: &random)).map { _ in words.randomElement(using: &random)! }.joined() }
        let expiries: [Date?] = [nil, Date(timeIntervalSince1970: 1_800_000_000), Date(timeIntervalSince1970: 1_800_000_000.123456),
                                 Date(timeIntervalSinceReferenceDate: -1.5), Date(timeIntervalSinceReferenceDate: 1e17), Date(timeIntervalSinceReferenceDate: 3e-7)]
        for expiresAt in expiries {
            for _ in 0..<100 {
                let signal = WakeSignal(kind: [.alert, .background, .liveActivity].randomElement(using: &random)!, category: WakeSignal.Category(rawValue: text()),
                                        title: text(), body: text(), deepLink: text(), threadID: text(), timeSensitive: Bool.random(using: &random),
                                        deliveryID: Bool.random(using: &random) ? text() : nil, extra: Dictionary((0..<3).map { _ in (text(), text()) }, uniquingKeysWith: { a, _ in a }),
                                        priority: Bool.random(using: &random) ? .high : .low, expiresAt: expiresAt,
                                        collapseID: Bool.random(using: &random) ? text() : nil)
                let stored = try OutboxText.encode(signal)
                #expect(OutboxText.canonicalSignal(from: stored) == signal, "\(stored)")
                #expect(try JSONDecoder().decode(WakeSignal.self, from: Data(stored.utf8)) == signal)
            }
        }
        // Written by JSONEncoder (an earlier version's rows): the decoder reads it.
        let plain = WakeSignal.delivery(id: "dlv/3", agentID: "a")
        let encoded = String(decoding: try JSONEncoder().encode(plain), as: UTF8.self)
        #expect(OutboxText.canonicalSignal(from: encoded) == nil && OutboxText.decode(encoded) == plain)
        // Neither reads a priority or kind WakeSignal does not know, a key twice, or a document cut short.
        let good = try OutboxText.encode(plain)
        #expect(OutboxText.canonicalSignal(from: good) == plain)
        for bad in [good.replacingOccurrences(of: "\"priority\":10", with: "\"priority\":7"),
                    good.replacingOccurrences(of: "\"priority\":10", with: "\"priority\":10.5"),
                    good.replacingOccurrences(of: "\"kind\":\"alert\"", with: "\"kind\":\"loud\""),
                    good.replacingOccurrences(of: "\"body\":", with: "\"title\":\"x\",\"body\":"),
                    good.replacingOccurrences(of: "\"timeSensitive\":false", with: "\"timeSensitive\":fals"),
                    good.replacingOccurrences(of: "\"priority\":10", with: "\"priority\":-"), String(good.dropLast())] {
            #expect(bad != good && OutboxText.canonicalSignal(from: bad) == nil, "\(bad)")
        }
    }
}
