import Foundation
import Gateway
import GatewayTestSupport
import APIKit
import Testing

/// The alerts the original iOS app receives, decoded from what a local APNs received, as the contract (§5.1, §5.2,
/// §11) gives them: `content-available: 1` on every alert so iOS wakes the app to fetch, the generic text, the
/// category, the thread and the ids, `interruption-level` only when time-sensitive.
@Suite("Alert pushes as the original app reads them", .serialized)
struct AlertPushContractTests {
    static let phone = String(repeating: "ab", count: 32)
    static let otherPhone = String(repeating: "cd", count: 32)

    /// `aps` decoded strictly: every key the contract names, and no other.
    struct APS: Decodable {
        struct Alert: Decodable, Equatable { let title: String; let body: String }
        let alert: Alert
        let sound: String
        let contentAvailable: Int
        let category: String
        let threadID: String
        let interruptionLevel: String?

        enum CodingKeys: String, CodingKey, CaseIterable {
            case alert, sound, category
            case contentAvailable = "content-available"
            case threadID = "thread-id"
            case interruptionLevel = "interruption-level"
        }
    }

    func alerts(_ apns: APNsStandIn) async throws -> [(token: String, aps: APS, root: JSONValue)] {
        try await apns.requests().compactMap { request in
            guard request["headers"]?["apns-push-type"] == "alert", let text = request["body"]?.stringValue else { return nil }
            let root = try JSONValue.parse(Array(text.utf8))
            let keys = Set(root["aps"]?.objectValue?.keys.map { $0 } ?? [])
            #expect(keys.isSubset(of: Set(APS.CodingKeys.allCases.map(\.rawValue))), "aps keys beyond the contract: \(keys)")
            let aps = try JSONCoding.decode(APS.self, from: Array(try JSONCoding.encoder.encode(root["aps"]!)))
            return (request["token"]?.stringValue ?? "", aps, root)
        }
    }

    @Test("a delivery and an approval: content-available 1 on both, the contract's text, category, thread and ids; time-sensitive only for the approval")
    func deliveryAndApproval() async throws {
        let apns = try await APNsStandIn.start()
        defer { apns.stop() }
        try await withTestGateway(environment: apns.environment) { gw in
            try await gw.registerDevice(id: "phone", key: gw.adminKey, token: Self.phone)
            let line = try await gw.request("POST", "/api/v1/channels/mobile/test", json: ["to": "device:phone"])
            let deliveryID = try #require(line.json["delivery_id"]?.stringValue)
            _ = try await gw.request("POST", "/api/v1/approvals", json: ["agent_id": "echo", "tool": "send_email", "call_id": "call-9", "wait": false])
            // Sent by the dispatcher's own loop, which may hold them in flight while a drain finds nothing due.
            #expect(try await eventually { try await apns.requests().count >= 2 })
            let all = try await alerts(apns)
            let delivery = try #require(all.first { $0.aps.category == "SOULACY_DELIVERY" })
            #expect(delivery.aps.contentAvailable == 1)
            #expect(delivery.aps.interruptionLevel == nil)
            #expect(delivery.aps.sound == "default")
            #expect(delivery.aps.threadID == "delivery-mobile-test")
            #expect(delivery.root["delivery_id"]?.stringValue == deliveryID)
            #expect(delivery.root["deep_link"]?.stringValue == "soulacy://delivery/\(deliveryID)")
            let approval = try #require(all.first { $0.aps.category == "SOULACY_APPROVAL" })
            #expect(approval.aps.contentAvailable == 1)
            #expect(approval.aps.interruptionLevel == "time-sensitive")
            #expect(approval.aps.alert.title == "Approval needed")
            #expect(approval.aps.threadID == "approval-echo")
            #expect(approval.root["call_id"] == "call-9" && approval.root["tool"] == "send_email" && approval.root["agent_id"] == "echo")
            #expect(approval.root["deep_link"] == "soulacy://approval/call-9")
        }
    }

    @Test("a failed location run: the firing device alone gets '<agent name> could not run' as SOULACY_TRIGGER at priority 10, with nothing of the run in it")
    func failedLocationRun() async throws {
        let apns = try await APNsStandIn.start()
        defer { apns.stop() }
        let config = """
            agents:
              - id: home
                name: Home arrival
                runner:
                  command: ["/bin/sh", "-c", "echo RUN-OUTPUT-NOT-IN-PUSHES; exit 3"]
                trigger: location
                location:
                  name: Home
                  latitude: 52.52
                  longitude: 13.405
                  radius_m: 150
                  on: enter
            """
        try await withTestGateway(config: config, environment: apns.environment) { gw in
            try await gw.registerDevice(id: "phone", key: gw.adminKey, token: Self.phone)
            try await gw.registerDevice(id: "tablet", key: gw.adminKey, token: Self.otherPhone)
            let fired = try await gw.request("POST", "/api/v1/mobile/triggers/home/fire",
                                             json: ["event": "enter", "device_id": "phone", "latitude": 52.52, "longitude": 13.405])
            #expect(fired.status == 202)
            let runID = try #require(fired.json["run_id"]?.stringValue)
            let run = try await gw.request("GET", "/api/v1/runs/\(runID)?wait=true").json
            #expect(run["status"] == "failed", "\(run)")
            // The alert is queued as the run ends; the dispatcher sends it on its next turn.
            #expect(try await eventually { try await apns.requests().contains { $0["body"]?.stringValue?.contains("SOULACY_TRIGGER") == true } })
            await gw.gateway.dispatcher.drain()
            let requests = try await apns.requests()
            let triggers = try await alerts(apns).filter { $0.aps.category == "SOULACY_TRIGGER" }
            #expect(triggers.count == 1 && triggers.first?.token == Self.phone, "only the firing device: \(triggers.map(\.token))")
            let alert = try #require(triggers.first)
            #expect(alert.aps.alert.title == "Home arrival could not run")
            #expect(alert.aps.contentAvailable == 1)
            #expect(alert.aps.threadID == "trigger-home")
            #expect(alert.root["deep_link"] == "soulacy://activity")
            let sent = try #require(requests.first { $0["body"]?.stringValue?.contains("SOULACY_TRIGGER") == true })
            #expect(sent["headers"]?["apns-priority"] == "10")
            #expect(!requests.contains { $0["body"]?.stringValue?.contains("RUN-OUTPUT-NOT-IN-PUSHES") == true })
        }
    }
}
