import Foundation
import GatewayTestSupport
import APIKit
import Testing

/// Everything stored survives a restart on the same data directory.
@Suite("Restart", .serialized)
struct RestartTests {
    @Test("devices, deliveries, receipts and keys are all there after a restart; no second admin key is minted")
    func keepsEverything() async throws {
        let directory = TestGateway.makeTemporaryDirectory()
        let (deliveryID, viewer) = try await withTestGateway(directory: directory) { (gw) async throws in
            let viewer = try await gw.mintKey(subject: "priya", role: "viewer")
            try await gw.registerDevice(id: "p1", key: viewer)
            let run = try await gw.runAgent("echo", input: "kept", to: "user:priya")
            let id = try #require(run["delivery_id"]?.stringValue)
            #expect(try await gw.request("POST", "/api/v1/mobile/deliveries/\(id)/read", json: ["device_id": "p1"], key: .some(viewer)).status == 200)
            return (id, viewer)
        }
        try await withTestGateway(directory: directory) { (gw) async throws in
            #expect(try await gw.gateway.keys.list().count == 2)
            #expect(try await gw.gateway.bootstrapAdminKey() == nil)
            let list = try await gw.request("GET", "/api/v1/mobile/deliveries?device_id=p1", key: .some(viewer))
            #expect(list.status == 200)
            let line = try #require(list.json["deliveries"]?.arrayValue?.first)
            #expect(line["id"]?.stringValue == deliveryID)
            #expect(line["body"] == "kept")
            #expect(line["read"] == true)
            #expect(try gw.gateway.database.read { try $0.integrityCheck() } == "ok")
        }
    }
}
