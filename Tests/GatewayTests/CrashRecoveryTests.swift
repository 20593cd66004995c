import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import GatewayTestSupport
import APIKit
import SQLite
import Testing

/// kill -9 of the real gateway process in the middle of a burst of deliveries.
@Suite("Crash recovery", .serialized)
struct CrashRecoveryTests {
    static let secret = "CRASH-TEST-PRIVATE-OUTPUT"

    @Test("channel sends: after kill -9 mid-burst every acknowledged run's output is delivered, none recorded as delivered is sent again",
          arguments: BuiltInChannel.allCases)
    func killMidChannelBurst(_ kind: BuiltInChannel) async throws {
        // The services' own pacing (Discord's bucket, Teams' 4 a second) is off: this is about the kill.
        let service = try await ChannelService.start(kind, limits: .off)
        defer { service.stop() }
        try await service.delay(milliseconds: 20)  // keep sends in flight when the kill lands
        let setup = service.setup()
        let directory = TestGateway.makeTemporaryDirectory()
        let configPath = directory + "/gateway-config.yaml"
        try setup.gatewayConfig.write(toFile: configPath, atomically: true, encoding: .utf8)
        let workers = 4
        // Each run's text names the run, so what the service took can be matched to the outbox's rows.
        let soul = service.soul((0..<workers).map { ("reporter-\($0)", setup.destination) },
                                command: #"["/bin/sh", "-c", "echo \#(Self.secret) $SOULACY_RUN_ID"]"#)
        let gateway = try GatewayProcess(directory: directory, config: soul, environment: ["SOULACY_GATEWAY_CONFIG": configPath])
        let key = try #require(try await gateway.start())
        // Each worker runs its agent to the end, again and again: a 200 means the run ended and its send is recorded.
        let acknowledged = Acknowledged()
        let otherAnswers = Acknowledged()
        let burst = Task {
            await withTaskGroup(of: Void.self) { group in
                for worker in 0..<workers {
                    group.addTask {
                        for _ in 0..<500 {
                            guard let (status, body) = try? await gateway.call("POST", "/api/v1/agents/reporter-\(worker)/trigger", key: key) else { return }
                            if status == 200, body["delivered"] == true, let run = body["run_id"]?.stringValue { acknowledged.add(run) } else { otherAnswers.add("\(status) \(body)") }
                        }
                    }
                }
            }
        }
        #expect(await eventually(timeout: .seconds(60)) { acknowledged.count >= 20 },
                "\(acknowledged.count) acknowledged; other answers: \(otherAnswers.ids.prefix(3)); gateway: \(gateway.output.suffix(2000))")
        gateway.kill9()
        await burst.value
        let acked = acknowledged.ids

        let database = directory + "/data/soulacy.db"
        let before = try Connection(path: database, readOnly: true)
        let deliveredBefore = Set(try before.query("SELECT run_id FROM channel_outbox WHERE state = 'delivered'").compactMap { $0.string("run_id") })
        let inFlightAtKill = Set(try before.query("SELECT run_id FROM channel_outbox WHERE state = 'pending' AND lease_owner IS NOT NULL")
            .compactMap { $0.string("run_id") })
        #expect(try before.integrityCheck() == "ok")

        _ = try await gateway.start()
        let pool = try DatabasePool(path: database, readerCount: 1)
        #expect(await eventually(timeout: .seconds(60)) {
            (try? pool.read { try $0.query("SELECT COUNT(*) AS n FROM channel_outbox WHERE state = 'pending'").first?.int("n") }) == 0
        })
        let after = try Connection(path: database, readOnly: true)
        let rows = try after.query("SELECT id, run_id, channel, state FROM channel_outbox")
        let deliveredRuns = Set(rows.filter { $0.string("state") == "delivered" }.compactMap { $0.string("run_id") })
        // 1. Every acknowledged run's output went out.
        #expect(acked.isSubset(of: deliveredRuns), "lost: \(acked.subtracting(deliveredRuns).count) of \(acked.count)")
        #expect(rows.allSatisfy { $0.string("state") == "delivered" && $0.string("channel") == kind.rawValue })
        // The runs say so too: each acknowledged run's output is delivered, with when.
        for run in acked {
            let (_, view) = try await gateway.call("GET", "/api/v1/runs/\(run)", key: key)
            let outputs = view["outputs"]?.arrayValue ?? []
            #expect(outputs.count == 1 && outputs[0]["state"] == "delivered" && outputs[0]["delivered_at"]?.stringValue != nil, "\(run): \(view)")
        }
        // 2. The service took every send; one recorded as delivered before the kill exactly once. Only a send in
        // flight at the kill may arrive twice: the service took it while the answer died with the process.
        let received = try await service.received()
        var timesTaken: [String: Int] = [:]
        for row in rows {
            let run = row.string("run_id") ?? ""
            timesTaken[run] = received.filter { $0.contains(run) }.count
        }
        for (run, taken) in timesTaken {
            #expect(taken >= 1, "\(run)'s output never arrived")
            if deliveredBefore.contains(run) { #expect(taken == 1, "\(run) was recorded as delivered and sent \(taken) times") }
            #expect(taken <= 2)
        }
        let duplicated = Set(timesTaken.filter { $0.value > 1 }.keys)
        #expect(duplicated.isSubset(of: inFlightAtKill), "sent twice without having been in flight: \(duplicated.subtracting(inFlightAtKill))")
        #expect(try after.integrityCheck() == "ok")
        gateway.terminate()
    }

    @Test("after kill -9 mid-burst every acknowledged delivery is in the inbox and every wake-up is sent, none twice once recorded")
    func killMidBurst() async throws {
        let standIn = try await APNsStandIn.start()
        defer { standIn.stop() }
        try await standIn.delay(milliseconds: 15)  // keep pushes in flight when the kill lands
        let directory = TestGateway.makeTemporaryDirectory()
        let gateway = try GatewayProcess(directory: directory, environment: standIn.environment)
        let key = try #require(try await gateway.start())
        let tokens = (0..<3).map { String(repeating: String(format: "%02x", $0 + 1), count: 32) }
        for (i, token) in tokens.enumerated() {
            let (status, _) = try await gateway.call("POST", "/api/v1/mobile/devices", key: key,
                                             json: ["notifications_enabled": true, "id": .string("phone-\(i)"), "push_token": .string(token)])
            #expect(status == 201)
        }

        // Eight clients post deliveries as fast as they can; the process is killed after 60 acknowledgements.
        let acknowledged = Acknowledged()
        let burst = Task {
            await withTaskGroup(of: Void.self) { group in
                for worker in 0..<8 {
                    group.addTask {
                        for n in 0..<1000 {
                            guard let (status, body) = try? await gateway.call("POST", "/api/v1/channels/mobile/test", key: key,
                                                                       json: ["body": .string("\(Self.secret) \(worker)-\(n)")]) else { return }
                            if status == 201, let id = body["delivery_id"]?.stringValue { acknowledged.add(id) }
                        }
                    }
                }
            }
        }
        #expect(await eventually(timeout: .seconds(30)) { acknowledged.count >= 60 })
        gateway.kill9()
        await burst.value
        let acked = acknowledged.ids
        #expect(acked.count >= 60)

        // What the dead process had recorded as sent: these must never go out again.
        let database = directory + "/data/soulacy.db"
        let before = try Connection(path: database, readOnly: true)
        let sentBefore = Set(try before.query("SELECT wake_id FROM mobile_push_outbox WHERE state = 'sent'").compactMap { $0.string("wake_id") })
        let inFlightAtKill = Set(try before.query("SELECT wake_id FROM mobile_push_outbox WHERE state = 'pending' AND lease_owner IS NOT NULL")
            .compactMap { $0.string("wake_id") })
        #expect(try before.integrityCheck() == "ok")

        _ = try await gateway.start()
        let pool = try DatabasePool(path: database, readerCount: 1)
        #expect(await eventually(timeout: .seconds(60)) {
            (try? pool.read { try $0.query("SELECT COUNT(*) AS n FROM mobile_push_outbox WHERE state = 'pending'").first?.int("n") }) == 0
        })
        let after = try Connection(path: database, readOnly: true)

        // 1. Every acknowledged delivery is in the inbox, whole.
        var inbox: Set<String> = []
        var cursor: String? = nil
        repeat {
            let (_, page) = try await gateway.call("GET", "/api/v1/mobile/deliveries?device_id=phone-0&limit=200" + (cursor.map { "&cursor=\($0)" } ?? ""), key: key)
            for line in page["deliveries"]?.arrayValue ?? [] {
                if let id = line["id"]?.stringValue { inbox.insert(id) }
                #expect(line["body"]?.stringValue?.hasPrefix(Self.secret) == true)
            }
            cursor = page["next_cursor"]?.stringValue
        } while cursor != nil
        #expect(acked.isSubset(of: inbox), "lost: \(acked.subtracting(inbox))")

        // 2. Every wake-up of every stored delivery was sent; one per device.
        let rows = try after.query("SELECT wake_id, delivery_id, state FROM mobile_push_outbox")
        #expect(rows.count == inbox.count * 3)
        #expect(rows.allSatisfy { $0.string("state") == "sent" })
        let received = try await standIn.requests().filter { $0["status"] == 200 }
        var timesSent: [String: Int] = [:]
        for request in received { if let id = request["headers"]?["apns-id"]?.stringValue { timesSent[id, default: 0] += 1 } }
        for row in rows {
            let wake = row.string("wake_id") ?? ""
            #expect((timesSent[wake] ?? 0) >= 1, "wake-up \(wake) never arrived")
            // 3. One that was acknowledged and recorded before the kill was not sent again.
            if sentBefore.contains(wake) { #expect(timesSent[wake] == 1, "wake-up \(wake) was resent after it was recorded") }
        }
        // Only a wake-up in flight at the instant of the kill can arrive twice: the service may have taken it
        // while the answer died with the process. Those carry the delivery as apns-collapse-id, so the phone shows one.
        let duplicated = Set(timesSent.filter { $0.value > 1 }.keys)
        #expect(duplicated.isSubset(of: inFlightAtKill), "resent without having been in flight: \(duplicated.subtracting(inFlightAtKill))")
        #expect(timesSent.values.allSatisfy { $0 <= 2 })
        let collapse = received.compactMap { $0["headers"]?["apns-collapse-id"]?.stringValue }
        #expect(collapse.count == received.count && Set(collapse).isSubset(of: inbox))

        // 4. Nothing the agent said reached the push service; the database is sound.
        #expect(!received.map { $0.serialized() }.joined().contains(Self.secret))
        #expect(try after.integrityCheck() == "ok")
        gateway.terminate()
    }
}

extension CrashRecoveryTests {
    @Test("kill -9 at random points during deliveries and decisions: nothing acknowledged is lost, nothing is decided twice")
    func killDuringDecisions() async throws {
        let directory = TestGateway.makeTemporaryDirectory()
        let gateway = try GatewayProcess(directory: directory)
        let key = try #require(try await gateway.start())
        let deliveries = Acknowledged()
        let decisions = Decisions()
        // The kill points come from a seed that every failure message names, so a failing run can be replayed
        // (SOULACY_TEST_SEED=<seed> picks it).
        let seed = ProcessInfo.processInfo.environment["SOULACY_TEST_SEED"].flatMap(UInt64.init) ?? UInt64.random(in: 1...UInt64.max)
        var random = SplitMix(seed: seed)
        for cycle in 0..<3 {
            let calls = (0..<20).map { "call-\(cycle)-\($0)" }
            for call in calls {
                let (status, _) = try await gateway.call("POST", "/api/v1/approvals", key: key,
                                                      json: ["agent_id": "echo", "tool": "unlock", "call_id": .string(call), "wait": false])
                #expect(status == 201)
            }
            let work = Task {
                await withTaskGroup(of: Void.self) { group in
                    for worker in 0..<6 {
                        group.addTask {
                            for n in 0..<400 {
                                let call = calls[(worker * 7 + n) % calls.count]
                                let verb = (worker + n) % 2 == 0 ? "approve" : "deny"
                                guard let (status, body) = try? await gateway.call("POST", "/approvals/\(call)/\(verb)", key: key) else { return }
                                if status == 200, let state = body["state"]?.stringValue { decisions.add(call, state: state, decidedNow: body["already_decided"] == false) }
                                guard let (s2, b2) = try? await gateway.call("POST", "/api/v1/channels/mobile/test", key: key, json: ["body": .string("d\(cycle)-\(worker)-\(n)")]) else { return }
                                if s2 == 201, let id = b2["delivery_id"]?.stringValue { deliveries.add(id) }
                            }
                        }
                    }
                }
            }
            try await Task.sleep(for: .milliseconds(80 + random.next(321)))
            gateway.kill9()
            _ = await work.result
            _ = try await gateway.start()
        }
        let db = try Connection(path: directory + "/data/soulacy.db", readOnly: true)
        #expect(try db.integrityCheck() == "ok", "seed \(seed)")
        let stored = Dictionary(uniqueKeysWithValues: try db.query("SELECT call_id, state FROM approvals").map { ($0.string("call_id")!, $0.string("state")!) })
        let seen = decisions.all
        // One decider at most per approval, and what it was told is what is stored.
        for (call, answers) in seen {
            #expect(answers.filter(\.decidedNow).count <= 1, "\(call) was decided twice (seed \(seed))")
            for answer in answers { #expect(stored[call] == answer.state, "\(call): told \(answer.state), stored \(stored[call] ?? "nothing") (seed \(seed))") }
        }
        #expect(seen.values.contains { $0.contains(where: \.decidedNow) })
        let lines = Set(try db.query("SELECT id FROM mobile_deliveries").compactMap { $0.string("id") })
        #expect(deliveries.ids.isSubset(of: lines), "lost \(deliveries.ids.subtracting(lines).count) acknowledged deliveries (seed \(seed))")
        // A second answer after the restarts reports the decision already taken.
        if let (call, state) = stored.first(where: { $0.value != "pending" }) {
            let (_, again) = try await gateway.call("POST", "/approvals/\(call)/approve", key: key)
            #expect(again["already_decided"] == true && again["state"]?.stringValue == state)
        }
        gateway.terminate()
    }
}

final class Decisions: @unchecked Sendable {
    struct Answer { let state: String; let decidedNow: Bool }
    private let lock = NSLock()
    private var answers: [String: [Answer]] = [:]
    func add(_ call: String, state: String, decidedNow: Bool) { lock.withLock { answers[call, default: []].append(Answer(state: state, decidedNow: decidedNow)) } }
    var all: [String: [Answer]] { lock.withLock { answers } }
}

final class Acknowledged: @unchecked Sendable {
    private let lock = NSLock()
    private var set: Set<String> = []
    func add(_ id: String) { lock.withLock { _ = set.insert(id) } }
    var count: Int { lock.withLock { set.count } }
    var ids: Set<String> { lock.withLock { set } }
}
