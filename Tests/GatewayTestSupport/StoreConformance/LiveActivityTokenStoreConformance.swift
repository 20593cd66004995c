import ChannelAPI
import Foundation
import Mobile
import Storage

/// What every engine's `LiveActivityTokenStore` must do: a session's token reaches its iOS device with the environment
/// it was registered for and the device's bundle; a later token for the same device and session replaces it; a
/// session's targets are that session's, on devices of that person, never an Android one; push-to-start goes to the
/// person's iOS phones that sent a start token; a removed device gets nothing; a registration commits with the
/// caller's transaction and a rolled-back one leaves nothing; and concurrent registrations lose none (one row per
/// device and session). Returns the broken rules (empty: conformant).
///
/// Each run needs a fresh database (the devices are fixed ids).
public struct LiveActivityTokenStoreConformance: Sendable {
    public let fixture: any StorageEngineFixture
    public let tokens: any LiveActivityTokenStore
    public let devices: any DeviceRegistry

    public init(fixture: any StorageEngineFixture, tokens: any LiveActivityTokenStore, devices: any DeviceRegistry) {
        self.fixture = fixture
        self.tokens = tokens
        self.devices = devices
    }

    static func hex(_ byte: String, _ count: Int = 32) -> String { String(repeating: byte, count: count) }

    static func registration(_ id: String, platform: String, startToken: String?) throws -> DeviceRegistration {
        try InboxConformance.registration(id, token: hex("ab"), notifications: true, platform: platform, environment: "development", startToken: startToken)
    }

    public func run() async -> [ConformanceFailure] {
        var failures: [ConformanceFailure] = []
        let engine = fixture.engine
        func check(_ rule: String, _ holds: Bool, _ detail: @autoclosure () -> String) {
            if !holds { failures.append(ConformanceFailure(rule: rule, detail: "\(engine): \(detail())")) }
        }
        do {
            let now = Date(timeIntervalSince1970: 1_780_000_000)
            let startToken = Self.hex("5a", 40)
            _ = try await devices.register(try Self.registration("alice-phone", platform: "ios", startToken: startToken), subject: "alice", keyID: nil)
            _ = try await devices.register(try Self.registration("alice-pad", platform: "ios", startToken: nil), subject: "alice", keyID: nil)
            _ = try await devices.register(try Self.registration("bob-android", platform: "android", startToken: nil), subject: "bob", keyID: nil)
            let phone = try requireDevice(await devices.device(id: "alice-phone"))

            try await tokens.register(deviceID: "alice-phone", sessionID: "ses_1", agentID: "brief", token: Self.hex("01"), environment: .development, now: now)
            let first = try await tokens.targets(sessionID: "ses_1", subject: "alice")
            check("a token reaches its device", first.map(\.deviceID) == ["alice-phone"] && first.first?.pushToken == Self.hex("01")
                  && first.first?.environment == .development && first.first?.platform == .ios && first.first?.bundleID == phone.bundleID,
                  "targets of ses_1: \(first)")

            try await tokens.register(deviceID: "alice-phone", sessionID: "ses_1", agentID: "brief", token: Self.hex("02"), environment: .production, now: now)
            let replaced = try await tokens.targets(sessionID: "ses_1", subject: "alice")
            check("a later token replaces", replaced.map(\.pushToken) == [Self.hex("02")] && replaced.first?.environment == .production,
                  "after a second token: \(replaced)")

            try await tokens.register(deviceID: "alice-pad", sessionID: "ses_1", agentID: "brief", token: Self.hex("03"), environment: .production, now: now)
            let both = try await tokens.targets(sessionID: "ses_1", subject: "alice")
            check("every device of the session", Set(both.map(\.deviceID)) == ["alice-phone", "alice-pad"], "two devices registered, targets: \(both)")
            let otherSession = try await tokens.targets(sessionID: "ses_2", subject: "alice")
            check("per session", otherSession.isEmpty, "ses_2 has no token but targets \(otherSession)")
            let otherPerson = try await tokens.targets(sessionID: "ses_1", subject: "bob")
            check("only the device's person", otherPerson.isEmpty, "bob's run of ses_1 targets alice's devices: \(otherPerson)")
            try await tokens.register(deviceID: "bob-android", sessionID: "ses_b", agentID: "brief", token: Self.hex("04"), environment: .production, now: now)
            let android = try await tokens.targets(sessionID: "ses_b", subject: "bob")
            check("never an Android device", android.isEmpty, "an Android device is a Live Activity target: \(android)")

            let starts = try await tokens.startTargets(subject: "alice")
            check("push-to-start", starts.map(\.deviceID) == ["alice-phone"] && starts.first?.pushToken == startToken
                  && starts.first?.environment == .development, "alice's start targets: \(starts)")
            let bobStarts = try await tokens.startTargets(subject: "bob")
            check("push-to-start", bobStarts.isEmpty, "bob has no iOS phone, start targets: \(bobStarts)")

            // A phone keeps its newest tokens: 70 older sessions (a second apart, before ses_1's token) leave ses_1 and
            // the newest of them within the bound.
            let count = 70, room = liveActivityTokensPerDevice - 1
            for n in 0..<count {
                try await tokens.register(deviceID: "alice-pad", sessionID: "ses_old_\(n)", agentID: "brief", token: Self.hex("0c"), environment: .production,
                                          now: now.addingTimeInterval(Double(n - 1000)))
            }
            var keptSessions: [Int] = []
            for n in 0..<count where try await !tokens.targets(sessionID: "ses_old_\(n)", subject: "alice").isEmpty { keptSessions.append(n) }
            check("newest tokens per device", keptSessions == Array((count - room)..<count), "sessions still targeted after \(count): \(keptSessions)")
            let stillBoth = try await tokens.targets(sessionID: "ses_1", subject: "alice")
            check("newest tokens per device", Set(stillBoth.map(\.deviceID)) == ["alice-phone", "alice-pad"], "ses_1 after the old sessions: \(stillBoth)")

            // With the caller's effect, or not at all.
            try await fixture.storage.withTransaction { session in
                try fixture.writeEffect("live-activity", in: session)
                try tokens.register(deviceID: "alice-phone", sessionID: "ses_joined", agentID: "brief", token: Self.hex("05"), environment: .production, now: now, in: session)
            }
            let joined = try await tokens.targets(sessionID: "ses_joined", subject: "alice")
            let effects = try await fixture.effects()
            check("commits with the caller", joined.count == 1 && effects.contains("live-activity"), "joined: \(joined), effects: \(effects)")
            struct Abandon: Error {}
            do {
                try await fixture.storage.withTransaction { session in
                    try tokens.register(deviceID: "alice-phone", sessionID: "ses_rolled_back", agentID: "brief", token: Self.hex("06"), environment: .production, now: now, in: session)
                    throw Abandon()
                }
            } catch is Abandon {}
            let rolledBack = try await tokens.targets(sessionID: "ses_rolled_back", subject: "alice")
            check("a rollback leaves nothing", rolledBack.isEmpty, "a rolled-back registration targets \(rolledBack)")

            // Twenty sessions at once, and twenty tokens for one session at once.
            let store = self.tokens
            try await withThrowingTaskGroup(of: Void.self) { group in
                for n in 0..<20 {
                    group.addTask {
                        try await store.register(deviceID: "alice-pad", sessionID: "ses_many_\(n)", agentID: "brief", token: Self.hex(String(format: "%02x", n)), environment: .production, now: now)
                    }
                    group.addTask {
                        try await store.register(deviceID: "alice-pad", sessionID: "ses_one", agentID: "brief", token: Self.hex(String(format: "%02x", 100 + n)), environment: .production, now: now)
                    }
                }
                try await group.waitForAll()
            }
            var kept = 0
            for n in 0..<20 {
                if try await tokens.targets(sessionID: "ses_many_\(n)", subject: "alice").count == 1 { kept += 1 }
            }
            check("concurrent registrations", kept == 20, "\(kept) of 20 sessions registered at once have their token")
            let one = try await tokens.targets(sessionID: "ses_one", subject: "alice")
            check("one row per device and session", one.count == 1 && (100..<120).map { Self.hex(String(format: "%02x", $0)) }.contains(one.first?.pushToken ?? ""),
                  "20 tokens for one session at once: \(one)")

            // A removed phone gets nothing, though its tokens were registered.
            _ = try await devices.deleteDevice(id: "alice-phone", subject: "alice")
            let afterRemoval = try await tokens.targets(sessionID: "ses_1", subject: "alice")
            check("a removed device gets nothing", afterRemoval.map(\.deviceID) == ["alice-pad"], "after removing alice-phone: \(afterRemoval)")
            let startsAfter = try await tokens.startTargets(subject: "alice")
            check("a removed device gets nothing", startsAfter.isEmpty, "start targets after removing alice-phone: \(startsAfter)")
        } catch {
            failures.append(ConformanceFailure(rule: "no errors", detail: "\(engine): \(error)"))
        }
        return failures
    }
}

private struct MissingDevice: Error, CustomStringConvertible {
    var description: String { "a device registered a moment ago is not there" }
}

/// The device, or an error the suite reports under "no errors".
private func requireDevice(_ device: Device?) throws -> Device {
    guard let device else { throw MissingDevice() }
    return device
}
