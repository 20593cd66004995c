import Foundation
import Gateway
import GatewayTestSupport
import Household
import APIKit
import Identity
import Testing

/// Households: pairing codes, subjects from names, roles everywhere, members, revocation, the watch surface.
@Suite("Household and pairing", .serialized)
struct HouseholdTests {
    func pair(_ gw: TestGateway, as key: String? = nil, name: String? = nil, role: String? = nil) async throws -> (code: String, json: JSONValue) {
        var body: [String: JSONValue] = [:]
        if let name { body["name"] = .string(name) }
        if let role { body["role"] = .string(role) }
        let response = try await gw.request("POST", "/api/v1/pairing/tokens", json: body.isEmpty ? nil : .object(body), key: .some(key))
        guard response.status == 200, let code = response.json["code"]?.stringValue else { throw TestFailure("pairing failed: \(response.status) \(response.text)") }
        return (code, response.json)
    }

    func redeem(_ gw: TestGateway, _ code: String, name: String = "Phone") async throws -> TestResponse {
        try await gw.request("POST", "/api/v1/pairing/redeem", json: ["code": .string(code), "name": .string(name)], key: .none)
    }

    @Test("no body pairs a phone as the caller (the original's shapes): 16 base32 characters, once, its key carries the caller's subject and role")
    func pairAsCaller() async throws {
        try await withTestGateway { (gw) async throws in
            let priya = try await gw.mintKey(subject: "priya", role: "operator")
            let (code, offer) = try await pair(gw, as: priya)
            // The main port serves TLS beside plain HTTP: the link pins it, on the same host and port.
            let pin = try #require(gw.gateway.tlsPin)
            let https = "https://127.0.0.1:\(gw.gateway.port)"
            #expect(offer["subject"] == "priya" && offer["role"] == "operator" && offer["fingerprint"] == .string(pin) && offer["display_name"]?.stringValue != nil)
            #expect(offer["pair_url"] == .string("\(https)/mobile?pair=\(code)&fp=\(pin)") && offer["base_url"] == .string(https))
            #expect(offer["link"]?.stringValue?.hasPrefix("soulacy://pair?v=1&code=\(code)") == true)
            #expect(code.count == 16 && code.allSatisfy { ("A"..."Z").contains($0) || ("2"..."7").contains($0) })
            let redeemed = try await redeem(gw, " " + code.lowercased() + " ")  // trimmed and upper-cased, as the original reads it
            #expect(redeemed.status == 200)
            #expect(redeemed.json["paired"] == true && redeemed.json["subject"] == "priya" && redeemed.json["role"] == "operator")
            #expect(redeemed.json["message"] == "Store this token; it is shown only once.")
            #expect(redeemed.json["scopes"]?.arrayValue?.contains("approvals:write") == true)
            let token = try #require(redeemed.json["token"]?.stringValue)
            #expect(try await gw.request("GET", "/api/v1/mobile/deliveries", key: .some(token)).status == 200)
            for wrong in [code, "AAAABBBBCCCCDDDD"] {
                let refused = try await redeem(gw, wrong)
                #expect(refused.status == 401 && refused.json["paired"] == false && refused.json["reason"] == "invalid or expired pairing code")
            }
            #expect(try await redeem(gw, "  ").status == 400)
            // An admin's own phone pairs as an operator, as in the original.
            let own = try await pair(gw)
            #expect(own.json["role"] == "operator" && own.json["subject"] == "owner")
            // Codes are stored only as hashes.
            let raw = try Data(contentsOf: URL(fileURLWithPath: gw.gateway.database.path)) + ((try? Data(contentsOf: URL(fileURLWithPath: gw.gateway.database.path + "-wal"))) ?? Data())
            #expect(raw.range(of: Data(code.utf8)) == nil)
        }
    }

    @Test("a code expires after two minutes")
    func expiry() async throws {
        try await withTestGateway { (gw) async throws in
            let offer = try await gw.gateway.household.createOffer(subject: "owner", name: "Owner", role: .admin, createdBy: nil, madeBy: "owner", now: Date().addingTimeInterval(-121))
            let response = try await redeem(gw, offer.code)
            #expect(response.status == 401 && response.json["paired"] == false && response.errorCode == "pairing_code_expired")
        }
    }

    @Test("an admin pairs a phone for someone else: the subject is a slug of the name, predictable for collisions and any script")
    func pairForSomeoneElse() async throws {
        try await withTestGateway { (gw) async throws in
            let (code, offer) = try await pair(gw, name: "Priya", role: "operator")
            #expect(offer["subject"] == "priya")
            let redeemed = try await redeem(gw, code)
            #expect(redeemed.json["subject"] == "priya" && redeemed.json["role"] == "operator")
            // The same person again (a second phone): the same subject.
            #expect(try await pair(gw, name: " priya ", role: "viewer").json["subject"] == "priya")
            // A different person whose name gives the same slug gets the next free one.
            #expect(try await pair(gw, name: "Príya", role: "viewer").json["subject"] == "priya-2")
            #expect(try await pair(gw, name: "Дмитрий", role: "viewer").json["subject"] == "dmitrij")
            #expect(try await pair(gw, name: "王小明", role: "viewer").json["subject"] == "wang-xiao-ming")
            let emoji = try await pair(gw, name: "🌻", role: "viewer").json["subject"]?.stringValue ?? ""
            #expect(emoji.hasPrefix("member-") && emoji.count == 13)
            #expect(try await pair(gw, name: "🌻", role: "viewer").json["subject"]?.stringValue == emoji)
            #expect(try await pair(gw, name: "Owner", role: "viewer").json["subject"] == "owner-2")

            let viewer = try await gw.mintKey(subject: "sam", role: "operator")
            let refused = try await gw.request("POST", "/api/v1/pairing/tokens", json: ["name": "Eve", "role": "viewer"], key: .some(viewer))
            #expect(refused.status == 403)
            let adminForOthers = try await gw.request("POST", "/api/v1/pairing/tokens", json: ["name": "Eve", "role": "admin"])
            #expect(adminForOthers.status == 400 && adminForOthers.errorField == "role")
        }
    }

    @Test("wrong codes are rate-limited per address; then even the right code waits")
    func bruteForce() async throws {
        try await withTestGateway { (gw) async throws in
            let (code, _) = try await pair(gw)
            for _ in 0..<5 { #expect(try await redeem(gw, "ZZZZZZZZZZZZZZZZ").status == 401) }
            let limited = try await redeem(gw, "ZZZZ-ZZZZ-ZZZZ")
            #expect(limited.status == 429 && limited.errorCode == "too_many_attempts")
            #expect(Int(limited.headers["retry-after"] ?? "") ?? 0 > 0)
            #expect(try await redeem(gw, code).status == 429)
        }
    }

    @Test("a person pairs at most 100 keys active or made within a day: the next redemption is 409 too_many_keys naming code, the code stays unused, no guess is counted, and revoking does not make room the same day")
    func keysPerPerson() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            let viewer = try await gw.mintKey(subject: "vee", role: "viewer")
            // The viewer's own key is one of the hundred.
            for _ in 1..<PairingCodes.maximumKeysPerPerson {
                let (code, _) = try await pair(gw, as: viewer)
                #expect(try await redeem(gw, code).status == 200)
            }
            let (code, _) = try await pair(gw, as: viewer)
            for _ in 0..<6 {
                let refused = try await redeem(gw, code)
                #expect(refused.status == 409 && refused.errorCode == "too_many_keys" && refused.errorField == "code", "\(refused.text)")
            }
            let keys = try await gw.request("GET", "/admin/api-keys").json["keys"]?.arrayValue ?? []
            let mine = keys.filter { $0["subject"] == "vee" && $0["revoked_at"] == .null }
            #expect(mine.count == PairingCodes.maximumKeysPerPerson)
            let some = try #require(mine.last?["id"]?.stringValue)
            // Revoking does not make room the same day: pairing and revoking in a loop would grow the key table.
            #expect(try await gw.request("DELETE", "/admin/api-keys/\(some)").status == 204)
            #expect(try await redeem(gw, code).errorCode == "too_many_keys")
        }
    }

    @Test("members lists everyone with a paired phone (admin only); revoking a key unpairs that phone at once")
    func membersAndRevocation() async throws {
        try await withTestGateway { (gw) async throws in
            let (code, _) = try await pair(gw, name: "Priya", role: "viewer")
            let redeemed = try await redeem(gw, code, name: "Priya's iPhone")
            let token = try #require(redeemed.json["token"]?.stringValue)
            let keyID = try #require(redeemed.json["key_id"]?.stringValue)
            try await gw.registerDevice(id: "priya-phone", key: token, token: String(repeating: "ab", count: 32))

            let members = try await gw.request("GET", "/api/v1/pairing/members")
            let priya = try #require(members.json["members"]?.arrayValue?.first { $0["subject"] == "priya" })
            #expect(priya["name"] == "Priya" && priya["role"] == "viewer")
            #expect(priya["keys"]?.arrayValue?.first?["name"] == "Priya's iPhone")
            #expect(priya["devices"]?.arrayValue?.first?["id"] == "priya-phone")
            #expect(try await gw.request("GET", "/api/v1/pairing/members", key: .some(token)).status == 403)

            #expect(try await gw.request("DELETE", "/admin/api-keys/\(keyID)").status == 204)
            #expect(try await gw.request("GET", "/api/v1/mobile/deliveries", key: .some(token)).status == 401)
            #expect(try gw.gateway.mobileStore.devices.device(id: "priya-phone") == nil)
            #expect(try await gw.request("GET", "/api/v1/pairing/members").json["members"]?.arrayValue?.contains { $0["subject"] == "priya" } == false)
        }
    }

    @Test("roles as the original's rbac: a viewer reads, chats and decides its own approvals from the lock screen, but cannot run, fire or remember; an operator can")
    func roles() async throws {
        try await withTestGateway { (gw) async throws in
            let viewer = try await gw.mintKey(subject: "vee", role: "viewer")
            let op = try await gw.mintKey(subject: "vee", role: "operator")
            let asked = try await gw.request("POST", "/api/v1/approvals", json: ["agent_id": "echo", "tool": "send_email", "wait": false], key: .some(op))
            let callID = try #require(asked.json["call_id"]?.stringValue)
            #expect(try await gw.request("GET", "/approvals", key: .some(viewer)).json["approvals"]?.arrayValue?.count == 1)
            #expect(try await gw.request("POST", "/api/v1/memory/facts", json: ["text": "likes tea"], key: .some(viewer)).status == 403)
            #expect(try await gw.request("POST", "/api/v1/agents/echo/run", json: [:], key: .some(viewer)).status == 403)
            #expect(try await gw.request("POST", "/chat", json: ["text": "hello"], key: .some(viewer)).json["reply"] == "hello")
            let decided = try await gw.request("POST", "/approvals/\(callID)/approve", key: .some(viewer))
            #expect(decided.status == 200 && decided.json["state"] == "approved" && decided.json["ok"] == true && decided.json["approved"] == true)
            // The operator's second answer reports the decision the viewer took; nothing runs twice.
            let again = try await gw.request("POST", "/api/v1/approvals/\(callID)/deny", key: .some(op))
            #expect(again.json["already_decided"] == true && again.json["approved"] == true && again.json["ok"] == true)
            #expect(try await gw.request("POST", "/api/v1/memory/facts", json: ["text": "likes tea"], key: .some(op)).status == 201)
        }
    }

    @Test("one person can never read or act on another's approvals, memory or inbox — not even an admin")
    func isolation() async throws {
        try await withTestGateway { (gw) async throws in
            let priya = try await gw.mintKey(subject: "priya", role: "operator")
            let asked = try await gw.request("POST", "/api/v1/approvals", json: ["agent_id": "echo", "tool": "pay", "arguments": ["amount": 40], "wait": false], key: .some(priya))
            let callID = try #require(asked.json["call_id"]?.stringValue)
            _ = try await gw.request("POST", "/api/v1/memory/facts", json: ["text": "priya's secret"], key: .some(priya))
            _ = try await gw.runAgent("echo", input: "for priya", to: "user:priya")

            // The owner (admin) sees none of it and cannot decide it.
            #expect(try await gw.request("GET", "/approvals").json["approvals"]?.arrayValue?.isEmpty == true)
            #expect(try await gw.request("GET", "/api/v1/approvals/\(callID)").status == 404)
            #expect(try await gw.request("POST", "/approvals/\(callID)/approve").status == 404)
            #expect(try await gw.request("POST", "/api/v1/approvals/\(callID)/deny").status == 404)
            #expect(try await gw.request("GET", "/api/v1/memory/facts").json["facts"]?.arrayValue?.isEmpty == true)
            let facts = try await gw.request("GET", "/api/v1/memory/facts", key: .some(priya)).json["facts"]?.arrayValue ?? []
            #expect(try await gw.request("DELETE", "/api/v1/memory/facts/\(facts.first?["id"]?.stringValue ?? "")").status == 404)
            #expect(try await gw.request("GET", "/api/v1/mobile/deliveries").json["deliveries"]?.arrayValue?.isEmpty == true)
            // Priya's own view is intact.
            #expect(try await gw.request("GET", "/api/v1/approvals/\(callID)", key: .some(priya)).json["arguments"]?["amount"] == 40)
            #expect(facts.count == 1)
        }
    }

    @Test("the watch pairs through the phone and uses the short paths with its own key")
    func watchSurface() async throws {
        try await withTestGateway { (gw) async throws in
            let phone = try await gw.mintKey(subject: "priya", role: "operator")
            let offer = try await gw.request("POST", "/pairing/tokens", key: .some(phone))
            #expect(offer.status == 200)
            let watch = try await gw.request("POST", "/pairing/redeem", json: ["code": offer.json["code"]!, "name": "Priya's Watch"], key: .none)
            let watchKey = try #require(watch.json["token"]?.stringValue)
            #expect(watch.json["key_id"]?.stringValue != nil && watch.json["subject"] == "priya")

            let agents = try await gw.request("GET", "/agents", key: .some(watchKey))
            #expect(agents.json["agents"]?.arrayValue?.map { $0["id"] } == ["echo"])
            let asked = try await gw.request("POST", "/api/v1/approvals", json: ["agent_id": "echo", "tool": "lights", "wait": false], key: .some(phone))
            let callID = try #require(asked.json["call_id"]?.stringValue)
            #expect(try await gw.request("GET", "/approvals", key: .some(watchKey)).json["approvals"]?.arrayValue?.first?["call_id"]?.stringValue == callID)
            #expect(try await gw.request("POST", "/approvals/\(callID)/deny", key: .some(watchKey)).json["state"] == "denied")
            let chat = try await gw.request("POST", "/chat", json: ["agent_id": "echo", "text": "voice note"], key: .some(watchKey))
            #expect(chat.json["reply"] == "voice note")
            // The watch is its own key: revoking it leaves the phone paired.
            #expect(try await gw.request("DELETE", "/admin/api-keys/\(watch.json["key_id"]!.stringValue!)").status == 204)
            #expect(try await gw.request("GET", "/approvals", key: .some(watchKey)).status == 401)
            #expect(try await gw.request("GET", "/approvals", key: .some(phone)).status == 200)
        }
    }

    @Test("without auto-TLS, or behind a public URL, links are not pinned; a typed base_url is pinned when TLS is on, refused when it is not a URL")
    func unpinnedLinks() async throws {
        try await withTestGateway(environment: ["SOULACY_TLS": "off"]) { (gw) async throws in
            #expect(gw.gateway.tlsPin == nil)
            let (code, offer) = try await pair(gw, as: gw.adminKey)
            #expect(offer["fingerprint"] == "" && offer["pair_url"] == .string("\(gw.baseURL)/mobile?pair=\(code)") && offer["base_url"] == .string(gw.baseURL))
            let typed = try await gw.request("POST", "/api/v1/pairing/tokens", json: ["base_url": "http://box.tailnet.ts.net:18789"])
            #expect(typed.json["pair_url"]?.stringValue?.hasPrefix("http://box.tailnet.ts.net:18789/mobile?pair=") == true && typed.json["fingerprint"] == "")
        }
        try await withTestGateway(environment: ["SOULACY_PUBLIC_URL": "https://soulacy.example.com"]) { (gw) async throws in
            let (code, offer) = try await pair(gw, as: gw.adminKey)
            #expect(offer["pair_url"] == .string("https://soulacy.example.com/mobile?pair=\(code)") && offer["fingerprint"] == "")
            // Typed by the operator: direct, so pinned, and http becomes https on the same host and port.
            let typed = try await gw.request("POST", "/api/v1/pairing/tokens", json: ["base_url": "http://192.168.1.20:18789"])
            let typedCode = typed.json["code"]?.stringValue ?? ""
            #expect(typed.json["pair_url"] == .string("https://192.168.1.20:18789/mobile?pair=\(typedCode)&fp=\(gw.gateway.tlsPin!)"))
            #expect(typed.json["base_url"] == "https://192.168.1.20:18789")
            let bad = try await gw.request("POST", "/api/v1/pairing/tokens", json: ["base_url": "ftp://x/y"])
            #expect(bad.status == 400 && bad.json["field"] == "base_url")
        }
    }

    @Test("soulacy pair prints a code, the app's link with its QR code and the soulacy:// link; the code pairs; GET /mobile says to use the app")
    func pairCommand() async throws {
        let directory = TestGateway.makeTemporaryDirectory()
        try await withTestGateway(directory: directory) { (gw) async throws in
            let (status, output) = try await runProgram(RepositoryPaths.soulacyBinary, ["pair", "--data", directory + "/data", "--name", "Priya", "--role", "viewer"])
            #expect(status == 0)
            let code = try #require(output.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.first { $0.count == 16 && $0.allSatisfy { $0.isUppercase || $0.isNumber } })
            #expect(output.contains("soulacy://pair?v=1&code=\(code)"))
            let pin = try #require(gw.gateway.tlsPin)
            #expect(output.contains("https://127.0.0.1:8080/mobile?pair=\(code)&fp=\(pin)"), "the Soulacy app's link, which the QR encodes, pins the certificate")
            // Scanned with the camera instead: the page says to open it in the app.
            let page = try await gw.request("GET", "/mobile?pair=\(code)", key: .none)
            #expect(page.status == 200 && page.text.contains("Open this in the Soulacy app") && page.headers["content-type"]?.hasPrefix("text/html") == true)
            #expect(output.contains("█"))
            let redeemed = try await redeem(gw, code)
            #expect(redeemed.status == 200 && redeemed.json["subject"] == "priya" && redeemed.json["role"] == "viewer")
        }
    }
}
