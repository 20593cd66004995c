import Crypto
import Foundation
import Gateway
import GatewayTestSupport
import APIKit
import SQLite
import Testing

/// Bearer API keys: stored hashed, checked on every route, roles enforced, revocation immediate.
@Suite("API keys and roles", .serialized)
struct AuthTests {
    @Test("every route but /health refuses a missing or unknown key with 401")
    func unauthenticated() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
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
        try await withTestGateway(mode: .router) { (gw) async throws in
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
        try await withTestGateway(mode: .router) { (gw) async throws in
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
        try await withTestGateway(mode: .router) { (gw) async throws in
            #expect(try await gw.request("POST", "/admin/api-keys", json: ["name": "x", "role": "root"]).errorField == "role")
            #expect(try await gw.request("POST", "/admin/api-keys", json: ["name": "x", "subject": "Not Valid"]).errorField == "subject")
            #expect(try await gw.request("POST", "/admin/api-keys", json: ["role": "viewer"]).errorField == "name")
        }
    }

    /// A key's `created_at` as a date (RFC 3339, whole seconds are enough here).
    static func date(_ value: JSONValue?) -> Date? {
        guard let text = value?.stringValue, text.count >= 20 else { return nil }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "yyyy-MM-dd'T'HH:mm:ss"
        return formatter.date(from: String(text.prefix(19)))
    }

    func pair(_ gw: TestGateway, as key: String? = nil, body: JSONValue? = nil, phone: String) async throws -> (token: String, keyID: String) {
        let offer = try await gw.request("POST", "/api/v1/pairing/tokens", json: body, key: .some(key))
        let code = try #require(offer.json["code"]?.stringValue, "\(offer.status) \(offer.text)")
        let redeemed = try await gw.request("POST", "/api/v1/pairing/redeem", json: ["code": .string(code), "name": .string(phone)], key: .none)
        return (try #require(redeemed.json["token"]?.stringValue), try #require(redeemed.json["key_id"]?.stringValue))
    }

    @Test("an admin mints keys only for their own subject: a key naming someone else is 403 naming subject, pointing to a pairing code")
    func adminMintsOnlyForThemselves() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            let refused = try await gw.request("POST", "/admin/api-keys", json: ["name": "Priya's key", "role": "operator", "subject": "priya"])
            #expect(refused.status == 403)
            #expect(refused.errorField == "subject" && refused.errorCode == "foreign_subject")
            #expect(refused.errorMessage?.contains("subject") == true && refused.errorMessage?.contains("pairing code") == true)
            #expect(refused.json["key"] == nil)
            #expect(try await gw.request("GET", "/admin/api-keys").json["keys"]?.arrayValue?.contains { $0["subject"] == "priya" } == false)
            // Their own subject, named or not, is minted as before.
            #expect(try await gw.request("POST", "/admin/api-keys", json: ["name": "Laptop", "subject": "owner"]).status == 201)
            #expect(try await gw.request("POST", "/admin/api-keys", json: ["name": "Tablet"]).json["subject"] == "owner")
            // Priya's key comes from a code made for her, which she redeems; it acts as her.
            let priya = try await pair(gw, body: ["name": "Priya", "role": "operator"], phone: "Priya's iPhone")
            #expect(try await gw.request("GET", "/api/v1/mobile/deliveries", key: .some(priya.token)).status == 200)
            let listed = try await gw.request("GET", "/api/v1/api-keys", key: .some(priya.token)).json["keys"]?.arrayValue ?? []
            #expect(listed.map { $0["id"] } == [.string(priya.keyID)] && listed.first?["subject"] == "priya" && listed.first?["role"] == "operator")
        }
    }

    @Test("every key shows who minted it and when; a pairing code's key shows the code's maker")
    func mintedByAndWhen() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            let started = Date().addingTimeInterval(-5)
            let laptop = try await gw.request("POST", "/admin/api-keys", json: ["name": "Laptop", "role": "operator"])
            #expect(laptop.json["minted_by"] == "owner" && Self.date(laptop.json["created_at"]) != nil)
            let phone = try await pair(gw, body: ["name": "Priya", "role": "viewer"], phone: "Priya's iPhone")
            // Priya pairs her own watch with a code she makes herself.
            let watch = try await pair(gw, as: phone.token, phone: "Priya's Watch")
            let keys = try #require(try await gw.request("GET", "/admin/api-keys").json["keys"]?.arrayValue)
            func key(_ id: String) -> JSONValue? { keys.first { $0["id"] == .string(id) } }
            #expect(key(phone.keyID)?["minted_by"] == "owner" && key(phone.keyID)?["subject"] == "priya")
            #expect(key(watch.keyID)?["minted_by"] == "priya" && key(watch.keyID)?["subject"] == "priya")
            #expect(keys.first { $0["kind"] == "bootstrap" }?["minted_by"] == "owner")
            for listed in keys {
                let created = try #require(Self.date(listed["created_at"]), "\(listed)")
                #expect(created >= started.addingTimeInterval(-60) && created <= Date().addingTimeInterval(5))
            }
            // The household view says it too.
            let member = try await gw.request("GET", "/api/v1/pairing/members").json["members"]?.arrayValue?.first { $0["subject"] == "priya" }
            #expect(Set(member?["keys"]?.arrayValue?.compactMap { $0["minted_by"]?.stringValue } ?? []) == ["owner", "priya"])
        }
    }

    @Test("a person, a viewer too, lists and revokes the keys of their own subject, and cannot see or revoke anyone else's")
    func ownKeys() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            let phone = try await pair(gw, body: ["name": "Priya", "role": "viewer"], phone: "Priya's iPhone")
            let watch = try await pair(gw, as: phone.token, phone: "Priya's Watch")
            let sam = try await pair(gw, body: ["name": "Sam", "role": "viewer"], phone: "Sam's iPhone")
            let mine = try await gw.request("GET", "/api/v1/api-keys", key: .some(phone.token))
            #expect(mine.status == 200)
            let listed = try #require(mine.json["keys"]?.arrayValue)
            #expect(Set(listed.compactMap { $0["id"]?.stringValue }) == [phone.keyID, watch.keyID])
            #expect(listed.allSatisfy { $0["subject"] == "priya" && $0["minted_by"]?.stringValue != nil && Self.date($0["created_at"]) != nil && $0["key"] == nil })
            #expect(!mine.text.contains(phone.token) && !mine.text.contains(watch.token))
            // The owner's list is the owner's keys only.
            #expect(try await gw.request("GET", "/api/v1/api-keys").json["keys"]?.arrayValue?.allSatisfy { $0["subject"] == "owner" } == true)

            // Sam's key is not Priya's to revoke: it is as unknown to her as a key that does not exist.
            let foreign = try await gw.request("DELETE", "/api/v1/api-keys/\(sam.keyID)", key: .some(phone.token))
            #expect(foreign.status == 404 && foreign.errorCode == "not_found")
            #expect(try await gw.request("GET", "/api/v1/mobile/deliveries", key: .some(sam.token)).status == 200)
            #expect(try await gw.request("DELETE", "/api/v1/api-keys/\(phone.keyID)", key: .some(sam.token)).status == 404)

            // Her own watch's key she revokes at once; her phone goes on working.
            #expect(try await gw.request("DELETE", "/api/v1/api-keys/\(watch.keyID)", key: .some(phone.token)).status == 204)
            #expect(try await gw.request("GET", "/api/v1/mobile/deliveries", key: .some(watch.token)).status == 401)
            #expect(try await gw.request("GET", "/api/v1/mobile/deliveries", key: .some(phone.token)).status == 200)
            #expect(try await gw.request("DELETE", "/api/v1/api-keys/\(watch.keyID)", key: .some(phone.token)).status == 404)
            let after = try await gw.request("GET", "/api/v1/api-keys", key: .some(phone.token)).json["keys"]?.arrayValue ?? []
            #expect(after.first { $0["id"] == .string(watch.keyID) }?["revoked_at"]?.stringValue != nil)
            #expect(after.first { $0["id"] == .string(phone.keyID) }?["revoked_at"] == .null)
        }
    }

    @Test("keys from before minted_by was recorded show null, unless a kept pairing code names its maker")
    func mintedByOfOlderKeys() async throws {
        let directory = TestGateway.makeTemporaryDirectory()
        try FileManager.default.createDirectory(atPath: directory + "/data", withIntermediateDirectories: true)
        let database = try DatabasePool(path: directory + "/data/soulacy.db")
        try database.migrate(try GatewaySchema.migrator().migrations.filter { $0.id != "auth.2-minted-by" })
        let ownerToken = "sk_" + String(repeating: "a", count: 64)
        try database.transaction { db in
            for (id, name, subject, role, kind, token) in [("0000000000000001", "Owner (first start)", "owner", "admin", "bootstrap", ownerToken),
                                                          ("0000000000000002", "Old laptop", "owner", "operator", "manual", "sk_" + String(repeating: "b", count: 64)),
                                                          ("0000000000000003", "Priya's iPhone", "priya", "viewer", "managed", "sk_" + String(repeating: "c", count: 64))] {
                try db.run("INSERT INTO api_keys (id, name, subject, role, kind, token_sha256, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                           id, name, subject, role, kind, SHA256.hash(token), Int64(1_700_000_000_000))
            }
            try db.run("INSERT INTO pairing_codes (code_sha256, subject, role, created_by_key, created_at, expires_at, redeemed_at, redeemed_key) VALUES (?, 'priya', 'viewer', '0000000000000001', 1, 2, 1, '0000000000000003')",
                       SHA256.hash("CODE"))
        }
        database.close()
        try ownerToken.write(toFile: directory + "/admin.key", atomically: true, encoding: .utf8)
        try await withTestGateway(directory: directory, mode: .router) { (gw) async throws in
            let keys = try #require(try await gw.request("GET", "/admin/api-keys").json["keys"]?.arrayValue)
            #expect(keys.count == 3)
            func mintedBy(_ id: String) -> JSONValue? { keys.first { $0["id"] == .string(id) }?["minted_by"] }
            #expect(mintedBy("0000000000000001") == .null && mintedBy("0000000000000002") == .null)
            #expect(mintedBy("0000000000000003") == "owner")
            #expect(keys.allSatisfy { Self.date($0["created_at"]) == Date(timeIntervalSince1970: 1_700_000_000) })
        }
    }
}
