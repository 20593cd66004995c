import Crypto
import Foundation
import Gateway
import GatewayTestSupport
import Glibc
import HTTPClient
import APIKit
import Testing

/// The original app pairing as SOULACY-CONTRACT.md §1.1 and §2 describe it, played from outside: it reads the QR
/// link, pins the key the link names, and talks to the gateway's one port over TLS, where plain HTTP also answers.
@Suite("Pairing over pinned TLS on the gateway's one port")
struct PinnedPairingContractTests {
    struct TokenAnswer: Decodable {
        let code: String; let expires_at: String; let pair_url: String; let base_url: String; let fingerprint: String
        let subject: String; let display_name: String; let role: String
    }
    struct Redeemed: Decodable {
        let paired: Bool; let token: String; let key_id: String; let scopes: [String]; let subject: String; let role: String
        let display_name: String; let fingerprint: String; let message: String
    }
    struct Refused: Decodable { let paired: Bool; let reason: String }
    struct Ping: Decodable { let status: String; let auth: String; let mode: String }

    func decode<T: Decodable>(_ type: T.Type, _ bytes: [UInt8]) throws -> T { try JSONDecoder().decode(type, from: Data(bytes)) }

    @Test("the QR link names the one port and the key's pin; the app pins it, pairs over TLS, gets the relay secret there only, and plain HTTP still answers on the same port")
    func pairsThroughTheLink() async throws {
        let relay = RelayServerProcess()
        try await relay.start()
        defer { relay.stop() }
        try await withTestGateway(environment: ["SOULACY_RELAY_MAILBOX_URL": relay.url]) { (gw) async throws in
            let offer = try decode(TokenAnswer.self, try await gw.request("POST", "/api/v1/pairing/tokens").body)
            // The app's parsing: host:port is the gateway, `pair` the code, `fp` the pin.
            let link = try #require(URLComponents(string: offer.pair_url))
            let fp = try #require(link.queryItems?.first { $0.name == "fp" }?.value)
            #expect(link.scheme == "https" && link.path == "/mobile" && link.port.map(UInt16.init) == gw.gateway.port)
            #expect(link.queryItems?.first { $0.name == "pair" }?.value == offer.code && fp == offer.fingerprint)
            #expect(fp.count == 64 && fp.allSatisfy { "0123456789abcdef".contains($0) })
            let base = "https://\(link.host!):\(link.port!)"
            #expect(offer.base_url == base)

            // What the app pins is SHA-256 of the served leaf's EC point (SecKeyCopyExternalRepresentation), taken
            // here from the live handshake with openssl; ALPN never picks h2.
            let port = gw.gateway.port
            let served = try await runProgram("/bin/sh", ["-c", "openssl s_client -connect 127.0.0.1:\(port) -servername x </dev/null 2>/dev/null | openssl x509 -pubkey -noout | openssl pkey -pubin -outform DER | tail -c 65 | openssl dgst -sha256 -r"])
            #expect(served.output.hasPrefix(fp), "\(served.output)")
            let alpn = try await runProgram("/bin/sh", ["-c", "openssl s_client -connect 127.0.0.1:\(port) -alpn h2,http/1.1 </dev/null 2>&1"])
            #expect(alpn.output.contains("BEGIN CERTIFICATE") || alpn.output.contains("Server certificate"))
            #expect(!alpn.output.contains("ALPN protocol: h2"), "\(alpn.output.suffix(400))")

            // The pinned session: names are ignored, the key decides. /ping answers on the TLS side (the pin probe).
            let pinned = HTTP2Client(configuration: HTTP2ClientConfiguration(pinnedPublicKeySHA256: Hex.decode(fp)))
            let ping = try await pinned.send(ClientRequest(method: "GET", url: base + "/ping"))
            #expect(ping.status == 200)
            #expect(try decode(Ping.self, ping.body).status == "ok")
            let otherPin = HTTP2Client(configuration: HTTP2ClientConfiguration(pinnedPublicKeySHA256: Hex.decode(String(fp.reversed()))))
            await #expect(throws: (any Error).self) { _ = try await otherPin.send(ClientRequest(method: "GET", url: base + "/ping")) }

            // Redeem over the pinned connection: the original's answer, plus the relay secret, which only travels here.
            let json = [("content-type", "application/json")]
            let answer = try await pinned.send(ClientRequest(method: "POST", url: base + "/api/v1/pairing/redeem", headers: json,
                                                             body: JSONValue.object(["code": .string(offer.code), "name": "Priya's iPhone"]).serializedBytes()))
            #expect(answer.status == 200)
            let redeemed = try decode(Redeemed.self, answer.body)
            #expect(redeemed.paired && redeemed.fingerprint == fp && redeemed.role == "operator" && redeemed.message == "Store this token; it is shown only once.")
            // The original's shapes: sk_ + 64 lowercase hex, a 16-hex key id.
            #expect(redeemed.token.wholeMatch(of: /sk_[0-9a-f]{64}/) != nil && redeemed.key_id.wholeMatch(of: /[0-9a-f]{16}/) != nil)
            #expect(try JSONValue.parse(answer.body)["relay"]?["secret"]?.stringValue?.isEmpty == false)
            let auth = [("authorization", "Bearer \(redeemed.token)")]
            #expect(try await pinned.send(ClientRequest(method: "GET", url: base + "/api/v1/mobile/deliveries", headers: auth)).status == 200)
            // The same token over plain HTTP on the same port (a reverse proxy in front, or the tailnet).
            #expect(try await gw.request("GET", "/api/v1/mobile/deliveries", key: .some(redeemed.token)).status == 200)

            // A code redeemed over plain HTTP pairs too, but carries no relay secret; a used code is the original's 401.
            let second = try decode(TokenAnswer.self, try await gw.request("POST", "/api/v1/pairing/tokens").body)
            let plain = try await gw.request("POST", "/api/v1/pairing/redeem", json: ["code": .string(second.code)], key: .none)
            #expect(plain.status == 200 && plain.json["relay"] == nil && plain.json["paired"] == true)
            let again = try await pinned.send(ClientRequest(method: "POST", url: base + "/api/v1/pairing/redeem", headers: json,
                                                            body: JSONValue.object(["code": .string(second.code)]).serializedBytes()))
            let refused = try decode(Refused.self, again.body)
            #expect(again.status == 401 && !refused.paired && refused.reason == "invalid or expired pairing code")
        }
    }

    @Test("the certificate is made once and kept: a restart serves the same key, so a paired phone's pin still holds")
    func certificateKept() async throws {
        let directory = TestGateway.makeTemporaryDirectory()
        let first = try await withTestGateway(directory: directory) { gw in gw.gateway.tlsPin }
        let second = try await withTestGateway(directory: directory) { (gw) async throws -> String? in
            let pin = try #require(gw.gateway.tlsPin)
            let pinned = HTTP2Client(configuration: HTTP2ClientConfiguration(pinnedPublicKeySHA256: Hex.decode(pin)))
            #expect(try await pinned.send(ClientRequest(method: "GET", url: "https://127.0.0.1:\(gw.gateway.port)/ping")).status == 200)
            return pin
        }
        #expect(first != nil && first == second)
        let key = GatewayTLSIdentity.certificatePath(dataDirectory: directory + "/data").replacingOccurrences(of: ".crt", with: ".key")
        let mode = (try FileManager.default.attributesOfItem(atPath: key)[.posixPermissions] as? NSNumber)?.intValue
        #expect(mode == 0o600, "the key is the owner's only")
    }
}

/// The shared port itself, below the gateway: the first byte picks TLS or plain HTTP; silence is dropped.
@Suite("HTTPServer: TLS and plain HTTP on one port")
struct SharedPortTests {
    @Test("each connection gets the protocol it opened with; the handler knows which; a silent connection is closed after the first-byte limit")
    func sharedPort() async throws {
        let made = try SelfSignedCertificate.generate(commonName: "test", ipAddresses: ["127.0.0.1"])
        // The protocol checks run with the original's 10 s first-byte limit: a loaded test machine may pause a client
        // between its connect and its first byte for longer than a short limit, and that is not what they test.
        func sharedPortServer(firstByteSeconds: Int) throws -> HTTPServer {
            var configuration = HTTPServerConfiguration(host: "127.0.0.1", port: 0, tls: (made.keyPEM, made.certificatePEM))
            configuration.acceptsPlainHTTP = true
            configuration.firstByteTimeoutSeconds = firstByteSeconds
            // Answered on the server's own thread: at the start of a full parallel run Swift's cooperative pool can
            // be busy for seconds, and that is not what this test is about.
            let answer: @Sendable (HTTPRequest) -> HTTPResponse = { request in
                HTTPResponse(status: 200, headers: [("Content-Type", "text/plain")], body: Array((request.isSecure ? "tls" : "plain").utf8))
            }
            let server = HTTPServer(configuration: configuration, immediate: { answer($0) }) { answer($0) }
            try server.start()
            return server
        }
        let server = try sharedPortServer(firstByteSeconds: 10)
        let port = server.port
        #expect(port != 0)
        let plain = await RawHTTP.exchange(port: port, Array("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".utf8), timeout: 20)
        #expect(plain.hasPrefix("HTTP/1.1 200") && plain.hasSuffix("plain"))
        let pin = try SelfSignedCertificate.publicKeyPin(pem: made.certificatePEM)
        let client = HTTP2Client(configuration: HTTP2ClientConfiguration(pinnedPublicKeySHA256: Hex.decode(pin)))
        for _ in 0..<3 {
            let secure = try await client.send(ClientRequest(method: "GET", url: "https://127.0.0.1:\(port)/"))
            #expect(secure.status == 200 && String(decoding: secure.body, as: UTF8.self) == "tls")
        }
        await server.stop()
        #expect(RawHTTP.connect(port: port, timeout: 1) == nil, "stopped: the port refuses")

        // A client that connects and says nothing is let go after the limit (the original's 10 s; 1 s here).
        let quick = try sharedPortServer(firstByteSeconds: 1)
        let silent = try #require(RawHTTP.connect(port: quick.port, timeout: 30))
        defer { close(silent) }
        let start = ContinuousClock.now
        let closed = await onOwnThread {
            var byte: UInt8 = 0
            return recv(silent, &byte, 1, 0) == 0
        }
        // Well under the 10 s default, with room for a loaded machine's stall.
        #expect(closed && ContinuousClock.now - start < .seconds(8))
        await quick.stop()
    }
}
