import Foundation
import GatewayTestSupport
import APIKit
import Testing

/// Bad input gets a clear 4xx with the JSON error shape; nothing stored is touched.
@Suite("HTTP errors", .serialized)
struct HTTPErrorTests {
    @Test("malformed JSON, a non-object body and a wrong type name the problem")
    func malformed() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            let broken = try await gw.request("POST", "/api/v1/mobile/devices", body: Array("{\"id\": ".utf8))
            #expect(broken.status == 400)
            #expect(broken.errorCode == "invalid_json")
            let array = try await gw.request("POST", "/api/v1/mobile/devices", body: Array("[1,2]".utf8))
            #expect(array.status == 400)
            #expect(array.errorMessage?.contains("must be a JSON object") == true)
            let empty = try await gw.request("POST", "/api/v1/mobile/devices", body: [])
            #expect(empty.status == 400)
            #expect(empty.errorCode == "invalid_json")
            #expect(broken.headers["content-type"] == "application/json")
        }
    }

    @Test("unknown routes are 404 and wrong methods 405 with Allow, both as JSON")
    func routing() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            let missing = try await gw.request("GET", "/api/v1/nothing-here")
            #expect(missing.status == 404)
            #expect(missing.errorCode == "not_found")
            let wrong = try await gw.request("PUT", "/api/v1/mobile/deliveries")
            #expect(wrong.status == 405)
            #expect(wrong.errorCode == "method_not_allowed")
            #expect(wrong.headers["allow"] == "GET")
        }
    }

    @Test("an oversized body is refused with 413, announced or chunked, and nothing is stored")
    func oversized() async throws {
        try await withTestGateway(maximumBodyBytes: 4096) { (gw) async throws in
            let big = Array(("{\"id\": \"big\", \"name\": \"" + String(repeating: "x", count: 5000) + "\"}").utf8)
            let announced = try await gw.request("POST", "/api/v1/mobile/devices", body: big)
            #expect(announced.status == 413)
            #expect(announced.errorCode == "body_too_large")

            let port = gw.gateway.port
            var chunked = "POST /api/v1/mobile/devices HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(gw.adminKey)\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            for _ in 0..<3 { chunked += "800\r\n" + String(repeating: "y", count: 2048) + "\r\n" }
            chunked += "0\r\n\r\n"
            let reply = await RawHTTP.exchange(port: port, chunked)
            #expect(reply.hasPrefix("HTTP/1.1 413"))
            #expect(reply.contains("body_too_large"))
            #expect(try gw.gateway.mobileStore.devices.allDevices().isEmpty)
        }
    }

    @Test("oversized headers are refused by the server, garbage gets 400, and the gateway keeps serving")
    func headersAndGarbage() async throws {
        try await withTestGateway { (gw) async throws in
            let port = gw.gateway.port
            let huge = "GET /health HTTP/1.1\r\nHost: x\r\nX-Big: \(String(repeating: "h", count: 100_000))\r\n\r\n"
            let reply = await RawHTTP.exchange(port: port, huge)
            #expect(reply.hasPrefix("HTTP/1.1 431"))
            let garbage = await RawHTTP.exchange(port: port, "\u{01}\u{02}NOT HTTP AT ALL\r\n\r\n")
            #expect(garbage.hasPrefix("HTTP/1.1 400"))
            #expect(try await gw.request("GET", "/health", key: .none).status == 200)
        }
    }
}
