import ChannelAPI
import Foundation
import GatewayTestSupport
import APIKit
import Mobile
import MobileHTTP
import SQLite
import Testing

/// The durable inbox: who sees what, read receipts per device, pagination, the System agent.
@Suite("Mobile inbox", .serialized)
struct InboxTests {
    func ids(_ response: TestResponse) -> [String] {
        response.json["deliveries"]?.arrayValue?.compactMap { $0["id"]?.stringValue } ?? []
    }

    @Test("each destination kind reaches exactly the right people and devices")
    func destinations() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            let priya = try await gw.mintKey(subject: "priya", role: "operator")
            try await gw.registerDevice(id: "owner-phone", key: nil)
            try await gw.registerDevice(id: "owner-ipad", key: nil)
            try await gw.registerDevice(id: "priya-phone", key: priya)

            let toAll = try await gw.runAgent("echo", input: "for everyone", to: "all")
            let toPriya = try await gw.runAgent("echo", input: "for priya", to: "user:priya")
            let toIpad = try await gw.runAgent("echo", input: "for the ipad", to: "device:owner-ipad")
            let all = try #require(toAll["delivery_id"]?.stringValue)
            let forPriya = try #require(toPriya["delivery_id"]?.stringValue)
            let forIpad = try #require(toIpad["delivery_id"]?.stringValue)

            #expect(ids(try await gw.request("GET", "/api/v1/mobile/deliveries")) == [forIpad, all])
            #expect(ids(try await gw.request("GET", "/api/v1/mobile/deliveries?device_id=owner-phone")) == [all])
            #expect(ids(try await gw.request("GET", "/api/v1/mobile/deliveries?device_id=owner-ipad")) == [forIpad, all])
            #expect(ids(try await gw.request("GET", "/api/v1/mobile/deliveries", key: .some(priya))) == [forPriya, all])
            // Another person's device cannot be named, and another person's line cannot be fetched.
            #expect(try await gw.request("GET", "/api/v1/mobile/deliveries?device_id=owner-ipad", key: .some(priya)).status == 403)
            #expect(try await gw.request("GET", "/api/v1/mobile/deliveries/\(forIpad)?device_id=priya-phone", key: .some(priya)).status == 404)
            let fetched = try await gw.request("GET", "/api/v1/mobile/deliveries/\(forPriya)?device_id=priya-phone", key: .some(priya))
            #expect(fetched.json["body"] == "for priya")
            #expect(fetched.json["title"] == "Result from echo")
            // One line is read as one phone sees it: without the phone, 400 naming device_id.
            let unnamed = try await gw.request("GET", "/api/v1/mobile/deliveries/\(forPriya)", key: .some(priya))
            #expect(unnamed.status == 400 && unnamed.json["error"] == "device_id is required" && unnamed.json["field"] == "device_id")

            // Recipients were resolved and stored in the same transaction as the line.
            let recipients = try gw.gateway.database.read { db in
                try db.query("SELECT delivery_id, device_id FROM mobile_delivery_recipients ORDER BY delivery_id, device_id")
                    .map { "\($0.string("delivery_id")!)>\($0.string("device_id")!)" }
            }
            #expect(Set(recipients) == Set(["\(all)>owner-ipad", "\(all)>owner-phone", "\(all)>priya-phone", "\(forPriya)>priya-phone", "\(forIpad)>owner-ipad"]))
        }
    }

    @Test("a rendered inbox page is reused only until something changes; ETag and If-None-Match work")
    func pageReuse() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            let priya = try await gw.mintKey(subject: "priya", role: "operator")
            try await gw.registerDevice(id: "phone", key: nil)
            let first = try #require(try await gw.runAgent("echo", input: "first", to: "all")["delivery_id"]?.stringValue)
            let path = "/api/v1/mobile/deliveries?device_id=phone"

            let page = try await gw.request("GET", path)
            #expect(ids(page) == [first])
            let etag = try #require(page.headers["etag"])
            #expect(page.headers["cache-control"] == "private, no-cache")
            let again = try await gw.request("GET", path)
            #expect(again.body == page.body && again.headers["etag"] == etag)
            let unchanged = try await gw.request("GET", path, headers: ["If-None-Match": "\"other\", \(etag)"])
            #expect(unchanged.status == 304)
            #expect(unchanged.body.isEmpty)

            // A new line: the old validator no longer matches and the page shows it.
            let second = try #require(try await gw.runAgent("echo", input: "second", to: "all")["delivery_id"]?.stringValue)
            let grown = try await gw.request("GET", path, headers: ["If-None-Match": etag])
            #expect(grown.status == 200)
            #expect(ids(grown) == [second, first])
            #expect(grown.json["unread_count"] == 2)
            #expect(grown.headers["etag"] != etag)

            // A read receipt changes the page too.
            #expect(try await gw.request("POST", "/api/v1/mobile/deliveries/\(first)/read", json: ["device_id": "phone"]).status == 200)
            let read = try await gw.request("GET", path)
            #expect(read.json["unread_count"] == 1)
            #expect(read.json["deliveries"]?.arrayValue?.last?["read"] == true)
            let readTag = try #require(read.headers["etag"])
            #expect(readTag != grown.headers["etag"])
            // A write that leaves this page as it was (a line for the person's other phone) has it rendered again
            // from its kept lines: the same bytes, so the same validator, and the phone's copy still answers 304.
            try await gw.registerDevice(id: "tablet", key: nil, token: String(repeating: "0c", count: 32))
            #expect(try await gw.request("POST", "/api/v1/channels/mobile/test", json: ["to": "device:tablet", "body": "tablet only"]).status == 201)
            let rerendered = try await gw.request("GET", path)
            #expect(rerendered.body == read.body && rerendered.headers["etag"] == readTag)
            #expect(try await gw.request("GET", path, headers: ["If-None-Match": readTag]).status == 304)

            // The owner's page is cached, yet another person still cannot read it by naming the device.
            #expect(try await gw.request("GET", path, key: .some(priya)).status == 403)
            // A removed device's page is not served from memory.
            #expect(try await gw.request("DELETE", "/api/v1/mobile/devices/phone").status == 204)
            #expect(try await gw.request("GET", path).status == 403)
        }
    }

    @Test("a device id reused by another person shows them neither the old owner's lines nor their read state")
    func reusedDeviceID() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            let priya = try await gw.mintKey(subject: "priya", role: "operator")
            try await gw.registerDevice(id: "tablet", key: priya)
            let forTablet = try #require(try await gw.request("POST", "/api/v1/channels/mobile/test", json: ["to": "device:tablet", "body": "priya's own"]).json["delivery_id"]?.stringValue)
            let forAll = try #require(try await gw.request("POST", "/api/v1/channels/mobile/test", json: ["body": "everyone"]).json["delivery_id"]?.stringValue)
            let ghost = try #require(try await gw.request("POST", "/api/v1/channels/mobile/test", json: ["to": "device:ghost", "body": "no such phone"]).json["delivery_id"]?.stringValue)
            #expect(try await gw.request("POST", "/api/v1/mobile/deliveries/\(forAll)/read", json: ["device_id": "tablet"], key: .some(priya)).status == 200)
            #expect(ids(try await gw.request("GET", "/api/v1/mobile/deliveries?device_id=tablet", key: .some(priya))) == [forAll, forTablet])

            #expect(try await gw.request("DELETE", "/api/v1/mobile/devices/tablet", key: .some(priya)).status == 204)
            try await gw.registerDevice(id: "tablet", key: nil)
            try await gw.registerDevice(id: "ghost", key: nil)
            let owner = try await gw.request("GET", "/api/v1/mobile/deliveries?device_id=tablet")
            #expect(ids(owner) == [forAll])
            #expect(owner.json["unread_count"] == 1)
            #expect(try await gw.request("GET", "/api/v1/mobile/deliveries/\(forTablet)?device_id=tablet").status == 404)
            // A line sent to a device nobody had reached no one; registering that id later does not reveal it.
            #expect(!ids(try await gw.request("GET", "/api/v1/mobile/deliveries?device_id=ghost")).contains(ghost))
            #expect(try await gw.request("POST", "/api/v1/mobile/deliveries/\(forTablet)/read", json: ["device_id": "tablet"]).status == 404)
        }
    }

    @Test("the line-owner migration keeps every line, hides reused-id lines and drops receipts that no longer apply")
    func lineOwnerMigration() throws {
        let path = TestGateway.makeTemporaryDirectory() + "/migrate.db"
        let database = try DatabasePool(path: path)
        try database.migrate(Array(MobileSchema.migrations.prefix { $0.id != "mobile.6-line-owner" }))
        try database.transaction { db in
            // Priya registered "tablet" at 100, after the owner's tablet of that id had gone.
            for (id, subject, registered) in [("tablet", "priya", 100), ("phone", "owner", 0)] {
                try db.run("INSERT INTO mobile_devices (id, subject, name, platform, bundle_id, notifications_enabled, created_at, updated_at) VALUES (?, ?, '', 'ios', 'b', 1, ?, ?)", id, subject, registered, registered)
            }
            // All written at 50: dlv_4 was for the owner's tablet.
            for (seq, kind, value) in [(1, "all", ""), (2, "device", "phone"), (3, "user", "owner"), (4, "device", "tablet")] {
                try db.run("INSERT INTO mobile_deliveries (seq, id, destination, destination_kind, destination_value, agent_id, agent_name, session_id, title, body, parts, metadata, created_at) VALUES (?, ?, ?, ?, ?, 'echo', 'Echo', 's', 't', 'b', '[]', '{}', 50)",
                           seq, "dlv_\(seq)", kind == "all" ? "all" : "\(kind):\(value)", kind, value)
            }
            for (line, device) in [("dlv_1", "tablet"), ("dlv_4", "tablet"), ("dlv_3", "tablet"), ("dlv_2", "phone"), ("dlv_1", "gone")] {
                try db.run("INSERT INTO mobile_receipts (delivery_id, device_id, read_at) VALUES (?, ?, 1)", line, device)
            }
        }
        try database.migrate(MobileSchema.migrations)
        let store = try MobileStore(database: database)
        #expect(try database.read { try $0.query("SELECT COUNT(*) AS n FROM mobile_deliveries").first?.int("n") } == 4)
        // The tablet line was the owner's; the owner has no tablet now, so it shows for no one.
        let priya = try store.deliveries(subject: "priya", deviceID: "tablet", before: nil, limit: 10)
        #expect(priya.items.map(\.id) == ["dlv_1"])
        #expect(priya.unreadCount == 0)
        let owner = try store.deliveries(subject: "owner", deviceID: "phone", before: nil, limit: 10)
        #expect(owner.items.map(\.id) == ["dlv_3", "dlv_2", "dlv_1"])
        #expect(owner.unreadCount == 2)
        let kept = try database.read { try $0.query("SELECT delivery_id || '>' || device_id AS r FROM mobile_receipts ORDER BY r").compactMap { $0.string("r") } }
        #expect(kept == ["dlv_1>tablet", "dlv_2>phone"])
    }

    @Test("pages and unread counts match a plain model over hundreds of lines, reads and a removed device")
    func modelCheck() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            let store = gw.gateway.mobileStore
            var devices = ["owner-phone": "owner", "owner-ipad": "owner", "priya-phone": "priya"]
            for (id, subject) in devices {
                try store.devices.register(try DeviceRegistration(json: JSONObject(["id": .string(id)])), subject: subject)
            }
            struct Line { let id: String; let kind: String; let value: String; let owner: String?; let system: Bool }
            var lines: [Line] = []  // oldest first
            var receipts: Set<[String]> = []
            var random = SplitMix(seed: 20261202)
            let destinations = ["all", "all", "all", "user:owner", "user:priya", "device:owner-phone", "device:owner-ipad", "device:priya-phone", "device:nobody"]

            func visible(_ line: Line, _ subject: String, _ device: String?) -> Bool {
                guard !line.system else { return false }
                switch line.kind {
                case "all": return true
                case "user": return line.value == subject
                default: return line.owner == subject && (device.map { $0 == line.value } ?? (devices[line.value] == subject))
                }
            }
            func read(_ line: Line, _ subject: String, _ device: String?) -> Bool {
                if let device { return receipts.contains([line.id, device]) }
                return devices.contains { $0.value == subject && receipts.contains([line.id, $0.key]) }
            }
            func check(_ label: String) throws {
                for (subject, device) in [("owner", nil), ("owner", "owner-phone"), ("owner", "owner-ipad"), ("priya", nil), ("priya", "priya-phone")] as [(String, String?)] {
                    guard device.map({ devices[$0] == subject }) ?? true else { continue }
                    let expected = lines.reversed().filter { visible($0, subject, device) }
                    var seen: [Delivery] = []
                    var cursor: Int64?
                    var unread: Int?
                    repeat {
                        let page = try store.deliveries(subject: subject, deviceID: device, before: cursor, limit: 7)
                        seen += page.items
                        unread = unread ?? page.unreadCount
                        #expect(page.unreadCount == unread, "\(label): unread count changed between pages")
                        cursor = page.hasMore ? page.items.last?.seq : nil
                    } while cursor != nil
                    #expect(seen.map(\.id) == expected.map(\.id), "\(label): \(subject) \(device ?? "all devices")")
                    #expect(seen.map { $0.readAt != nil } == expected.map { read($0, subject, device) }, "\(label): read state")
                    #expect(unread == expected.filter { !read($0, subject, device) }.count, "\(label): unread count for \(subject) \(device ?? "all devices")")
                }
            }

            for round in 0..<4 {
                for _ in 0..<60 {
                    let to = destinations[random.next(destinations.count)]
                    let system = random.next(10) == 0
                    let output = Output(agentID: system ? "system" : "echo", agentName: "Echo", sessionID: "s", parts: ["line"])
                    let stored = try store.insertDelivery(output, destination: try Destination(parsing: to))
                    let parts = to.split(separator: ":", maxSplits: 1).map(String.init)
                    let owner: String? = parts[0] == "user" ? parts[1] : parts[0] == "device" ? devices[parts[1]] : nil
                    lines.append(Line(id: stored.id, kind: parts[0], value: parts.count > 1 ? parts[1] : "", owner: owner, system: system))
                }
                for _ in 0..<40 {
                    let line = lines[random.next(lines.count)]
                    let device = devices.keys.sorted()[random.next(devices.count)], subject = devices[device]!
                    let accepted = try store.markRead(deliveryID: line.id, deviceID: device, subject: subject)
                    #expect(accepted == visible(line, subject, device))
                    if accepted { receipts.insert([line.id, device]) }
                }
                try check("round \(round)")
                let counts = try Self.countsAgree(store.database)
                #expect(counts.kept == counts.counted, "round \(round): \(counts)")
                if round == 1 {
                    // The owner's iPad goes; its id comes back as Priya's.
                    #expect(try store.devices.deleteDevice(id: "owner-ipad", subject: "owner"))
                    devices["owner-ipad"] = nil
                    receipts = receipts.filter { $0[1] != "owner-ipad" }
                    try check("after removing the iPad")
                    try store.devices.register(try DeviceRegistration(json: JSONObject(["id": "owner-ipad"])), subject: "priya")
                    devices["owner-ipad"] = "priya"
                }
            }
        }
    }

    /// The counts `mobile.12-line-counts` keeps, beside the same counts taken from the rows.
    static func countsAgree(_ database: DatabasePool) throws -> (kept: [String], counted: [String]) {
        try database.read { db in
            let kept = try db.query("SELECT destination_kind || '|' || destination_value || '|' || destination_subject || '=' || lines AS c FROM mobile_line_counts WHERE lines <> 0 ORDER BY c")
                + db.query("SELECT 'receipts|' || device_id || '=' || receipts AS c FROM mobile_receipt_counts WHERE receipts <> 0 ORDER BY c")
            let counted = try db.query("""
                SELECT k || '=' || COUNT(*) AS c FROM (
                    SELECT destination_kind || '|' || destination_value || '|' || (CASE destination_kind WHEN 'device' THEN COALESCE(destination_subject, '') ELSE '' END) AS k
                    FROM mobile_deliveries WHERE agent_id <> 'system')
                GROUP BY k ORDER BY c
                """) + db.query("SELECT 'receipts|' || device_id || '=' || COUNT(*) AS c FROM mobile_receipts GROUP BY device_id ORDER BY c")
            return (kept.compactMap { $0.string("c") }, counted.compactMap { $0.string("c") })
        }
    }

    @Test("the inbox's kept counts equal the rows' own counts after inserts, receipts, a removed device, and rows changed or deleted by hand (as a later migration might)")
    func keptCounts() throws {
        let database = try DatabasePool(path: TestGateway.makeTemporaryDirectory() + "/counts.db")
        try database.migrate(MobileSchema.migrations)
        let store = try MobileStore(database: database)
        for (id, subject) in [("phone", "owner"), ("tablet", "owner"), ("priya-phone", "priya")] {
            try store.devices.register(try DeviceRegistration(json: JSONObject(["id": .string(id)])), subject: subject)
        }
        var stored: [String] = []
        for (n, to) in ["all", "user:owner", "device:phone", "device:tablet", "user:priya", "device:priya-phone", "device:nobody", "all"].enumerated() {
            for agent in ["echo", "system"] {
                let line = try store.insertDelivery(Output(agentID: agent, agentName: "A", sessionID: "s", parts: ["\(n)"]), destination: try Destination(parsing: to))
                stored.append(line.id)
            }
        }
        for (line, device, subject) in [(stored[0], "phone", "owner"), (stored[2], "phone", "owner"), (stored[4], "phone", "owner"), (stored[0], "tablet", "owner")] {
            #expect(try store.markRead(deliveryID: line, deviceID: device, subject: subject))
        }
        var now = try Self.countsAgree(database)
        #expect(now.kept == now.counted && !now.kept.isEmpty, "\(now)")
        #expect(try store.deliveries(subject: "owner", deviceID: "phone", before: nil, limit: 5).unreadCount == 4 - 3)

        #expect(try store.devices.deleteDevice(id: "tablet", subject: "owner"))
        now = try Self.countsAgree(database)
        #expect(now.kept == now.counted, "after removing the tablet: \(now)")

        try database.transaction { db in
            try db.run("UPDATE mobile_deliveries SET destination_kind = 'user', destination_value = 'owner', destination = 'user:owner', destination_subject = 'owner' WHERE id = ?", stored[8])
            try db.run("UPDATE mobile_deliveries SET agent_id = 'system' WHERE id = ?", stored[6])
            try db.run("UPDATE mobile_deliveries SET agent_id = 'echo' WHERE id = ?", stored[7])
            try db.run("DELETE FROM mobile_deliveries WHERE id IN (?, ?)", stored[0], stored[9])
        }
        now = try Self.countsAgree(database)
        #expect(now.kept == now.counted, "after rows changed by hand: \(now)")
        // The page's own lines and its unread count agree with what is stored (the cascade took the line's receipt).
        let page = try store.deliveries(subject: "owner", deviceID: "phone", before: nil, limit: 20)
        #expect(page.items.map(\.id) == [stored[14], stored[8], stored[4], stored[2]] && page.unreadCount == 2, "\(page.items.map(\.id)) \(page.unreadCount)")
    }

    @Test("a write for one person leaves another's cached page in use; a write for them is seen at once")
    func pageCachePerPerson() async throws {
        try await withTestGateway { (gw) async throws in
            let priya = try await gw.mintKey(subject: "priya", role: "operator")
            try await gw.registerDevice(id: "owner-phone", key: nil)
            try await gw.registerDevice(id: "priya-phone", key: priya)
            let first = try #require(try await gw.request("POST", "/api/v1/channels/mobile/test", json: ["to": "user:priya", "body": "first"]).json["delivery_id"]?.stringValue)
            let path = "/api/v1/mobile/deliveries?device_id=priya-phone"
            let cached = try await gw.request("GET", path, key: .some(priya))
            #expect(ids(cached) == [first])

            // A line written behind the store's back bumps no generation: while Priya's page comes from memory,
            // she does not see it. That is how this test can tell a served page from a rendered one.
            try gw.gateway.database.write { db in
                try db.run("INSERT INTO mobile_deliveries (id, destination, destination_kind, destination_value, destination_subject, agent_id, agent_name, session_id, title, body, parts, metadata, created_at) VALUES ('dlv_hidden', 'user:priya', 'user', 'priya', 'priya', 'echo', 'Echo', 's', 't', 'behind the store', '[]', '{}', 1)")
            }
            // The owner's lines, receipts and phones change the owner's pages only.
            let owners = try #require(try await gw.request("POST", "/api/v1/channels/mobile/test", json: ["to": "user:owner", "body": "owner's"]).json["delivery_id"]?.stringValue)
            let phones = try #require(try await gw.request("POST", "/api/v1/channels/mobile/test", json: ["to": "device:owner-phone", "body": "owner's phone"]).json["delivery_id"]?.stringValue)
            #expect(try await gw.request("POST", "/api/v1/mobile/deliveries/\(owners)/read", json: ["device_id": "owner-phone"]).status == 200)
            try await gw.registerDevice(id: "owner-tablet", key: nil)
            #expect(try await gw.request("DELETE", "/api/v1/mobile/devices/owner-tablet").status == 204)
            let still = try await gw.request("GET", path, key: .some(priya))
            #expect(still.body == cached.body && still.headers["etag"] == cached.headers["etag"], "Priya's page was rendered again for the owner's writes")
            // ... and the owner sees each of them at once.
            let owner = try await gw.request("GET", "/api/v1/mobile/deliveries?device_id=owner-phone")
            #expect(ids(owner) == [phones, owners])
            #expect(owner.json["unread_count"] == 1)

            // A line for Priya is hers at once (the page is rendered again, so the hidden line shows too).
            let second = try #require(try await gw.request("POST", "/api/v1/channels/mobile/test", json: ["to": "user:priya", "body": "second"]).json["delivery_id"]?.stringValue)
            #expect(ids(try await gw.request("GET", path, key: .some(priya))) == [second, "dlv_hidden", first])
            // So are her receipts and a line for everyone, which the owner sees at once as well.
            #expect(try await gw.request("POST", "/api/v1/mobile/deliveries/\(second)/read", json: ["device_id": "priya-phone"], key: .some(priya)).status == 200)
            #expect(try await gw.request("GET", path, key: .some(priya)).json["unread_count"] == 2)
            let everyone = try #require(try await gw.request("POST", "/api/v1/channels/mobile/test", json: ["body": "everyone"]).json["delivery_id"]?.stringValue)
            #expect(ids(try await gw.request("GET", path, key: .some(priya))).first == everyone)
            #expect(ids(try await gw.request("GET", "/api/v1/mobile/deliveries?device_id=owner-phone")).first == everyone)
            // Her phone's removal is hers too: its page is not served from memory.
            #expect(try await gw.request("DELETE", "/api/v1/mobile/devices/priya-phone", key: .some(priya)).status == 204)
            #expect(try await gw.request("GET", path, key: .some(priya)).status == 403)
        }
    }

    @Test("each change bumps the generation of exactly the people whose inbox it changes, after it commits")
    func inboxGenerations() async throws {
        let store = try MobileStore(database: try migratedDatabase(TestGateway.makeTemporaryDirectory() + "/db.sqlite"))
        let people = ["owner", "priya", "sam"]
        func generations() -> [String: UInt64] { Dictionary(uniqueKeysWithValues: people.map { ($0, store.inboxGenerations.generation(of: $0)) }) }
        /// Who `change` bumped (and by how much nobody cares; only that exactly they moved).
        func bumped(_ change: () throws -> Void) rethrows -> Set<String> {
            let before = generations()
            try change()
            let after = generations()
            return Set(people.filter { after[$0] != before[$0] })
        }
        let output = Output(agentID: "echo", agentName: "Echo", sessionID: "s", parts: ["line"])
        #expect(try bumped { try store.devices.register(try DeviceRegistration(json: JSONObject(["id": "owner-phone"])), subject: "owner") } == ["owner"])
        #expect(try bumped { try store.devices.register(try DeviceRegistration(json: JSONObject(["id": "priya-phone"])), subject: "priya", keyID: "key-p") } == ["priya"])
        #expect(try bumped { _ = try store.insertDelivery(output, destination: .user("priya")) } == ["priya"])
        #expect(try bumped { _ = try store.insertDelivery(output, destination: .device("owner-phone")) } == ["owner"])
        #expect(try bumped { _ = try store.insertDelivery(output, destination: .device("nobody's")) } == [])
        var line = ""
        #expect(try bumped { line = try store.insertDelivery(output, destination: .all).id } == Set(people))
        #expect(try bumped { _ = try store.insertDeliveries([(output, .user("sam")), (output, .user("owner"))]) } == ["sam", "owner"])
        var accepted = false
        #expect(try bumped { accepted = try store.markRead(deliveryID: line, deviceID: "priya-phone", subject: "priya") } == ["priya"])
        #expect(accepted)
        // Read again: no new receipt, nothing changed. A refused receipt changes nothing either.
        #expect(try bumped { accepted = try store.markRead(deliveryID: line, deviceID: "priya-phone", subject: "priya") } == [])
        #expect(try bumped { accepted = try store.markRead(deliveryID: line, deviceID: "priya-phone", subject: "owner") } == [])
        #expect(!accepted)
        // Someone else's device id is refused and bumps nobody; a rolled-back transaction bumps nobody.
        var refused = false
        #expect(bumped {
            do { try store.devices.register(try DeviceRegistration(json: JSONObject(["id": "priya-phone"])), subject: "sam") } catch { refused = error is DeviceOwnershipError }
        } == [])
        #expect(refused)
        struct Abandon: Error {}
        #expect(bumped { _ = try? store.database.transaction { (_: Connection) throws -> Void in _ = try store.insertDelivery(output, destination: .user("sam")); throw Abandon() } } == [])
        // Inside an open transaction the bump waits for its commit.
        let inside = try store.database.transaction { _ in
            _ = try store.insertDelivery(output, destination: .user("sam"))
            return store.inboxGenerations.generation(of: "sam")
        }
        #expect(store.inboxGenerations.generation(of: "sam") > inside)
        // A grouped write (it commits on the group-commit thread) bumps before its caller resumes.
        let before = generations()
        _ = try await store.insertDeliveryGrouped(output, destination: .user("owner"))
        #expect(people.filter { generations()[$0] != before[$0] } == ["owner"])
        var removed = false
        #expect(try bumped { removed = try store.devices.deleteDevice(id: "owner-phone", subject: "owner") } == ["owner"])
        #expect(removed)
        var count = 0
        #expect(try bumped { count = try store.devices.removeDevices(registeredByKey: "key-p") } == ["priya"])
        #expect(count == 1)
    }

    @Test("kept lines stay within their byte budget, the oldest forgotten first; a line too large is made each time, not kept")
    func lineCacheBudget() {
        let cache = InboxLineCache(budgetBytes: 16_384, largestKept: 2_048)
        func line(_ n: Int, body: String = "a result") -> Delivery {
            Delivery(seq: Int64(n), id: "dlv_\(n)", destination: .user("owner"), agentID: "brief", agentName: "Brief", sessionID: "s", title: "t",
                     body: body, partsJSON: "[]", metadataJSON: "{}", createdAt: Date(timeIntervalSince1970: 1_790_000_000), readAt: nil)
        }
        let first = cache.line(for: line(0))
        #expect(cache.line(for: line(0)).digest == first.digest && cache.held.lines == 1)
        for n in 1...500 { _ = cache.line(for: line(n)) }
        #expect(cache.held.bytes <= 16_384 && cache.held.lines < 500)
        let large = cache.line(for: line(999, body: String(repeating: "x", count: 4_000)))
        #expect(large.bytes > 2_048 && cache.held.bytes <= 16_384)
        // Another body under the same id is another line (an id is met once per database; a digest follows the bytes).
        #expect(InboxLineCache().line(for: line(1, body: "other")).digest != InboxLineCache().line(for: line(1)).digest)
    }

    @Test("the page cache keeps to its byte budget: stale generations go first, oversized pages are not kept")
    func pageCacheBudget() {
        let cache = InboxPageCache(budgetBytes: 2400)
        func key(_ n: Int) -> InboxPageCache.Key { .init(subject: "owner", deviceID: "phone", cursor: nil, limit: n) }
        let page = [UInt8](repeating: 1, count: 600)
        cache.store(page, etag: "\"t\"", for: key(1), generation: 1)
        for n in 2...4 { cache.store(page, etag: "\"t\"", for: key(n), generation: 2) }
        #expect(cache.heldBytes == 2400)
        #expect(cache.page(for: key(1), generation: 2) == nil)  // written since: never served
        #expect(cache.page(for: key(2), generation: 2)?.body == page)
        // Over budget: the generation-1 page is dropped, the current ones stay.
        cache.store(page, etag: "\"t\"", for: key(5), generation: 2)
        #expect(cache.heldBytes == 2400)
        #expect((2...5).allSatisfy { cache.page(for: key($0), generation: 2) != nil })
        // Still over with only current pages: start over.
        cache.store(page, etag: "\"t\"", for: key(6), generation: 2)
        #expect(cache.heldBytes == 600)
        #expect(cache.page(for: key(2), generation: 2) == nil && cache.page(for: key(6), generation: 2) != nil)
        // A page over a quarter of the budget is answered, with its validator, but not kept.
        let big = cache.store([UInt8](repeating: 2, count: 601), etag: "\"big\"", for: key(7), generation: 2)
        #expect(cache.page(for: key(7), generation: 2) == nil && cache.heldBytes == 600)
        // (That equal bodies get equal validators is the renderer's: `pageReuse` holds a page rendered again to its ETag.)
        #expect(big.etag == "\"big\"" && big.body.count == 601)
        #expect(big.etag != cache.page(for: key(6), generation: 2)?.etag)
    }

    @Test("read receipts are per device: reading on one does not mark another")
    func readReceipts() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            try await gw.registerDevice(id: "phone", key: nil)
            try await gw.registerDevice(id: "watch-ish", key: nil)
            let run = try await gw.runAgent("echo", input: "read me", to: "all")
            let id = try #require(run["delivery_id"]?.stringValue)

            let phoneBefore = try await gw.request("GET", "/api/v1/mobile/deliveries?device_id=phone")
            #expect(phoneBefore.json["unread_count"] == 1)
            let read = try await gw.request("POST", "/api/v1/mobile/deliveries/\(id)/read", json: ["device_id": "phone"])
            #expect(read.status == 200)
            #expect(read.json == ["read": true])

            let phone = try await gw.request("GET", "/api/v1/mobile/deliveries?device_id=phone")
            #expect(phone.json["unread_count"] == 0)
            #expect(phone.json["deliveries"]?.arrayValue?.first?["read"] == true)
            let other = try await gw.request("GET", "/api/v1/mobile/deliveries?device_id=watch-ish")
            #expect(other.json["unread_count"] == 1)
            #expect(other.json["deliveries"]?.arrayValue?.first?["read"] == false)

            // Reading twice keeps the first time; a device that is not the caller's is refused.
            let firstReadAt = phone.json["deliveries"]?.arrayValue?.first?["read_at"]
            #expect(try await gw.request("POST", "/api/v1/mobile/deliveries/\(id)/read", json: ["device_id": "phone"]).status == 200)
            #expect(try await gw.request("GET", "/api/v1/mobile/deliveries?device_id=phone").json["deliveries"]?.arrayValue?.first?["read_at"] == firstReadAt)
            let missing = try await gw.request("POST", "/api/v1/mobile/deliveries/\(id)/read", json: [:])
            #expect(missing.status == 400)
            #expect(missing.errorField == "device_id")
            #expect(try await gw.request("POST", "/api/v1/mobile/deliveries/dlv_nope/read", json: ["device_id": "phone"]).status == 404)
        }
    }

    @Test("the System agent's lines are stored but never returned")
    func systemAgentFiltered() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            try await gw.registerDevice(id: "phone", key: nil)
            let channel = try gw.gateway.channels.channel(named: "mobile")
            let hidden = try await channel.deliver(Output(agentID: "system", agentName: "System", sessionID: "s", parts: ["internal"]), to: "all")
            let shown = try await channel.deliver(Output(agentID: "echo", agentName: "Echo", sessionID: "s", parts: ["visible"]), to: "all")
            let list = try await gw.request("GET", "/api/v1/mobile/deliveries?device_id=phone")
            #expect(ids(list) == [shown.deliveryID])
            #expect(list.json["unread_count"] == 1)
            #expect(try await gw.request("GET", "/api/v1/mobile/deliveries/\(hidden.deliveryID)?device_id=phone").status == 404)
            #expect(!list.text.contains("internal"))
            let agents = try await gw.request("GET", "/api/v1/agents")
            #expect(!agents.text.contains("\"system\""))
        }
    }

    @Test("pages go newest first and the cursor walks every line exactly once")
    func pagination() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            let channel = try gw.gateway.channels.channel(named: "mobile")
            var sent: [String] = []
            for i in 0..<7 {
                sent.append(try await channel.deliver(Output(agentID: "echo", agentName: "Echo", sessionID: "s", parts: ["n\(i)"]), to: "all").deliveryID)
            }
            var seen: [String] = []
            var cursor: String?
            repeat {
                let path = "/api/v1/mobile/deliveries?limit=3" + (cursor.map { "&cursor=\($0)" } ?? "")
                let page = try await gw.request("GET", path)
                #expect(page.status == 200)
                seen += ids(page)
                cursor = page.json["next_cursor"]?.stringValue
            } while cursor != nil
            #expect(seen == sent.reversed())
            for bad in ["cursor=-4", "cursor=x"] {
                let response = try await gw.request("GET", "/api/v1/mobile/deliveries?\(bad)")
                #expect(response.status == 400)
                #expect(response.errorField == "cursor")
            }
            // As the original: a limit outside 1–200, or not a number, means 100.
            for odd in ["limit=0", "limit=201", "limit=abc"] {
                #expect(try await gw.request("GET", "/api/v1/mobile/deliveries?\(odd)").json["deliveries"]?.arrayValue?.count == sent.count, "\(odd)")
            }
        }
    }

    @Test("the channel test endpoint defaults to all and validates its destination")
    func channelTest() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            let priya = try await gw.mintKey(subject: "priya", role: "viewer")
            try await gw.registerDevice(id: "owner-phone", key: nil)
            try await gw.registerDevice(id: "priya-phone", key: priya)
            let sent = try await gw.request("POST", "/api/v1/channels/mobile/test")
            #expect(sent.status == 201)
            #expect(sent.json["destination"] == "all")
            #expect(sent.json["recipients"] == 2)
            let id = try #require(sent.json["delivery_id"]?.stringValue)
            #expect(ids(try await gw.request("GET", "/api/v1/mobile/deliveries", key: .some(priya))).contains(id))
            for bad in ["everyone", "user:", "device", "team:x", "user:a b"] {
                let response = try await gw.request("POST", "/api/v1/channels/mobile/test", json: ["to": .string(bad)])
                #expect(response.status == 400)
                #expect(response.errorField == "to")
            }
        }
    }

    @Test("a credential sees only its own subject's deliveries, whatever its role")
    func credentialScope() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            let priya = try await gw.mintKey(subject: "priya", role: "viewer")
            let sam = try await gw.mintKey(subject: "sam", role: "operator")
            _ = try await gw.runAgent("echo", input: "priya only", to: "user:priya")
            #expect(ids(try await gw.request("GET", "/api/v1/mobile/deliveries", key: .some(priya))).count == 1)
            #expect(ids(try await gw.request("GET", "/api/v1/mobile/deliveries", key: .some(sam))).isEmpty)
            #expect(ids(try await gw.request("GET", "/api/v1/mobile/deliveries")).isEmpty)
        }
    }
}
