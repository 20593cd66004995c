import APIKit
import Crypto
import Foundation
import GatewayTestSupport
import RelayMailbox
import RelayMailboxStores
import Testing

/// The relay mailbox may face the internet: who may make a mailbox, and how much one phone's queue may hold.
@Suite("Relay mailbox limits")
struct RelayMailboxLimitsTests {
    static func call(_ router: Router, _ method: String, _ path: String, bearer: String? = nil, json: JSONValue? = nil) async -> HTTPResponse {
        var headers = ["content-type": "application/json"]
        if let bearer { headers["authorization"] = "Bearer \(bearer)" }
        let parts = path.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        let query = Dictionary(uniqueKeysWithValues: (parts.count == 2 ? parts[1].split(separator: "&") : []).map { pair in
            let kv = pair.split(separator: "=", maxSplits: 1).map(String.init)
            return (kv[0], kv.count == 2 ? kv[1] : "")
        })
        return await router.handle(HTTPRequest(method: method, path: String(parts[0]), query: query, headers: headers, body: json.map { Array($0.serialized().utf8) } ?? []))
    }

    static func hash(_ secret: String) -> JSONValue { .string(Hex.encode(SHA256.hash(secret))) }

    @Test("with an enrollment token only a gateway presenting it makes a mailbox; a phone's queue and its held sends are bounded, then 507 until read or applied; ids and pages are bounded")
    func limits() async throws {
        let store = try SQLiteMailboxStore(path: TestGateway.makeTemporaryDirectory() + "/relay.db")
        defer { store.close() }
        let router = MailboxAPI(store: store, maximumItemBytes: 512 * 1024, enrollToken: "enroll-3f9a", maximumPendingItems: 20).router
        // Strangers, and a wrong token, make no mailbox; the token's holder does.
        for bearer in [nil, "enroll-wrong"] as [String?] {
            let refused = await Self.call(router, "POST", "/v1/mailboxes", bearer: bearer, json: ["secret_sha256": Self.hash("gw")])
            #expect(refused.status == 401, "\(String(describing: bearer)): \(refused.status)")
        }
        let made = await Self.call(router, "POST", "/v1/mailboxes", bearer: "enroll-3f9a", json: ["secret_sha256": Self.hash("gw")])
        let mailbox = try #require(try JSONValue.parse(made.body)["mailbox_id"]?.stringValue, "\(made.status)")
        // A phone's id is at most 128 characters.
        let long = await Self.call(router, "PUT", "/v1/mailboxes/\(mailbox)/devices/\(String(repeating: "d", count: 129))", bearer: "gw",
                                   json: ["secret_sha256": Self.hash("phone")])
        #expect(long.status == 400 && String(decoding: long.body, as: UTF8.self).contains("device"))
        #expect(await Self.call(router, "PUT", "/v1/mailboxes/\(mailbox)/devices/phone", bearer: "gw", json: ["secret_sha256": Self.hash("phone")]).status == 204)
        #expect(await Self.call(router, "PUT", "/v1/mailboxes/\(mailbox)/devices/phone/carriage", bearer: "phone", json: ["on": true]).status == 204)
        // 20 items of 400 KB wait; the 21st is refused, naming the field, and nothing more is stored.
        let big = String(repeating: "c", count: 400 * 1024)
        for n in 1...20 {
            let stored = await Self.call(router, "POST", "/v1/mailboxes/\(mailbox)/devices/phone/items", bearer: "gw", json: ["ciphertext": .string(big), "seq": .number(Double(n))])
            #expect(stored.status == 201, "item \(n): \(stored.status)")
        }
        let full = await Self.call(router, "POST", "/v1/mailboxes/\(mailbox)/devices/phone/items", bearer: "gw", json: ["ciphertext": "x", "seq": 21])
        let answer = try JSONValue.parse(full.body)
        #expect(full.status == 507 && answer["code"] == "mailbox_full" && answer["field"] == "ciphertext", "\(full.status) \(answer)")
        // A page holds what fits in 4 MiB (8 of these), at least one; the phone reads on and acknowledges.
        let page = try JSONValue.parse(await Self.call(router, "GET", "/v1/mailboxes/\(mailbox)/devices/phone/items?after=0", bearer: "phone").body)
        #expect(page["items"]?.arrayValue?.count == 8, "\(page["items"]?.arrayValue?.count ?? -1) items in a page")
        #expect(await Self.call(router, "POST", "/v1/mailboxes/\(mailbox)/devices/phone/ack", bearer: "phone", json: ["through": 8]).status == 204)
        let room = await Self.call(router, "POST", "/v1/mailboxes/\(mailbox)/devices/phone/items", bearer: "gw", json: ["ciphertext": "x", "seq": 21])
        #expect(room.status == 201, "after the phone read 8: \(room.status)")

        // The phone's held sends are bounded the same way, until the gateway applies them.
        for n in 1...20 {
            let held = await Self.call(router, "POST", "/v1/mailboxes/\(mailbox)/devices/phone/commands", bearer: "phone", json: ["id": .string("cmd-\(n)"), "ciphertext": "sealed"])
            #expect(held.status == 202, "command \(n): \(held.status)")
        }
        let tooMany = await Self.call(router, "POST", "/v1/mailboxes/\(mailbox)/devices/phone/commands", bearer: "phone", json: ["id": "cmd-21", "ciphertext": "sealed"])
        let refusal = try JSONValue.parse(tooMany.body)
        #expect(tooMany.status == 507 && refusal["code"] == "mailbox_full" && refusal["field"] == "ciphertext", "\(tooMany.status) \(refusal)")
        #expect(await Self.call(router, "POST", "/v1/mailboxes/\(mailbox)/commands/phone/cmd-1/applied", bearer: "gw").status == 204)
        #expect(await Self.call(router, "POST", "/v1/mailboxes/\(mailbox)/devices/phone/commands", bearer: "phone", json: ["id": "cmd-21", "ciphertext": "sealed"]).status == 202)

        // A mailbox holds a bounded number of phones; a phone already in it may always change its bearer.
        let few = MailboxAPI(store: store, maximumDevices: 3).router
        for phone in ["phone-2", "phone-3"] {
            #expect(await Self.call(few, "PUT", "/v1/mailboxes/\(mailbox)/devices/\(phone)", bearer: "gw", json: ["secret_sha256": Self.hash(phone)]).status == 204)
        }
        let crowded = await Self.call(few, "PUT", "/v1/mailboxes/\(mailbox)/devices/phone-4", bearer: "gw", json: ["secret_sha256": Self.hash("phone-4")])
        let crowdedAnswer = try JSONValue.parse(crowded.body)
        #expect(crowded.status == 507 && crowdedAnswer["code"] == "mailbox_full" && crowdedAnswer["field"] == "device", "\(crowded.status) \(crowdedAnswer)")
        #expect(await Self.call(few, "PUT", "/v1/mailboxes/\(mailbox)/devices/phone-3", bearer: "gw", json: ["secret_sha256": Self.hash("phone-3b")]).status == 204)
        #expect(await Self.call(few, "DELETE", "/v1/mailboxes/\(mailbox)/devices/phone-3", bearer: "gw").status == 204)
        #expect(await Self.call(few, "PUT", "/v1/mailboxes/\(mailbox)/devices/phone-4", bearer: "gw", json: ["secret_sha256": Self.hash("phone-4")]).status == 204)

        // Wake-ups are paced per mailbox: the relay's push credentials serve every gateway.
        let paced = MailboxAPI(store: store, pushesPerMinute: 3).router
        for _ in 0..<3 {
            let sent = await Self.call(paced, "POST", "/v1/mailboxes/\(mailbox)/push", bearer: "gw", json: ["device_id": "phone"])
            #expect(sent.status == 200, "\(sent.status) \(String(decoding: sent.body, as: UTF8.self))")
        }
        let throttled = await Self.call(paced, "POST", "/v1/mailboxes/\(mailbox)/push", bearer: "gw", json: ["device_id": "phone"])
        let throttledAnswer = try JSONValue.parse(throttled.body)
        #expect(throttled.status == 429 && throttledAnswer["code"] == "rate_limited", "\(throttled.status)")
        #expect(throttled.headers.first { $0.0.lowercased() == "retry-after" }.map { Int($0.1) ?? 0 } ?? 0 > 0)

        // Without a token (a relay on a private network) anyone makes one, as before.
        let open = MailboxAPI(store: store).router
        #expect(await Self.call(open, "POST", "/v1/mailboxes", json: ["secret_sha256": Self.hash("gw2")]).status == 201)
    }
}
