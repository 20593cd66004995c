import ChannelAPI
import ChannelTesting
import Crypto
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import GatewayTestSupport
import APIKit
import Identity
import Testing

/// Security properties checked as tests: roles on every route, secrets out of logs, constant-time comparison.
@Suite("Security", .serialized)
struct SecurityTests {
    @Test("every route needing more than a viewer refuses a viewer with 403; admin routes refuse an operator")
    func rolesOnEveryRoute() async throws {
        try await withTestGateway { (gw) async throws in
            let viewer = try await gw.mintKey(subject: "vee", role: "viewer")
            let op = try await gw.mintKey(subject: "vee", role: "operator")
            var checked = 0
            for route in gw.gateway.router.routes {
                guard case .role(let required) = route.access else { continue }
                let path = route.pattern.replacingOccurrences(of: ":id", with: "x")
                if required >= .operator {
                    let r = try await gw.request(route.method.rawValue, path, json: route.method == .POST ? [:] : nil, key: .some(viewer))
                    // The original's role refusal: its text, the key's role and what the route needs.
                    #expect(r.status == 403 && r.json["error"] == "insufficient permissions" && r.json["role"] == "viewer"
                            && r.json["required"] == .string(required.rawValue), "\(route.method) \(route.pattern) gave \(r.status) \(r.text) to a viewer")
                    checked += 1
                }
                if required == .admin {
                    let r = try await gw.request(route.method.rawValue, path, json: route.method == .POST ? [:] : nil, key: .some(op))
                    #expect(r.status == 403, "\(route.method) \(route.pattern) gave \(r.status) to an operator")
                    checked += 1
                }
            }
            #expect(checked >= 15)
        }
    }

    @Test("keys, pairing codes, push tokens' secrets and the relay token never reach the logs")
    func nothingSecretInLogs() async throws {
        let relay = try await RelayStandIn.start()
        defer { relay.stop() }
        let apns = try await APNsStandIn.start()
        defer { apns.stop() }
        let directory = TestGateway.makeTemporaryDirectory()
        let gateway = try GatewayProcess(directory: directory, environment: apns.environment.merging(relay.environment) { $1 })
        let admin = try #require(try await gateway.start())
        func call(_ method: String, _ path: String, key: String?, json: JSONValue? = nil) async throws -> JSONValue {
            try await gateway.call(method, path, key: key, json: json).json
        }
        let code = try #require(try await call("POST", "/api/v1/pairing/tokens", key: admin, json: ["name": "Priya", "role": "viewer"])["code"]?.stringValue)
        let priya = try #require(try await call("POST", "/api/v1/pairing/redeem", key: nil, json: ["code": .string(code)])["token"]?.stringValue)
        _ = try await call("POST", "/api/v1/mobile/devices", key: priya, json: ["notifications_enabled": true, "id": "p1", "push_token": .string(String(repeating: "ab", count: 32))])
        _ = try await call("POST", "/api/v1/channels/mobile/test", key: admin, json: ["to": "all"])
        _ = try await call("GET", "/api/v1/mobile/deliveries", key: "sk_guessed-key")
        _ = try await call("POST", "/api/v1/pairing/redeem", key: nil, json: ["code": "WRON-GCOD-E000"])
        try await Task.sleep(for: .milliseconds(500))
        gateway.terminate()
        // The first start prints the admin key and a pairing code once on stdout, for the owner; the log is stderr.
        let log = gateway.output.split(separator: "\n").filter { !$0.contains("SOULACY_ADMIN_KEY=") && !$0.hasPrefix("  ") }.joined(separator: "\n")
        let pem = try String(contentsOfFile: apns.keyFile, encoding: .utf8).split(separator: "\n")[1]
        for secret in [admin, priya, code, RelayStandIn.token, String(pem), "sk_guessed-key", "WRON-GCOD-E000"] {
            #expect(!log.contains(secret), "the log holds a secret")
        }
        #expect(log.contains("listening"))
    }

    @Test("in process, at debug level: no key, code, push token, relay secret or agent output in any log line")
    func nothingSecretInProcessLogs() async throws {
        let memory = MemoryLogHandler()
        let apns = try await APNsStandIn.start()
        defer { apns.stop() }
        let output = "AGENT-OUTPUT-MUST-NOT-BE-LOGGED-51f"
        let token = String(repeating: "cd", count: 32)
        var secrets: [String] = [output, token]
        try await withTestGateway(environment: apns.environment, log: Log(minimum: .debug, handler: memory)) { (gw) async throws in
            secrets.append(gw.adminKey)
            let code = try #require(try await gw.request("POST", "/api/v1/pairing/tokens", json: ["name": "Priya", "role": "viewer"]).json["code"]?.stringValue)
            secrets.append(code)
            let priya = try #require(try await gw.request("POST", "/api/v1/pairing/redeem", json: ["code": .string(code)], key: .none).json["token"]?.stringValue)
            secrets.append(priya)
            _ = try await gw.request("POST", "/api/v1/mobile/devices", json: ["notifications_enabled": true, "id": "p1", "push_token": .string(token)], key: .some(priya))
            _ = try await gw.runAgent("echo", input: output, to: "all")
            _ = try await gw.request("POST", "/api/v1/memory/facts", json: ["content": .string(output)], key: .some(priya))
            _ = try await gw.request("GET", "/api/v1/mobile/deliveries", key: .some("sk_guessed-key-\(output)"))
            _ = try await gw.request("POST", "/api/v1/pairing/redeem", json: ["code": "WRONGCODE0000000"], key: .none)
            #expect(await eventually { (try? await apns.requests().count) == 1 })
        }
        let lines = memory.lines
        #expect(lines.contains { $0.contains("listening") }, "the log was captured")
        #expect(lines.contains { $0.contains("POST /api/v1/pairing/redeem 200") }, "requests are logged at debug")
        for secret in secrets {
            #expect(!lines.contains { $0.contains(secret) }, "a log line holds a secret")
        }
    }

    @Test("secret comparison takes the same time wherever the strings differ")
    func constantTime() {
        let secret = String(repeating: "s", count: 64)
        let early = "x" + String(repeating: "s", count: 63)
        let late = String(repeating: "s", count: 63) + "x"
        func time(_ candidate: String) -> Duration {
            let start = ContinuousClock.now
            for _ in 0..<20_000 { _ = SecureBytes.constantTimeEqual(candidate, secret) }
            return ContinuousClock.now - start
        }
        _ = time(early)
        // Both are hashed and compared whole: the time does not depend on where the first difference is.
        // Interleaved runs, fastest of each, so a busy machine slows both alike.
        var a = Duration.seconds(1000), b = Duration.seconds(1000)
        for _ in 0..<11 {
            a = min(a, time(early))
            b = min(b, time(late))
        }
        let ratio = Double(a.components.attoseconds + a.components.seconds * 1_000_000_000_000_000_000) /
                    Double(b.components.attoseconds + b.components.seconds * 1_000_000_000_000_000_000)
        #expect(ratio > 0.4 && ratio < 2.5, "ratio \(ratio)")
        #expect(!SecureBytes.constantTimeEqual(early, secret) && !SecureBytes.constantTimeEqual(late, secret) && SecureBytes.constantTimeEqual(secret, secret))
    }
}
