import ChannelAPI
import ChannelDelivery
import Foundation
import Gateway
import HTTPClient
import JSON
import Mobile
import SQLite
import Synchronization

/// A backlog's drain: the gate opens (the push service is back) and the gateway's own dispatcher empties the outbox.
enum Backlog {
    private struct RolledBack: Error {}

    /// The dispatcher's claim statement (as `SQLitePushOutbox.claimDue` runs it: the writer, an IMMEDIATE
    /// transaction, 256 rows), rolled back so the probe takes no rows. Its time includes the wait for the writer,
    /// which the dispatcher's own claims share with every settle.
    static func probeClaim(_ database: DatabasePool) async -> Double {
        let started = ContinuousClock.now
        let now = Date().sqliteMillis
        do {
            try await database.asyncTransaction { db -> Void in
                _ = try db.query("""
                    UPDATE mobile_push_outbox SET lease_owner = ?, lease_until = ?
                    WHERE id IN (SELECT id FROM mobile_push_outbox
                                 WHERE state = 'pending' AND next_attempt_at <= ? AND (lease_until IS NULL OR lease_until < ?)
                                 ORDER BY next_attempt_at, id LIMIT ?)
                    RETURNING *
                    """, "bench-probe", now + 60_000, now, now, 256)
                throw RolledBack()
            }
        } catch {}
        return SoulacyBench.seconds(ContinuousClock.now - started) * 1000
    }

    static func pending(_ database: DatabasePool) throws -> Int {
        Int(try database.read { try $0.query("SELECT COUNT(*) AS n FROM mobile_push_outbox WHERE state = 'pending'").first?.int("n") ?? 0 })
    }

    static func drain(store: MobileStore, dispatcher: PushDispatcher, wake: BenchWakeTransport, expected: Int) async throws -> [String: Any] {
        let database = store.database
        let before = wake.acknowledged
        let start = ContinuousClock.now
        wake.gate.set(open: true)
        dispatcher.poke()
        // Claim probes ten times a second, on their own task.
        let probes = Mutex<[(t: Double, ms: Double)]>([])
        let prober = Task.detached {
            while !Task.isCancelled {
                let ms = await probeClaim(database)
                probes.withLock { $0.append((SoulacyBench.seconds(ContinuousClock.now - start), ms)) }
                try? await Task.sleep(for: .milliseconds(100))
            }
        }
        var samples: [[String: Any]] = []
        var peakRSS = residentMegabytes()
        var drained: Double?
        while SoulacyBench.seconds(ContinuousClock.now - start) < 900 {
            try await Task.sleep(for: .milliseconds(250))
            // Counting a million pending rows four times a second would load the drain it watches: the transport's
            // count says how many are left until the outbox itself should be empty.
            let sent = wake.acknowledged - before
            let left = sent < expected ? expected - sent : try pending(database)
            let rss = residentMegabytes()
            peakRSS = max(peakRSS, rss)
            samples.append(["t": SoulacyBench.seconds(ContinuousClock.now - start), "pending": left, "rss_mb": rss, "sent": wake.acknowledged - before])
            if left == 0 {
                drained = SoulacyBench.seconds(ContinuousClock.now - start)
                break
            }
        }
        prober.cancel()
        await prober.value
        let all = probes.withLock { $0 }
        // Per second of the drain: the claim probes' p50 and p99.
        var perSecond: [[String: Any]] = []
        for second in 0..<Int((drained ?? 900).rounded(.up)) {
            let window = all.filter { Int($0.t) == second }.map(\.ms)
            if !window.isEmpty { perSecond.append(["t": second, "p50_ms": percentile(window, 0.5), "p99_ms": percentile(window, 0.99), "n": window.count]) }
        }
        let seconds = drained ?? SoulacyBench.seconds(ContinuousClock.now - start)
        return ["drained": drained != nil, "seconds": seconds, "per_second": Double(expected) / seconds, "sent": wake.acknowledged - before,
                "rss_peak_mb": peakRSS, "samples": samples, "claims": perSecond,
                "claim_p50_ms": percentile(all.map(\.ms), 0.5), "claim_p99_ms": percentile(all.map(\.ms), 0.99)]
    }
}

/// Channel sends through the durable hand-off (the channel outbox and the gateway's channel dispatcher, as a run's
/// outputs take it) beside the same bodies posted by a plain client.
enum ChannelBench {
    static func output(_ n: Int) -> Output {
        Output(agentID: "bench", agentName: "Bench", sessionID: "s-\(n % 977)", title: "Result from Bench",
               parts: ["Send \(n): a result of ordinary length for a webhook, about as long as an agent's summary of its run."])
    }

    static func handOff(gateway: Gateway, channel: String, destination: String, count: Int) async throws -> [String: Any] {
        let sends = (0..<count).map { PendingChannelSend(channel: channel, destination: destination, output: output($0), subject: "owner") }
        let database = gateway.database
        func left() throws -> Int {
            Int(try database.read { try $0.query("SELECT COUNT(*) AS n FROM channel_outbox WHERE state = 'pending'").first?.int("n") ?? 0 })
        }
        let start = ContinuousClock.now
        // Written durably (one transaction), then claimed, sent and settled by the dispatcher.
        try await gateway.channelOutbox.enqueue(sends, runID: nil, now: Date())
        gateway.channelDispatcher.poke()
        while try left() > 0, SoulacyBench.seconds(ContinuousClock.now - start) < 300 {
            try await Task.sleep(for: .milliseconds(20))
        }
        let seconds = SoulacyBench.seconds(ContinuousClock.now - start)
        let states = try database.read { db in
            try db.query("SELECT state, COUNT(*) AS n FROM channel_outbox GROUP BY state").reduce(into: [String: Int]()) { $0[$1.string("state") ?? "?"] = Int($1.int("n") ?? 0) }
        }
        _ = try database.write { try $0.run("DELETE FROM channel_outbox") }
        return ["count": count, "seconds": seconds, "per_second": Double(count) / seconds, "states": states]
    }

    /// The reference: the same JSON bodies (and headers of the same names and sizes, not computed) posted by
    /// libcurl through the same client configuration the webhook channel uses, with as many in flight as the
    /// dispatcher's window.
    static func plainPosts(url: String, count: Int, concurrency: Int) async throws -> [String: Any] {
        let client = HTTP2Client(configuration: HTTP2ClientConfiguration(maximumConnectionsPerHost: HTTP2ClientConfiguration.pooledConnectionsPerHost))
        let created = JSONValue.iso8601(Date())
        let bodies: [[UInt8]] = (0..<count).map { n in
            let o = output(n)
            return JSONValue.object([
                "id": .string(PendingChannelSend.newID()), "type": "agent.output", "agent_id": .string(o.agentID), "agent_name": .string(o.agentName),
                "session_id": .string(o.sessionID), "title": .string(o.title), "text": .string(o.body),
                "parts": .array(o.parts.map { .object(["type": "text", "text": .string($0)]) }), "metadata": .object([:]), "created_at": .string(created),
            ]).serializedBytes()
        }
        let signature = "v1," + String(repeating: "A", count: 43) + "="
        let headers = [("Content-Type", "application/json"), ("User-Agent", "Soulacy-Gateway"), ("webhook-id", PendingChannelSend.newID()),
                       ("webhook-timestamp", "1767225600"), ("webhook-signature", signature), ("X-Soulacy-Timestamp", "1767225600"),
                       ("X-Soulacy-Signature", "sha256=" + String(repeating: "0", count: 64))]
        _ = try? await client.send(ClientRequest(method: "POST", url: url, headers: headers, body: bodies[0]))  // warm up
        let start = ContinuousClock.now
        let ok = await SoulacyBench.inTurn(count: count, concurrency: concurrency) { n in
            guard let response = try? await client.send(ClientRequest(method: "POST", url: url, headers: headers, body: bodies[n])) else { return false }
            return (200..<300).contains(response.status)
        }
        let seconds = SoulacyBench.seconds(ContinuousClock.now - start)
        return ["count": count, "ok": ok, "seconds": seconds, "per_second": Double(count) / seconds]
    }
}

/// Agent runs whose model is a scripted stand-in (benchmarks/llm_standin.py): from the stand-in's last token (its
/// own clock, written down just before the last bytes go out) to the inbox line and to its wake-up.
enum LLMBench {
    static func runs(harness: GatewayHarness, wake: BenchWakeTransport, agent: String, count: Int, standInTimes: String) async throws -> [String: Any] {
        let gateway = harness.gateway
        let store = gateway.mobileStore
        try store.devices.register(try DeviceRegistration(json: JSONObject(["id": "llm-phone", "push_token": .string(Household.pushToken),
                                                                            "notifications_enabled": true])), subject: "owner")
        wake.recordTimes()
        let client = HTTP2Client()
        let base = "http://127.0.0.1:\(gateway.port)"
        let auth = [("Authorization", "Bearer \(harness.adminKey)"), ("Content-Type", "application/json")]
        var deliveries: [String] = []
        var failures: [String] = []
        for i in 0..<count {
            let started = try await client.send(ClientRequest(method: "POST", url: "\(base)/api/v1/agents/\(agent)/run", headers: auth,
                                                              body: JSONValue.object(["input": .string("run \(i)"), "to": "device:llm-phone"]).serializedBytes()))
            guard started.status == 202, let runID = (try? JSONValue.parse(started.body))?["run_id"]?.stringValue else {
                failures.append("run \(i): HTTP \(started.status) \(String(decoding: started.body.prefix(200), as: UTF8.self))")
                continue
            }
            let finished = try await client.send(ClientRequest(method: "GET", url: "\(base)/api/v1/runs/\(runID)?wait=true", headers: auth, timeout: .seconds(60)))
            guard let run = try? JSONValue.parse(finished.body), let delivery = run["delivery_id"]?.stringValue else {
                failures.append("run \(i): no delivery: \(String(decoding: finished.body.prefix(300), as: UTF8.self))")
                continue
            }
            // Its wake-up, acknowledged by the stand-in, before the next run starts.
            let deadline = ContinuousClock.now + .seconds(10)
            while wake.times(of: delivery) == nil, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(1)) }
            deliveries.append(delivery)
        }
        // The stand-in's last-token times, one per request, in order (the runs went one at a time).
        let times = try await client.send(ClientRequest(method: "GET", url: standInTimes))
        let lastTokens = (try? JSONValue.parse(times.body))?.arrayValue?.compactMap(\.numberValue) ?? []
        guard lastTokens.count == deliveries.count else {
            throw BenchError("the stand-in answered \(lastTokens.count) requests for \(deliveries.count) runs; failures: \(failures.prefix(3))")
        }
        var toLine: [Double] = []
        var toSent: [Double] = []
        var toAcked: [Double] = []
        // The first runs open connections and warm caches: left out.
        let warmUp = min(5, deliveries.count / 10)
        for (i, delivery) in deliveries.enumerated() where i >= warmUp {
            let token = lastTokens[i]
            // created_at: the store's clock when the line was prepared, just before its transaction (milliseconds).
            if let created = try store.database.read({ try $0.query("SELECT created_at FROM mobile_deliveries WHERE id = ?", delivery).first?.int("created_at") }) {
                toLine.append((Double(created) / 1000 - token) * 1000)
            }
            if let wakeUp = wake.times(of: delivery) {
                toSent.append((wakeUp.sent - token) * 1000)
                toAcked.append((wakeUp.acked - token) * 1000)
            }
        }
        return ["runs": count, "measured": toAcked.count, "failures": failures.count, "first_failure": failures.first ?? "",
                "line_p50_ms": percentile(toLine, 0.5), "line_p99_ms": percentile(toLine, 0.99),
                "sent_p50_ms": percentile(toSent, 0.5), "sent_p99_ms": percentile(toSent, 0.99),
                "acked_p50_ms": percentile(toAcked, 0.5), "acked_p99_ms": percentile(toAcked, 0.99), "acked_ms": toAcked]
    }
}
