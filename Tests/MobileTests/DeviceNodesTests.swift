import Foundation
import Gateway
import GatewayTestSupport
import APIKit
import Testing

/// The original app's device-node protocol (SOULACY-CONTRACT.md §12), played from the outside.
@Suite("Device nodes", .serialized)
struct DeviceNodesTests {
    static let node: JSONValue = ["device_id": "phone", "name": "Ana's iPhone", "platform": "ios", "model": "iPhone16,1", "os_version": "18.2",
                                  "app_version": "1.4", "capabilities": ["canvas.present", "focus.status"], "permissions": ["calendar": "granted"]]

    @Test("register, list, enqueue (Idempotency-Key is the id), poll, claim once, answer once; the queue's rules")
    func lifecycle() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            let registered = try await gw.request("POST", "/api/v1/mobile/nodes/register", json: Self.node)
            #expect(registered.status == 201 && registered.json == ["registered": true, "device_id": "phone", "poll_interval_seconds": 5, "foreground_only": true])
            let list = try await gw.request("GET", "/api/v1/mobile/nodes")
            #expect(list.json["nodes"]?[0]?["permissions"] == ["calendar": "granted"] && list.json["supported_commands"]?.arrayValue?.count == 13)

            let queued = try await gw.request("POST", "/api/v1/mobile/nodes/phone/commands", json: ["command": "focus.status"], headers: ["Idempotency-Key": "cmd-1"])
            #expect(queued.status == 201 && queued.json["id"] == "cmd-1" && queued.json["status"] == "queued" && queued.json["params"] == [:])
            // Not enabled, unknown, or too big: 400 naming why.
            let off = try await gw.request("POST", "/api/v1/mobile/nodes/phone/commands", json: ["command": "camera.capture"])
            #expect(off.status == 400 && off.errorMessage?.contains("device has not enabled \"camera.capture\"") == true)
            #expect(try await gw.request("POST", "/api/v1/mobile/nodes/phone/commands", json: ["command": "teleport"]).status == 400)
            let late = Date().addingTimeInterval(3600).formatted(.iso8601)
            #expect(try await gw.request("POST", "/api/v1/mobile/nodes/phone/commands", json: ["command": "focus.status", "expires_at": .string(late)]).status == 400)

            let pending = try await gw.request("GET", "/api/v1/mobile/nodes/phone/commands")
            #expect(pending.json["commands"]?.arrayValue?.map { $0["id"] } == ["cmd-1"])
            #expect(try await gw.request("GET", "/api/v1/mobile/nodes/phone/commands").json["commands"]?.arrayValue?.count == 1, "polling changes nothing")

            // Exactly one of many concurrent claims wins.
            let claims = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<8 { group.addTask { try await gw.request("POST", "/api/v1/mobile/nodes/phone/commands/cmd-1/claim").status } }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(claims.filter { $0 == 200 }.count == 1 && claims.filter { $0 == 409 }.count == 7)
            // The original's error texts, which its app shows (§12): the store's own errors, mapped by the HTTP layer.
            let again = try await gw.request("POST", "/api/v1/mobile/nodes/phone/commands/cmd-1/claim")
            #expect(again.status == 409 && again.errorMessage == "mobile node command has already been claimed or settled")
            let missing = try await gw.request("GET", "/api/v1/mobile/nodes/phone/commands/nope")
            #expect(missing.status == 404 && missing.errorMessage == "device or command not found")
            let notMine = try await gw.request("GET", "/api/v1/mobile/nodes/someone-elses/commands")
            #expect(notMine.status == 404 && notMine.errorMessage == "device or command not found")
            #expect(off.errorMessage?.hasPrefix("invalid mobile node request: ") == true && off.errorField == "command")
            #expect(try await gw.request("GET", "/api/v1/mobile/nodes/phone/commands").json["commands"] == [])

            let outcome: JSONValue = ["status": "completed", "result": ["focused": true, "name": "Work"]]
            let done = try await gw.request("POST", "/api/v1/mobile/nodes/phone/commands/cmd-1/result", json: outcome)
            #expect(done.status == 200 && done.json["status"] == "completed" && done.json["result"]?["name"] == "Work" && done.json["completed_at"] != nil)
            #expect(try await gw.request("POST", "/api/v1/mobile/nodes/phone/commands/cmd-1/result", json: outcome).status == 200, "the same outcome again")
            #expect(try await gw.request("POST", "/api/v1/mobile/nodes/phone/commands/cmd-1/result", json: ["status": "failed", "error": "x"]).status == 409)
            #expect(try await gw.request("GET", "/api/v1/mobile/nodes/phone/commands/cmd-1").json["status"] == "completed")

            // A result before a claim, and another person's node, are refused.
            _ = try await gw.request("POST", "/api/v1/mobile/nodes/phone/commands", json: ["command": "focus.status"], headers: ["Idempotency-Key": "cmd-2"])
            #expect(try await gw.request("POST", "/api/v1/mobile/nodes/phone/commands/cmd-2/result", json: ["status": "completed"]).status == 409)
            let priya = try await gw.mintKey(subject: "priya", role: "operator")
            #expect(try await gw.request("GET", "/api/v1/mobile/nodes/phone/commands", key: .some(priya)).status == 404)
            #expect(try await gw.request("POST", "/api/v1/mobile/nodes/register", json: Self.node, key: .some(priya)).status == 404)
            #expect(try await gw.request("GET", "/api/v1/mobile/nodes", key: .some(priya)).json["nodes"] == [])

            // canvas.present keeps its validation; removing the phone expires what waits for it.
            let badCard = try await gw.request("POST", "/api/v1/mobile/nodes/phone/commands", json: ["command": "canvas.present", "params": ["components": [["type": "table"]]]])
            #expect(badCard.status == 400 && badCard.errorMessage?.contains("use one of text, checklist, form, chart, metric") == true)
            _ = try await gw.registerDevice(id: "phone", key: nil)
            #expect(try await gw.request("DELETE", "/api/v1/mobile/devices/phone").status == 204)
            #expect(try await gw.request("GET", "/api/v1/mobile/nodes").json["nodes"] == [])
        }
    }

    @Test("a command agent reaches the node protocol over HTTP with its run token, as the person it runs for")
    func commandAgentOverHTTP() async throws {
        let config = """
            agents:
              - id: asker
                runner:
                  command: ["/bin/sh", "-c", "curl -s -X POST -H \\"Authorization: Bearer $SOULACY_RUN_TOKEN\\" -H 'Content-Type: application/json' -d '{\\"command\\":\\"focus.status\\"}' $SOULACY_API_URL/api/v1/mobile/nodes/phone/commands"]
            """
        try await withTestGateway(config: config) { (gw) async throws in
            #expect(try await gw.request("POST", "/api/v1/mobile/nodes/register", json: Self.node).status == 201)
            let run = try await gw.runAgent("asker", input: "")
            #expect(run["status"] == "succeeded", "\(run)")
            let pending = try await gw.request("GET", "/api/v1/mobile/nodes/phone/commands")
            #expect(pending.json["commands"]?[0]?["command"] == "focus.status" && pending.json["commands"]?[0]?["status"] == "queued")
            // The credential dies with the run.
            let later = try await gw.request("GET", "/api/v1/mobile/nodes", key: .some("srun_gone"))
            #expect(later.status == 401)
        }
    }
}
