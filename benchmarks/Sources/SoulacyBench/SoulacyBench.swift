import APNs
import Crypto
import ChannelAPI
import Foundation
import APIKit
import Mobile
import SQLite
import Synchronization

/// Measurements for benchmarks/run, each printed as one JSON line. Not a test: nothing here asserts.
@main
struct SoulacyBench {
    static func main() async throws {
        let args = Array(CommandLine.arguments.dropFirst())
        switch args.first {
        case "inbox": try await inbox(count: Int(args[safe: 1] ?? "") ?? 20000, concurrency: Int(args[safe: 2] ?? "") ?? 64)
        case "plain-sqlite": try plainSQLite(count: Int(args[safe: 1] ?? "") ?? 20000)
        case "apns": try await apns(env: ProcessInfo.processInfo.environment, count: Int(args[safe: 1] ?? "") ?? 20000, concurrency: Int(args[safe: 2] ?? "") ?? 256)
        case "latency": try await latency(env: ProcessInfo.processInfo.environment, rate: Int(args[safe: 1] ?? "") ?? 1000, seconds: Int(args[safe: 2] ?? "") ?? 5)
        case "dispatch": try await dispatch(env: ProcessInfo.processInfo.environment, count: Int(args[safe: 1] ?? "") ?? 50000, connections: Int(args[safe: 2] ?? "") ?? 1)
        case "fanout": try await fanout(env: ProcessInfo.processInfo.environment, devices: Int(args[safe: 1] ?? "") ?? 10000)
        case "serve": try await GatewayHarness.run(arguments: Array(args.dropFirst()))
        case "relay": try await RelayBench.run(arguments: Array(args.dropFirst()))
        default:
            FileHandle.standardError.write(Data("usage: soulacy-bench inbox N C | plain-sqlite N | apns N C | latency RATE SECONDS | dispatch N CONNECTIONS | fanout DEVICES | serve AGENTS GATEWAY-CONFIG | relay AGENTS LINES COMMANDS\n".utf8))
            exit(64)
        }
    }

    static func emit(_ fields: [String: Any]) {
        let data = try! JSONSerialization.data(withJSONObject: fields, options: [.sortedKeys])
        // Straight to the descriptor, unbuffered: fflush(NULL) would wait on stdin's lock while the harness's reader
        // thread is blocked reading it.
        FileHandle.standardOutput.write(data + Data("\n".utf8))
    }

    static func temporaryDatabase() -> String {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("soulacy-bench-\(UUID().uuidString)").path
        try? FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        return dir + "/bench.db"
    }


    /// Numbered jobs 0..<count taken in turn by `concurrency` workers (each takes the next number when it is free);
    /// returns how many `job` counted as done.
    static func inTurn(count: Int, concurrency: Int, _ job: @escaping @Sendable (Int) async -> Bool) async -> Int {
        let counters = Counters()
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<concurrency {
                group.addTask {
                    while true {
                        let n = counters.next.add(1, ordering: .relaxed).oldValue
                        guard n < count else { return }
                        if await job(n) { counters.delivered.add(1, ordering: .relaxed) }
                    }
                }
            }
        }
        return counters.delivered.load(ordering: .relaxed)
    }

    static func seconds(_ d: Duration) -> Double { Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18 }

    static func store(path: String) throws -> MobileStore {
        let database = try DatabasePool(path: path)
        try database.migrate(MobileSchema.migrations)
        let store = try MobileStore(database: database)
        for i in 0..<2 {
            try store.devices.register(try DeviceRegistration(json: JSONObject(["notifications_enabled": true, "id": .string("phone-\(i)"), "push_token": .string(String(repeating: "0\(i)", count: 32))])), subject: "owner")
        }
        return store
    }

    /// Durable deliveries per second through the mobile channel as shipped: WAL, fsync on commit, group commit.
    static func inbox(count: Int, concurrency: Int) async throws {
        let store = try store(path: temporaryDatabase())
        let channel = MobileChannel(store: store.inbox)
        let output = Output(agentID: "bench", agentName: "Bench", sessionID: "s", parts: ["a result of ordinary length for an inbox line"])
        let counters = Counters()
        let start = ContinuousClock.now
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<concurrency {
                group.addTask {
                    while counters.next.add(1, ordering: .relaxed).oldValue < count {
                        _ = try await channel.deliver(output, to: "all")
                    }
                }
            }
            try await group.waitForAll()
        }
        let elapsed = seconds(ContinuousClock.now - start)
        let rows = try store.database.read { try $0.query("SELECT (SELECT COUNT(*) FROM mobile_deliveries) AS d, (SELECT COUNT(*) FROM mobile_push_outbox) AS o").first }
        emit(["bench": "inbox", "deliveries": count, "per_second": Double(count) / elapsed, "seconds": elapsed,
              "stored": rows?.int("d") ?? 0, "outbox_rows": rows?.int("o") ?? 0])
    }

    /// The reference: the same rows (line, 2 recipients, 2 outbox rows, same tables, indexes and ids) written by
    /// plain SQL in one thread, 512 deliveries per transaction, with the same WAL and fsync settings.
    static func plainSQLite(count: Int) throws {
        let path = temporaryDatabase()
        _ = try store(path: path)  // the shipped schema and the two devices
        let db = try Connection(path: path)
        let signal = String(decoding: try JSONEncoder().encode(WakeSignal.delivery(id: "dlv_000000000000000000000000", agentID: "bench")), as: UTF8.self)
        let start = ContinuousClock.now
        var i = 0
        while i < count {
            try db.transaction { c in
                for _ in 0..<min(512, count - i) {
                    let id = "dlv_" + TimeOrderedID.hex()
                    try c.run("INSERT INTO mobile_deliveries (id, destination, destination_kind, destination_value, agent_id, agent_name, session_id, title, body, parts, metadata, created_at) VALUES (?, 'all', 'all', '', 'bench', 'Bench', 's', 'Result from Bench', 'a result of ordinary length for an inbox line', '[{\"type\":\"text\",\"text\":\"a result of ordinary length for an inbox line\"}]', '{}', ?)", id, Int64(i))
                    for device in ["phone-0", "phone-1"] {
                        try c.run("INSERT INTO mobile_delivery_recipients (delivery_id, device_id) VALUES (?, ?)", id, device)
                        try c.run("INSERT INTO mobile_push_outbox (wake_id, delivery_id, device_id, signal, next_attempt_at, expires_at, created_at) VALUES (?, ?, ?, ?, 0, 0, 0)",
                                  TimeOrderedID.uuidText(), id, device, signal)
                    }
                    i += 1
                }
            }
        }
        let elapsed = seconds(ContinuousClock.now - start)
        emit(["bench": "plain-sqlite", "deliveries": count, "per_second": Double(count) / elapsed, "seconds": elapsed])
    }

    static func apnsTransport(_ env: [String: String]) throws -> APNsTransport {
        guard let config = try APNsConfiguration.fromEnvironment(env) else { throw BenchError("set SOULACY_MOBILE_APNS_* for the stand-in") }
        return try APNsTransport(configuration: config)
    }

    /// Wake-ups per second through the APNs transport over one multiplexed HTTP/2 connection.
    static func apns(env: [String: String], count: Int, concurrency: Int) async throws {
        let transport = try apnsTransport(env)
        let target = WakeTarget(deviceID: "d", platform: .ios, pushToken: String(repeating: "ab", count: 32), environment: .production, bundleID: "dev.soulacy.ios")
        // Warm up: the TLS handshake and the provider token are not part of the rate.
        _ = await transport.send(.delivery(id: "warm", agentID: "a"), to: target)
        let idleRSS = residentMegabytes()
        let counters = Counters()
        let start = ContinuousClock.now
        let delivered = await inTurn(count: count, concurrency: concurrency) { n in
            if n % 1000 == 0 { counters.notePeak() }
            return await transport.send(.delivery(id: "dlv_\(n)", agentID: "a"), to: target) == .delivered
        }
        let elapsed = seconds(ContinuousClock.now - start)
        counters.notePeak()
        emit(["bench": "apns", "sent": count, "delivered": delivered, "per_second": Double(count) / elapsed,
              "connections": transport.connectionsOpened, "rss_before_mb": idleRSS, "rss_peak_mb": Double(counters.peak.load(ordering: .relaxed))])
    }

    /// Delivery-to-wake-up latency: deliveries at a fixed rate through the channel, the dispatcher and APNs.
    static func latency(env: [String: String], rate: Int, seconds duration: Int) async throws {
        let store = try store(path: temporaryDatabase())
        let timing = TimingTransport(inner: try apnsTransport(env))
        let dispatcher = PushDispatcher(store: store, transports: WakeTransportRegistry([timing]), log: Log(minimum: .error))
        let channel = MobileChannel(store: store.inbox, dispatcher: dispatcher)
        let worker = Task { await dispatcher.run() }
        let output = Output(agentID: "bench", agentName: "Bench", sessionID: "s", parts: ["result"])
        let total = rate * duration
        let interval = 1.0 / Double(rate)
        let start = ContinuousClock.now
        await withTaskGroup(of: Void.self) { group in
            for n in 0..<total {
                let due = start + .milliseconds(Int64(Double(n) * interval * 1000))
                try? await Task.sleep(until: due, clock: .continuous)
                group.addTask {
                    if let receipt = try? await channel.deliver(output, to: "device:phone-0") { timing.delivered(receipt.deliveryID) }
                }
            }
        }
        let deadline = ContinuousClock.now + .seconds(30)
        while timing.completed < total, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        worker.cancel()
        let samples = timing.latencies.sorted()
        func pct(_ p: Double) -> Double { samples.isEmpty ? 0 : samples[min(samples.count - 1, Int(Double(samples.count) * p))] * 1000 }
        emit(["bench": "latency", "rate": rate, "deliveries": total, "woken": samples.count, "p50_ms": pct(0.5), "p99_ms": pct(0.99)])
    }
}

extension SoulacyBench {
    /// A store with `devices` phones that take pushes (the stand-in's token), registered in one transaction.
    static func pushStore(devices: Int) throws -> MobileStore {
        let database = try DatabasePool(path: temporaryDatabase())
        try database.migrate(MobileSchema.migrations)
        let store = try MobileStore(database: database)
        try database.transaction { _ in
            for i in 0..<devices {
                try store.devices.register(try DeviceRegistration(json: JSONObject(["id": .string("phone-\(i)"), "notifications_enabled": true,
                                                                                    "push_token": .string(Household.pushToken)])), subject: "owner")
            }
        }
        return store
    }

    static let standInTarget = WakeTarget(deviceID: "d", platform: .ios, pushToken: Household.pushToken, environment: .production, bundleID: "dev.soulacy.ios")

    /// The dispatcher's rate: `count` wake-ups already in the outbox, claimed, sent over `connections` HTTP/2
    /// connections (one APNs transport each, taken in turn) and settled. The product opens one connection per
    /// environment; more are several transports side by side. The window is 256 attempts, or 100 per connection
    /// (the stand-in's streams) when that is more.
    static func dispatch(env: [String: String], count: Int, connections: Int) async throws {
        let store = try pushStore(devices: 1)
        var n = 0
        while n < count {
            let batch = min(InboxGenerator.batch, count - n)
            _ = try store.insertDeliveries((0..<batch).map { (output: InboxGenerator.output(n + $0), destination: Destination.device("phone-0")) })
            n += batch
        }
        let transports = try (0..<connections).map { _ in try apnsTransport(env) }
        // The TLS handshakes and provider tokens are not part of the rate.
        for transport in transports { _ = await transport.send(.delivery(id: "warm", agentID: "a"), to: standInTarget) }
        let counting = CountingTransport(RoundRobinTransport(transports))
        let dispatcher = PushDispatcher(store: store, transports: WakeTransportRegistry([counting]), log: Log(minimum: .error),
                                        batchSize: max(256, 100 * connections))
        let start = ContinuousClock.now
        let worker = Task { await dispatcher.run() }
        let deadline = start + .seconds(300)
        // The transport's count is free to read; the outbox is counted only once it should be empty.
        while counting.acknowledged < count, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(2)) }
        while try Backlog.pending(store.database) > 0, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(2)) }
        let elapsed = seconds(ContinuousClock.now - start)
        worker.cancel()
        await worker.value
        emit(["bench": "dispatch", "count": count, "connections": connections, "delivered": counting.delivered, "per_second": Double(count) / elapsed,
              "opened": transports.reduce(0) { $0 + $1.connectionsOpened }])
    }

    /// One delivery to `devices` phones: from the call until the stand-in acknowledged the last wake-up.
    static func fanout(env: [String: String], devices: Int) async throws {
        let store = try pushStore(devices: devices)
        let transport = try apnsTransport(env)
        _ = await transport.send(.delivery(id: "warm", agentID: "a"), to: standInTarget)
        let counting = CountingTransport(transport)
        let dispatcher = PushDispatcher(store: store, transports: WakeTransportRegistry([counting]), log: Log(minimum: .error))
        let channel = MobileChannel(store: store.inbox, dispatcher: dispatcher)
        let worker = Task { await dispatcher.run() }
        try await Task.sleep(for: .milliseconds(200))
        let start = ContinuousClock.now
        let receipt = try await channel.deliver(Output(agentID: "bench", agentName: "Bench", sessionID: "s", parts: ["one line for everyone"]), to: "all")
        let written = seconds(ContinuousClock.now - start)
        let deadline = start + .seconds(300)
        while counting.acknowledged < devices, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(2)) }
        let elapsed = seconds(ContinuousClock.now - start)
        worker.cancel()
        await worker.value
        emit(["bench": "fanout", "devices": devices, "recipients": receipt.recipientCount, "acknowledged": counting.acknowledged, "delivered": counting.delivered,
              "written_s": written, "seconds": elapsed, "per_second": Double(devices) / elapsed])
    }
}

/// Several transports taken in turn: one HTTP/2 connection each.
final class RoundRobinTransport: WakeTransport, Sendable {
    let transports: [any WakeTransport]
    private let next = Atomic<Int>(0)
    var name: String { transports[0].name }
    init(_ transports: [any WakeTransport]) { self.transports = transports }
    func canWake(_ target: WakeTarget) -> Bool { transports[0].canWake(target) }
    func send(_ signal: WakeSignal, to target: WakeTarget) async -> WakeOutcome {
        await transports[next.add(1, ordering: .relaxed).oldValue % transports.count].send(signal, to: target)
    }
}

/// Counts what a transport was asked to send and what the service accepted.
final class CountingTransport: WakeTransport, Sendable {
    let inner: any WakeTransport
    private let counts = Atomic<Int>(0)
    private let accepted = Atomic<Int>(0)
    var name: String { inner.name }
    init(_ inner: any WakeTransport) { self.inner = inner }
    func canWake(_ target: WakeTarget) -> Bool { inner.canWake(target) }
    func send(_ signal: WakeSignal, to target: WakeTarget) async -> WakeOutcome {
        let outcome = await inner.send(signal, to: target)
        if outcome == .delivered { accepted.add(1, ordering: .relaxed) }
        counts.add(1, ordering: .relaxed)
        return outcome
    }
    var acknowledged: Int { counts.load(ordering: .relaxed) }
    var delivered: Int { accepted.load(ordering: .relaxed) }
}

/// Wraps a transport and records, per delivery, the time from the durable write to the service's acknowledgement.
final class TimingTransport: WakeTransport, @unchecked Sendable {
    let inner: any WakeTransport
    var name: String { inner.name }
    private let lock = NSLock()
    private var writtenAt: [String: ContinuousClock.Instant] = [:]
    private var ackedAt: [String: ContinuousClock.Instant] = [:]
    init(inner: any WakeTransport) { self.inner = inner }
    func canWake(_ target: WakeTarget) -> Bool { inner.canWake(target) }
    func delivered(_ id: String) { lock.withLock { if writtenAt[id] == nil { writtenAt[id] = .now } } }
    func send(_ signal: WakeSignal, to target: WakeTarget) async -> WakeOutcome {
        let outcome = await inner.send(signal, to: target)
        if let id = signal.deliveryID { lock.withLock { ackedAt[id] = .now } }
        return outcome
    }
    var completed: Int { lock.withLock { ackedAt.count } }
    var latencies: [Double] {
        lock.withLock {
            ackedAt.compactMap { id, acked in writtenAt[id].map { SoulacyBench.seconds(acked - $0) } }
        }
    }
}

struct BenchError: Error, CustomStringConvertible {
    let description: String
    init(_ d: String) { description = d }
}

extension Array {
    subscript(safe index: Int) -> Element? { indices.contains(index) ? self[index] : nil }
}

func residentMegabytes() -> Double {
    let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
    let line = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") } ?? ""
    return (Double(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "0") ?? 0) / 1024
}

final class Counters: Sendable {
    let next = Atomic<Int>(0)
    let delivered = Atomic<Int>(0)
    let peak = Atomic<Int>(0)
    func notePeak() {
        let now = Int(residentMegabytes().rounded(.up))
        if now > peak.load(ordering: .relaxed) { peak.store(now, ordering: .relaxed) }
    }
}
