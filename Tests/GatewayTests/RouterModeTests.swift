import Foundation
import Gateway
import GatewayTestSupport
import SQLite
import Testing

/// The test kit's `.router` mode: the gateway a route test needs, without what only socket tests need.
@Suite("The in-process test router")
struct RouterModeTests {
    @Test("no socket, no TLS identity, synchronous=NORMAL; answers come from the main listener's responder with its middleware")
    func inProcess() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            #expect(gw.gateway.port == 0, "a socket was bound")
            #expect(!FileManager.default.fileExists(atPath: GatewayTLSIdentity.certificatePath(dataDirectory: gw.directory + "/data")))
            let synchronous = try gw.gateway.database.read { db in try db.query("PRAGMA synchronous").first?.int("synchronous") }
            #expect(synchronous == 1, "synchronous is \(String(describing: synchronous)), not NORMAL (1)")
            // Authentication, the request id and the router's refusals, as over the socket.
            let answer = try await gw.request("GET", "/api/v1/mobile/deliveries?limit=1", headers: ["X-Request-Id": "router-mode-1"])
            #expect(answer.status == 200 && answer.headers["x-request-id"] == "router-mode-1")
            #expect(try await gw.request("GET", "/api/v1/mobile/deliveries", key: .none).status == 401)
            #expect(try await gw.request("GET", "/api/v1/nothing").status == 404)
        }
        try await withTestGateway { (gw) async throws in
            #expect(gw.gateway.port != 0)
            let synchronous = try gw.gateway.database.read { db in try db.query("PRAGMA synchronous").first?.int("synchronous") }
            #expect(synchronous == 2, "a live gateway keeps synchronous=FULL")
        }
    }
}
