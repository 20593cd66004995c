import Foundation
import GatewayTestSupport
import Identity
import Testing
import YAML

/// openapi.yaml describes exactly the routes the router serves, with the same access rules.
@Suite("OpenAPI description")
struct OpenAPIRoutesTests {
    struct Operation: Hashable, CustomStringConvertible {
        let method: String
        let path: String
        let access: String
        var description: String { "\(method) \(path) [\(access)]" }
    }

    func documented() throws -> Set<Operation> {
        let text = try String(contentsOfFile: RepositoryPaths.root + "/openapi.yaml", encoding: .utf8)
        let root = try #require(try YAMLParser.parse(text))
        let paths = try #require(root.mappingEntries?.first { $0.key == "paths" }?.value.mappingEntries)
        var result: Set<Operation> = []
        for path in paths {
            for operation in path.value.mappingEntries ?? [] {
                let fields = operation.value.mappingEntries ?? []
                let role = fields.first { $0.key == "x-soulacy-role" }?.value.scalarValue
                let security = fields.first { $0.key == "security" }?.value
                let open: Bool = if case .sequence(let items, _) = security {
                    items.isEmpty || items.allSatisfy { $0.mappingEntries?.first?.key == "webhookSecret" }
                } else { false }
                let route = path.key.replacingOccurrences(of: "{", with: ":").replacingOccurrences(of: "}", with: "")
                result.insert(Operation(method: operation.key.uppercased(), path: route, access: open ? "open" : (role ?? "missing role")))
            }
        }
        return result
    }

    @Test("every route in the router is in openapi.yaml and nothing else is, with the same access")
    func matchesRouter() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            let served = Set(gw.gateway.router.routes.map { route -> Operation in
                let access: String = switch route.access {
                case .open: "open"
                case .role(let role): role.rawValue
                }
                return Operation(method: route.method.rawValue, path: route.pattern, access: access)
            })
            let spec = try documented()
            #expect(served.subtracting(spec).isEmpty, "served but not documented: \(served.subtracting(spec).sorted { $0.description < $1.description })")
            #expect(spec.subtracting(served).isEmpty, "documented but not served: \(spec.subtracting(served).sorted { $0.description < $1.description })")
        }
    }

    // Where schemathesis found the server refusing what the contract allows, or accepting what it forbids
    // (issue 26 item 13). openapi.yaml states the same rules.

    @Test("chat with an empty text is the original's 400 'agent_id and text are required', naming text (POST and GET stream)")
    func chatEmptyText() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            for path in ["/api/v1/chat", "/chat", "/api/v1/chat/stream"] {
                let refused = try await gw.request("POST", path, json: ["agent_id": "echo", "text": ""])
                #expect(refused.status == 400 && refused.errorField == "text" && refused.errorMessage == "agent_id and text are required", "\(path): \(refused.text)")
            }
            let streamed = try await gw.request("GET", "/api/v1/chat/stream?agent_id=echo&text=")
            #expect(streamed.status == 400 && streamed.errorField == "text", "\(streamed.text)")
            #expect(try await gw.request("POST", "/api/v1/chat", json: ["agent_id": "echo", "text": "hi"]).json["reply"] == "hi")
        }
    }

    @Test("an approval asked with an empty agent_id is a 400 naming agent_id, not an unknown agent")
    func askEmptyAgent() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            let refused = try await gw.request("POST", "/api/v1/approvals", json: ["agent_id": "", "tool": "shell", "wait": false])
            #expect(refused.status == 400 && refused.errorField == "agent_id", "\(refused.text)")
        }
    }

    @Test("the inbox with an empty device_id is the caller's feed, as the original reads an empty query value")
    func inboxEmptyDeviceID() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            let feed = try await gw.request("GET", "/api/v1/mobile/deliveries?device_id=")
            #expect(feed.status == 200 && feed.json["deliveries"]?.arrayValue != nil, "\(feed.text)")
            #expect(try await gw.request("GET", "/api/v1/mobile/deliveries?device_id=%20").status == 200)
            #expect(try await gw.request("GET", "/api/v1/mobile/deliveries?device_id=nobodys").status == 403)
        }
    }

    @Test("a node command's expires_at is read as RFC 3339 with any offset up to 23:59, then checked against the 15-minute window")
    func nodeCommandExpiryOffsets() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            let registered = try await gw.request("POST", "/api/v1/mobile/nodes/register", json: ["device_id": "phone", "capabilities": ["system.notify"]])
            #expect(registered.status == 201, "\(registered.text)")
            // 23:46 ahead of UTC, written in that zone: ten minutes from now, so inside the window.
            let soon = Self.rfc3339(Date().addingTimeInterval(600), offsetMinutes: 23 * 60 + 46)
            #expect(soon.hasSuffix("+23:46"), "\(soon)")
            let queued = try await gw.request("POST", "/api/v1/mobile/nodes/phone/commands", json: ["command": "system.notify", "expires_at": .string(soon)])
            #expect(queued.status == 201, "\(queued.text)")
            let late = try await gw.request("POST", "/api/v1/mobile/nodes/phone/commands",
                                            json: ["command": "system.notify", "expires_at": .string(Self.rfc3339(Date().addingTimeInterval(3600), offsetMinutes: -(23 * 60 + 59)))])
            #expect(late.status == 400 && late.errorMessage?.contains("15 minutes") == true, "\(late.text)")
            for wrong in ["2026-13-01T00:00:00Z", "2026-02-30T00:00:00Z", "2026-01-01T00:00:00+24:00", "2026-01-01 00:00:00Z"] {
                let refused = try await gw.request("POST", "/api/v1/mobile/nodes/phone/commands", json: ["command": "system.notify", "expires_at": .string(wrong)])
                #expect(refused.status == 400 && refused.errorMessage?.contains("RFC 3339") == true, "\(wrong): \(refused.text)")
            }
        }
    }

    @Test("a phone's name is at most 200 bytes as the original counts them; a node's model and versions count characters as openapi.yaml does")
    func lengthUnits() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            // 100 two-byte letters: 100 characters, 200 bytes; one more is 202 bytes.
            #expect(try await gw.request("POST", "/api/v1/mobile/devices", json: ["id": "p1", "name": .string(String(repeating: "é", count: 100))]).status == 201)
            let long = try await gw.request("POST", "/api/v1/mobile/devices", json: ["id": "p2", "name": .string(String(repeating: "é", count: 101))])
            #expect(long.status == 400 && long.errorField == "name" && long.errorMessage?.contains("too long") == true, "\(long.text)")
            // Combining marks are characters of their own (e + U+0301 is two): 101 such pairs are over 200.
            let combined = try await gw.request("POST", "/api/v1/mobile/devices", json: ["id": "p3", "name": .string(String(repeating: "e\u{301}", count: 101))])
            #expect(combined.status == 400 && combined.errorField == "name", "\(combined.text)")
            // Every other limit counts characters as maxLength does: 101 e + U+0301 pairs are 202, over the title's 200.
            let title = try await gw.request("POST", "/api/v1/channels/mobile/test", json: ["title": .string(String(repeating: "e\u{301}", count: 101))])
            #expect(title.status == 400 && title.errorField == "title", "\(title.text)")
            // 64 three-byte characters: within os_version's 64, though 192 bytes.
            let node = try await gw.request("POST", "/api/v1/mobile/nodes/register",
                                            json: ["device_id": "n1", "os_version": .string(String(repeating: "版", count: 64)), "model": .string(String(repeating: "版", count: 200))])
            #expect(node.status == 201, "\(node.text)")
            let over = try await gw.request("POST", "/api/v1/mobile/nodes/register", json: ["device_id": "n1", "os_version": .string(String(repeating: "版", count: 65))])
            #expect(over.status == 400 && over.errorField == "os_version", "\(over.text)")
        }
    }

    /// `date` written in RFC 3339 at a UTC offset of `offsetMinutes`.
    static func rfc3339(_ date: Date, offsetMinutes: Int) -> String {
        var calendar = Calendar(identifier: .gregorian)
        // Shifted by hand: Foundation's time zones stop at ±18 hours.
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let c = calendar.dateComponents([.year, .month, .day, .hour, .minute, .second], from: date.addingTimeInterval(TimeInterval(offsetMinutes * 60)))
        let sign = offsetMinutes < 0 ? "-" : "+"
        return String(format: "%04d-%02d-%02dT%02d:%02d:%02d%@%02d:%02d", c.year!, c.month!, c.day!, c.hour!, c.minute!, c.second!,
                      sign, abs(offsetMinutes) / 60, abs(offsetMinutes) % 60)
    }
}
