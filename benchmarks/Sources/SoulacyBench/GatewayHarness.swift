import APNs
import ChannelAPI
import ChannelDelivery
import Foundation
import Gateway
import HTTPClient
import Identity
import JSON
import Mobile
import SQLite
import Synchronization

/// `soulacy-bench serve AGENTS.yaml GATEWAY-CONFIG.yaml`: a real gateway in this process (its listener, routes,
/// middleware, stores, page cache and dispatchers, as `soulacy serve` assembles them), driven by benchmarks/run.py
/// with one JSON command per stdin line, each answered by one JSON line on stdout. In this process because what it
/// measures happens inside the gateway: lines written through its own store while wrk reads the inbox, wake-ups
/// queued while the push service is down, runs timed from the model's last token to the wake-up.
///
/// Wake-ups go through `BenchWakeTransport` (the APNs transport to the stand-in named by SOULACY_MOBILE_APNS_*,
/// timed, with a gate that holds sends while "the service is down").
final class GatewayHarness: Sendable {
    let gateway: Gateway
    let adminKey: String
    let wake: BenchWakeTransport?
    let writer = BackgroundWriter()
    let generator = InboxGenerator()

    init(agents: String, gatewayConfig: String) async throws {
        let env = ProcessInfo.processInfo.environment
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("soulacy-bench-gateway-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        wake = try APNsConfiguration.fromEnvironment(env).map { BenchWakeTransport(inner: try APNsTransport(configuration: $0)) }
        // The gateway builds no APNs client of its own: the timed one above is the only transport.
        var environment = env.filter { !$0.key.hasPrefix("SOULACY_MOBILE_APNS_") }
        // wrk sends far more than the default 600 requests a minute from loopback.
        environment["SOULACY_RATE_LIMIT_PER_MINUTE"] = "0"
        var options = GatewayOptions(configPath: agents, dataDirectory: directory + "/data", host: "127.0.0.1", port: 0, log: Log(minimum: .error),
                                     environment: environment, extraTransports: wake.map { [$0] } ?? [])
        options.gatewayConfigPath = gatewayConfig
        gateway = try Gateway(options: options)
        guard let key = try await gateway.bootstrapAdminKey() else { throw BenchError("a fresh data directory has no bootstrap key") }
        adminKey = key
        try gateway.start()
    }

    static func run(arguments: [String]) async throws {
        guard arguments.count >= 2 else { throw BenchError("usage: soulacy-bench serve AGENTS.yaml GATEWAY-CONFIG.yaml") }
        let harness = try await GatewayHarness(agents: arguments[0], gatewayConfig: arguments[1])
        SoulacyBench.emit(["port": Int(harness.gateway.port), "admin_key": harness.adminKey, "rss_mb": residentMegabytes()])
        // stdin is read on a thread of its own: a blocking read must not hold one of the two cooperative threads.
        let (lines, continuation) = AsyncStream.makeStream(of: String.self)
        Thread.detachNewThread {
            while let line = readLine() { continuation.yield(line) }
            continuation.finish()
        }
        for await line in lines {
            guard let data = line.data(using: .utf8), let command = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
                  let name = command["cmd"] as? String else { continue }
            if name == "quit" { break }
            do {
                SoulacyBench.emit(try await harness.perform(name, command))
            } catch {
                SoulacyBench.emit(["error": "\(error)"])
            }
        }
        await harness.writer.set(rate: 0, store: harness.gateway.mobileStore, household: nil)
        await harness.gateway.stop()
    }

    func perform(_ name: String, _ command: [String: Any]) async throws -> [String: Any] {
        let store = gateway.mobileStore
        func int(_ key: String, _ fallback: Int) -> Int { (command[key] as? Int) ?? fallback }
        switch name {
        case "household":
            let household = Household(people: int("people", 100), devicesPerPerson: int("devices_per_person", 10), withTokens: (command["tokens"] as? Bool) ?? false)
            try household.register(in: store)
            generator.household.withLock { $0 = household }
            let measured = household.measuredPerson
            let key = try await gateway.keys.mint(name: "bench", subject: household.person(measured), role: .viewer, kind: .manual, mintedBy: nil).token
            return ["key": key, "subject": household.person(measured), "device": household.device(measured, 0), "rss_mb": residentMegabytes()]
        case "grow":
            return try generator.grow(to: int("lines", 1000), store: store)
        case "writes":
            await writer.set(rate: int("rate", 0), store: store, household: generator.household.withLock { $0 })
            return ["rate": int("rate", 0)]
        case "write-stats":
            return writer.stats()
        case "rss":
            return ["rss_mb": residentMegabytes()]
        case "gate":
            guard let wake else { throw BenchError("no APNs stand-in configured") }
            wake.gate.set(open: (command["open"] as? Bool) ?? true)
            return ["open": wake.gate.isOpen]
        case "backlog":
            return try await generator.backlog(int("count", 100_000), store: store)
        case "drain":
            guard let wake else { throw BenchError("no APNs stand-in configured") }
            return try await Backlog.drain(store: store, dispatcher: gateway.dispatcher, wake: wake, expected: int("count", 0))
        case "webhooks":
            return try await ChannelBench.handOff(gateway: gateway, channel: (command["channel"] as? String) ?? "webhook",
                                                  destination: (command["destination"] as? String) ?? "bench", count: int("count", 5000))
        case "plain-posts":
            return try await ChannelBench.plainPosts(url: (command["url"] as? String) ?? "", count: int("count", 5000), concurrency: int("concurrency", 256))
        case "llm-runs":
            guard let wake else { throw BenchError("no APNs stand-in configured") }
            return try await LLMBench.runs(harness: self, wake: wake, agent: (command["agent"] as? String) ?? "talker", count: int("count", 100),
                                           standInTimes: (command["times_url"] as? String) ?? "")
        default:
            throw BenchError("unknown command \(name)")
        }
    }
}

/// The benchmark household: `people` people with `devicesPerPerson` phones each (1,000 devices and 100 people by
/// default). Person 7's first phone is the one whose inbox is measured.
struct Household: Sendable {
    let people: Int
    let devicesPerPerson: Int
    let withTokens: Bool
    static let pushToken = String(repeating: "ab", count: 32)
    var measuredPerson: Int { min(7, people - 1) }

    func person(_ p: Int) -> String { "person-\(p)" }
    func device(_ p: Int, _ d: Int) -> String { "dev-\(p)-\(d)" }

    /// Every phone registered through the device store, in one transaction (one fsync, not a thousand).
    func register(in store: MobileStore) throws {
        try store.database.transaction { _ in
            for p in 0..<people {
                for d in 0..<devicesPerPerson {
                    var fields: [String: JSONValue] = ["id": .string(device(p, d)), "name": .string("Phone \(d)")]
                    if withTokens {
                        fields["push_token"] = .string(Self.pushToken)
                        fields["notifications_enabled"] = true
                    }
                    try store.devices.register(try DeviceRegistration(json: JSONObject(fields)), subject: person(p))
                }
            }
        }
    }
}

/// A small deterministic generator (SplitMix64), so every run writes the same inbox.
struct SplitMix64: Sendable {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    mutating func below(_ n: Int) -> Int { Int(next() % UInt64(n)) }
}

/// Writes large inboxes fast through the store's own insert path (`MobileStore.insertDeliveries`: the same rows,
/// recipients and outbox rows as every delivery), 5,000 lines a transaction.
final class InboxGenerator: Sendable {
    let household = Mutex<Household?>(nil)
    private let written = Mutex<(lines: Int, random: SplitMix64)>((0, SplitMix64(state: 20_261_202)))
    static let batch = 5000

    /// One line in 10,000 is for everyone (each has a recipient row per device), 10% for one person (10 phones), the
    /// rest for one phone.
    static func destination(_ random: inout SplitMix64, _ household: Household, excluding: Int? = nil) -> Destination {
        var p = random.below(household.people)
        if let excluding, p == excluding { p = (p + 1) % household.people }
        let roll = random.below(10_000)
        if roll == 0, excluding == nil { return .all }
        if roll < 1000 { return .user(household.person(p)) }
        return .device(household.device(p, random.below(household.devicesPerPerson)))
    }

    static func output(_ n: Int) -> Output {
        Output(agentID: "bench", agentName: "Bench", sessionID: "s-\(n % 977)",
               parts: ["Line \(n): a result of ordinary length for an inbox, about as long as an agent's summary of its run."])
    }

    func grow(to target: Int, store: MobileStore) throws -> [String: Any] {
        guard let household = household.withLock({ $0 }) else { throw BenchError("no household yet") }
        let start = ContinuousClock.now
        var added = 0
        while true {
            let lines = written.withLock { state -> [(output: Output, destination: Destination)] in
                let n = min(Self.batch, target - state.lines)
                guard n > 0 else { return [] }
                // The first 20 lines are for the measured phone, so its page is a full page of 20 at every size.
                let lines = (0..<n).map { i in
                    (output: Self.output(state.lines + i),
                     destination: state.lines + i < 20 ? .device(household.device(household.measuredPerson, 0)) : Self.destination(&state.random, household))
                }
                state.lines += n
                return lines
            }
            if lines.isEmpty { break }
            _ = try store.insertDeliveries(lines)
            added += lines.count
        }
        let seconds = SoulacyBench.seconds(ContinuousClock.now - start)
        let bytes = ["", "-wal"].compactMap { try? FileManager.default.attributesOfItem(atPath: store.database.path + $0)[.size] as? Int }.reduce(0, +)
        return ["lines": written.withLock { $0.lines }, "added": added, "seconds": seconds, "per_second": added > 0 ? Double(added) / seconds : 0,
                "database_mb": Double(bytes) / 1_048_576]
    }

    /// `count` lines, each for one phone that takes pushes: `count` wake-ups in the outbox.
    func backlog(_ count: Int, store: MobileStore) async throws -> [String: Any] {
        guard let household = household.withLock({ $0 }), household.withTokens else { throw BenchError("a household with push tokens first") }
        let start = ContinuousClock.now
        var n = 0
        while n < count {
            let lines = (0..<min(Self.batch, count - n)).map { i in
                (output: Self.output(n + i), destination: Destination.device(household.device((n + i) % household.people, ((n + i) / household.people) % household.devicesPerPerson)))
            }
            _ = try store.insertDeliveries(lines)
            n += lines.count
        }
        let pending = try await store.outbox.counts()[.pending] ?? 0
        return ["queued": count, "pending": pending, "seconds": SoulacyBench.seconds(ContinuousClock.now - start)]
    }
}

/// Deliveries for other people than the measured one, written at a steady rate through the path a run's output
/// takes (`insertDeliveryGrouped`: group commit, one fsync shared by the lines of the same moment).
actor BackgroundWriter {
    private var task: Task<Void, Never>?
    private nonisolated let counters = WriteCounters()

    func set(rate: Int, store: MobileStore, household: Household?) async {
        task?.cancel()
        await task?.value
        task = nil
        counters.state.withLock { $0 = (0, 0, .now) }
        guard rate > 0, let household else { return }
        let counters = self.counters
        task = Task.detached {
            var random = SplitMix64(state: UInt64(rate))
            let tick = Duration.milliseconds(10)
            var due = ContinuousClock.now
            var owed = 0.0
            var n = 0
            await withTaskGroup(of: Void.self) { group in
                while !Task.isCancelled {
                    due += tick
                    try? await Task.sleep(until: due, clock: .continuous)
                    owed += Double(rate) / 100
                    while owed >= 1 {
                        owed -= 1
                        n += 1
                        let destination = InboxGenerator.destination(&random, household, excluding: household.measuredPerson)
                        let output = InboxGenerator.output(n)
                        group.addTask {
                            do {
                                _ = try await store.insertDeliveryGrouped(output, destination: destination)
                                counters.state.withLock { $0.written += 1 }
                            } catch {
                                counters.state.withLock { $0.failed += 1 }
                            }
                        }
                    }
                }
                await group.waitForAll()
            }
        }
    }

    nonisolated func stats() -> [String: Any] {
        counters.state.withLock { c in
            let seconds = SoulacyBench.seconds(ContinuousClock.now - c.since)
            return ["written": c.written, "failed": c.failed, "seconds": seconds, "per_second": seconds > 0 ? Double(c.written) / seconds : 0]
        }
    }
}

final class WriteCounters: Sendable {
    let state = Mutex<(written: Int, failed: Int, since: ContinuousClock.Instant)>((0, 0, .now))
}

/// Holds every send while closed: the push service is down (the dispatcher's window of attempts waits on it;
/// everything else stays queued in the outbox). Opening it is the service coming back.
final class Gate: Sendable {
    private let state = Mutex<(open: Bool, waiters: [CheckedContinuation<Void, Never>])>((true, []))

    var isOpen: Bool { state.withLock { $0.open } }

    func set(open: Bool) {
        let waiters = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            s.open = open
            guard open else { return [] }
            defer { s.waiters = [] }
            return s.waiters
        }
        for waiter in waiters { waiter.resume() }
    }

    func pass() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { s -> Bool in
                if s.open { return true }
                s.waiters.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }
}

/// The APNs transport, gated and timed: per delivery, when its wake-up was handed to the transport and when the
/// stand-in acknowledged it (wall-clock seconds, comparable with another process's `time.time()`).
final class BenchWakeTransport: WakeTransport, Sendable {
    let inner: any WakeTransport
    let gate = Gate()
    var name: String { inner.name }
    private let times = Mutex<(sent: [String: Double], acked: [String: Double], count: Int, recording: Bool)>(([:], [:], 0, false))

    init(inner: any WakeTransport) { self.inner = inner }

    func canWake(_ target: WakeTarget) -> Bool { inner.canWake(target) }

    func send(_ signal: WakeSignal, to target: WakeTarget) async -> WakeOutcome {
        await gate.pass()
        let sent = Date().timeIntervalSince1970
        let outcome = await inner.send(signal, to: target)
        let acked = Date().timeIntervalSince1970
        times.withLock { t in
            t.count += 1
            // Only the runs' wake-ups are looked up by delivery (`recordTimes`); a backlog's million are only counted.
            if t.recording, let id = signal.deliveryID {
                t.sent[id] = sent
                t.acked[id] = acked
            }
        }
        return outcome
    }

    var acknowledged: Int { times.withLock { $0.count } }

    func times(of deliveryID: String) -> (sent: Double, acked: Double)? {
        times.withLock { t in t.sent[deliveryID].flatMap { s in t.acked[deliveryID].map { (s, $0) } } }
    }

    /// From now on, each wake-up's times are kept by delivery id.
    func recordTimes() { times.withLock { $0.recording = true } }
}

/// Percentiles of a sample, in the sample's unit.
func percentile(_ values: [Double], _ p: Double) -> Double {
    guard !values.isEmpty else { return 0 }
    let sorted = values.sorted()
    return sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]
}

extension Gateway {
    /// The benchmark's gateways run on SQLite in a temporary data directory.
    var mobileStore: MobileStore {
        guard let file = stores.sqlite else { preconditionFailure("the benchmark's gateway runs on \(stores.engine), not SQLite") }
        return file.mobileStore
    }

    var database: DatabasePool {
        guard let file = stores.sqlite else { preconditionFailure("the benchmark's gateway runs on \(stores.engine), not SQLite") }
        return file.database
    }
}
