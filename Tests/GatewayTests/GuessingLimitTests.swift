import Foundation
import GatewayHTTP
import GatewayTestSupport
import HTTPServer
import JSON
import Testing

/// Wrong pairing codes and console sign-ins, counted per client (an IPv6 client's /64), with a ceiling over all
/// clients only where a secret is short enough for many clients to find together (six-digit console codes).
@Suite("Guessing limits")
struct GuessingLimitTests {
    func redeem(_ gw: TestGateway, _ code: String, from address: String) async throws -> TestResponse {
        try await gw.request("POST", "/api/v1/pairing/redeem", json: ["code": .string(code), "name": "Phone"], key: .none, from: address)
    }

    func signIn(_ gw: TestGateway, _ body: JSONValue, from address: String) async throws -> TestResponse {
        try await gw.request("POST", "/api/v1/console/session", json: body, key: .none, from: address)
    }

    @Test("an IPv4 address is its own client; an IPv6 address counts as its /64; a mapped IPv4 is the IPv4; anything else is itself")
    func allowanceKeys() {
        #expect(ClientAddresses.allowanceKey("192.0.2.7") == "192.0.2.7")
        #expect(ClientAddresses.allowanceKey("2001:db8:1:2:aaaa::1") == "2001:db8:1:2::/64")
        #expect(ClientAddresses.allowanceKey("2001:0db8:0001:0002:ffff:ffff:ffff:fffe") == "2001:db8:1:2::/64")
        #expect(ClientAddresses.allowanceKey("2001:db8:1:3::1") == "2001:db8:1:3::/64")
        #expect(ClientAddresses.allowanceKey("fe80::1%eth0") == "fe80:0:0:0::/64")
        #expect(ClientAddresses.allowanceKey("::1") == "0:0:0:0::/64")
        #expect(ClientAddresses.allowanceKey("relay") == "relay")
        #expect(ClientAddresses.allowanceKey("not:an:address") == "not:an:address")
        #expect(ClientAddresses.allowanceKey(String(repeating: ":", count: 10_000)).count == 10_000)
        let request = HTTPRequest(method: "GET", path: "/", remoteAddress: "::ffff:198.51.100.4")
        #expect(ClientAddresses().allowanceKey(of: request) == "198.51.100.4")
        // Behind a trusted proxy: a port the proxy added is not part of the client, and an entry that is no address
        // leaves the last one believed.
        let proxy = ClientAddresses(trustedProxies: ["10.0.0.1"])
        func forwarded(_ value: String) -> String {
            proxy.allowanceKey(of: HTTPRequest(method: "GET", path: "/", headers: ["x-forwarded-for": value], remoteAddress: "10.0.0.1"))
        }
        #expect(forwarded("192.0.2.7:5678") == "192.0.2.7" && forwarded("192.0.2.7:1") == forwarded("192.0.2.7:2"))
        #expect(forwarded("[2001:db8:9:9::1]:443") == "2001:db8:9:9::/64")
        #expect(forwarded("not-an-address") == "10.0.0.1" && forwarded("198.51.100.1, junk") == "10.0.0.1")
        #expect(forwarded("198.51.100.1, 192.0.2.8") == "192.0.2.8")
    }

    @Test("wrong pairing codes from many clients never lock out pairing: a fresh client's right code pairs after 60 wrong ones from 12 others")
    func pairingHasNoHouseholdCeiling() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            let offer = try await gw.request("POST", "/api/v1/pairing/tokens", json: ["name": "Priya", "role": "viewer"])
            let code = try #require(offer.json["code"]?.stringValue)
            for client in 0..<12 {
                for _ in 0..<5 { #expect(try await redeem(gw, "ZZZZZZZZZZZZZZZZ", from: "192.0.2.\(client + 1)").status == 401) }
                #expect(try await redeem(gw, "ZZZZZZZZZZZZZZZZ", from: "192.0.2.\(client + 1)").status == 429)
            }
            let paired = try await redeem(gw, code, from: "198.51.100.9")
            #expect(paired.status == 200 && paired.json["subject"] == "priya", "\(paired.text)")
        }
    }

    @Test("addresses of one IPv6 /64 share one count of wrong pairing codes; another /64 has its own")
    func ipv6CountedPerSlash64() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            for host in 1...5 { #expect(try await redeem(gw, "ZZZZZZZZZZZZZZZZ", from: "2001:db8:7:7::\(host)").status == 401) }
            let sameNetwork = try await redeem(gw, "ZZZZZZZZZZZZZZZZ", from: "2001:db8:7:7:dead:beef:0:1")
            #expect(sameNetwork.status == 429 && sameNetwork.errorCode == "too_many_attempts")
            #expect(try await redeem(gw, "ZZZZZZZZZZZZZZZZ", from: "2001:db8:7:8::1").status == 401)
        }
    }

    @Test("past 30 wrong console codes from all clients, code sign-in waits for everyone, while API-key sign-in and pairing stay open")
    func consoleCodeCeiling() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            for client in 0..<6 {
                for attempt in 0..<5 {
                    let wrong = try await signIn(gw, ["code": .string(String(format: "%06d", client * 10 + attempt))], from: "192.0.2.\(client + 1)")
                    #expect(wrong.status == 401 && wrong.errorCode == "console_code_unknown")
                }
            }
            let right = try await gw.gateway.consoleSessions.createCode(subject: "owner", role: .viewer)
            let waiting = try await signIn(gw, ["code": .string(right.code)], from: "198.51.100.9")
            #expect(waiting.status == 429 && waiting.errorCode == "too_many_attempts" && Int(waiting.headers["retry-after"] ?? "") ?? 0 > 0)
            #expect(try await signIn(gw, ["api_key": .string(gw.adminKey)], from: "198.51.100.9").status == 200)
            let offer = try await gw.request("POST", "/api/v1/pairing/tokens", json: ["name": "Sam", "role": "viewer"])
            let code = try #require(offer.json["code"]?.stringValue)
            #expect(try await redeem(gw, code, from: "198.51.100.9").status == 200)
        }
    }

    @Test("guesses sent at once are counted as they arrive: of 40 wrong codes from one client in parallel, 5 are checked and the rest wait; a right one is forgiven")
    func parallelGuesses() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for n in 0..<40 {
                    group.addTask { try await signIn(gw, ["code": .string(String(format: "%06d", n))], from: "192.0.2.50").status }
                }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(statuses.filter { $0 == 401 }.count == 5 && statuses.filter { $0 == 429 }.count == 35, "\(statuses.sorted())")
            // Right answers do not count: a client that signs in with its key ten times is never held back.
            for _ in 0..<10 { #expect(try await signIn(gw, ["api_key": .string(gw.adminKey)], from: "192.0.2.51").status == 200) }
            for _ in 0..<4 { #expect(try await signIn(gw, ["api_key": "sk_wrong"], from: "192.0.2.51").status == 401) }
            #expect(try await signIn(gw, ["api_key": .string(gw.adminKey)], from: "192.0.2.51").status == 200)
        }
    }

    @Test("the limiter's table stays within its capacity under a flood of clients, and the window ends a client's wait")
    func boundedTable() {
        let limiter = GuessingLimiter(perClient: 2, window: 60, capacity: 100)
        let start = Date()
        for client in 0..<20_000 { limiter.recordFailure(client: "c\(client)", now: start) }
        #expect(limiter.trackedClients <= 100)
        limiter.recordFailure(client: "x", now: start)
        limiter.recordFailure(client: "x", now: start.addingTimeInterval(1))
        #expect(limiter.retryAfter(client: "x", now: start.addingTimeInterval(1)) == 59)
        #expect(limiter.retryAfter(client: "x", now: start.addingTimeInterval(59)) == 1)
        #expect(limiter.retryAfter(client: "x", now: start.addingTimeInterval(60)) == nil)
        #expect(limiter.retryAfter(client: "y", now: start) == nil)
    }
}
