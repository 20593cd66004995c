import APIKit
import ChannelTesting
import Dispatch
import Foundation
import Gateway
import GatewayTestSupport
import Synchronization
import Testing

/// The original's per-address request limit (contract §1.4): past it, 429 `{"error":"rate limit exceeded"}`.
@Suite("Request rate limit", .serialized)
struct RateLimitTests {
    /// A plain GET from a chosen loopback source address: the status and the raw reply.
    func get(_ gw: TestGateway, _ path: String, from source: String, headers: [String: String] = [:]) async -> (status: Int, reply: String) {
        let extra = headers.map { "\($0.key): \($0.value)\r\n" }.joined()
        // No half-close after the request: libmicrohttpd drops a connection whose client shut its side before the
        // reply was queued (an empty reply, status 0, once in a loaded CI run). The wait matches URLSession's.
        let request = Array("GET \(path) HTTP/1.1\r\nHost: gateway\r\n\(extra)Connection: close\r\n\r\n".utf8)
        let reply = await RawHTTP.exchange(port: gw.gateway.port, request, timeout: 30, from: source, halfClose: false)
        let status = reply.split(separator: " ", maxSplits: 2).dropFirst().first.flatMap { Int($0) } ?? 0
        return (status, reply)
    }

    @Test("past the limit an address gets the original's 429 with Retry-After; each request counts once, another address is unaffected, the allowance comes back")
    func limitPerAddress() async throws {
        let clock = ManualClock(Date())
        try await withTestGateway(clock: clock, environment: ["SOULACY_RATE_LIMIT_PER_MINUTE": "5"]) { (gw) async throws in
            // Quick reads answered on the server thread and calls that run in a task count alike, once each.
            #expect(try await gw.request("GET", "/api/v1/mobile/deliveries").status == 200)
            #expect(try await gw.request("POST", "/api/v1/memory/facts", json: ["content": "likes tea"]).status == 201)
            #expect(try await gw.request("GET", "/health", key: .none).status == 200)
            #expect(try await gw.request("POST", "/api/v1/memory/facts", json: ["content": "likes jasmine tea"]).status == 201)
            #expect(try await gw.request("GET", "/api/v1/mobile/deliveries").status == 200)

            for (method, path) in [("GET", "/api/v1/mobile/deliveries"), ("POST", "/api/v1/memory/facts"), ("GET", "/health")] {
                let refused = try await gw.request(method, path, json: method == "POST" ? ["content": "refused"] : nil)
                #expect(refused.status == 429, "\(method) \(path)")
                #expect(refused.json == ["error": "rate limit exceeded", "code": "rate_limited"], "\(refused.text)")
                // One place frees every 60/5 = 12 seconds.
                #expect(refused.headers["retry-after"] == "12")
            }
            #expect(try await gw.request("GET", "/api/v1/memory/facts").status == 429)

            // Another address of the same machine has its own allowance.
            let other = await get(gw, "/health", from: "127.0.0.2")
            #expect(other.status == 200, "\(other.reply)")

            // The refused requests took no place: twelve seconds on, exactly one more passes.
            clock.advance(by: .seconds(11))
            let early = try await gw.request("GET", "/health", key: .none)
            #expect(early.status == 429 && early.headers["retry-after"] == "1")
            clock.advance(by: .seconds(1))
            #expect(try await gw.request("GET", "/health", key: .none).status == 200)
            #expect(try await gw.request("GET", "/health", key: .none).status == 429)
            // A quiet minute restores the whole allowance.
            clock.advance(by: .seconds(60))
            for _ in 0..<5 { #expect(try await gw.request("GET", "/health", key: .none).status == 200) }
            #expect(try await gw.request("GET", "/health", key: .none).status == 429)
            // Nothing refused was applied.
            clock.advance(by: .seconds(12))
            #expect(try await gw.request("GET", "/api/v1/memory/facts").json["facts"]?.arrayValue?.count == 2)
        }
    }

    @Test("X-Forwarded-For names the client only when the peer is a trusted proxy; from anyone else it is ignored")
    func trustedProxies() async throws {
        try await withTestGateway(environment: ["SOULACY_RATE_LIMIT_PER_MINUTE": "2", "SOULACY_TRUSTED_PROXIES": "127.0.0.1"]) { (gw) async throws in
            // Through the proxy (127.0.0.1): each forwarded client has its own allowance.
            for _ in 0..<2 { #expect(await get(gw, "/health", from: "127.0.0.1", headers: ["X-Forwarded-For": "203.0.113.7"]).status == 200) }
            #expect(await get(gw, "/health", from: "127.0.0.1", headers: ["X-Forwarded-For": "203.0.113.7"]).status == 429)
            #expect(await get(gw, "/health", from: "127.0.0.1", headers: ["X-Forwarded-For": "203.0.113.8"]).status == 200)
            // What the client put in front of the proxy's entry changes nothing: the right-most untrusted entry counts.
            #expect(await get(gw, "/health", from: "127.0.0.1", headers: ["X-Forwarded-For": "198.51.100.1, 203.0.113.7"]).status == 429)
            // Not from a trusted proxy: the header is the client's own claim, and the peer is counted.
            #expect(await get(gw, "/health", from: "127.0.0.2", headers: ["X-Forwarded-For": "198.51.100.2"]).status == 200)
            #expect(await get(gw, "/health", from: "127.0.0.2", headers: ["X-Forwarded-For": "198.51.100.3"]).status == 200)
            let spoofed = await get(gw, "/health", from: "127.0.0.2", headers: ["X-Forwarded-For": "198.51.100.4"])
            #expect(spoofed.status == 429 && spoofed.reply.contains(#""error":"rate limit exceeded""#))
        }
    }

    @Test("an IPv6 client is counted per /64: its other addresses share the allowance, another /64 has its own")
    func ipv6PerSlash64() async throws {
        try await withTestGateway(environment: ["SOULACY_RATE_LIMIT_PER_MINUTE": "3"], mode: .router) { (gw) async throws in
            for host in 1...3 { #expect(try await gw.request("GET", "/health", key: .none, from: "2001:db8:5:5::\(host)").status == 200) }
            let sameNetwork = try await gw.request("GET", "/health", key: .none, from: "2001:db8:5:5:1234:5678:9abc:def0")
            #expect(sameNetwork.status == 429 && sameNetwork.errorCode == "rate_limited")
            #expect(try await gw.request("GET", "/health", key: .none, from: "2001:db8:5:6::1").status == 200)
            #expect(try await gw.request("GET", "/health", key: .none, from: "192.0.2.1").status == 200)
        }
    }

    @Test("SOULACY_RATE_LIMIT_PER_MINUTE is the original's 600 by default, 0 turns it off; bad values name their variable")
    func settings() throws {
        #expect(try GatewaySettings.fromEnvironment([:]).rateLimitPerMinute == 600)
        #expect(try GatewaySettings.fromEnvironment([:]).trustedProxies == [])
        #expect(try GatewaySettings.fromEnvironment(["SOULACY_RATE_LIMIT_PER_MINUTE": "0"]).rateLimitPerMinute == 0)
        #expect(try GatewaySettings.fromEnvironment(["SOULACY_TRUSTED_PROXIES": "10.0.0.1, ::1"]).trustedProxies == ["10.0.0.1", "::1"])
        for (variable, value) in [("SOULACY_RATE_LIMIT_PER_MINUTE", "-1"), ("SOULACY_RATE_LIMIT_PER_MINUTE", "lots"), ("SOULACY_TRUSTED_PROXIES", "proxy.local")] {
            #expect { try GatewaySettings.fromEnvironment([variable: value]) } throws: { error in
                "\(error)".contains(variable) && "\(error)".contains(value)
            }
        }
    }

    @Test("the table stays bounded under a flood of addresses and forgets idle ones; concurrent requests of one address get exactly the limit")
    func boundedAndThreadSafe() async throws {
        let clock = ManualClock(Date())
        let limiter = RequestRateLimiter(perMinute: 5, capacity: 100, clock: clock)
        for n in 0..<10_000 { _ = limiter.take(key: "10.0.\(n / 256).\(n % 256)") }
        #expect(limiter.trackedKeys == 100)
        // A minute later every allowance is whole again: the table empties as requests come.
        clock.advance(by: .seconds(61))
        for _ in 0..<60 { _ = limiter.take(key: "192.0.2.1") }
        #expect(limiter.trackedKeys == 1)

        let shared = RequestRateLimiter(perMinute: 100, clock: clock)
        let allowed = await onOwnThread {
            let count = Atomic<Int>(0)
            DispatchQueue.concurrentPerform(iterations: 1_000) { _ in
                if shared.take(key: "192.0.2.9") == .allowed { count.add(1, ordering: .relaxed) }
            }
            return count.load(ordering: .relaxed)
        }
        #expect(allowed == 100)
        #expect(shared.take(key: "192.0.2.9") == .limited(retryAfter: 1))
    }
}
