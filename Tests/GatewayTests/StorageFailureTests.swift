import Foundation
import GatewayTestSupport
import APIKit
import Testing

/// A full disk and a read-only database: clear errors, nothing stored is lost or corrupted.
@Suite("Storage failures", .serialized)
struct StorageFailureTests {
    @Test("a full database refuses new lines with 507 and keeps everything already stored")
    func diskFull() async throws {
        try await withTestGateway { (gw) async throws in
            try await gw.registerDevice(id: "phone", key: nil)
            let kept = try await gw.request("POST", "/api/v1/channels/mobile/test", json: ["body": "kept line"])
            #expect(kept.status == 201)
            // Cap the file at its current size: the next writes hit SQLite's "database or disk is full".
            let pages = try gw.gateway.database.write { try $0.query("PRAGMA page_count").first?.int("page_count") ?? 0 }
            try gw.gateway.database.write { try $0.query("PRAGMA max_page_count = \(pages)") }
            var refused: TestResponse?
            for _ in 0..<200 {
                let r = try await gw.request("POST", "/api/v1/channels/mobile/test", json: ["body": .string(String(repeating: "x", count: 3900))])
                if r.status != 201 { refused = r; break }
            }
            let full = try #require(refused)
            #expect(full.status == 507 && full.errorCode == "storage_full", "\(full.status) \(full.text)")
            #expect(full.errorMessage?.contains("disk is full") == true)
            let lines = try await gw.request("GET", "/api/v1/mobile/deliveries?device_id=phone&limit=200")
            #expect(lines.status == 200)
            #expect(lines.json["deliveries"]?.arrayValue?.contains { $0["body"] == "kept line" } == true)
            #expect(try gw.gateway.database.read { try $0.integrityCheck() } == "ok")
            // Space again: writing works again.
            try gw.gateway.database.write { try $0.query("PRAGMA max_page_count = 1000000") }
            #expect(try await gw.request("POST", "/api/v1/channels/mobile/test").status == 201)
        }
    }

    @Test("a read-only database refuses writes with 503 and still serves reads")
    func readOnly() async throws {
        try await withTestGateway { (gw) async throws in
            try await gw.registerDevice(id: "phone", key: nil)
            _ = try await gw.request("POST", "/api/v1/channels/mobile/test", json: ["body": "before"])
            try gw.gateway.database.write { try $0.execute("PRAGMA query_only = 1") }
            let refused = try await gw.request("POST", "/api/v1/channels/mobile/test")
            #expect(refused.status == 503 && refused.errorCode == "storage_read_only")
            let registration = try await gw.registerDevice(id: "second", key: nil)
            #expect(registration.status == 503)
            #expect(try await gw.request("GET", "/api/v1/mobile/deliveries?device_id=phone").json["deliveries"]?.arrayValue?.count == 1)
            try gw.gateway.database.write { try $0.execute("PRAGMA query_only = 0") }
            #expect(try gw.gateway.database.read { try $0.integrityCheck() } == "ok")
        }
    }
}
