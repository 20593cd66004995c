import Crypto
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Gateway
import GatewayTestSupport
import HTTPClient
import APIKit
import RelayProtocol
import Synchronization
import Testing

/// Issue 26, item 1: one unauthenticated 2 KB body nested about 340 levels deep killed the gateway with SIGSEGV.
/// Every path that reads JSON (request bodies on the server's and the storage threads, relay commands, provider
/// answers) and SOUL.yaml refuse nesting beyond 64 levels, tried here at 65 to 10,000 levels, and the process
/// answers the next request.
@Suite("Deep nesting from outside", .serialized)
struct DeepNestingTests {
    static func objects(_ depth: Int) -> [UInt8] { Array((String(repeating: #"{"a":"#, count: depth) + "1" + String(repeating: "}", count: depth)).utf8) }
    static func arrays(_ depth: Int) -> [UInt8] { Array((String(repeating: "[", count: depth) + "1" + String(repeating: "]", count: depth)).utf8) }

    @Test("the real binary: an unauthenticated pairing redeem nested 340 to 10,000 levels is a 400 naming the limit, and the gateway stays up")
    func unauthenticatedRedeem() async throws {
        let directory = TestGateway.makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let process = try GatewayProcess(directory: directory)
        try await process.start()
        defer { _ = process.terminate() }
        for depth in [338, 340, 400, 10_000] {
            for body in [Self.objects(depth), Self.arrays(depth)] {
                let answer = try await process.call("POST", "/api/v1/pairing/redeem", key: nil, body: body, headers: ["Content-Type": "application/json"])
                #expect(answer.status == 400, "depth \(depth)")
                #expect(answer.json["code"] == "invalid_json")
                #expect(answer.json["error"]?.stringValue?.contains("64 levels") == true, "\(answer.json)")
            }
        }
        let health = try await process.call("GET", "/health", key: nil)
        #expect(health.status == 200, "the gateway answers after every deep body")
    }

    @Test("every route that reads a body refuses 10,000 levels with invalid_json, on whichever thread it runs, and nothing is stored")
    func everyRouteWithABody() async throws {
        try await withTestGateway { gw in
            let before = try await gw.request("GET", "/api/v1/memory/facts").json
            var refused: [String] = []
            for route in gw.gateway.router.routes where ["POST", "PUT", "PATCH"].contains(route.method.rawValue) {
                // Parameters filled with something plausible: the body is read before any lookup.
                let path = route.pattern.split(separator: "/").map { $0.hasPrefix(":") ? "x" : String($0) }.joined(separator: "/")
                let answer = try await gw.request(route.method.rawValue, "/" + path, body: Self.objects(10_000), headers: ["Content-Type": "application/json"])
                #expect(answer.status < 500, "\(route.method.rawValue) \(route.pattern): \(answer.status) \(answer.text)")
                if answer.errorCode == "invalid_json" {
                    #expect(answer.errorMessage?.contains("64 levels") == true, "\(route.pattern): \(answer.text)")
                    refused.append(route.pattern)
                }
            }
            // The routes that take a JSON body, on both kinds of thread (quick reads answer on the server's).
            for pattern in ["/api/v1/pairing/redeem", "/api/v1/memory/facts", "/api/v1/approvals", "/api/v1/mobile/devices", "/api/v1/chat",
                            "/admin/api-keys", "/api/v1/mobile/invoke", "/api/v1/chat/stream"] {
                #expect(refused.contains(pattern), "\(pattern) did not refuse the deep body: refused \(refused)")
            }
            #expect(try await gw.request("GET", "/api/v1/memory/facts").json == before)
            #expect(try await gw.request("GET", "/api/v1/health").status == 200)
        }
    }

    @Test("a provider whose answer is nested 10,000 levels fails that run with a clear error; the gateway goes on")
    func providerAnswers() async throws {
        // Answers in turn: the whole body too deep, then a tool call whose argument string is too deep.
        let deepBody = Array(#"{"choices":[{"message":{"role":"assistant","content":"hi","x":"#.utf8) + Self.arrays(10_000) + Array("}}]}".utf8)
        let deepArguments = Array(#"{"choices":[{"finish_reason":"tool_calls","message":{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"remember","arguments":""#.utf8)
            + Array(String(repeating: "[", count: 10_000).utf8) + Array(#""}}]}}]}"#.utf8)
        let turn = Counter()
        let provider = HTTPServer(configuration: HTTPServerConfiguration(host: "127.0.0.1", port: 0)) { _ in
            let n = turn.next()
            return HTTPResponse(status: 200, headers: [("content-type", "application/json")], body: n == 0 ? deepBody : deepArguments)
        }
        try provider.start()
        defer { Task { await provider.stop() } }
        let agents = """
            agents:
              - id: talker
                name: Talker
                system_prompt: You answer briefly.
                llm:
                  provider: openai
                  model: test-model
                  base_url: http://127.0.0.1:\(provider.port)/v1
            """
        try await withTestGateway(config: agents, environment: ["OPENAI_API_KEY": "sk-test"]) { gw in
            let first = try await gw.request("POST", "/api/v1/chat", json: ["agent_id": "talker", "text": "hello"])
            #expect(first.status == 502, "\(first.text)")
            #expect(first.errorMessage?.contains("not JSON") == true, "\(first.text)")
            // A tool call's arguments that are not readable JSON are treated as none; the run still ends.
            let second = try await gw.request("POST", "/api/v1/chat", json: ["agent_id": "talker", "text": "again"])
            // The provider asks for the tool on every turn, so the run ends when its turns run out, with the runner's
            // own words and not a word of the unreadable arguments.
            #expect(second.status == 200 && second.json["reply"] == "(no final response produced)", "\(second.text)")
            #expect(try await gw.request("GET", "/api/v1/health").status == 200)
        }
    }

    @Test("a relay command nested 10,000 levels is answered 400 invalid_json to the phone, never applied, and the carriage goes on")
    func relayCommands() async throws {
        let relay = RelayServerProcess()
        try await relay.start()
        defer { relay.stop() }
        try await withTestGateway(environment: ["SOULACY_RELAY_MAILBOX_URL": relay.url], lan: true) { gw in
            let code = try #require(try await gw.request("POST", "/api/v1/pairing/tokens").json["code"]?.stringValue)
            let pinned = HTTP2Client(configuration: HTTP2ClientConfiguration(pinnedPublicKeySHA256: Hex.decode(gw.gateway.tlsPin!)))
            let redeemed = try JSONValue.parse(try await pinned.send(ClientRequest(
                method: "POST", url: "https://127.0.0.1:\(gw.gateway.lanPort!)/api/v1/pairing/redeem", headers: [("content-type", "application/json")],
                body: JSONValue.object(["code": .string(code), "name": "Phone"]).serializedBytes())).body)
            let endpoint = try #require(redeemed["relay"])
            let mailbox = try #require(endpoint["mailbox_id"]?.stringValue), device = try #require(endpoint["device_id"]?.stringValue)
            let keys = try RelayKeys(secret: Base64URL.decode(try #require(endpoint["secret"]?.stringValue))!, deviceID: device)
            // Sealed by hand: no JSONValue could hold this command to seal it the ordinary way.
            let plaintext = Array(#"{"id":"deep-1","method":"POST","path":"/api/v1/memory/facts","type":"command","v":1,"body":"#.utf8) + Self.arrays(10_000) + Array("}".utf8)
            let sealed = try SealedBox.seal(plaintext, key: keys.up, header: RelayEnvelope.header(.command))
            let base = "\(relay.url)/v1/mailboxes/\(mailbox)/devices/\(device)"
            let auth = [("authorization", "Bearer \(keys.bearer)"), ("content-type", "application/json")]
            let client = HTTP2Client()
            let posted = try await client.send(ClientRequest(method: "POST", url: base + "/commands", headers: auth,
                                                             body: JSONValue.object(["id": "deep-1", "ciphertext": .string(sealed)]).serializedBytes()))
            #expect(posted.status == 202 || posted.status == 200, "\(posted.status) \(String(decoding: posted.body, as: UTF8.self))")
            try await gw.gateway.carriage!.tick()
            let page = try JSONCoding.decode(MailboxItemPage.self, from: try await client.send(ClientRequest(method: "GET", url: base + "/items?after=0", headers: auth)).body)
            let results = page.items.compactMap { $0.ciphertext.flatMap { try? RelayEnvelope.open($0, as: RelayResult.self, kind: .result, key: keys.down) } }
            #expect(results.map(\.id) == ["deep-1"])
            #expect(results.first?.status == 400 && results.first?.error == "invalid_json")
            #expect(try await gw.request("GET", "/api/v1/memory/facts").json["facts"] == [])
        }
    }

    @Test("SOUL.yaml nested 10,000 levels stops the start naming the file, position and limit; a reload keeps the agents it had")
    func agentFiles() async throws {
        let directory = TestGateway.makeTemporaryDirectory()
        let agents = directory + "/agents"
        try FileManager.default.createDirectory(atPath: agents + "/good", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: agents + "/deep", withIntermediateDirectories: true)
        try "id: good\nname: Good\nrunner:\n  command: [\"/bin/cat\"]\n".write(toFile: agents + "/good/SOUL.yaml", atomically: true, encoding: .utf8)
        let deep = "id: deep\nname: Deep\ntags: " + String(repeating: "[", count: 10_000) + "x" + String(repeating: "]", count: 10_000) + "\n"
        try deep.write(toFile: agents + "/deep/SOUL.yaml", atomically: true, encoding: .utf8)
        // At start nothing runs yet to fall back on: the start is refused with the reason.
        await #expect { try await TestGateway.start(agents: agents, directory: directory) } throws: { error in
            "\(error)".contains("deep/SOUL.yaml:3:") && "\(error)".contains("64 levels")
        }
        let check = try await runProgram(RepositoryPaths.soulacyBinary, ["check", agents])
        #expect(check.status != 0 && check.output.contains("deep/SOUL.yaml:3:") && check.output.contains("64 levels"), "\(check.output)")
        // While running, the same file arriving by hot reload is refused and the agents already loaded stay.
        try FileManager.default.removeItem(atPath: agents + "/deep")
        try await withTestGateway(agents: agents, directory: directory) { gw in
            try FileManager.default.createDirectory(atPath: agents + "/deep", withIntermediateDirectories: true)
            try deep.write(toFile: agents + "/deep/SOUL.yaml", atomically: true, encoding: .utf8)
            _ = gw.gateway.catalog.reload()
            #expect(gw.gateway.config.agents.map(\.id) == ["good"])
            #expect(try await gw.request("GET", "/health", key: .none).status == 200)
        }
    }
}

/// Hands out 0, 1, 2, … across threads.
final class Counter: Sendable {
    private let value = Mutex(0)
    func next() -> Int { value.withLock { n in defer { n += 1 }; return n } }
}
