import APIKit
import Foundation
import Gateway
import GatewayTestSupport
import HTTPClient
import HTTPServer
import PostgreSQL
import SQLite
import Synchronization
import Testing

/// Inputs a review found would end the process (a trap, not an error): each now gets an error naming what was
/// wrong, or is bounded, and the gateway goes on.
@Suite("Inputs that once ended the process")
struct HostileInputTests {
    @Test("a time written with digits other than ASCII, or carried by its offset outside years 0000-9999, is refused naming the field")
    func unicodeDigitsAndYearBounds() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            // Full-width digits: a regex's \d matched them, and Int(_:) then could not read them (a forced unwrap).
            for text in ["２０２６-01-01T00:00:00Z", "0000-01-01T00:00:00+00:01", "9999-12-31T23:59:59-00:01"] {
                let queued = try await gw.request("POST", "/api/v1/mobile/nodes/phone/commands", json: ["command": "canvas.present", "expires_at": .string(text)])
                #expect(queued.status == 400 && queued.errorField == "expires_at", "\(text): \(queued.status) \(queued.text)")
                let fact = try await gw.request("POST", "/api/v1/memory/facts", json: ["content": "x", "expires_at": .string(text)])
                #expect(fact.status == 400 && fact.text.contains("expires_at"), "\(text): \(fact.status) \(fact.text)")
            }
            // The gateway is still there, and what is stored is untouched.
            #expect(try await gw.request("GET", "/api/v1/memory/facts").status == 200)
        }
        #expect(SoulConfigLoader.timestamp("２０２６-01-01", quoted: false) == nil)
        #expect(SoulConfigLoader.timestamp("2026-01-0１", quoted: false) == nil)
        #expect(SoulConfigLoader.timestamp("0000-01-01T00:00:00+00:01", quoted: true) == nil)
        #expect(SoulConfigLoader.timestamp("0001-01-01T00:00:00Z", quoted: true) != nil)
        #expect(SoulConfigLoader.timestamp("9999-12-31T23:59:59Z", quoted: true) != nil)
        #expect(SoulConfigLoader.timestamp("2026-06-01", quoted: false) == Date(timeIntervalSince1970: 1_780_272_000))
    }

    @Test("timestamps and stored milliseconds are total: a date past what they hold is clamped, never a trap")
    func totalTimestamps() {
        #expect(JSONValue.iso8601(Date(timeIntervalSince1970: -1e18)) == "0000-01-01T00:00:00.000Z")
        #expect(JSONValue.iso8601(Date(timeIntervalSince1970: 1e300)) == "9999-12-31T23:59:59.999Z")
        #expect(JSONValue.iso8601(Date(timeIntervalSince1970: .nan)) == "1970-01-01T00:00:00.000Z")
        #expect(JSONValue.iso8601(Date(timeIntervalSince1970: 1_780_272_000.5)) == "2026-06-01T00:00:00.500Z")
        #expect(Date(timeIntervalSince1970: 1e300).sqliteMillis == .max && Date(timeIntervalSince1970: -1e300).sqliteMillis == .min)
        #expect(Date(timeIntervalSince1970: .nan).sqliteMillis == 0 && Date(timeIntervalSince1970: 1.5).sqliteMillis == 1500)
        #expect(Date(timeIntervalSince1970: 1e300).postgresMillis == .max && Date(timeIntervalSince1970: .nan).postgresMillis == 0)
    }

    @Test("a bare number of seconds is bounded like the unit forms; an agent file asking for more is refused naming the key")
    func durationBounds() {
        #expect(DurationText.parse("10000000000000000") == nil)
        #expect(DurationText.parse("9200000000") == nil)
        #expect(DurationText.parse("9199999999") == .seconds(9_199_999_999))
        #expect(DurationText.parse("-5") == nil && DurationText.parse("90") == .seconds(90))
        var loader = SoulConfigLoader(file: "huge.yaml", destinations: Gateway.destinationValidators, environment: [:])
        _ = loader.parse(text: "id: huge\nenabled: true\nrunner: {command: [/bin/cat]}\nrun_timeout: 10000000000000000\n")
        #expect(loader.problems.contains { $0.message.contains("run_timeout") }, "\(loader.problems)")
        var every = SoulConfigLoader(file: "every.yaml", destinations: Gateway.destinationValidators, environment: [:])
        _ = every.parse(text: "id: every\nenabled: true\nrunner: {command: [/bin/cat]}\nschedule: {cron: \"@every 10000000000000000\"}\n")
        #expect(!every.problems.isEmpty, "an @every past the bound is refused")
    }

    @Test("an answer larger than the request's bound is cut off with an error saying so, whole or streamed; one within it arrives whole")
    func responseBound() async throws {
        let big = [UInt8](repeating: UInt8(ascii: "x"), count: 3 * 1024 * 1024)
        let server = HTTPServer(configuration: HTTPServerConfiguration(host: "127.0.0.1", port: 0),
                                immediate: { _ in HTTPResponse(status: 200, headers: [("content-type", "text/plain")], body: big) }) { _ in
            HTTPResponse(status: 200, headers: [("content-type", "text/plain")], body: big)
        }
        try server.start()
        defer { Task { await server.stop() } }
        let client = HTTP2Client()
        let url = "http://127.0.0.1:\(server.port)/big"
        do {
            _ = try await client.send(ClientRequest(method: "GET", url: url, maximumResponseBytes: 1024 * 1024))
            Issue.record("a 3 MiB answer passed a 1 MiB bound")
        } catch {
            #expect(error.description == "the answer was larger than 1048576 bytes and was cut off", "\(error)")
        }
        let counted = Counter()
        do {
            _ = try await client.send(ClientRequest(method: "GET", url: url, maximumResponseBytes: 1024 * 1024)) { counted.add($0.count) }
            Issue.record("a 3 MiB stream passed a 1 MiB bound")
        } catch {
            #expect(error.description.contains("larger than 1048576 bytes"), "\(error)")
        }
        #expect(counted.value <= 1024 * 1024, "\(counted.value) bytes were handed on")
        let whole = try await client.send(ClientRequest(method: "GET", url: url))
        #expect(whole.status == 200 && whole.body == big)
        // A timeout past what libcurl's milliseconds hold (an agent's run_timeout once could be) is "a long time".
        let patient = try await client.send(ClientRequest(method: "GET", url: url, timeout: .seconds(Int64.max / 2)))
        #expect(patient.status == 200)
    }

    @Test("a mutating call's path past 512 bytes is logged as its hash: the same call replays, another long path with the key is refused")
    func longPathsInTheIdempotencyLog() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            let long = "/api/v1/mobile/devices/" + String(repeating: "d", count: 20_000)
            let first = try await gw.request("DELETE", long, headers: ["Idempotency-Key": "long-1"])
            let again = try await gw.request("DELETE", long, headers: ["Idempotency-Key": "long-1"])
            #expect(again.status == first.status && again.body == first.body && again.headers["idempotent-replayed"] == "true", "\(first.status) \(again.status)")
            let other = try await gw.request("DELETE", long + "e", headers: ["Idempotency-Key": "long-1"])
            #expect(other.status == 409 && other.errorCode == "idempotency_key_reused" && !other.text.contains(String(repeating: "d", count: 600)), "\(other.status)")
            // What the log keeps for it is the hash, not the 20 KB path.
            let kept = try gw.gateway.database.read { db in try db.query("SELECT path FROM idempotency_log").compactMap { $0.string("path") } }
            #expect(kept.allSatisfy { $0.utf8.count <= 512 } && kept.contains { $0.hasPrefix("sha256:") }, "\(kept.map { $0.prefix(40) })")
        }
    }

    final class Counter: Sendable {
        private let total = Mutex(0)
        func add(_ n: Int) { total.withLock { $0 += n } }
        var value: Int { total.withLock { $0 } }
    }
}

/// Each delivery to a person writes a row and queues a wake-up per phone of theirs: a key cannot multiply that.
@Suite("Devices per person")
struct DevicesPerPersonTests {
    @Test("a person registers at most 50 devices (409 too_many_devices naming id); updating one of them, or removing one, still works; another person is not counted")
    func bounded() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            for n in 0..<50 {
                #expect(try await gw.request("POST", "/api/v1/mobile/devices", json: ["id": .string("phone-\(n)")]).status == 201)
            }
            let refused = try await gw.request("POST", "/api/v1/mobile/devices", json: ["id": "phone-50"])
            #expect(refused.status == 409 && refused.errorCode == "too_many_devices" && refused.errorField == "id", "\(refused.status) \(refused.text)")
            #expect(try await gw.request("POST", "/api/v1/mobile/devices", json: ["id": "phone-7", "name": "Renamed"]).status == 201)
            let ben = try await gw.mintKey(subject: "ben", role: "operator")
            #expect(try await gw.request("POST", "/api/v1/mobile/devices", json: ["id": "ben-phone"], key: .some(ben)).status == 201)
            #expect(try await gw.request("DELETE", "/api/v1/mobile/devices/phone-0").status == 204)
            #expect(try await gw.request("POST", "/api/v1/mobile/devices", json: ["id": "phone-50"]).status == 201)
            #expect(try await gw.request("GET", "/api/v1/mobile/devices").json["devices"]?.arrayValue?.count == 50)
        }
    }
}
