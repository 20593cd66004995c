import Foundation
import GatewayTestSupport
import APIKit
import Testing

/// Bearer API keys: stored hashed, checked on every route, roles enforced, revocation immediate.
@Suite("API keys and roles", .serialized)
struct AuthTests {
    @Test("every route but /health refuses a missing or unknown key with 401")
    func unauthenticated() async throws {
        try await withTestGateway { (gw) async throws in
            for route in gw.gateway.router.routes where route.access != .open {
                let path = route.pattern.replacingOccurrences(of: ":id", with: "x")
                for key: String?? in [.none, .some("sk_not-a-real-key"), .some("garbage")] {
                    let response = try await gw.request(route.method.rawValue, path, key: key)
                    #expect(response.status == 401, "\(route.method) \(route.pattern)")
                    #expect(response.errorCode == "unauthorized")
                }
            }
            #expect(try await gw.request("GET", "/health", key: .none).status == 200)
        }
    }

    @Test("roles: viewer reads, operator runs, admin manages")
    func roles() async throws {
        try await withTestGateway { (gw) async throws in
            let viewer = try await gw.mintKey(subject: "vee", role: "viewer")
            let op = try await gw.mintKey(subject: "opal", role: "operator")
            #expect(try await gw.request("GET", "/api/v1/mobile/deliveries", key: .some(viewer)).status == 200)
            let refusedRun = try await gw.request("POST", "/api/v1/agents/echo/run", json: ["input": "x"], key: .some(viewer))
            #expect(refusedRun.status == 403)
            #expect(refusedRun.json["required"] == "operator" && refusedRun.json["role"] == "viewer")
            #expect(try await gw.request("POST", "/api/v1/agents/echo/run", json: ["input": "x"], key: .some(op)).status == 202)
            for key in [viewer, op] {
                #expect(try await gw.request("GET", "/admin/api-keys", key: .some(key)).status == 403)
                #expect(try await gw.request("POST", "/admin/api-keys", json: ["name": "x"], key: .some(key)).status == 403)
                #expect(try await gw.request("POST", "/api/v1/channels/mobile/test", key: .some(key)).status == 403)
            }
            // An operator may send a run's reply to themselves only.
            let elsewhere = try await gw.request("POST", "/api/v1/agents/echo/run", json: ["input": "x", "to": "all"], key: .some(op))
            #expect(elsewhere.status == 403)
            #expect(elsewhere.errorField == "to")
        }
    }

    @Test("keys are stored as hashes only and revocation takes effect on the next call")
    func hashedAndRevocable() async throws {
        try await withTestGateway { (gw) async throws in
            let created = try await gw.request("POST", "/admin/api-keys", json: ["name": "Laptop", "role": "operator", "subject": "owner"])
            #expect(created.status == 201)
            let token = try #require(created.json["key"]?.stringValue)
            let id = try #require(created.json["id"]?.stringValue)
            #expect(try await gw.request("GET", "/api/v1/mobile/deliveries", key: .some(token)).status == 200)

            let raw = try Data(contentsOf: URL(fileURLWithPath: gw.gateway.database.path))
            let wal = (try? Data(contentsOf: URL(fileURLWithPath: gw.gateway.database.path + "-wal"))) ?? Data()
            #expect(raw.range(of: Data(token.utf8)) == nil)
            #expect(wal.range(of: Data(token.utf8)) == nil)
            #expect(raw.range(of: Data(gw.adminKey.utf8)) == nil && wal.range(of: Data(gw.adminKey.utf8)) == nil)

            let listed = try await gw.request("GET", "/admin/api-keys")
            #expect(!listed.text.contains(token))
            #expect(listed.json["keys"]?.arrayValue?.count == 2)

            #expect(try await gw.request("DELETE", "/admin/api-keys/\(id)").status == 204)
            #expect(try await gw.request("GET", "/api/v1/mobile/deliveries", key: .some(token)).status == 401)
            #expect(try await gw.request("DELETE", "/admin/api-keys/\(id)").status == 404)
        }
    }

    @Test("key creation validates role and subject")
    func keyValidation() async throws {
        try await withTestGateway { (gw) async throws in
            #expect(try await gw.request("POST", "/admin/api-keys", json: ["name": "x", "role": "root"]).errorField == "role")
            #expect(try await gw.request("POST", "/admin/api-keys", json: ["name": "x", "subject": "Not Valid"]).errorField == "subject")
            #expect(try await gw.request("POST", "/admin/api-keys", json: ["role": "viewer"]).errorField == "name")
        }
    }
}
