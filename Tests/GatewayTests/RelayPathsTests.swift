import Crypto
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
import ChannelAPI
import Gateway
import Mobile
#endif
import GatewayTestSupport
import HTTPClient
import APIKit
import RelayProtocol
import SoulacyClient
import SQLiteStores
import Testing

/// The phone's three paths to its gateway: the pinned Wi-Fi listener, the tailnet, and the end-to-end encrypted
/// relay mailbox with idempotent held sends. The seed's scenarios that make sense without a phone.
@Suite("The phone's three paths", .serialized)
struct RelayPathsTests {
    static let secretText = "RELAY-PLAINTEXT-MUST-NOT-APPEAR-7c1"

    /// Pairs a phone over the pinned Wi-Fi listener, the only place the relay secret is handed out; returns its
    /// token and relay endpoint.
    func pairPhone(_ gw: TestGateway) async throws -> (token: String, relay: RelayEndpoint) {
        let code = try #require(try await gw.request("POST", "/api/v1/pairing/tokens").json["code"]?.stringValue)
        let port = try #require(gw.gateway.lanPort, "relay tests pair over the pinned listener: start the gateway with lan: true")
        let pinned = HTTP2Client(configuration: HTTP2ClientConfiguration(pinnedPublicKeySHA256: Hex.decode(gw.gateway.tlsPin!)))
        let answer = try await pinned.send(ClientRequest(method: "POST", url: "https://127.0.0.1:\(port)/api/v1/pairing/redeem", headers: [("content-type", "application/json")],
                                                         body: JSONValue.object(["code": .string(code), "name": "Test phone"]).serializedBytes()))
        let redeemed = try JSONValue.parse(answer.body)
        let token = try #require(redeemed["token"]?.stringValue)
        let relay = try #require(redeemed["relay"])
        return (token, RelayEndpoint(url: relay["url"]!.stringValue!, mailboxID: relay["mailbox_id"]!.stringValue!,
                                     deviceID: relay["device_id"]!.stringValue!, secret: Base64URL.decode(relay["secret"]!.stringValue!)!))
    }

    /// A relay mailbox server and a gateway that carries through it, both stopped afterwards.
    func withRelayGateway(environment: [String: String] = [:], _ body: (RelayServerProcess, TestGateway) async throws -> Void) async throws {
        let relay = RelayServerProcess()
        try await relay.start()
        defer { relay.stop() }
        try await withTestGateway(environment: environment.merging(["SOULACY_RELAY_MAILBOX_URL": relay.url]) { $1 }, lan: true) { gw in try await body(relay, gw) }
    }

    @Test("commands a phone sends through the relay are applied in process: a loopback address past its request limit does not hold them up")
    func relayPastTheRateLimit() async throws {
        try await withRelayGateway(environment: ["SOULACY_RATE_LIMIT_PER_MINUTE": "3"]) { relay, gw in
            let (token, endpoint) = try await pairPhone(gw)
            // The pairing took two of loopback's three; the rest goes now.
            while try await gw.request("GET", "/health", key: .none).status != 429 {}
            let limited = ContinuousClock.now
            let phone = client(nil, token: token, relay: endpoint)
            for _ in 0..<5 {
                guard case .answered(let answer, .relay) = await phone.send(method: "GET", path: "/api/v1/mobile/deliveries") else {
                    Issue.record("no answer through the relay"); return
                }
                #expect(answer.status == 200)
            }
            // Loopback is still limited: only the places that came back meanwhile (one every 20 s at 3 a minute; a
            // loaded machine can take that long for the five) pass before the next 429.
            let cameBack = Int((ContinuousClock.now - limited) / .seconds(20)) + 1
            var passed = 0
            while try await gw.request("GET", "/health", key: .none).status != 429, passed <= cameBack { passed += 1 }
            #expect(passed <= cameBack, "\(passed) requests passed where \(cameBack) places can have come back")
        }
    }

    @Test("phones enrolled while the gateway's first mailbox is still being made all land in that one mailbox")
    func oneMailboxUnderConcurrentEnrolment() async throws {
        let relay = RelayServerProcess()
        try await relay.start()
        defer { relay.stop() }
        let database = try migratedDatabase(TestGateway.makeTemporaryDirectory() + "/soulacy.db")
        defer { database.close() }
        let mobile = try MobileStore(database: database)
        let keys = try SQLiteAPIKeyStore(database: database)
        // A fresh carriage with no mailbox yet, and no run loop: the enrolments are the first to need one.
        let carriage = RelayCarriage(url: relay.url, caFile: nil, store: try SQLiteRelayCarriageStore(database: database, sealingKey: SecureBytes.random(count: 32)),
                                     mobile: mobile.inbox, keys: keys, log: Log(minimum: .error)) { _, _, _ in .noContent }
        let enrolments = try await withThrowingTaskGroup(of: RelayCarriage.Enrollment.self) { group in
            for phone in 0..<4 { group.addTask { try await carriage.enroll(keyID: "key_\(phone)", subject: "owner") } }
            var all: [RelayCarriage.Enrollment] = []
            for try await enrolment in group { all.append(enrolment) }
            return all
        }
        #expect(enrolments.count == 4)
        #expect(Set(enrolments.map(\.mailboxID)).count == 1, "mailboxes: \(Set(enrolments.map(\.mailboxID)))")
    }

    @Test("the relay secret never travels in plain HTTP: a plain redeem gets a hint, the pinned listener gets the secret")
    func relaySecretOnlyOverPinnedTLS() async throws {
        try await withRelayGateway { _, gw in
            let code = try #require(try await gw.request("POST", "/api/v1/pairing/tokens").json["code"]?.stringValue)
            let plain = try await gw.request("POST", "/api/v1/pairing/redeem", json: ["code": .string(code), "name": "Tailnet phone"], key: .none)
            #expect(plain.status == 200 && plain.json["token"]?.stringValue != nil)
            #expect(plain.json["relay"] == nil && plain.json["relay_hint"]?.stringValue?.contains("pinned") == true)
            let (_, endpoint) = try await pairPhone(gw)
            #expect(endpoint.secret.count == 32)
        }
    }

    func client(_ gw: TestGateway?, token: String, relay: RelayEndpoint?, lanPin: String? = nil, readBack: Duration = .seconds(6)) -> GatewayClient {
        var paths = GatewayPaths(relay: relay)
        if let gw, let port = gw.gateway.lanPort { paths.lan = ("https://127.0.0.1:\(port)", lanPin ?? gw.gateway.tlsPin!) }
        paths.tailnet = gw.map { $0.baseURL } ?? "http://127.0.0.1:\(freePort())"
        // A path that answers must not lose its probe to a loaded machine's stall; closed ports are refused at once.
        return GatewayClient(paths: paths, token: token, probeTimeout: .seconds(10), readBack: readBack)
    }

    @Test("the Wi-Fi listener is HTTPS with a pinned key: the right pin connects, a wrong one is refused; both pairing links carry the one pin")
    func pinning() async throws {
        try await withTestGateway(lan: true) { (gw) async throws in
            let fingerprint = try #require(gw.gateway.tlsPin)
            #expect(fingerprint.count == 64)
            let offer = try await gw.request("POST", "/api/v1/pairing/tokens").json
            let link = offer["link"]?.stringValue ?? ""
            #expect(link.contains("fp=\(fingerprint)") && link.contains("lan=127.0.0.1:\(gw.gateway.lanPort!)"))
            // The original app's link goes to the pinned listener and pins its public key (64 hex, not the certificate's hash).
            let pin = fingerprint
            let code = offer["code"]?.stringValue ?? ""
            #expect(offer["pair_url"] == .string("https://127.0.0.1:\(gw.gateway.lanPort!)/mobile?pair=\(code)&fp=\(pin)"))
            #expect(offer["fingerprint"] == .string(pin))
            // The pin is SHA-256 of the certificate's EC point (0x04‖X‖Y), as iOS' SecKeyCopyExternalRepresentation gives it.
            let pem = try String(contentsOfFile: GatewayTLSIdentity.certificatePath(dataDirectory: gw.gateway.options.dataDirectory), encoding: .utf8)
            let point = try await runProgram("/bin/sh", ["-c", "printf '%s' \"$0\" | openssl x509 -pubkey -noout | openssl ec -pubin -outform DER 2>/dev/null | tail -c 65 | openssl dgst -sha256 -r", pem])
            #expect(point.output.hasPrefix(pin), "\(point.output)")
            let key = try await gw.mintKey(subject: "owner", role: "operator")
            let good = GatewayClient(paths: GatewayPaths(lan: ("https://127.0.0.1:\(gw.gateway.lanPort!)", fingerprint)), token: key, probeTimeout: .seconds(10))
            #expect(await good.probe() == .lan)
            guard case .answered(let answer, .lan) = await good.send(method: "GET", path: "/api/v1/mobile/deliveries") else { Issue.record("no answer over the Wi-Fi"); return }
            #expect(answer.status == 200)
            let wrongPin = String(fingerprint.reversed())
            let bad = GatewayClient(paths: GatewayPaths(lan: ("https://127.0.0.1:\(gw.gateway.lanPort!)", wrongPin)), token: key, probeTimeout: .seconds(10))
            #expect(await bad.probe() == nil)
            guard case .unreachable = await bad.send(method: "GET", path: "/api/v1/mobile/deliveries") else { Issue.record("a wrong pin connected"); return }
            // The door: a browser Origin is refused; a POST without an Idempotency-Key is 422.
            let pinned = HTTP2Client(configuration: HTTP2ClientConfiguration(pinnedPublicKeySHA256: Hex.decode(fingerprint)))
            let base = "https://127.0.0.1:\(gw.gateway.lanPort!)"
            let noKey = try await pinned.send(ClientRequest(method: "POST", url: base + "/api/v1/memory/facts", headers: [("authorization", "Bearer \(key)")], body: Array(#"{"text":"x"}"#.utf8)))
            #expect(noKey.status == 422 && String(decoding: noKey.body, as: UTF8.self).contains("idempotency_key_required"))
            let browser = try await pinned.send(ClientRequest(method: "GET", url: base + "/api/v1/mobile/deliveries", headers: [("authorization", "Bearer \(key)"), ("origin", "https://evil.example")]))
            #expect(browser.status == 403)
        }
    }

    @Test("replaying a mutating call answers from the log: same status and body, one effect, across restarts; a reused key on another route is 409")
    func idempotency() async throws {
        let directory = TestGateway.makeTemporaryDirectory()
        let key = "intent-0001"
        let first = try await withTestGateway(directory: directory) { (gw) async throws -> TestResponse in
            let r = try await gw.request("POST", "/api/v1/memory/facts", json: ["text": "likes tea"], headers: ["Idempotency-Key": key])
            #expect(r.status == 201)
            let again = try await gw.request("POST", "/api/v1/memory/facts", json: ["text": "likes tea"], headers: ["Idempotency-Key": key])
            #expect(again.status == 201 && again.body == r.body && again.headers["idempotent-replayed"] == "true")
            let elsewhere = try await gw.request("POST", "/api/v1/channels/mobile/test", headers: ["Idempotency-Key": key])
            #expect(elsewhere.status == 409 && elsewhere.errorCode == "idempotency_key_reused")
            return r
        }
        try await withTestGateway(directory: directory) { (gw) async throws in
            let replay = try await gw.request("POST", "/api/v1/memory/facts", json: ["text": "likes tea"], headers: ["Idempotency-Key": key])
            #expect(replay.body == first.body && replay.headers["idempotent-replayed"] == "true")
            #expect(try await gw.request("GET", "/api/v1/memory/facts").json["facts"]?.arrayValue?.count == 1)
        }
    }

    @Test("with neither direct path answering, the phone falls back to the relay and reads its inbox through it, sealed")
    func relayFallback() async throws {
        try await withRelayGateway { relay, gw in
            let (token, endpoint) = try await pairPhone(gw)
            _ = try await gw.request("POST", "/api/v1/mobile/devices", json: ["id": "phone"], key: .some(token))
            _ = try await gw.request("POST", "/api/v1/channels/mobile/test", json: ["body": .string(Self.secretText)])
            // Both direct paths point at closed ports: only the relay is left.
            let phone = GatewayClient(paths: GatewayPaths(lan: ("https://127.0.0.1:\(freePort())", String(repeating: "0", count: 64)),
                                                          tailnet: "http://127.0.0.1:\(freePort())", relay: endpoint), token: token, probeTimeout: .seconds(1))
            #expect(await phone.probe() == .relay)
            guard case .answered(let answer, .relay) = await phone.send(method: "GET", path: "/api/v1/mobile/deliveries?device_id=phone") else {
                Issue.record("no answer through the relay"); return
            }
            #expect(answer.status == 200)
            #expect(String(decoding: answer.body, as: UTF8.self).contains(Self.secretText))
            // New lines came down as sealed records too.
            await phone.readRelay()
            #expect(await eventually {
                await phone.readRelay()
                return await phone.relayRecords().contains { $0.fields["body"] == Self.secretText }
            })
            #expect(relay.storedBytes().range(of: Data(Self.secretText.utf8)) == nil)
            // A command with an empty path (it once trapped the gateway's carriage) is answered as the router answers
            // an empty path (the root's page); the carriage goes on.
            for path in ["", "?", "?a=b"] {
                guard case .answered(let odd, .relay) = await phone.send(method: "GET", path: path) else { Issue.record("no answer for '\(path)'"); return }
                #expect(odd.status == 200 && String(decoding: odd.body, as: UTF8.self).contains("<html"), "'\(path)': \(odd.status)")
            }
            guard case .answered(let again, .relay) = await phone.send(method: "GET", path: "/api/v1/mobile/deliveries?device_id=phone") else {
                Issue.record("no answer through the relay after the empty paths"); return
            }
            #expect(again.status == 200)
        }
    }

    @Test("a relay with an enrollment token makes a mailbox for the gateway that presents it, and for no other")
    func enrollmentToken() async throws {
        let relay = RelayServerProcess()
        try await relay.start(environment: ["SOULACY_RELAY_ENROLL_TOKEN": "enroll-7c21"])
        defer { relay.stop() }
        try await withTestGateway(environment: ["SOULACY_RELAY_MAILBOX_URL": relay.url, "SOULACY_RELAY_MAILBOX_TOKEN": "enroll-7c21"], lan: true) { gw in
            let (token, endpoint) = try await pairPhone(gw)
            _ = try await gw.request("POST", "/api/v1/mobile/devices", json: ["id": "phone"], key: .some(token))
            let phone = GatewayClient(paths: GatewayPaths(tailnet: "http://127.0.0.1:\(freePort())", relay: endpoint), token: token, probeTimeout: .seconds(10))
            guard case .answered(let answer, .relay) = await phone.send(method: "GET", path: "/api/v1/mobile/deliveries?device_id=phone") else {
                Issue.record("no answer through the relay"); return
            }
            #expect(answer.status == 200)
        }
        // A gateway without the token gets no mailbox: its phone pairs, without a relay path, and the token never shows.
        try await withTestGateway(environment: ["SOULACY_RELAY_MAILBOX_URL": relay.url], lan: true) { gw in
            let code = try #require(try await gw.request("POST", "/api/v1/pairing/tokens").json["code"]?.stringValue)
            let pinned = HTTP2Client(configuration: HTTP2ClientConfiguration(pinnedPublicKeySHA256: Hex.decode(gw.gateway.tlsPin!)))
            let answer = try await pinned.send(ClientRequest(method: "POST", url: "https://127.0.0.1:\(gw.gateway.lanPort!)/api/v1/pairing/redeem",
                                                             headers: [("content-type", "application/json")],
                                                             body: JSONValue.object(["code": .string(code), "name": "Phone"]).serializedBytes()))
            let redeemed = try JSONValue.parse(answer.body)
            #expect(redeemed["token"]?.stringValue != nil && redeemed["relay"] == nil, "\(answer.status) \(redeemed)")
        }
        let log = (try? String(contentsOfFile: relay.directory + "/relay.log", encoding: .utf8)) ?? ""
        #expect(!log.contains("enroll-7c21"))
    }

    @Test("the mailbox serves HTTPS when given a certificate: gateway and phone reach it with their trust, plain HTTP does not")
    func relayOverTLS() async throws {
        let relay = RelayServerProcess(tls: true)
        try await relay.start()
        defer { relay.stop() }
        #expect(relay.url.hasPrefix("https://"))
        // Without the relay's CA the handshake fails; plain HTTP to the TLS port gets no answer.
        #expect((try? await HTTP2Client().send(ClientRequest(method: "GET", url: relay.url + "/health", timeout: .seconds(2)))) == nil)
        #expect((try? await HTTP2Client().send(ClientRequest(method: "GET", url: "http://127.0.0.1:\(relay.port)/health", timeout: .seconds(2))))?.status != 200)
        try await withTestGateway(environment: ["SOULACY_RELAY_MAILBOX_URL": relay.url, "SOULACY_RELAY_MAILBOX_CA_FILE": relay.certificatePath], lan: true) { (gw) async throws in
            let (token, endpoint) = try await pairPhone(gw)
            _ = try await gw.request("POST", "/api/v1/mobile/devices", json: ["id": "phone"], key: .some(token))
            _ = try await gw.request("POST", "/api/v1/channels/mobile/test", json: ["body": .string(Self.secretText)])
            let phone = GatewayClient(paths: GatewayPaths(tailnet: "http://127.0.0.1:\(freePort())", relay: endpoint), token: token,
                                      probeTimeout: .seconds(1), relayCAFile: relay.certificatePath)
            #expect(await phone.probe() == .relay)
            guard case .answered(let answer, .relay) = await phone.send(method: "GET", path: "/api/v1/mobile/deliveries?device_id=phone") else {
                Issue.record("no answer through the TLS relay"); return
            }
            #expect(answer.status == 200)
            #expect(String(decoding: answer.body, as: UTF8.self).contains(Self.secretText))
        }
    }

    @Test("the relay refuses to start with a key others can read, or with half of the TLS pair")
    func relayTLSRefusals() async throws {
        let directory = TestGateway.makeTemporaryDirectory()
        let made = try SelfSignedCertificate.generate(commonName: "r", ipAddresses: ["127.0.0.1"])
        _ = FileManager.default.createFile(atPath: directory + "/key.pem", contents: Data(made.keyPEM.utf8), attributes: [.posixPermissions: 0o644])
        try made.certificatePEM.write(toFile: directory + "/cert.pem", atomically: true, encoding: .utf8)
        for (arguments, expected) in [(["--tls-cert", directory + "/cert.pem", "--tls-key", directory + "/key.pem"], "key.pem is readable by group or others"),
                                      (["--tls-cert", directory + "/cert.pem"], "--tls-cert and --tls-key go together")] {
            let (status, text) = try await runProgram(RepositoryPaths.relayBinary,
                                                ["--data", directory + "/data", "--listen", "127.0.0.1:\(freePort())"] + arguments)
            #expect(status != 0)
            #expect(text.contains(expected), "\(text)")
            #expect(!text.contains("PRIVATE KEY"))
        }
    }

    @Test("one intent retried on each of the three paths, in every order: the first answer comes back on each, sealed at rest, applied once")
    func replayAcrossPaths() async throws {
        try await withRelayGateway { relay, gw in
            let (token, endpoint) = try await pairPhone(gw)
            let lan = GatewayClient(paths: GatewayPaths(lan: ("https://127.0.0.1:\(gw.gateway.lanPort!)", gw.gateway.tlsPin!)), token: token, probeTimeout: .seconds(10))
            let tailnet = GatewayClient(paths: GatewayPaths(tailnet: gw.baseURL), token: token, probeTimeout: .seconds(10))
            let viaRelay = client(nil, token: token, relay: endpoint)
            let doors: [(InboxPath, GatewayClient)] = [(.lan, lan), (.tailnet, tailnet), (.relay, viaRelay)]
            let orders = [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]]
            for (n, order) in orders.enumerated() {
                let key = "cross-path-\(n)"
                let body = Data(JSONValue.object(["text": .string("fact \(n)")]).serialized().utf8)
                var answers: [DoorAnswer] = []
                for index in order {
                    let (expected, door) = doors[index]
                    guard case .answered(let answer, let path) = await door.send(method: "POST", path: "/api/v1/memory/facts", body: body, idempotencyKey: key) else {
                        Issue.record("order \(order): \(expected) gave no answer"); continue
                    }
                    #expect(path == expected)
                    #expect(answer.status == 201, "order \(order), \(expected): \(answer.status) \(String(decoding: answer.body, as: UTF8.self))")
                    answers.append(answer)
                }
                #expect(answers.count == 3 && Set(answers.map(\.body)).count == 1, "order \(order): every path gets the first answer")
                #expect(answers.dropFirst().allSatisfy { $0.replayed }, "order \(order)")
            }
            let facts = try await gw.request("GET", "/api/v1/memory/facts", key: .some(token)).json["facts"]?.arrayValue ?? []
            #expect(facts.count == orders.count, "one effect per intent")
            // Sealed at rest: no answer's fact id is readable in the log.
            let stored = try gw.gateway.database.read { try $0.query("SELECT body FROM idempotency_log").compactMap { $0.blob("body") } }
            #expect(stored.count == orders.count)
            for fact in facts {
                let id = try #require(fact["id"]?.stringValue)
                #expect(!stored.contains { String(decoding: $0, as: UTF8.self).contains(id) })
            }
        }
    }

    @Test("every command replayed through the relay gives one effect")
    func replayThroughRelay() async throws {
        try await withRelayGateway { relay, gw in
            let (token, endpoint) = try await pairPhone(gw)
            let phone = client(nil, token: token, relay: endpoint)
            #expect(await phone.probe() == .relay)
            let asked = try await gw.request("POST", "/api/v1/approvals", json: ["agent_id": "echo", "tool": "unlock", "call_id": "call_relay", "wait": false])
            #expect(asked.status == 201)
            let intents: [(String, String, Data?)] = [
                ("POST", "/api/v1/mobile/devices", Data(JSONValue.object(["id": "relay-phone"]).serialized().utf8)),
                ("POST", "/api/v1/memory/facts", Data(JSONValue.object(["text": "relay fact"]).serialized().utf8)),
                ("POST", "/approvals/call_relay/approve", nil),
            ]
            var keys: [String] = []
            for (method, path, body) in intents {
                let key = UUID().uuidString.lowercased()
                keys.append(key)
                guard case .answered(let a, .relay) = await phone.send(method: method, path: path, body: body, idempotencyKey: key) else {
                    Issue.record("\(path) got no answer"); continue
                }
                #expect(a.status < 300, "\(path) \(a.status)")
            }
            // The same intents, with the same keys, sent again: each answered from the log.
            for ((method, path, body), key) in zip(intents, keys) {
                guard case .answered(let a, .relay) = await phone.send(method: method, path: path, body: body, idempotencyKey: key) else { continue }
                #expect(a.status < 300)
            }
            #expect(try await gw.request("GET", "/api/v1/memory/facts", key: .some(token)).json["facts"]?.arrayValue?.count == 1)
            #expect(try gw.gateway.mobileStore.devices.list(subject: "owner").filter { $0.id == "relay-phone" }.count == 1)
            let approval = try #require(try await gw.gateway.approvals.approval(callID: "call_relay"))
            #expect(approval.state == .approved)
            let logged = try gw.gateway.database.read { try $0.query("SELECT COUNT(*) AS n FROM idempotency_log").first?.int("n") }
            #expect(logged == 3)
        }
    }

    @Test("gateway stopped: a send is held at the relay, and applied once when the gateway returns; a refused one says so in plain words")
    func heldSends() async throws {
        let relay = RelayServerProcess()
        try await relay.start()
        defer { relay.stop() }
        let directory = TestGateway.makeTemporaryDirectory()
        let env = ["SOULACY_RELAY_MAILBOX_URL": relay.url]
        let (token, endpoint) = try await withTestGateway(directory: directory, environment: env, lan: true) { (gw) async throws in
            let paired = try await pairPhone(gw)
            _ = try await gw.request("POST", "/api/v1/approvals", json: ["agent_id": "echo", "tool": "pay", "call_id": "call_held", "wait": false, "timeout_seconds": 3600])
            return paired
        }
        // The gateway is down: both sends wait at the relay.
        let phone = client(nil, token: token, relay: endpoint, readBack: .seconds(1))
        guard case .held(let factID) = await phone.send(method: "POST", path: "/api/v1/memory/facts", body: Data(#"{"text":"held fact"}"#.utf8)) else { Issue.record("not held"); return }
        guard case .held(let approveID) = await phone.send(method: "POST", path: "/approvals/call_held/approve") else { Issue.record("not held"); return }
        #expect(await phone.pendingSends.sorted() == [factID, approveID].sorted())

        // Meanwhile the approval is denied on the computer itself, with the relay path shut.
        try await withTestGateway(directory: directory) { (gw) async throws in
            #expect(try await gw.request("POST", "/approvals/call_held/deny").json["state"] == "denied")
        }
        // Back with the relay: the held sends are applied, once.
        try await withTestGateway(directory: directory, environment: env, lan: true) { (gw) async throws in
            var settled: [String: Settlement] = [:]
            for _ in 0..<60 where settled.count < 2 {
                settled = await phone.settleHeld()
                try await Task.sleep(for: .milliseconds(200))
            }
            #expect(settled[factID] == .sent(status: 201))
            #expect(settled[approveID] == .refused(words: "Not sent. That approval was already denied on your computer."))
            #expect(await phone.pendingSends.isEmpty)
            // Settling again changes nothing and applies nothing.
            _ = await phone.settleHeld()
            #expect(try await gw.request("GET", "/api/v1/memory/facts", key: .some(token)).json["facts"]?.arrayValue?.count == 1)
            #expect(try await gw.gateway.approvals.approval(callID: "call_held")?.state == .denied)
        }
    }

    @Test("an item too large for the relay comes down as a too_large marker; a result too large is 413")
    func tooLarge() async throws {
        try await withRelayGateway { relay, gw in
            let (token, endpoint) = try await pairPhone(gw)
            let channel = try gw.gateway.channels.channel(named: "mobile")
            _ = try await channel.deliver(.init(agentID: "echo", agentName: "Echo", sessionID: "s", parts: [String(repeating: "x", count: 200_000)]), to: "all")
            let phone = client(nil, token: token, relay: endpoint)
            #expect(await eventually {
                await phone.readRelay()
                return await phone.relayRecords().contains { $0.tooLarge }
            })
            _ = await phone.probe()
            guard case .answered(let answer, .relay) = await phone.send(method: "GET", path: "/api/v1/mobile/deliveries") else { Issue.record("no answer"); return }
            #expect(answer.status == 413)
        }
    }

    @Test("a revoked phone reads nothing more through the relay: its place and bearer are gone there, no new record is sealed for it")
    func revokedPhone() async throws {
        try await withRelayGateway { relay, gw in
            let (token, endpoint) = try await pairPhone(gw)
            try await gw.gateway.carriage!.tick()
            let keys = try RelayKeys(secret: endpoint.secret, deviceID: endpoint.deviceID)
            func items() async throws -> (status: Int, count: Int) {
                var request = URLRequest(url: URL(string: "\(relay.url)/v1/mailboxes/\(endpoint.mailboxID)/devices/\(endpoint.deviceID)/items?after=0")!)
                request.setValue("Bearer \(keys.bearer)", forHTTPHeaderField: "Authorization")
                let (data, response) = try await URLSession.shared.data(for: request)
                return ((response as! HTTPURLResponse).statusCode, (try? JSONValue.parse(Array(data)))?["items"]?.arrayValue?.count ?? 0)
            }
            _ = try await gw.request("POST", "/api/v1/channels/mobile/test", json: ["body": "before"])
            try await gw.gateway.carriage!.tick()
            #expect(try await items() == (200, 1))
            let keyID = try #require(try await gw.request("GET", "/admin/api-keys").json["keys"]?.arrayValue?.first { $0["kind"] == "managed" || $0["name"] == "Test phone" }?["id"]?.stringValue)
            #expect(try await gw.request("DELETE", "/admin/api-keys/\(keyID)").status == 204)
            _ = try await gw.request("POST", "/api/v1/channels/mobile/test", json: ["body": .string(Self.secretText)])
            try await gw.gateway.carriage!.tick()
            // The relay refuses the revoked phone's bearer and holds nothing for it.
            #expect(try await items().status == 401)
            #expect(try await gw.request("GET", "/api/v1/mobile/deliveries", key: .some(token)).status == 401)
        }
    }

    @Test("the phones' pairing secrets and the mailbox bearer are sealed in the database (the key is a file beside it); clear ones from before are sealed at start")
    func secretsSealedAtRest() async throws {
        let relay = RelayServerProcess()
        try await relay.start()
        defer { relay.stop() }
        let directory = TestGateway.makeTemporaryDirectory()
        let legacy = SecureBytes.random(count: 32)
        let environment = ["SOULACY_RELAY_MAILBOX_URL": relay.url]
        func databaseBytes(_ gw: TestGateway) -> Data {
            ["", "-wal"].reduce(into: Data()) { $0.append((try? Data(contentsOf: URL(fileURLWithPath: gw.directory + "/data/soulacy.db" + $1))) ?? Data()) }
        }
        try await withTestGateway(directory: directory, environment: environment, lan: true) { gw in
            let (_, endpoint) = try await pairPhone(gw)
            try await gw.gateway.carriage!.tick()
            let bytes = databaseBytes(gw)
            #expect(bytes.range(of: Data(endpoint.secret)) == nil && bytes.range(of: Data(Base64URL.encode(endpoint.secret).utf8)) == nil)
            #expect(bytes.range(of: Data(Hex.encode(endpoint.secret).utf8)) == nil)
            // The sealing key is a file of the owner's only, beside the database.
            let key = try FileManager.default.attributesOfItem(atPath: gw.directory + "/data/relay-secrets.key")
            #expect((key[.posixPermissions] as? NSNumber)?.intValue == 0o600)
            // A row as an earlier version wrote it: the secret in the clear.
            try gw.gateway.database.write { db in
                try db.run("INSERT INTO relay_devices (device_id, subject, secret, last_seq, registered) VALUES ('legacy-phone', 'owner', ?, 0, 1)", legacy)
            }
        }
        try await withTestGateway(directory: directory, environment: environment, lan: true) { gw in
            let stored = try gw.gateway.database.read { try $0.query("SELECT secret FROM relay_devices WHERE device_id = 'legacy-phone'").first?.blob("secret") }
            #expect(stored != nil && stored != legacy, "sealed at start")
            #expect(databaseBytes(gw).range(of: Data(legacy)) == nil)
            let bearer = try gw.gateway.database.read { try $0.query("SELECT bearer FROM relay_mailbox").first?.string("bearer") }
            #expect(bearer?.utf8.count ?? 0 > 43, "the mailbox bearer is sealed too")
        }
    }

    @Test("more than 200 lines written while the phone was away all come down, in order, with no gap")
    func backlog() async throws {
        try await withRelayGateway { relay, gw in
            let (token, endpoint) = try await pairPhone(gw)
            for n in 0..<230 { _ = try await gw.request("POST", "/api/v1/channels/mobile/test", json: ["body": .string("line \(n)")]) }
            try await gw.gateway.carriage!.tick()
            let phone = client(nil, token: token, relay: endpoint)
            await phone.readRelay()
            let records = await phone.relayRecords()
            #expect(records.count == 230)
            let seqs = records.compactMap(\.seq)
            #expect(seqs == seqs.sorted() && Set(seqs).count == 230)
            #expect(records.first?.fields["body"] == "line 0" && records.last?.fields["body"] == "line 229")
            // Each record is the inbox's own delivery view, decoded with the app's names and types.
            let first = try #require(records.first?.delivery)
            #expect(first.body == "line 0" && first.parts?.first?.text == "line 0" && first.read_at == nil && first.presentation == nil)
            #expect(first.created_at.hasSuffix("Z") && first.destination == "all")
        }
    }

    @Test("with the relay off for a phone nothing is held for it: no records, no commands")
    func relayOff() async throws {
        try await withRelayGateway { relay, gw in
            let (token, endpoint) = try await pairPhone(gw)
            let phone = client(nil, token: token, relay: endpoint, readBack: .seconds(1))
            #expect(await phone.setRelay(on: false))
            _ = try await gw.request("POST", "/api/v1/channels/mobile/test", json: ["body": "while off"])
            try await gw.gateway.carriage!.tick()
            let keys = try RelayKeys(secret: endpoint.secret, deviceID: endpoint.deviceID)
            var request = URLRequest(url: URL(string: "\(relay.url)/v1/mailboxes/\(endpoint.mailboxID)/devices/\(endpoint.deviceID)/items?after=0")!)
            request.setValue("Bearer \(keys.bearer)", forHTTPHeaderField: "Authorization")
            let (data, _) = try await URLSession.shared.data(for: request)
            #expect(try JSONValue.parse(Array(data))["items"]?.arrayValue?.isEmpty == true)
            _ = await phone.probe()
            guard case .unreachable = await phone.send(method: "POST", path: "/api/v1/memory/facts", body: Data(#"{"text":"nope"}"#.utf8)) else {
                Issue.record("a command was held with the relay off"); return
            }
            #expect(try await gw.request("GET", "/api/v1/memory/facts", key: .some(token)).json["facts"]?.arrayValue?.isEmpty == true)
        }
    }

    @Test("one key per intent across a change of path: a send the relay dropped is sent again directly and applied once")
    func keyAcrossPaths() async throws {
        let relay = RelayServerProcess()
        try await relay.start()
        defer { relay.stop() }
        let directory = TestGateway.makeTemporaryDirectory()
        let env = ["SOULACY_RELAY_MAILBOX_URL": relay.url]
        let (token, endpoint) = try await withTestGateway(directory: directory, environment: env, lan: true) { (gw) async throws in try await pairPhone(gw) }
        // Away from home with the gateway down: the send is held at the relay…
        let away = client(nil, token: token, relay: endpoint, readBack: .milliseconds(500))
        guard case .held(let id) = await away.send(method: "POST", path: "/api/v1/memory/facts", body: Data(#"{"text":"one intent"}"#.utf8)) else { Issue.record("not held"); return }
        // …then the person turns the relay off, which drops what it held.
        #expect(await away.setRelay(on: false))
        try await withTestGateway(directory: directory, environment: env, lan: true) { (gw) async throws in
            // Home again: the tailnet answers and no result came down, so the held send goes directly with its own key.
            await away.update(tailnet: gw.baseURL)
            let settled = await away.settleHeld()
            #expect(settled[id] == .sent(status: 201))
            guard case .answered(let again, .tailnet) = await away.send(method: "POST", path: "/api/v1/memory/facts", body: Data(#"{"text":"one intent"}"#.utf8), idempotencyKey: id) else {
                Issue.record("no direct answer"); return
            }
            #expect(again.replayed && again.status == 201)
            #expect(try await gw.request("GET", "/api/v1/memory/facts", key: .some(token)).json["facts"]?.arrayValue?.count == 1)
        }
    }

    @Test("new items wake the phone through the relay's APNs with a generic alert and a sealed payload; with the relay off, no push")
    func relayPush() async throws {
        let apns = try await APNsStandIn.start()
        defer { apns.stop() }
        let relay = RelayServerProcess()
        try await relay.start(environment: apns.environment)
        defer { relay.stop() }
        try await withTestGateway(environment: ["SOULACY_RELAY_MAILBOX_URL": relay.url], lan: true) { (gw) async throws in
            let (token, endpoint) = try await pairPhone(gw)
            let phone = client(nil, token: token, relay: endpoint)
            #expect(await phone.registerRelayPush(token: String(repeating: "cd", count: 32)))
            _ = try await gw.request("POST", "/api/v1/channels/mobile/test", json: ["body": .string(Self.secretText), "title": .string(Self.secretText)])
            #expect(try await eventually { try await apns.requests().count == 1 })
            let push = try #require(try await apns.requests().first)
            #expect(push["status"] == 200)
            let body = push["body"]?.stringValue ?? ""
            #expect(body.contains("New in your Inbox") && body.contains("\"sealed\""))
            #expect(!body.contains(Self.secretText))
            #expect(await phone.setRelay(on: false))
            _ = try await gw.request("POST", "/api/v1/channels/mobile/test", json: ["body": "while off"])
            // A round's calls to the relay (records, then the push) are awaited within the tick: after it, nothing more comes.
            try await gw.gateway.carriage!.tick()
            #expect(try await apns.requests().count == 1)
        }
    }

    @Test("sealed envelopes: the header binds version and type; another key or type does not open")
    func envelopes() throws {
        let keys = try RelayKeys(secret: SecureBytes.random(count: 32), deviceID: "key_1")
        typealias Fields = [String: JSONValue]
        let sealed = try RelayEnvelope.seal(["id": "x", "text": Self.secretText], kind: .record, key: keys.down)
        #expect(!sealed.contains(Self.secretText))
        let opened = try RelayEnvelope.open(sealed, as: Fields.self, kind: .record, key: keys.down)
        #expect(opened == ["id": "x", "text": .string(Self.secretText), "v": 1, "type": "record"])
        #expect(throws: (any Error).self) { try RelayEnvelope.open(sealed, as: Fields.self, kind: .result, key: keys.down) }
        #expect(throws: (any Error).self) { try RelayEnvelope.open(sealed, as: Fields.self, kind: .record, key: keys.up) }
        var tampered = Array(Base64URL.decode(sealed)!)
        tampered[20] ^= 1
        #expect(throws: (any Error).self) { try RelayEnvelope.open(Base64URL.encode(tampered), as: Fields.self, kind: .record, key: keys.down) }
        // The typed messages go through whole.
        let command = RelayCommand(id: "c1", method: "POST", path: "/api/v1/memory/facts?x=1", body: ["content": "milk"])
        let up = try RelayEnvelope.seal(command, kind: .command, key: keys.up)
        #expect(try RelayEnvelope.open(up, as: RelayCommand.self, kind: .command, key: keys.up) == command)
        let result = RelayResult(id: "c1", status: 201, contentType: "application/json", bodyB64: "e30")
        #expect(try RelayEnvelope.open(try RelayEnvelope.seal(result, kind: .result, key: keys.down), as: RelayResult.self, kind: .result, key: keys.down) == result)
        #expect(keys.down != keys.up && keys.up != keys.auth)
    }
}
