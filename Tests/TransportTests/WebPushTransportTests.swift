import APIKit
import ChannelAPI
import ChannelTesting
import Crypto
import Foundation
import GatewayTestSupport
import Testing
import WebPush

/// The Web Push transport against a local push service written from RFC 8030/8291/8292, which verifies the VAPID
/// token against its key, decrypts every message with http_ece and answers with scripted statuses.
@Suite("Web Push transport", .serialized)
struct WebPushTransportTests {
    func transport(_ standIn: WebPushStandIn, directory: String = TestGateway.makeTemporaryDirectory(), contact: String? = nil,
                   clock: any WallClock = SystemWallClock()) throws -> WebPushTransport {
        var environment = standIn.environment
        if let contact { environment["SOULACY_WEBPUSH_CONTACT"] = contact }
        let configuration = try #require(try WebPushConfiguration.fromEnvironment(environment))
        return WebPushTransport(configuration: configuration, keys: try WebPushKeys.loadOrCreate(dataDirectory: directory), clock: clock)
    }

    /// A browser subscribed with the transport's VAPID key, as the device the gateway would store.
    func target(_ webPush: WebPushTransport, _ standIn: WebPushStandIn) async throws -> (WakeTarget, WebPushStandIn.Subscription) {
        let made = try await standIn.subscribe(applicationServerKey: webPush.publicKey)
        let subscription = try WebPushSubscription(endpoint: made.endpoint, p256dh: made.p256dh, auth: made.auth)
        let id = webPush.deviceID(for: subscription)
        return (WakeTarget(deviceID: id, platform: .web, pushToken: try webPush.seal(subscription, deviceID: id), environment: .production, bundleID: "web"), made)
    }

    @Test("RFC 8291 Appendix A: the example message encrypts to the RFC's body byte for byte")
    func rfcExample() throws {
        // The example's application server private key (yfWPiYE-n46HLnH0KqZOF1fJJU3MYrct3AELtAQ-oRw) as PKCS#8.
        let senderKey = try P256PrivateKey(pem: """
            -----BEGIN PRIVATE KEY-----
            MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgyfWPiYE+n46HLnH0
            KqZOF1fJJU3MYrct3AELtAQ+oRyhRANCAAT+M/SrDepxkU21WCP3O1SUj0EwbZIH
            Mtu5pZpTKGSCIA5Zent7wmC6HCJ5mFgJkuk5cwAvMBKiiujwa7t45ewP
            -----END PRIVATE KEY-----
            """)
        #expect(Base64URL.encode(try senderKey.publicKey()) == "BP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A8")
        let subscription = try WebPushSubscription(endpoint: "https://push.example.net/push/JzLQ3raZJfFBR0aqvOMsLrt54w4rJUsV",
                                                   p256dh: "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4",
                                                   auth: "BTBZMqHH6r4Tts7J_aSIgg")
        let body = try WebPushEncryption.encrypt(Array("When I grow up, I want to be a watermelon".utf8), to: subscription, senderKey: senderKey,
                                                 salt: try #require(Base64URL.decode("DGv6ra1nlYgDCS1FRnbzlw")))
        #expect(Base64URL.encode(body) == "DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A_yl95bQpu6cVPTpK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXLWyouBWLVWGNWQexSgSxsj_Qulcy4a-fN")
        #expect(subscription.origin == "https://push.example.net")
    }

    @Test("a wake-up goes out encrypted to the browser with a valid VAPID token; the service decrypts the generic wake-up")
    func deliveredAndDecrypted() async throws {
        let standIn = try await WebPushStandIn.start()
        defer { standIn.stop() }
        let webPush = try transport(standIn)
        let (target, _) = try await target(webPush, standIn)
        var signal = WakeSignal.delivery(id: "dlv_42", agentID: "brief")
        signal.expiresAt = Date().addingTimeInterval(3600)
        #expect(await webPush.send(signal, to: target) == .delivered)
        #expect(await webPush.send(.delivery(id: "dlv_43", agentID: "brief"), to: target) == .delivered)

        let received = try await standIn.requests()
        #expect(received.count == 2)
        let first = try #require(received.first)
        #expect(first["status"] == 201, "\(first)")
        let message = try JSONValue.parse(Array((first["plaintext"]?.stringValue ?? "").utf8))
        #expect(message == ["title": "Soulacy", "body": "An agent result is ready to review.", "category": "SOULACY_DELIVERY", "thread_id": "delivery-brief",
                            "delivery_id": "dlv_42", "collapse_id": "dlv_42", "time_sensitive": false, "extra": [:]])
        let headers = try #require(first["headers"])
        #expect(headers["content-encoding"] == "aes128gcm")
        #expect(headers["urgency"] == "high")
        let ttl = Int(headers["ttl"]?.stringValue ?? "") ?? -1
        #expect(ttl > 3500 && ttl <= 3600)
        #expect(Int(received[1]["headers"]?["ttl"]?.stringValue ?? "") == WebPushTransport.defaultTTL)
        #expect(headers["topic"]?.stringValue?.count == 32)
        #expect(headers["authorization"]?.stringValue?.hasPrefix("vapid t=") == true)
        #expect(headers["authorization"]?.stringValue?.hasSuffix(", k=\(webPush.publicKey)") == true)
        // The claims RFC 8292 asks for: the service's origin, a day at most, a contact.
        let claims = try #require(first["jwt_claims"])
        #expect(claims["aud"]?.stringValue == "https://127.0.0.1:\(standIn.tlsPort)")
        #expect(claims["sub"]?.stringValue == WebPushConfiguration.defaultContact)
        let exp = claims["exp"]?.numberValue ?? 0
        #expect(exp > Date().timeIntervalSince1970 + 11 * 3600 && exp <= Date().timeIntervalSince1970 + 12 * 3600 + 5)
        // One record of 4096 with a 65-byte ephemeral key, a fresh one per message; one token for both.
        #expect(first["rs"] == 4096 && first["keyid_length"] == 65)
        #expect(first["sender_key"] != received[1]["sender_key"])
        #expect(first["headers"]?["authorization"] == received[1]["headers"]?["authorization"])
        #expect(await webPush.authorization.signedCount == 1)
    }

    @Test("the Web Push transport passes the channel testing kit's conformance suite")
    func conformance() async throws {
        let standIn = try await WebPushStandIn.start()
        defer { standIn.stop() }
        let webPush = try transport(standIn)
        let (target, _) = try await target(webPush, standIn)
        let failures = await WakeTransportConformance(
            transport: webPush, acceptedTarget: target,
            foreignTarget: WakeTarget(deviceID: "i", platform: .ios, pushToken: String(repeating: "ab", count: 32), environment: .production, bundleID: "dev.soulacy.ios")
        ).run()
        #expect(failures.isEmpty, "\(failures)")
        // Every one of the 51 was decrypted by the service.
        let received = try await standIn.requests()
        #expect(received.count == 51 && received.allSatisfy { $0["status"] == 201 && $0["plaintext"]?.stringValue?.contains("An agent result is ready to review.") == true })
    }

    @Test("the service's answers: 404/410 reject the token, 429/5xx retry after Retry-After, 413 and other 4xx fail with its reason")
    func outcomes() async throws {
        let standIn = try await WebPushStandIn.start()
        defer { standIn.stop() }
        let webPush = try transport(standIn)
        let (target, made) = try await target(webPush, standIn)
        let signal = WakeSignal.delivery(id: "dlv", agentID: "a")

        try await standIn.script([["status": 404, "reason": "NotFound"]])
        #expect(await webPush.send(signal, to: target) == .tokenRejected(reason: "Web Push 404 NotFound"))
        try await standIn.script([["status": 410, "reason": "Gone"]])
        #expect(await webPush.send(signal, to: target) == .tokenRejected(reason: "Web Push 410 Gone"))
        try await standIn.script([["status": 429, "reason": "TooManyRequests", "retry_after": 120]])
        #expect(await webPush.send(signal, to: target) == .retry(after: .seconds(120), reason: "Web Push 429 TooManyRequests"))
        try await standIn.script([["status": 500, "reason": "InternalServerError"]])
        #expect(await webPush.send(signal, to: target) == .retry(after: nil, reason: "Web Push 500 InternalServerError"))
        try await standIn.script([["status": 503, "reason": "Unavailable", "retry_after": 7]])
        #expect(await webPush.send(signal, to: target) == .retry(after: .seconds(7), reason: "Web Push 503 Unavailable"))
        try await standIn.script([["status": 413, "reason": "Payload Too Large"]])
        #expect(await webPush.send(signal, to: target) == .failed(reason: "Web Push 413 Payload Too Large"))
        try await standIn.script([["status": 400, "reason": "BadRequest"]])
        #expect(await webPush.send(signal, to: target) == .failed(reason: "Web Push 400 BadRequest"))
        // A service that quotes the endpoint back: the subscription's capability stays out of the recorded reason.
        try await standIn.script([["status": 400, "reason": .string("no such subscription \(made.endpoint)")]])
        let quoted = await webPush.send(signal, to: target)
        #expect(quoted == .failed(reason: "Web Push 400 no such subscription (endpoint)"))
        #expect(await webPush.send(signal, to: target) == .delivered)

        // The browser unsubscribed: its endpoint is gone for good.
        try await standIn.unsubscribe(made)
        #expect(await webPush.send(signal, to: target) == .tokenRejected(reason: "Web Push 410 SubscriptionGone"))
    }

    @Test("a subscription made with another VAPID key is refused (403) once renewed, then failed; no reason names the endpoint")
    func wrongKey() async throws {
        let standIn = try await WebPushStandIn.start()
        defer { standIn.stop() }
        let webPush = try transport(standIn)
        let other = try transport(standIn)
        let made = try await standIn.subscribe(applicationServerKey: other.publicKey)
        let subscription = try WebPushSubscription(endpoint: made.endpoint, p256dh: made.p256dh, auth: made.auth)
        let id = webPush.deviceID(for: subscription)
        let target = WakeTarget(deviceID: id, platform: .web, pushToken: try webPush.seal(subscription, deviceID: id), environment: .production, bundleID: "web")
        let outcome = await webPush.send(.delivery(id: "d", agentID: "a"), to: target)
        #expect(outcome == .failed(reason: "Web Push 403 VapidKeyMismatch"))
        #expect(try await standIn.requests().count == 2)
        #expect(await webPush.authorization.signedCount == 2)
    }

    @Test("a token sealed for another device or under another key is rejected without a request; oversize, silent and Live Activity wake-ups fail before one")
    func refusedLocally() async throws {
        let standIn = try await WebPushStandIn.start()
        defer { standIn.stop() }
        let webPush = try transport(standIn)
        let (target, _) = try await target(webPush, standIn)
        var moved = target
        moved.deviceID = "web-someone-else"
        guard case .tokenRejected = await webPush.send(.delivery(id: "d", agentID: "a"), to: moved) else { Issue.record("a token moved to another device opened"); return }
        let otherGateway = try transport(standIn)
        guard case .tokenRejected = await otherGateway.send(.delivery(id: "d", agentID: "a"), to: target) else { Issue.record("another key opened the token"); return }
        var big = WakeSignal.delivery(id: "d", agentID: "a")
        big.extra = ["padding": String(repeating: "x", count: 5000)]
        guard case .failed(let reason) = await webPush.send(big, to: target) else { Issue.record("an oversize message was sent"); return }
        #expect(reason.contains("\(WebPushEncryption.maximumPlaintext)"))
        var silent = WakeSignal.delivery(id: "d", agentID: "a")
        silent.kind = .background
        guard case .failed = await webPush.send(silent, to: target) else { Issue.record("a silent wake-up was sent to a browser"); return }
        #expect(try await standIn.requests().isEmpty)
        #expect(!webPush.canWake(WakeTarget(deviceID: "p", platform: .android, pushToken: "fcm", environment: .production, bundleID: "dev.soulacy.android")))
    }

    @Test("an unreachable push service is a retry, not a failure")
    func unreachable() async throws {
        let standIn = try await WebPushStandIn.start()
        let webPush = try transport(standIn)
        let (target, _) = try await target(webPush, standIn)
        standIn.stop()
        guard case .retry = await webPush.send(.delivery(id: "x", agentID: "a"), to: target) else { Issue.record("expected retry"); return }
    }

    static let point = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"
    static let auth = "BTBZMqHH6r4Tts7J_aSIgg"

    /// The field a subscription is refused for; nil when it is taken.
    func refused(endpoint: String = "https://push.example.net/p/1", p256dh: String = Self.point, auth: String = Self.auth) -> String? {
        do { _ = try WebPushSubscription(endpoint: endpoint, p256dh: p256dh, auth: auth); return nil } catch { return error.field }
    }

    @Test("subscriptions: an https endpoint (http only to this machine), a 65-byte P-256 point, a 16-byte secret, base64url; each refusal names its field")
    func subscriptionRules() throws {
        #expect(refused() == nil)
        #expect(refused(endpoint: "http://127.0.0.1:8080/push/1") == nil)
        #expect(refused(endpoint: "http://localhost/push/1") == nil)
        for endpoint in ["http://push.example.net/p/1", "ftp://push.example.net/p/1", "https://user:pw@push.example.net/p/1", "not a url", "",
                         "https://push.example.net/p/1#x", "https://push.example.net/" + String(repeating: "a", count: 3000)] {
            #expect(refused(endpoint: endpoint) == "endpoint", "\(endpoint.prefix(60))")
        }
        #expect(refused(p256dh: String(Self.point.dropLast(4))) == "keys.p256dh")
        // Standard base64 is not base64url.
        #expect(refused(p256dh: Self.point.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")) == "keys.p256dh")
        // 65 bytes starting 0x04 but not a point on the curve.
        #expect(refused(p256dh: Base64URL.encode([0x04] + [UInt8](repeating: 1, count: 64))) == "keys.p256dh")
        #expect(refused(p256dh: "") == "keys.p256dh")
        #expect(refused(auth: Base64URL.encode([UInt8](repeating: 7, count: 15))) == "keys.auth")
        #expect(refused(auth: "!!!!") == "keys.auth")
        #expect(refused(auth: Self.auth + "==") == nil)
    }

    @Test("configuration: on by default with a contact that works everywhere; off, bad switches and local contacts are named")
    func configuration() throws {
        #expect(try WebPushConfiguration.fromEnvironment([:]) == WebPushConfiguration(contact: WebPushConfiguration.defaultContact))
        #expect(try WebPushConfiguration.fromEnvironment(["SOULACY_WEBPUSH": "off"]) == nil)
        #expect(try WebPushConfiguration.fromEnvironment(["SOULACY_WEBPUSH_CONTACT": "mailto:ops@example.org"])?.contact == "mailto:ops@example.org")
        #expect(try WebPushConfiguration.fromEnvironment(["SOULACY_WEBPUSH_CONTACT": "https://home.example.org/"])?.contact == "https://home.example.org/")
        #expect(throws: WebPushConfigurationError.self) { try WebPushConfiguration.fromEnvironment(["SOULACY_WEBPUSH": "maybe"]) }
        for bad in ["mailto:me@localhost", "https://localhost", "mailto:nobody", "ops@example.org", "http://example.org", "https://127.0.0.1"] {
            do {
                _ = try WebPushConfiguration.fromEnvironment(["SOULACY_WEBPUSH_CONTACT": bad])
                Issue.record("\(bad) was taken as a contact")
            } catch {
                #expect(error.description.hasPrefix("SOULACY_WEBPUSH_CONTACT: "), "\(error)")
            }
        }
    }

    @Test("the VAPID key is made once, owner-only, and read back; a loose or broken key file is refused, never replaced")
    func keys() throws {
        let directory = TestGateway.makeTemporaryDirectory()
        let first = try WebPushKeys.loadOrCreate(dataDirectory: directory)
        let second = try WebPushKeys.loadOrCreate(dataDirectory: directory)
        #expect(first.publicKey == second.publicKey && first.publicKey.count == 65 && first.publicKey[0] == 0x04)
        for name in [WebPushKeys.vapidKeyFileName, WebPushKeys.subscriptionKeyFileName] {
            let mode = try FileManager.default.attributesOfItem(atPath: directory + "/" + name)[.posixPermissions] as? Int
            #expect(mode == 0o600, "\(name) has mode \(String(mode ?? 0, radix: 8))")
        }
        let path = directory + "/" + WebPushKeys.vapidKeyFileName
        chmod(path, 0o644)
        #expect(throws: WebPushConfigurationError.self) { try WebPushKeys.loadOrCreate(dataDirectory: directory) }
        try SecretFile.write("not a key", to: path)
        #expect(throws: WebPushConfigurationError.self) { try WebPushKeys.loadOrCreate(dataDirectory: directory) }
        #expect(try String(contentsOfFile: path, encoding: .utf8) == "not a key")
    }
}
