import Foundation
import GatewayTestSupport
import APIKit
import Testing

/// POST /api/v1/mobile/devices: every rule of the seed's "Android (FCM)" section and the registration facts.
@Suite("Device registration", .serialized)
struct DeviceRegistrationTests {
    static let iosToken = String(repeating: "0a1b", count: 16)

    func register(_ gateway: TestGateway, _ body: [String: JSONValue], key: String? = nil) async throws -> TestResponse {
        try await gateway.request("POST", "/api/v1/mobile/devices", json: .object(body), key: .some(key))
    }

    func device(_ gateway: TestGateway, _ id: String, key: String? = nil) async throws -> JSONValue? {
        let list = try await gateway.request("GET", "/api/v1/mobile/devices", key: .some(key))
        return list.json["devices"]?.arrayValue?.first { $0["id"]?.stringValue == id }
    }

    @Test("platform defaults to ios; a new device and an update are both 201 {registered, device_id}, as the original answers")
    func platformDefaultAndUpdate() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            let first = try await register(gw, ["id": "inst-1", "name": "iPhone", "push_token": .string(Self.iosToken)])
            #expect(first.status == 201)
            #expect(first.json == .object(["registered": true, "device_id": "inst-1", "created": true]))
            #expect(try await device(gw, "inst-1")?["platform"] == "ios")
            #expect(try await device(gw, "inst-1")?["bundle_id"] == "dev.soulacy.ios")
            #expect(try await device(gw, "inst-1")?["push_environment"] == "production")

            let again = try await register(gw, ["id": "inst-1", "name": "Renamed", "push_environment": "development", "notifications_enabled": false])
            #expect(again.status == 201 && again.json["created"] == false)
            let updated = try #require(try await device(gw, "inst-1"))
            #expect(updated["name"] == "Renamed")
            #expect(updated["push_environment"] == "development")
            #expect(updated["notifications_enabled"] == false)
            #expect(updated["has_push_token"] == false)
            let list = try await gw.request("GET", "/api/v1/mobile/devices")
            #expect(list.json["devices"]?.arrayValue?.count == 1)
        }
    }

    @Test("any platform other than ios or android is refused, naming platform")
    func unknownPlatform() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            for value: JSONValue in ["windows", "IOS", "", 3, true] {
                let response = try await register(gw, ["id": "x", "platform": value])
                #expect(response.status == 400)
                #expect(response.errorField == "platform")
            }
        }
    }

    @Test("Android: bundle_id omitted or exactly dev.soulacy.android")
    func androidBundle() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            #expect(try await register(gw, ["id": "a1", "platform": "android"]).status == 201)
            #expect(try await device(gw, "a1")?["bundle_id"] == "dev.soulacy.android")
            #expect(try await register(gw, ["id": "a2", "platform": "android", "bundle_id": "dev.soulacy.android"]).status == 201)
            for bad: JSONValue in ["dev.soulacy.ios", "dev.soulacy.android2", "", "com.example"] {
                let response = try await register(gw, ["id": "a3", "platform": "android", "bundle_id": bad])
                #expect(response.status == 400)
                #expect(response.errorField == "bundle_id")
            }
        }
    }

    @Test("iOS: another bundle id is refused")
    func iosBundle() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            let response = try await register(gw, ["id": "i1", "bundle_id": "dev.soulacy.android"])
            #expect(response.status == 400)
            #expect(response.errorField == "bundle_id")
        }
    }

    @Test("Android push_token: up to 4096 characters, no whitespace, stored exactly")
    func androidToken() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            let exact = String(repeating: "aZ:_-", count: 819) + "Q"  // 4096 characters, mixed case and punctuation
            #expect(exact.count == 4096)
            #expect(try await register(gw, ["id": "a1", "platform": "android", "push_token": .string(exact)]).status == 201)
            let stored = try gw.gateway.mobileStore.devices.device(id: "a1")?.pushToken
            #expect(stored == exact)

            let tooLong = try await register(gw, ["id": "a2", "platform": "android", "push_token": .string(exact + "x")])
            #expect(tooLong.status == 400)
            #expect(tooLong.errorField == "push_token")
            for bad in ["abc def", "abc\tdef", "abc\n", " abc", "a\u{00A0}b"] {
                let response = try await register(gw, ["id": "a3", "platform": "android", "push_token": .string(bad)])
                #expect(response.status == 400, "token \(bad.debugDescription)")
                #expect(response.errorField == "push_token")
            }
            let wrongType = try await register(gw, ["id": "a3", "platform": "android", "push_token": 12])
            #expect(wrongType.errorField == "push_token")
            // Empty counts as absent.
            #expect(try await register(gw, ["id": "a4", "platform": "android", "push_token": ""]).status == 201)
            #expect(try gw.gateway.mobileStore.devices.device(id: "a4")?.pushToken == nil)
        }
    }

    @Test("Android: push_environment and live_start_token are ignored, whatever they hold")
    func androidIgnoredFields() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            let response = try await register(gw, ["id": "a1", "platform": "android", "push_environment": "nonsense", "live_start_token": "zz not hex"])
            #expect(response.status == 201)
            let stored = try #require(try gw.gateway.mobileStore.devices.device(id: "a1"))
            #expect(stored.pushEnvironment == nil)
            #expect(stored.liveStartToken == nil)
        }
    }

    @Test("iOS, as the original normalises: tokens trimmed and lower-cased, empty is absent, any other environment is production, an absent start token keeps the stored one")
    func iosTokenAndEnvironment() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            for bad in ["abc", String(repeating: "g", count: 64), String(repeating: "ab", count: 33)] {
                let response = try await register(gw, ["id": "i1", "push_token": .string(bad)])
                #expect(response.status == 400)
                #expect(response.errorField == "push_token")
            }
            #expect(try await register(gw, ["id": "i1", "push_token": ""]).status == 201)
            #expect(try gw.gateway.mobileStore.devices.device(id: "i1")?.pushToken == nil)
            #expect(try await register(gw, ["id": "i1", "push_token": .string("  " + String(repeating: "AB", count: 32) + "\n")]).status == 201)
            #expect(try gw.gateway.mobileStore.devices.device(id: "i1")?.pushToken == String(repeating: "ab", count: 32))
            for environment: JSONValue in ["sandbox", "PRODUCTION", ""] {
                #expect(try await register(gw, ["id": "i1", "push_environment": environment]).status == 201)
                #expect(try await device(gw, "i1")?["push_environment"] == "production")
            }
            #expect(try await register(gw, ["id": "i1", "push_environment": "development"]).status == 201)
            #expect(try await device(gw, "i1")?["push_environment"] == "development")
            for bad in ["not-hex", String(repeating: "a", count: 30), String(repeating: "ab", count: 257), "abc"] {
                #expect(try await register(gw, ["id": "i1", "live_start_token": .string(bad)]).errorField == "live_start_token", "\(bad)")
            }
            let start = String(repeating: "CD", count: 40)
            #expect(try await register(gw, ["id": "i1", "live_start_token": .string(start)]).status == 201)
            #expect(try gw.gateway.mobileStore.devices.device(id: "i1")?.liveStartToken == start.lowercased())
            // Re-registering without a start token, or with an empty one, keeps the one stored.
            #expect(try await register(gw, ["id": "i1", "name": "Renamed"]).status == 201)
            #expect(try await register(gw, ["id": "i1", "live_start_token": ""]).status == 201)
            #expect(try gw.gateway.mobileStore.devices.device(id: "i1")?.liveStartToken == start.lowercased())
            #expect(try await device(gw, "i1")?["live_activities"] == true)
            // Blank names become the original's default.
            #expect(try await register(gw, ["id": " i2 ", "name": "   "]).status == 201)
            #expect(try await device(gw, "i2")?["name"] == "iPhone")
        }
    }

    @Test("id is required, at most 128 characters of a safe alphabet; name at most 200")
    func idAndName() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            let missing = try await register(gw, ["name": "x"])
            #expect(missing.status == 400)
            #expect(missing.errorCode == "missing_field")
            #expect(missing.errorField == "id")
            #expect(try await register(gw, ["id": .string(String(repeating: "a", count: 128))]).status == 201)
            for bad: JSONValue in [.string(String(repeating: "a", count: 129)), "", "has space", "slash/id", 42] {
                #expect(try await register(gw, ["id": bad]).errorField == "id")
            }
            #expect(try await register(gw, ["id": "n1", "name": .string(String(repeating: "n", count: 200))]).status == 201)
            #expect(try await register(gw, ["id": "n2", "name": .string(String(repeating: "n", count: 201))]).errorField == "name")
            #expect(try await register(gw, ["id": "n3", "notifications_enabled": "yes"]).errorField == "notifications_enabled")
        }
    }

    @Test("a device id registered to another person is refused with 403 and stays theirs")
    func ownedByAnother() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            let priya = try await gw.mintKey(subject: "priya", role: "viewer")
            #expect(try await register(gw, ["id": "shared", "name": "Owner's phone"]).status == 201)
            let stolen = try await register(gw, ["id": "shared", "name": "Priya's"], key: priya)
            #expect(stolen.status == 403)
            #expect(stolen.errorField == "id")
            #expect(try gw.gateway.mobileStore.devices.device(id: "shared")?.subject == "owner")
            #expect(try gw.gateway.mobileStore.devices.device(id: "shared")?.name == "Owner's phone")
        }
    }

    @Test("a refused registration changes nothing already stored")
    func refusalKeepsStoredDevice() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            #expect(try await register(gw, ["id": "keep", "push_token": .string(Self.iosToken)]).status == 201)
            #expect(try await register(gw, ["id": "keep", "platform": "android", "push_token": "bad token"]).status == 400)
            let stored = try #require(try gw.gateway.mobileStore.devices.device(id: "keep"))
            #expect(stored.platform == .ios)
            #expect(stored.pushToken == Self.iosToken)
        }
    }

    @Test("DELETE removes the caller's device; someone else's is 204 too, and stays (the original says nothing of who has an id)")
    func deleteDevice() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            let priya = try await gw.mintKey(subject: "priya", role: "viewer")
            #expect(try await register(gw, ["id": "mine"]).status == 201)
            #expect(try await gw.request("DELETE", "/api/v1/mobile/devices/mine", key: .some(priya)).status == 204)
            #expect(try gw.gateway.mobileStore.devices.device(id: "mine") != nil)
            #expect(try await gw.request("DELETE", "/api/v1/mobile/devices/mine").status == 204)
            #expect(try gw.gateway.mobileStore.devices.device(id: "mine") == nil)
        }
    }
}
