import ChannelAPI
import Crypto
import Foundation
import Gateway
import HTTPClient
import JSON
import Mobile
import SoulacyClient

/// `soulacy-bench relay AGENTS.yaml LINES COMMANDS` with `SOULACY_RELAY_MAILBOX_URL` naming a running `soulacy-relay`:
/// a real gateway in this process carrying through that relay to a phone client (`GatewayClient`, the phone's own
/// side: sealed envelopes, cursors, held sends), beside the same phone reading and sending directly.
///
/// 1. Records: `LINES` inbox lines for the phone's person written at once through the store; the time until the
///    phone has read every one through the relay (the gateway's carriage seals and posts each, the phone pages,
///    opens and acknowledges), beside the phone reading the same lines over the direct path a page at a time.
/// 2. Held commands: the gateway stops; the phone sends `COMMANDS` memory facts, which the relay holds; the gateway
///    starts again on the same data directory, and the time until every one is applied and its answer read back by
///    the phone, beside the same commands sent directly (16 at a time).
enum RelayBench {
    static func run(arguments: [String]) async throws {
        guard arguments.count >= 3, let lines = Int(arguments[1]), let commands = Int(arguments[2]) else {
            throw BenchError("usage: soulacy-bench relay AGENTS.yaml LINES COMMANDS")
        }
        let env = ProcessInfo.processInfo.environment
        guard env["SOULACY_RELAY_MAILBOX_URL"] != nil else { throw BenchError("SOULACY_RELAY_MAILBOX_URL must name a running soulacy-relay") }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("soulacy-bench-relay-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var environment = env
        environment["SOULACY_RATE_LIMIT_PER_MINUTE"] = "0"
        var options = GatewayOptions(configPath: arguments[0], dataDirectory: directory + "/data", host: "127.0.0.1", port: 0, log: Log(minimum: .error),
                                     environment: environment)
        options.lanHost = "127.0.0.1"

        // The first life of the gateway: pair a phone (over the pinned listener, the only place the relay secret is
        // handed out), then the records.
        var gateway = try Gateway(options: options)
        guard let adminKey = try await gateway.bootstrapAdminKey() else { throw BenchError("a fresh data directory has no bootstrap key") }
        try gateway.start()
        let (token, relay) = try await pair(gateway, adminKey: adminKey)
        let base = "http://127.0.0.1:\(gateway.port)"
        let viaRelay = GatewayClient(paths: GatewayPaths(relay: relay), token: token, readBack: .zero)
        let direct = HTTP2Client()
        let records = try await recordsThroughRelay(gateway: gateway, phone: viaRelay, count: lines)
        let plainReads = try await readDirectly(base: base, token: token, client: direct, expected: lines)
        let plainCommands = try await commandsDirectly(base: base, token: token, client: direct, count: commands)
        await gateway.stop()

        // Gateway down: every command waits at the relay.
        let sendStart = ContinuousClock.now
        let held = await withTaskGroup(of: Bool.self) { group in
            for n in 0..<commands {
                group.addTask {
                    if case .held = await viaRelay.send(method: "POST", path: "/api/v1/memory/facts", body: Data(#"{"text":"held fact \#(n)"}"#.utf8)) { return true }
                    return false
                }
            }
            return await group.reduce(0) { $0 + ($1 ? 1 : 0) }
        }
        let holding = SoulacyBench.seconds(ContinuousClock.now - sendStart)

        // The second life, on the same data directory: the carriage applies what was held.
        options.lanHost = nil
        gateway = try Gateway(options: options)
        let restart = ContinuousClock.now
        try gateway.start()
        var settled = 0
        while settled < held, SoulacyBench.seconds(ContinuousClock.now - restart) < 300 {
            settled = await viaRelay.settleHeld().count
            if settled < held { try await Task.sleep(for: .milliseconds(20)) }
        }
        let applying = SoulacyBench.seconds(ContinuousClock.now - restart)
        await gateway.stop()
        SoulacyBench.emit([
            "records": records, "plain_reads": plainReads, "plain_commands": plainCommands,
            "held": ["count": commands, "held": held, "sending_seconds": holding, "settled": settled, "seconds": applying,
                     "per_second": Double(settled) / applying],
        ])
    }

    /// Pairs a phone as the app does: a pairing code made with the owner's key, redeemed over the pinned listener.
    static func pair(_ gateway: Gateway, adminKey: String) async throws -> (token: String, relay: RelayEndpoint) {
        let client = HTTP2Client()
        let made = try await client.send(ClientRequest(method: "POST", url: "http://127.0.0.1:\(gateway.port)/api/v1/pairing/tokens",
                                                       headers: [("authorization", "Bearer \(adminKey)")]))
        guard let code = (try? JSONValue.parse(made.body))?["code"]?.stringValue, let port = gateway.lanPort, let pin = gateway.tlsPin else {
            throw BenchError("no pairing code or pinned listener (HTTP \(made.status))")
        }
        let pinned = HTTP2Client(configuration: HTTP2ClientConfiguration(pinnedPublicKeySHA256: Hex.decode(pin)))
        let answer = try await pinned.send(ClientRequest(method: "POST", url: "https://127.0.0.1:\(port)/api/v1/pairing/redeem",
                                                         headers: [("content-type", "application/json")],
                                                         body: JSONValue.object(["code": .string(code), "name": "Bench phone"]).serializedBytes()))
        let redeemed = try JSONValue.parse(answer.body)
        guard let token = redeemed["token"]?.stringValue, let relay = redeemed["relay"], let url = relay["url"]?.stringValue,
              let mailbox = relay["mailbox_id"]?.stringValue, let device = relay["device_id"]?.stringValue,
              let secret = relay["secret"]?.stringValue.flatMap(Base64URL.decode) else {
            throw BenchError("pairing answered no relay endpoint (HTTP \(answer.status))")
        }
        return (token, RelayEndpoint(url: url, mailboxID: mailbox, deviceID: device, secret: secret))
    }

    static func output(_ n: Int) -> Output {
        Output(agentID: "bench", agentName: "Bench", sessionID: "relay", title: "Line \(n)",
               parts: ["Line \(n): a result of ordinary length for an inbox line, about as long as an agent's summary of its run."])
    }

    /// Lines for the owner written at once (one transaction), then read by the phone through the relay.
    static func recordsThroughRelay(gateway: Gateway, phone: GatewayClient, count: Int) async throws -> [String: Any] {
        let lines = (0..<count).map { (output: output($0), destination: Destination.user("owner")) }
        let start = ContinuousClock.now
        _ = try gateway.mobileStore.insertDeliveries(lines)
        var read = 0
        while read < count, SoulacyBench.seconds(ContinuousClock.now - start) < 300 {
            await phone.readRelay()
            read = await phone.relayRecords().count
            if read < count { try await Task.sleep(for: .milliseconds(10)) }
        }
        let seconds = SoulacyBench.seconds(ContinuousClock.now - start)
        let seqs = await phone.relayRecords().compactMap(\.seq)
        return ["count": count, "read": read, "in_order": seqs == seqs.sorted() && Set(seqs).count == seqs.count, "seconds": seconds,
                "per_second": Double(read) / seconds]
    }

    /// The same lines read over the direct path, a page of 100 at a time, newest first, as the app pages its inbox.
    static func readDirectly(base: String, token: String, client: HTTP2Client, expected: Int) async throws -> [String: Any] {
        let start = ContinuousClock.now
        var read = 0
        var cursor: String?
        repeat {
            let url = "\(base)/api/v1/mobile/deliveries?limit=100" + (cursor.map { "&cursor=\($0)" } ?? "")
            let page = try JSONValue.parse(try await client.send(ClientRequest(method: "GET", url: url, headers: [("authorization", "Bearer \(token)")])).body)
            read += page["deliveries"]?.arrayValue?.count ?? 0
            cursor = page["next_cursor"]?.stringValue
        } while cursor != nil && read < expected
        let seconds = SoulacyBench.seconds(ContinuousClock.now - start)
        return ["read": read, "seconds": seconds, "per_second": Double(read) / seconds]
    }

    /// The same commands sent directly, 16 at a time, each with its own Idempotency-Key as the phone sends them.
    static func commandsDirectly(base: String, token: String, client: HTTP2Client, count: Int) async throws -> [String: Any] {
        let start = ContinuousClock.now
        let ok = await SoulacyBench.inTurn(count: count, concurrency: 16) { n in
            let answer = try? await client.send(ClientRequest(method: "POST", url: "\(base)/api/v1/memory/facts",
                                                              headers: [("authorization", "Bearer \(token)"), ("content-type", "application/json"),
                                                                        ("idempotency-key", UUID().uuidString.lowercased())],
                                                              body: Array(#"{"text":"direct fact \#(n)"}"#.utf8)))
            return answer?.status == 201
        }
        let seconds = SoulacyBench.seconds(ContinuousClock.now - start)
        return ["count": count, "ok": ok, "seconds": seconds, "per_second": Double(ok) / seconds]
    }
}
