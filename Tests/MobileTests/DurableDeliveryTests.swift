import ChannelAPI
import ChannelTesting
import Foundation
import GatewayTestSupport
import APIKit
import Mobile
import Testing

/// The product's promise, end to end through the gateway's HTTP API and a real APNs stand-in:
/// a missing or failing push service never loses a result, and nothing sensitive leaves in a push.
@Suite("Durable delivery with APNs", .serialized)
struct DurableDeliveryTests {
    static let token = String(repeating: "5a", count: 32)
    static let secret = "PRIVATE-AGENT-OUTPUT-8f3a"
    static let quickRetries = RetryPolicy(initialDelay: 0.2, maximumDelay: 1)

    func inbox(_ gw: TestGateway) async throws -> [JSONValue] {
        try await gw.request("GET", "/api/v1/mobile/deliveries?device_id=phone").json["deliveries"]?.arrayValue ?? []
    }

    @Test("APNs down: the line is stored at once and the wake-up arrives when the service comes back")
    func serviceDown() async throws {
        let standIn = try await APNsStandIn.start()
        defer { standIn.stop() }
        standIn.stop()
        try await withTestGateway(environment: standIn.environment, retryPolicy: Self.quickRetries) { (gw) async throws in
            try await gw.registerDevice(id: "phone", key: nil, token: Self.token)
            let run = try await gw.runAgent("echo", input: Self.secret, to: "all")
            let id = try #require(run["delivery_id"]?.stringValue)
            #expect(try await inbox(gw).first?["body"]?.stringValue == Self.secret)
            // Attempts fail while the service is down; the row waits.
            #expect(await eventually { ((try? await gw.gateway.mobileStore.outbox.entries(deliveryID: id).first?.attempts) ?? 0) >= 2 })
            #expect(try await gw.gateway.mobileStore.outbox.entries(deliveryID: id).first?.state == .pending)

            try await standIn.start()
            #expect(try await eventually(timeout: .seconds(15)) { try await gw.gateway.mobileStore.outbox.entries(deliveryID: id).first?.state == .sent })
            let received = try await standIn.requests()
            #expect(received.count == 1)
            #expect(received.first?["status"] == 200)
            #expect(received.first?["body"]?.stringValue?.contains("soulacy://delivery/\(id)") == true)
            // The outcome is recorded per device and shown with the line.
            let line = try await gw.request("GET", "/api/v1/mobile/deliveries/\(id)?device_id=phone")
            let wake = try #require(line.json["wake_ups"]?.arrayValue?.first)
            #expect(wake["device_id"] == "phone" && wake["state"] == "sent" && wake["transport"] == "apns")
            #expect((wake["attempts"]?.numberValue ?? 0) >= 3)
        }
    }

    @Test("410 Unregistered clears the device's token; the inbox keeps every line")
    func unregistered() async throws {
        let standIn = try await APNsStandIn.start()
        defer { standIn.stop() }
        let logs = MemoryLogHandler()
        try await withTestGateway(environment: standIn.environment, retryPolicy: Self.quickRetries, log: Log(minimum: .info, handler: logs)) { (gw) async throws in
            try await gw.registerDevice(id: "phone", key: nil, token: Self.token)
            try await standIn.control("POST", "/control/unregister", json: ["token": .string(Self.token)])
            let one = try #require(try await gw.runAgent("echo", input: "one", to: "all")["delivery_id"]?.stringValue)
            #expect(try await eventually { try gw.gateway.mobileStore.devices.device(id: "phone")?.pushToken == nil })
            // The line says which delivery, device and transport as fields a log shipper filters on.
            #expect(await eventually { logs.records.contains { $0.message.contains("rejected the token of device phone")
                && $0.metadata["delivery_id"] == one && $0.metadata["device_id"] == "phone" && $0.metadata["transport"] == "apns" } }, "\(logs.lines)")
            let devices = try await gw.request("GET", "/api/v1/mobile/devices")
            #expect(devices.json["devices"]?.arrayValue?.first?["has_push_token"] == false)
            let two = try #require(try await gw.runAgent("echo", input: "two", to: "all")["delivery_id"]?.stringValue)
            // The line is stored with no wake-up row at all (the row would be written in the same transaction).
            #expect(try await gw.gateway.mobileStore.outbox.entries(deliveryID: two).isEmpty)
            #expect(try await standIn.requests().count == 1)
            #expect(try await inbox(gw).count == 2)
        }
    }

    @Test("the agent's output appears in no byte sent to the push service")
    func nothingSensitiveLeaves() async throws {
        let standIn = try await APNsStandIn.start()
        defer { standIn.stop() }
        try await withTestGateway(environment: standIn.environment) { (gw) async throws in
            try await gw.registerDevice(id: "phone", key: nil, token: Self.token)
            for i in 0..<5 { _ = try await gw.runAgent("echo", input: "\(Self.secret)-\(i)", to: "all") }
            _ = try await gw.request("POST", "/api/v1/channels/mobile/test", json: ["title": .string(Self.secret), "body": .string(Self.secret)])
            #expect(try await eventually { try await standIn.requests().count == 6 })
            let everything = try await standIn.requests().map { $0.serialized() }.joined()
            #expect(!everything.contains(Self.secret))
            #expect(!everything.contains("Echo"))
            #expect(!everything.contains(gw.adminKey))
            let privateKey = try String(contentsOfFile: standIn.keyFile, encoding: .utf8)
            let keyBody = privateKey.split(separator: "\n").dropFirst().first.map(String.init) ?? "none"
            #expect(!everything.contains(keyBody))
        }
    }

    @Test("a gateway with a group-readable APNs key refuses to start, naming the file")
    func refusesLooseKey() async throws {
        let standIn = try await APNsStandIn.start()
        defer { standIn.stop() }
        chmod(standIn.keyFile, 0o640)
        do {
            _ = try await withTestGateway(environment: standIn.environment) { _ in Issue.record("the gateway started") }
        } catch {
            #expect("\(error)".contains(standIn.keyFile))
        }
    }
}
