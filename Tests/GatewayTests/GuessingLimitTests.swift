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
