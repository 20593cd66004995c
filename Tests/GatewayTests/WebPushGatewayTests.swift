import APIKit
import ChannelAPI
import ChannelTesting
import Crypto
import Foundation
import Gateway
import GatewayTestSupport
import Mobile
import SQLite
import Testing
import WebPush

/// Browser notifications through the gateway: the console's two routes (docs/console-api.md §"Browser
/// notifications"), a browser as a device of platform `web` woken by the real transport against the Web Push
/// stand-in, the gateway's own VAPID key in its data directory, and the migration that lets `web` in.
@Suite("Web Push through the gateway", .serialized)
struct WebPushGatewayTests {
    static let secret = "the agent's own words: pineapple-9921"

    func subscribe(_ gw: TestGateway, _ subscription: WebPushStandIn.Subscription, name: String = "Laptop", key: String? = nil) async throws -> TestResponse {
        var body = subscription.json.objectValue ?? [:]
        body["name"] = .string(name)
        return try await gw.request("POST", "/api/v1/console/webpush/subscriptions", json: .object(body), key: .some(key))
    }

    @Test("GET /console/webpush gives the VAPID key; a browser subscribes, is a web device, and gets the generic wake-up and no output")
    func subscribeAndWake() async throws {
        let standIn = try await WebPushStandIn.start()
        defer { standIn.stop() }
        try await withTestGateway(environment: standIn.environment) { gw in
            let key = try await gw.request("GET", "/api/v1/console/webpush")
            #expect(key.status == 200, "\(key.text)")
            let publicKey = try #require(key.json["public_key"]?.stringValue)
            #expect(publicKey.count == 87 && publicKey.hasPrefix("B"))
            // The browser subscribes with that key, so the service accepts only tokens signed with it.
            let browser = try await standIn.subscribe(applicationServerKey: publicKey)
            let subscribed = try await subscribe(gw, browser)
            #expect(subscribed.status == 201, "\(subscribed.text)")
            let deviceID = try #require(subscribed.json["device_id"]?.stringValue)
            // The same endpoint again is the same device.
            #expect(try await subscribe(gw, browser, name: "Laptop (Firefox)").json["device_id"]?.stringValue == deviceID)
            let devices = try await gw.request("GET", "/api/v1/mobile/devices").json["devices"]?.arrayValue ?? []
            let device = try #require(devices.first { $0["id"]?.stringValue == deviceID })
            #expect(device["platform"] == "web" && device["name"] == "Laptop (Firefox)" && device["has_push_token"] == true && device["notifications_enabled"] == true)

            let run = try await gw.runAgent("echo", input: Self.secret, to: "all")
            let deliveryID = try #require(run["delivery_id"]?.stringValue)
            #expect(try await eventually { try await standIn.requests().contains { $0["status"] == 201 } })
            let pushes = try await standIn.requests()
            #expect(pushes.count == 1, "\(pushes)")
            let plaintext = try #require(pushes.first?["plaintext"]?.stringValue)
            #expect(!plaintext.contains("pineapple"))
            let message = try JSONValue.parse(Array(plaintext.utf8))
            #expect(message == ["title": "Soulacy", "body": "An agent result is ready to review.", "category": "SOULACY_DELIVERY",
                                "thread_id": "delivery-echo", "delivery_id": .string(deliveryID), "collapse_id": .string(deliveryID),
                                "time_sensitive": false, "extra": [:]])
            // The line itself is there for the browser's page to fetch.
            let line = try await gw.request("GET", "/api/v1/mobile/deliveries/\(deliveryID)?device_id=\(deviceID)")
            #expect(line.status == 200 && line.text.contains("pineapple"), "\(line.text)")
            #expect(line.json["wake_ups"]?[0]?["transport"] == "webpush", "\(line.text)")
        }
    }

    @Test("a 410 from the push service clears the browser's subscription, as APNs' 410 clears a phone's token")
    func goneClearsSubscription() async throws {
        let standIn = try await WebPushStandIn.start()
        defer { standIn.stop() }
        try await withTestGateway(environment: standIn.environment) { gw in
            let publicKey = try #require(try await gw.request("GET", "/api/v1/console/webpush").json["public_key"]?.stringValue)
            let browser = try await standIn.subscribe(applicationServerKey: publicKey)
            let deviceID = try #require(try await subscribe(gw, browser).json["device_id"]?.stringValue)
            try await standIn.unsubscribe(browser)
            _ = try await gw.runAgent("echo", input: "hello", to: "all")
            #expect(try await eventually { try gw.gateway.mobileStore.devices.device(id: deviceID)?.pushToken == nil })
            #expect(try await standIn.requests().map(\.["status"]) == [410])
            let device = try #require(try await gw.request("GET", "/api/v1/mobile/devices").json["devices"]?.arrayValue?.first { $0["id"]?.stringValue == deviceID })
            #expect(device["has_push_token"] == false)
            // Nothing more goes to it; the next line only reaches the inbox.
            _ = try await gw.runAgent("echo", input: "again", to: "all")
            await gw.gateway.dispatcher.drain()
            #expect(try await standIn.requests().count == 1)
        }
    }

    @Test("bad subscriptions are refused with 400 naming the field")
    func badSubscriptions() async throws {
        let point = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"
        let auth = "BTBZMqHH6r4Tts7J_aSIgg"
        let good: [String: JSONValue] = ["endpoint": "https://push.example.net/push/abc", "keys": ["p256dh": .string(point), "auth": .string(auth)]]
        try await withTestGateway { gw in
            func refused(_ change: (inout [String: JSONValue]) -> Void) async throws -> (Int, String?) {
                var body = good
                change(&body)
                let answer = try await gw.request("POST", "/api/v1/console/webpush/subscriptions", json: .object(body))
                return (answer.status, answer.errorField)
            }
            let cases: [(String, (inout [String: JSONValue]) -> Void)] = [
                ("endpoint", { $0["endpoint"] = nil }),
                ("endpoint", { $0["endpoint"] = "http://push.example.net/push/abc" }),
                ("endpoint", { $0["endpoint"] = "javascript:alert(1)" }),
                ("endpoint", { $0["endpoint"] = 42 }),
                ("keys", { $0["keys"] = nil }),
                ("keys", { $0["keys"] = "p256dh" }),
                ("keys.p256dh", { $0["keys"] = ["auth": .string(auth)] }),
                ("keys.p256dh", { $0["keys"] = ["p256dh": .string(String(point.dropLast(2))), "auth": .string(auth)] }),
                ("keys.p256dh", { $0["keys"] = ["p256dh": .string("B" + String(repeating: "A", count: 86)), "auth": .string(auth)] }),
                ("keys.auth", { $0["keys"] = ["p256dh": .string(point), "auth": "AAAA"] }),
                ("keys.auth", { $0["keys"] = ["p256dh": .string(point)] }),
                ("name", { $0["name"] = "tab\u{7}" }),
                ("name", { $0["name"] = .string(String(repeating: "n", count: 201)) }),
            ]
            for (field, change) in cases {
                let (status, named) = try await refused(change)
                #expect(status == 400 && named == field, "expected 400 naming \(field), got \(status) \(named ?? "no field")")
            }
            #expect(try await gw.request("POST", "/api/v1/console/webpush/subscriptions", body: Array("[1,2]".utf8)).status == 400)
            #expect(try await refused { _ in }.0 == 201)
            // Another person cannot take over a browser someone has subscribed.
            let other = try await gw.mintKey(subject: "priya", role: "viewer")
            let taken = try await gw.request("POST", "/api/v1/console/webpush/subscriptions", json: .object(good), key: .some(other))
            #expect(taken.status == 409 && taken.errorField == "endpoint", "\(taken.text)")
            #expect(try await gw.request("GET", "/api/v1/console/webpush", key: .none).status == 401)
        }
    }

    @Test("SOULACY_WEBPUSH=off: both routes are 404 webpush_off and no key is made")
    func off() async throws {
        try await withTestGateway(environment: ["SOULACY_WEBPUSH": "off"]) { gw in
            let key = try await gw.request("GET", "/api/v1/console/webpush")
            #expect(key.status == 404 && key.errorCode == "webpush_off", "\(key.text)")
            let post = try await gw.request("POST", "/api/v1/console/webpush/subscriptions", json: ["endpoint": "https://push.example.net/x"])
            #expect(post.status == 404 && post.errorCode == "webpush_off")
            #expect(!FileManager.default.fileExists(atPath: gw.directory + "/data/" + WebPushKeys.vapidKeyFileName))
        }
    }

    @Test("the VAPID key persists across restarts, owner-only, and neither it nor a subscription's secrets reach the log or the database in the clear")
    func keyPersistsAndStaysSecret() async throws {
        let standIn = try await WebPushStandIn.start()
        defer { standIn.stop() }
        let directory = TestGateway.makeTemporaryDirectory()
        let logs = MemoryLogHandler()
        let log = Log(minimum: .debug, handler: logs)
        let first = try await TestGateway.start(directory: directory, environment: standIn.environment, log: log)
        let publicKey = try #require(try await first.request("GET", "/api/v1/console/webpush").json["public_key"]?.stringValue)
        let browser = try await standIn.subscribe(applicationServerKey: publicKey)
        #expect(try await subscribe(first, browser).status == 201)
        await first.stop()

        let keyPath = directory + "/data/" + WebPushKeys.vapidKeyFileName
        let mode = try FileManager.default.attributesOfItem(atPath: keyPath)[.posixPermissions] as? Int
        #expect(mode == 0o600)
        let pem = try String(contentsOfFile: keyPath, encoding: .utf8)
        let second = try await TestGateway.start(directory: directory, environment: standIn.environment, log: log)
        #expect(try await second.request("GET", "/api/v1/console/webpush").json["public_key"]?.stringValue == publicKey)
        #expect(try String(contentsOfFile: keyPath, encoding: .utf8) == pem)
        // The restarted gateway still signs with the key the browser subscribed with.
        _ = try await second.runAgent("echo", input: "after restart", to: "all")
        #expect(try await eventually { try await standIn.requests().contains { $0["status"] == 201 } })
        await second.stop()

        let lines = logs.lines.joined(separator: "\n")
        #expect(lines.contains("Web Push"), "the transport said it was on")
        let keyLines = pem.split(separator: "\n").filter { !$0.hasPrefix("-----") }
        #expect(!keyLines.isEmpty)
        for secret in keyLines.map(String.init) + [browser.auth, browser.p256dh, browser.endpoint, browser.id] {
            #expect(!lines.contains(secret), "the log holds a secret: \(secret.prefix(12))…")
        }
        // At rest the subscription is sealed: neither the endpoint's token nor the auth secret is in the database files.
        let stored = ["", "-wal", "-shm"].compactMap { FileManager.default.contents(atPath: directory + "/data/soulacy.db" + $0) }.reduce(Data(), +)
        for secret in [browser.id, browser.auth, browser.p256dh] {
            #expect(stored.range(of: Data(secret.utf8)) == nil, "the database holds \(secret.prefix(12))… in the clear")
        }
        let authBytes = try #require(Base64URL.decode(browser.auth))
        #expect(stored.range(of: Data(authBytes)) == nil)
    }

    @Test("the console's sw.js and webpush.js, run by node against stand-ins of the browser APIs they use",
          .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/node"), "needs node (scripts/install-deps --test installs it)"))
    func consoleAssets() async throws {
        let (status, output) = try await runProgram("/usr/bin/node", [RepositoryPaths.root + "/Tests/ConsoleAssets/webpush-assets.test.mjs"])
        #expect(status == 0, "\(output)")
        #expect(output.contains("behaved"), "\(output)")
    }

    @Test("mobile.webpush-1-web-devices rebuilds mobile_devices: every column, row and the index kept, web allowed, other platforms still refused")
    func migration() throws {
        let directory = TestGateway.makeTemporaryDirectory()
        let database = try DatabasePool(path: directory + "/upgrade.db")
        let all = try GatewaySchema.migrator().migrations
        let index = try #require(all.firstIndex { $0.id == "mobile.webpush-1-web-devices" })
        try database.migrate(Array(all[..<index]))
        let columns = { () throws -> [String] in
            try database.read { db in try db.query("SELECT name FROM pragma_table_info('mobile_devices') ORDER BY cid").compactMap { $0.string("name") } }
        }
        let before = try columns()
        let indexes = { () throws -> [String] in
            try database.read { db in try db.query("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'mobile_devices' ORDER BY name").compactMap { $0.string("name") } }
        }
        let indexesBefore = try indexes()
        try database.transaction { db in
            try db.run("""
                INSERT INTO mobile_devices (id, subject, name, platform, bundle_id, push_token, push_environment, notifications_enabled, live_start_token,
                                            created_at, updated_at, registered_by_key, capabilities)
                VALUES ('phone', 'owner', 'iPhone', 'ios', 'dev.soulacy.ios', 'abab', 'development', 1, 'cdcd', 10, 20, 'key_1', '["canvas"]'),
                       ('pixel', 'priya', 'Pixel', 'android', 'dev.soulacy.android', NULL, NULL, 0, NULL, 11, 21, NULL, '[]')
                """)
            try db.run("INSERT INTO mobile_deliveries (id, destination, destination_kind, destination_value, agent_id, agent_name, session_id, title, body, parts, metadata, created_at) VALUES ('dlv_1', 'device:phone', 'device', 'phone', 'echo', 'Echo', 's', 't', 'b', '[]', '{}', 5)")
            try db.run("INSERT INTO mobile_receipts (delivery_id, device_id, read_at) VALUES ('dlv_1', 'phone', 30)")
        }
        let rows = { () throws -> [String] in
            try database.read { db in try db.query("SELECT * FROM mobile_devices ORDER BY id").map { row in before.map { "\($0)=\(row.string($0) ?? row.int($0).map(String.init) ?? "null")" }.joined(separator: " ") } }
        }
        let kept = try rows()
        try GatewaySchema.migrator().migrate(database)
        // A migration placed before this one that added a column would lose it here: every column must survive.
        let after = try columns()
        #expect(after.starts(with: before), "columns before \(before), after \(after)")
        #expect(try rows() == kept)
        #expect(try indexes() == indexesBefore && indexesBefore.contains("mobile_devices_by_subject"))
        let (readAt, foreignKeyProblems) = try database.read { db in
            (try db.query("SELECT read_at FROM mobile_receipts WHERE device_id = 'phone'").first?.int("read_at"),
             try db.query("PRAGMA foreign_key_check").count)
        }
        #expect(readAt == 30)
        #expect(foreignKeyProblems == 0)
        try database.transaction { db in
            try db.run("INSERT INTO mobile_devices (id, subject, name, platform, bundle_id, notifications_enabled, created_at, updated_at) VALUES ('web-1', 'owner', 'Browser', 'web', 'web', 1, 1, 1)")
        }
        #expect(throws: (any Error).self) {
            try database.transaction { db in
                try db.run("INSERT INTO mobile_devices (id, subject, name, platform, bundle_id, notifications_enabled, created_at, updated_at) VALUES ('w', 'owner', 'W', 'windows', 'x', 1, 1, 1)")
            }
        }
        // The default of capabilities came back with the column.
        #expect(try database.read { db in try db.query("SELECT capabilities FROM mobile_devices WHERE id = 'web-1'").first?.string("capabilities") } == "[]")
    }
}
