import Foundation
import GatewayTestSupport
import Testing

/// Which node answered and on which engine: what an operator of several gateways on one database reads first.
@Suite("Node identity")
struct NodeIdentityTests {
    @Test("GET /api/v1/health names the node (SOULACY_NODE_ID, else host name and data directory) and the engine")
    func healthNamesNodeAndEngine() async throws {
        try await withTestGateway(environment: ["SOULACY_NODE_ID": "node-a"], mode: .router) { gw in
            let health = try await gw.request("GET", "/api/v1/health")
            #expect(health.status == 200 && health.json["node"] == "node-a" && health.json["engine"] == "sqlite", "\(health.json)")
            // The original's fields are all still there.
            #expect(health.json["status"] == "ok" && health.json["deps"]?["database"] == "ok" && health.json["request_id"]?.stringValue != nil)
        }
        try await withTestGateway(mode: .router) { gw in
            let node = try #require(try await gw.request("GET", "/api/v1/health").json["node"]?.stringValue)
            #expect(node == ProcessInfo.processInfo.hostName + ":" + gw.directory + "/data", "\(node)")
        }
    }

    @Test("a SOULACY_NODE_ID that is too long or has spaces or control characters stops the start, naming the variable")
    func badNodeID() async throws {
        for value in ["has space", "tab\there", "é", String(repeating: "n", count: 129)] {
            let refused = await #expect(throws: (any Error).self) {
                try await withTestGateway(environment: ["SOULACY_NODE_ID": value], mode: .router) { _ in }
            }
            #expect(String(describing: refused).contains("SOULACY_NODE_ID"), "\(String(describing: refused))")
        }
    }
}
