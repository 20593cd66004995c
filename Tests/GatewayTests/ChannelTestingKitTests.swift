import APNs
import ChannelAPI
import ChannelTesting
import Foundation
import Testing

/// The kit itself: its conformance suite catches a broken transport, and APNs reasons map as documented.
@Suite("Channel testing kit")
struct ChannelTestingKitTests {
    static let target = WakeTarget(deviceID: "d", platform: .ios, pushToken: "tok", environment: .production, bundleID: "dev.soulacy.ios")
    static let android = WakeTarget(deviceID: "a", platform: .android, pushToken: "tok", environment: .production, bundleID: "dev.soulacy.android")

    /// Claims every device, even without a token, and fails every fourth send.
    final class SloppyTransport: WakeTransport, @unchecked Sendable {
        let name = "sloppy one"
        let lock = NSLock()
        var n = 0
        func canWake(_ target: WakeTarget) -> Bool { true }
        func send(_ signal: WakeSignal, to target: WakeTarget) async -> WakeOutcome {
            let count = lock.withLock { n += 1; return n }
            return count % 4 == 0 ? .failed(reason: "flaky") : .delivered
        }
    }

    @Test("the conformance suite passes a correct transport and names every rule a sloppy one breaks")
    func conformance() async {
        let good = await WakeTransportConformance(transport: RecordingTransport(platforms: [.ios]), acceptedTarget: Self.target, foreignTarget: Self.android).run()
        #expect(good.isEmpty)
        let bad = await WakeTransportConformance(transport: SloppyTransport(), acceptedTarget: Self.target, foreignTarget: Self.android).run()
        let rules = bad.map(\.rule)
        #expect(rules.contains("name"))
        #expect(rules.filter { $0 == "canWake" }.count == 2)
        #expect(rules.contains("concurrent sends"))
    }

    @Test("the scripted transport answers in order, then with its fallback")
    func scripted() async {
        let t = ScriptedTransport(script: [.retry(after: .seconds(1), reason: "a")], fallback: .failed(reason: "b"))
        t.enqueue(.delivered)
        let s = WakeSignal.delivery(id: "x", agentID: "y")
        #expect(await t.send(s, to: Self.target) == .retry(after: .seconds(1), reason: "a"))
        #expect(await t.send(s, to: Self.target) == .delivered)
        #expect(await t.send(s, to: Self.target) == .failed(reason: "b"))
        #expect(t.calls.count == 3)
    }

    @Test("the memory log handler keeps each record at or above the level, with its metadata in the printed line")
    func memoryLog() {
        let memory = MemoryLogHandler()
        let log = Log(minimum: .info, handler: memory).with("run", "run_1").with("agent", "brief")
        log.debug("not kept")
        log.warning("kept")
        #expect(memory.records.map(\.message) == ["kept"] && memory.records.first?.level == .warning)
        #expect(memory.records.first?.metadata == ["run": "run_1", "agent": "brief"])
        #expect(memory.lines.first?.hasSuffix("warning kept agent=brief run=run_1") == true, "\(memory.lines)")
    }

    @Test("the manual clock wakes sleepers only when advanced past their deadline")
    func manualClock() async throws {
        let clock = ManualClock(Date(timeIntervalSince1970: 1000))
        let woke = Task { try await clock.sleep(until: Date(timeIntervalSince1970: 1060)); return clock.now() }
        while clock.sleeperCount == 0 { await Task.yield() }
        clock.advance(by: .seconds(30))
        #expect(clock.sleeperCount == 1)
        clock.advance(by: .seconds(30))
        #expect(try await woke.value == Date(timeIntervalSince1970: 1060))
    }

    @Test("every documented APNs reason maps to the action Apple's documentation implies", arguments: [
        ("BadDeviceToken", 400, APNsReason.Action.tokenRejected), ("Unregistered", 410, .tokenRejected), ("ExpiredToken", 410, .tokenRejected),
        ("DeviceTokenNotForTopic", 400, .tokenRejected),
        ("ExpiredProviderToken", 403, .renewProviderToken), ("InvalidProviderToken", 403, .renewProviderToken), ("MissingProviderToken", 403, .renewProviderToken),
        ("TooManyRequests", 429, .retry), ("TooManyProviderTokenUpdates", 429, .retry), ("InternalServerError", 500, .retry),
        ("ServiceUnavailable", 503, .retry), ("Shutdown", 503, .retry), ("IdleTimeout", 400, .retry),
        ("BadCollapseId", 400, .permanentFailure), ("BadExpirationDate", 400, .permanentFailure), ("BadMessageId", 400, .permanentFailure),
        ("BadPriority", 400, .permanentFailure), ("BadTopic", 400, .permanentFailure), ("DuplicateHeaders", 400, .permanentFailure),
        ("InvalidPushType", 400, .permanentFailure), ("MissingDeviceToken", 400, .permanentFailure), ("MissingTopic", 400, .permanentFailure),
        ("PayloadEmpty", 400, .permanentFailure), ("TopicDisallowed", 400, .permanentFailure), ("BadCertificate", 403, .permanentFailure),
        ("BadCertificateEnvironment", 403, .permanentFailure), ("Forbidden", 403, .permanentFailure), ("BadPath", 404, .permanentFailure),
        ("MethodNotAllowed", 405, .permanentFailure), ("PayloadTooLarge", 413, .permanentFailure),
        ("SomethingNew", 502, .retry), ("SomethingNew", 400, .permanentFailure), ("SomethingNew", 410, .tokenRejected),
    ])
    func apnsReasons(reason: String, status: Int, action: APNsReason.Action) {
        #expect(APNsReason(rawValue: reason).action(status: status) == action)
    }
}

/// An actor owning `Waiters`, as the approvals broker and the device commands do.
actor WaitingRoom {
    var waiters = Waiters<String>()
    var parkedCount = 0
    func wait(_ key: String, ticket: Int? = nil) async -> String {
        let ticket = ticket ?? waiters.ticket()
        parkedCount += 1
        return await withCheckedContinuation { waiters.park(key, ticket: ticket, $0) }
    }
    func ticket() -> Int { waiters.ticket() }
    func answer(_ key: String, _ value: String) { waiters.answer(key, with: value) }
    func release(_ key: String, ticket: Int) { waiters.release(key, ticket: ticket, with: "gave up") }
}

@Suite("Waiters")
struct WaitersTests {
    @Test("each parked caller is resumed once: alone by release, with the rest by answer; other keys untouched")
    func resumedOnce() async throws {
        let room = WaitingRoom()
        let early = await room.ticket()
        async let first = room.wait("a", ticket: early)
        async let second = room.wait("a")
        async let third = room.wait("a")
        async let other = room.wait("b")
        while await room.parkedCount < 4 { try await Task.sleep(for: .milliseconds(5)) }
        await room.release("a", ticket: early)
        await room.release("a", ticket: early)  // already gone: nothing happens
        await room.answer("a", "approved")
        await room.answer("a", "late")          // nobody left
        #expect(await first == "gave up")
        #expect(await [second, third] == ["approved", "approved"])
        await room.answer("b", "denied")
        #expect(await other == "denied")
    }
}
