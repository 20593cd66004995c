import ChannelAPI
import Foundation
import GatewayTestSupport
import APIKit
import Mobile
import SQLite
import Testing

/// canvas.present through mobile.invoke: the card vocabulary and limits, and the waiting form.
@Suite("Agent-built UI (canvas.present)", .serialized)
struct CanvasTests {
    static func field(_ i: Int) -> JSONValue { ["name": .string("f\(i)"), "label": "Field", "kind": "text"] }
    static func item(_ i: Int) -> JSONValue { ["label": .string("item \(i)"), "done": false] }

    /// Polls like the phone does until a command is waiting.
    func firstPending(_ gw: TestGateway) async throws -> JSONValue {
        for _ in 0..<200 {
            if let first = try await gw.request("GET", "/api/v1/mobile/commands?device_id=phone").json["commands"]?.arrayValue?.first { return first }
            try await Task.sleep(for: .milliseconds(20))
        }
        throw TestFailure("no command arrived")
    }

    func check(_ card: JSONValue) -> JSONFieldError? {
        do { _ = try CanvasCard(card); return nil } catch { return error }
    }

    @Test("each limit holds at the edge and refuses one past it, naming the limit")
    func limits() {
        let text: JSONValue = ["type": "text", "markdown": "hi"]
        #expect(check(["components": .array(Array(repeating: text, count: 12))]) == nil)
        #expect(check(["components": .array(Array(repeating: text, count: 13))])?.message.contains("at most 12 components") == true)

        let form12: JSONValue = ["type": "form", "id": "f", "fields": .array((0..<12).map(Self.field))]
        let form13: JSONValue = ["type": "form", "id": "f", "fields": .array((0..<13).map(Self.field))]
        #expect(check(["components": [form12]]) == nil)
        #expect(check(["components": [form13]])?.message.contains("1 to 12 fields") == true)
        #expect(check(["components": [form12, form12]])?.message.contains("at most one form") == true)

        let list30: JSONValue = ["type": "checklist", "title": "Pack", "items": .array((0..<30).map(Self.item))]
        let list31: JSONValue = ["type": "checklist", "title": "Pack", "items": .array((0..<31).map(Self.item))]
        #expect(check(["components": [list30]]) == nil)
        #expect(check(["components": [list31]])?.message.contains("1 to 30 items") == true)

        let series: (Int) -> JSONValue = { n in ["label": "s", "values": .array((0..<n).map { .number(Double($0)) })] }
        let labels: (Int) -> JSONValue = { n in .array((0..<n).map { .string("l\($0)") }) }
        #expect(check(["components": [["type": "chart", "kind": "bar", "labels": labels(60), "series": .array(Array(repeating: series(60), count: 6))]]]) == nil)
        #expect(check(["components": [["type": "chart", "kind": "bar", "labels": labels(60), "series": .array(Array(repeating: series(60), count: 7))]]])?
            .message.contains("1 to 6 series") == true)
        #expect(check(["components": [["type": "chart", "kind": "line", "series": [series(61)]]]])?.message.contains("at most 60 points") == true)
        #expect(check(["components": [["type": "chart", "kind": "line", "labels": labels(61), "series": [series(1)]]]])?.message.contains("at most 60 labels") == true)
    }

    @Test("anything outside the vocabulary is refused with the vocabulary in the message")
    func vocabulary() {
        let cases: [(JSONValue, String, String)] = [
            (["components": [["type": "table"]]], "card.components[0].type", "use one of text, checklist, form, chart, metric"),
            (["components": [["type": "form", "id": "f", "fields": [["name": "a", "kind": "slider"]]]]], "card.components[0].fields[0].kind", "use one of text, number, choice, toggle, date"),
            (["components": [["type": "chart", "kind": "pie", "series": []]]], "card.components[0].kind", "use one of bar, line"),
            (["components": [["type": "metric", "label": "x", "value": 3, "trend": "sideways"]]], "card.components[0].trend", "use one of up, down, flat"),
            (["components": [["type": "text", "markdown": "x", "color": "red"]]], "card.components[0].color", "allowed: type, markdown"),
            (["title": "x", "footer": "y"], "card.footer", "allowed: title, body, items, components, submit"),
            (["components": [["type": "form", "id": "f", "fields": [["name": "c", "kind": "choice"]]]]], "card.components[0].fields[0].options", "needs 1 to 30 options"),
            (["components": [["type": "form", "id": "f", "fields": [["name": "n", "kind": "number", "default": "ten"]]]]], "card.components[0].fields[0].default", "does not fit kind number"),
            (["components": [["type": "form", "id": "f", "fields": [Self.field(1), Self.field(1)]]]], "card.components[0].fields[1].name", "unique"),
            ([:], "card", "needs at least one of"),
        ]
        for (card, field, words) in cases {
            let error = check(card)
            #expect(error?.field == field, "\(card)")
            #expect(error?.message.contains(words) == true, "\(error?.message ?? "no error") should contain \(words)")
        }
        // The seed's example card is valid.
        #expect(check(["title": "Trip", "body": "Pick one", "submit": "Send", "components": [
            ["type": "text", "markdown": "**Where?**"],
            ["type": "checklist", "title": "Pack", "items": [["label": "Passport", "done": false]]],
            ["type": "form", "id": "pick", "fields": [["name": "option", "label": "Option", "kind": "choice", "options": ["Beach", "Hills"], "required": true, "default": "Beach"],
                                                       ["name": "notes", "label": "Notes", "kind": "text"]], "submit": "Choose"],
            ["type": "chart", "title": "Temps", "kind": "line", "labels": ["Mon", "Tue"], "series": [["label": "°C", "values": [21, 23.5]]]],
            ["type": "metric", "label": "Budget", "value": 1200, "unit": "EUR", "trend": "down"],
        ]]) == nil)
    }

    static let formCard: JSONValue = ["title": "Trip", "components": [
        ["type": "checklist", "title": "Pack", "items": [["label": "Passport", "done": false]]],
        ["type": "form", "id": "pick", "fields": [["name": "option", "kind": "choice", "options": ["Beach", "Hills"]], ["name": "notes", "kind": "text"]]],
    ]]

    @Test("a form keeps the command open until submit; the result carries answers and every checklist's state")
    func submit() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            _ = try await gw.request("POST", "/api/v1/mobile/devices", json: ["id": "phone", "capabilities": ["canvas"]])
            async let invoked = gw.request("POST", "/api/v1/mobile/invoke", json: ["device_id": "phone", "command": "canvas.present", "params": Self.formCard, "expires_in_seconds": 60])
            let command = try await firstPending(gw)
            #expect(command["waits_for_submit"] == true && command["params"]?["title"] == "Trip")
            let id = try #require(command["id"]?.stringValue)
            let answer = try await gw.request("POST", "/api/v1/mobile/commands/\(id)/result", json: [
                "device_id": "phone", "presented": true, "submitted": true, "form_id": "pick",
                "answers": ["option": "Beach", "notes": "leave early"], "checklists": ["Pack": [["label": "Passport", "done": true]]],
            ])
            #expect(answer.status == 200)
            let result = try await invoked
            #expect(result.json["presented"] == true && result.json["submitted"] == true && result.json["form_id"] == "pick")
            #expect(result.json["answers"] == ["option": "Beach", "notes": "leave early"])
            #expect(result.json["checklists"] == ["Pack": [["label": "Passport", "done": true]]])
            // A second answer does not change the first.
            let again = try await gw.request("POST", "/api/v1/mobile/commands/\(id)/result", json: ["device_id": "phone", "dismissed": true])
            #expect(again.status == 409)
        }
    }

    @Test("dismiss and expiry end a waiting card; bad answers are refused by name")
    func dismissAndExpiry() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            _ = try await gw.request("POST", "/api/v1/mobile/devices", json: ["id": "phone", "capabilities": ["canvas"]])
            async let dismissed = gw.request("POST", "/api/v1/mobile/invoke", json: ["device_id": "phone", "command": "canvas.present", "params": Self.formCard])
            let id = try #require(try await firstPending(gw)["id"]?.stringValue)
            let wrongField = try await gw.request("POST", "/api/v1/mobile/commands/\(id)/result", json: ["device_id": "phone", "submitted": true, "answers": ["colour": "red"]])
            #expect(wrongField.status == 400 && wrongField.errorField == "answers.colour")
            #expect(try await gw.request("POST", "/api/v1/mobile/commands/\(id)/result", json: ["device_id": "phone", "presented": true, "dismissed": true]).status == 200)
            let d = try await dismissed
            #expect(d.json["dismissed"] == true && d.json["submitted"] == false)

            let started = ContinuousClock.now
            let expired = try await gw.request("POST", "/api/v1/mobile/invoke", json: ["device_id": "phone", "command": "canvas.present", "params": Self.formCard, "expires_in_seconds": 1])
            #expect(expired.json["expired"] == true && expired.json["presented"] == false)
            #expect(ContinuousClock.now - started >= .milliseconds(900))
            #expect(try await gw.request("POST", "/api/v1/mobile/invoke", json: ["device_id": "phone", "command": "canvas.present", "params": Self.formCard, "expires_in_seconds": 901]).errorField == "expires_in_seconds")
        }
    }

    @Test("refused: another person's device, a phone without the canvas capability, an unknown command")
    func refusals() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            let priya = try await gw.mintKey(subject: "priya", role: "operator")
            _ = try await gw.request("POST", "/api/v1/mobile/devices", json: ["id": "priya-phone", "capabilities": ["canvas"]], key: .some(priya))
            _ = try await gw.request("POST", "/api/v1/mobile/devices", json: ["id": "plain"])
            let card: JSONValue = ["title": "Hi"]
            let others = try await gw.request("POST", "/api/v1/mobile/invoke", json: ["device_id": "priya-phone", "command": "canvas.present", "params": card, "wait": false])
            #expect(others.status == 403 && others.errorField == "device_id")
            let off = try await gw.request("POST", "/api/v1/mobile/invoke", json: ["device_id": "plain", "command": "canvas.present", "params": card, "wait": false])
            #expect(off.status == 409 && off.errorCode == "capability_off")
            let unknown = try await gw.request("POST", "/api/v1/mobile/invoke", json: ["device_id": "plain", "command": "camera.snap", "params": card])
            #expect(unknown.errorField == "command" && unknown.errorMessage?.contains("canvas.present") == true)
            // Priya's pending commands are hers alone.
            let queued = try await gw.request("POST", "/api/v1/mobile/invoke", json: ["device_id": "priya-phone", "command": "canvas.present", "params": card, "wait": false], key: .some(priya))
            #expect(queued.status == 202)
            #expect(try await gw.request("GET", "/api/v1/mobile/commands?device_id=priya-phone").status == 403)
            // Removing the phone expires what was queued for it.
            #expect(try await gw.request("DELETE", "/api/v1/mobile/devices/priya-phone", key: .some(priya)).status == 204)
            let id = try #require(queued.json["id"]?.stringValue)
            let state = try gw.gateway.database.read { try $0.query("SELECT status FROM mobile_node_commands WHERE id = ?", id).first?.string("status") }
            #expect(state == "expired")
        }
    }

    @Test("one protocol: the first routes are aliases of the node queue; a canvas device is a canvas node; what the old table held moves over on upgrade")
    func oneProtocol() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            _ = try await gw.request("POST", "/api/v1/mobile/devices", json: ["notifications_enabled": true, "id": "phone", "capabilities": ["canvas"], "push_token": .string(String(repeating: "ab", count: 32))])
            let queued = try await gw.request("POST", "/api/v1/mobile/invoke", json: ["device_id": "phone", "command": "canvas.present", "params": Self.formCard, "wait": false])
            let id = try #require(queued.json["id"]?.stringValue)
            // The node routes see the same command, and the phone may answer either way.
            let nodes = try await gw.request("GET", "/api/v1/mobile/nodes").json["nodes"]?.arrayValue ?? []
            #expect(nodes.first?["device_id"] == "phone" && nodes.first?["capabilities"] == ["canvas.present"])
            #expect(try await gw.request("GET", "/api/v1/mobile/nodes/phone/commands").json["commands"]?[0]?["id"] == .string(id))
            #expect(try await gw.request("POST", "/api/v1/mobile/nodes/phone/commands/\(id)/claim").json["status"] == "running")
            let answered = try await gw.request("POST", "/api/v1/mobile/commands/\(id)/result", json: ["device_id": "phone", "presented": true, "dismissed": true])
            #expect(answered.status == 200 && answered.json["state"] == "completed")
            let settled = try await gw.request("GET", "/api/v1/mobile/nodes/phone/commands/\(id)").json
            #expect(settled["status"] == "completed" && settled["result"]?["dismissed"] == true)
            // A command queued on the node routes is in the first protocol's list too.
            let viaNode = try await gw.request("POST", "/api/v1/mobile/nodes/phone/commands", json: ["command": "canvas.present", "params": ["title": "Hi"]])
            #expect(viaNode.status == 201)
            #expect(try await gw.request("GET", "/api/v1/mobile/commands?device_id=phone").json["commands"]?[0]?["id"] == viaNode.json["id"])
            // Both woke the phone (each command its own discreet wake-up).
            let wakes = try gw.gateway.database.read { try $0.query("SELECT count(*) AS n FROM mobile_push_outbox WHERE device_id = 'phone'").first?.int("n") }
            #expect((wakes ?? 0) >= 2)
        }
        // Upgrade: a database from before, with a fetched and a finished command in the first protocol's table.
        let directory = TestGateway.makeTemporaryDirectory()
        let database = try DatabasePool(path: directory + "/old.db")
        try database.migrate(Array(MobileSchema.migrations.prefix { $0.id != "mobile.8-nodes" }))
        try database.transaction { db in
            for (id, state) in [("cmd_a", "delivered"), ("cmd_b", "completed")] {
                try db.run("INSERT INTO mobile_device_commands (id, device_id, subject, command, params, waits, state, result, created_at, expires_at) VALUES (?, 'phone', 'owner', 'canvas.present', '{\"title\":\"Hi\"}', 0, ?, NULL, 1, 9999999999999)", id, state)
            }
        }
        try database.migrate(MobileSchema.migrations)
        let moved = try database.read { try $0.query("SELECT id, status FROM mobile_node_commands ORDER BY id").map { "\($0.string("id")!)=\($0.string("status")!)" } }
        #expect(moved == ["cmd_a=queued", "cmd_b=completed"])
        let old = try database.read { try $0.query("SELECT name FROM sqlite_master WHERE name = 'mobile_device_commands'") }
        #expect(old.isEmpty)
        database.close()
    }
}
