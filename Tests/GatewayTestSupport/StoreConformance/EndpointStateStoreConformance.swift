import ChannelAPI
import Foundation

/// What every engine's `EndpointStateStore` must do, whatever keeps its rows. Each rule uses channels of its own,
/// named with a fresh UUID, so a database other suites share (or an earlier run left rows in) changes nothing:
///
/// - "disable and read back": a disabled endpoint reads back with every field as written (channel, endpoint,
///   fingerprint, display, reason, the time to the millisecond), by endpoint and in its channel's list; an endpoint
///   never disabled reads nil and a channel with none lists none.
/// - "one per endpoint": disabling an endpoint again keeps one record, and the later disable's fingerprint, display,
///   reason and time win.
/// - "per channel": a channel's list holds only its own records, oldest first, equal times in endpoint order (not
///   the order they were written), the same on every read; another channel's record of an endpoint of the same name
///   is its own and unaffected.
/// - "enable": enabling forgets that one record; the channel's others and another channel's record of the same
///   endpoint name stay; enabling an endpoint, or a channel, that has no record is not an error.
/// - "concurrent disables": twenty disables of one endpoint at once all succeed and leave exactly one record, whole
///   (every field from one of the twenty, never a mix).
///
/// Returns the broken rules (empty: conformant). A rule that throws is reported under its own name.
public struct EndpointStateStoreConformance: Sendable {
    public let engine: String
    public let store: any EndpointStateStore

    public init(engine: String, store: any EndpointStateStore) {
        self.engine = engine
        self.store = store
    }

    /// The failures of one rule, collected while it runs.
    private final class Checks {
        let engine: String
        let rule: String
        var failures: [ConformanceFailure] = []

        init(engine: String, rule: String) {
            self.engine = engine
            self.rule = rule
        }

        func check(_ holds: Bool, _ detail: @autoclosure () -> String) {
            if !holds { failures.append(ConformanceFailure(rule: rule, detail: "\(engine): \(detail())")) }
        }
    }

    /// A time with a millisecond part, which every engine must keep.
    static let start = Date(timeIntervalSince1970: 1_780_000_000.123)

    static func millis(_ date: Date) -> Int64 { Int64((date.timeIntervalSince1970 * 1000).rounded()) }

    /// Equal in every field, the time to the millisecond.
    static func same(_ a: DisabledEndpoint?, _ b: DisabledEndpoint?) -> Bool {
        guard let a, let b else { return a == nil && b == nil }
        return a.channel == b.channel && a.endpoint == b.endpoint && a.fingerprint == b.fingerprint && a.display == b.display
            && a.reason == b.reason && millis(a.since) == millis(b.since)
    }

    static func show(_ record: DisabledEndpoint?) -> String {
        guard let record else { return "nil" }
        return "(\(record.channel), \(record.endpoint), fingerprint \(record.fingerprint), display \(record.display), "
            + "reason \(record.reason), since \(millis(record.since)) ms)"
    }

    static func show(_ records: [DisabledEndpoint]) -> String { "[" + records.map { show($0) }.joined(separator: ", ") + "]" }

    static func channel(_ name: String) -> String { "\(name)_\(UUID().uuidString.lowercased())" }

    public func run() async -> [ConformanceFailure] {
        var failures: [ConformanceFailure] = []
        failures += await rule("disable and read back", readBack)
        failures += await rule("one per endpoint", onePerEndpoint)
        failures += await rule("per channel", perChannel)
        failures += await rule("enable", enable)
        failures += await rule("concurrent disables", concurrentDisables)
        return failures
    }

    private func rule(_ name: String, _ body: (Checks) async throws -> Void) async -> [ConformanceFailure] {
        let checks = Checks(engine: engine, rule: name)
        do {
            try await body(checks)
        } catch {
            checks.failures.append(ConformanceFailure(rule: name, detail: "\(engine): threw \(error)"))
        }
        return checks.failures
    }

    private func readBack(_ checks: Checks) async throws {
        let channel = Self.channel("webhook")
        let missing = try await store.disabled(channel: channel, endpoint: "endpoint:alerts")
        checks.check(missing == nil, "an endpoint never disabled reads \(Self.show(missing))")
        let none = try await store.disabled(channel: channel)
        checks.check(none.isEmpty, "a channel with nothing disabled lists \(Self.show(none))")

        // Quotes, a backslash, a percent sign and letters beyond ASCII: kept as written.
        let record = DisabledEndpoint(channel: channel, endpoint: "endpoint:alerts", fingerprint: "sha256:9f86d081884c7d65",
                                      display: "Alerts \"prod\" ünïcode ✓", reason: "410 Gone: 'bye' 100% \\ done",
                                      since: Self.start)
        try await store.disable(record)
        let read = try await store.disabled(channel: channel, endpoint: record.endpoint)
        checks.check(Self.same(read, record), "wrote \(Self.show(record)), read \(Self.show(read))")
        let listed = try await store.disabled(channel: channel)
        checks.check(listed.count == 1 && Self.same(listed.first, record), "the channel lists \(Self.show(listed)), not \(Self.show(record))")
        let other = try await store.disabled(channel: channel, endpoint: "endpoint:other")
        checks.check(other == nil, "another endpoint of the channel reads \(Self.show(other))")
    }

    private func onePerEndpoint(_ checks: Checks) async throws {
        let channel = Self.channel("webhook")
        let first = DisabledEndpoint(channel: channel, endpoint: "endpoint:alerts", fingerprint: "fp-1", display: "alerts",
                                     reason: "410 Gone", since: Self.start)
        let second = DisabledEndpoint(channel: channel, endpoint: "endpoint:alerts", fingerprint: "fp-2", display: "alerts (moved)",
                                      reason: "410 Gone again", since: Self.start.addingTimeInterval(60.5))
        try await store.disable(first)
        try await store.disable(second)
        let read = try await store.disabled(channel: channel, endpoint: "endpoint:alerts")
        checks.check(Self.same(read, second), "after two disables: \(Self.show(read)), not the second \(Self.show(second))")
        let listed = try await store.disabled(channel: channel)
        checks.check(listed.count == 1 && Self.same(listed.first, second), "after two disables the channel lists \(Self.show(listed))")
    }

    private func perChannel(_ checks: Checks) async throws {
        let channel = Self.channel("webhook")
        let neighbour = Self.channel("webhook")
        let later = Self.start.addingTimeInterval(5)
        // Written in neither the expected order nor endpoint order: c, a, b. Expected: oldest first, then by endpoint.
        let c = DisabledEndpoint(channel: channel, endpoint: "endpoint:c", fingerprint: "fp-c", display: "c", reason: "gone c", since: Self.start)
        let a = DisabledEndpoint(channel: channel, endpoint: "endpoint:a", fingerprint: "fp-a", display: "a", reason: "gone a", since: later)
        let b = DisabledEndpoint(channel: channel, endpoint: "endpoint:b", fingerprint: "fp-b", display: "b", reason: "gone b", since: Self.start)
        // The neighbour's endpoint has the name of one of the channel's, and the oldest time of all.
        let theirs = DisabledEndpoint(channel: neighbour, endpoint: "endpoint:a", fingerprint: "fp-n", display: "n", reason: "gone n",
                                      since: Self.start.addingTimeInterval(-5))
        for record in [c, a, theirs, b] { try await store.disable(record) }

        let expected = [b, c, a]
        let listed = try await store.disabled(channel: channel)
        checks.check(listed.count == expected.count && zip(listed, expected).allSatisfy { Self.same($0, $1) },
                     "the channel lists \(Self.show(listed)), not \(Self.show(expected))")
        let again = try await store.disabled(channel: channel)
        checks.check(again.count == listed.count && zip(again, listed).allSatisfy { Self.same($0, $1) },
                     "a second read lists \(Self.show(again)), the first \(Self.show(listed))")
        let theirList = try await store.disabled(channel: neighbour)
        checks.check(theirList.count == 1 && Self.same(theirList.first, theirs), "the other channel lists \(Self.show(theirList))")
        let ours = try await store.disabled(channel: channel, endpoint: "endpoint:a")
        checks.check(Self.same(ours, a), "the channel's endpoint:a reads \(Self.show(ours)), not \(Self.show(a))")
        let theirRecord = try await store.disabled(channel: neighbour, endpoint: "endpoint:a")
        checks.check(Self.same(theirRecord, theirs), "the other channel's endpoint:a reads \(Self.show(theirRecord)), not \(Self.show(theirs))")
        let notTheirs = try await store.disabled(channel: neighbour, endpoint: "endpoint:b")
        checks.check(notTheirs == nil, "the other channel reads the channel's endpoint:b as \(Self.show(notTheirs))")
    }

    private func enable(_ checks: Checks) async throws {
        let channel = Self.channel("webhook")
        let neighbour = Self.channel("webhook")
        let a = DisabledEndpoint(channel: channel, endpoint: "endpoint:a", fingerprint: "fp-a", display: "a", reason: "gone a", since: Self.start)
        let b = DisabledEndpoint(channel: channel, endpoint: "endpoint:b", fingerprint: "fp-b", display: "b", reason: "gone b",
                                 since: Self.start.addingTimeInterval(1))
        let theirs = DisabledEndpoint(channel: neighbour, endpoint: "endpoint:a", fingerprint: "fp-n", display: "n", reason: "gone n",
                                      since: Self.start)
        for record in [a, b, theirs] { try await store.disable(record) }

        try await store.enable(channel: channel, endpoint: "endpoint:a")
        let gone = try await store.disabled(channel: channel, endpoint: "endpoint:a")
        checks.check(gone == nil, "an enabled endpoint still reads \(Self.show(gone))")
        let left = try await store.disabled(channel: channel)
        checks.check(left.count == 1 && Self.same(left.first, b), "after enabling endpoint:a the channel lists \(Self.show(left)), not \(Self.show(b))")
        let theirList = try await store.disabled(channel: neighbour)
        checks.check(theirList.count == 1 && Self.same(theirList.first, theirs),
                     "enabling the channel's endpoint:a changed the other channel's: \(Self.show(theirList))")

        // None of these has a record: each is nothing, not an error, and changes nothing.
        do {
            try await store.enable(channel: channel, endpoint: "endpoint:a")
            try await store.enable(channel: channel, endpoint: "endpoint:never")
            try await store.enable(channel: Self.channel("unknown"), endpoint: "endpoint:b")
        } catch {
            checks.check(false, "enabling an endpoint without a record threw \(error)")
        }
        let after = try await store.disabled(channel: channel)
        checks.check(after.count == 1 && Self.same(after.first, b), "enabling endpoints without a record changed the channel's: \(Self.show(after))")
    }

    private func concurrentDisables(_ checks: Checks) async throws {
        let channel = Self.channel("webhook")
        let store = self.store
        let records = (0..<20).map { i in
            DisabledEndpoint(channel: channel, endpoint: "endpoint:raced", fingerprint: "fp-\(i)", display: "raced \(i)", reason: "gone \(i)",
                             since: Self.start.addingTimeInterval(Double(i) / 1000))
        }
        let errors = await withTaskGroup(of: String?.self) { group in
            for record in records {
                group.addTask {
                    do {
                        try await store.disable(record)
                        return nil
                    } catch {
                        return "\(error)"
                    }
                }
            }
            var errors: [String] = []
            for await error in group { if let error { errors.append(error) } }
            return errors
        }
        checks.check(errors.isEmpty, "\(errors.count) of 20 concurrent disables threw: \(errors.first ?? "")")
        let listed = try await store.disabled(channel: channel)
        checks.check(listed.count == 1, "20 concurrent disables of one endpoint left \(listed.count) records: \(Self.show(listed))")
        let read = try await store.disabled(channel: channel, endpoint: "endpoint:raced")
        checks.check(records.contains { Self.same($0, read) }, "after 20 concurrent disables the record is \(Self.show(read)), none of those written whole")
    }
}
