import ChannelAPI
import ChannelTesting
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import GatewayTestSupport
import Logging
import Testing

/// SOULACY_LOG_FORMAT=json on the real binary: every stderr line one JSON object, the access log naming each
/// request by its id and route pattern, nothing secret in any line.
@Suite("Structured logs", .serialized)
struct StructuredLogTests {
    @Test("JSON lines parse with time, level, component and message; the access line carries the request's id and pattern; no key or output leaks")
    func jsonLines() async throws {
        let directory = TestGateway.makeTemporaryDirectory()
        let gateway = try GatewayProcess(directory: directory, environment: ["SOULACY_LOG_FORMAT": "json", "SOULACY_LOG_LEVEL": "debug"])
        let key = try #require(try await gateway.start())
        let canary = "canary-output-\(UUID().uuidString)"
        let sent = try await gateway.call("POST", "/api/v1/channels/mobile/test", key: key, json: ["title": .string(canary), "body": .string(canary)],
                                          headers: ["X-Request-Id": "proxy-id.42"])
        #expect(sent.status == 201)
        let deliveryID = try #require(sent.json["delivery_id"]?.stringValue)
        _ = try await gateway.call("GET", "/api/v1/mobile/deliveries/\(deliveryID)", key: key, headers: ["X-Request-Id": "bad id with spaces"])
        _ = try await gateway.call("GET", "/health", key: nil)
        try await Task.sleep(for: .milliseconds(300))
        #expect(gateway.terminate() == 0)

        // stdout's human lines (the banner, the pairing offer, "listening") share the file; every other line is JSON.
        let human = ["First start", "SOULACY_ADMIN_KEY=", "Pairing code", "soulacy is listening", "  "]
        var records: [[String: Any]] = []
        for line in gateway.output.split(separator: "\n") where !human.contains(where: { line.hasPrefix($0) }) {
            let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
            #expect(object != nil, "not a JSON line: \(line)")
            if let object { records.append(object) }
        }
        #expect(!records.isEmpty)
        for record in records {
            #expect(record["time"] is String && record["level"] is String && record["component"] is String && record["message"] is String, "\(record)")
            #expect(record.values.allSatisfy { $0 is String }, "metadata is flat: \(record)")
        }
        let access = records.filter { $0["component"] as? String == "http" }
        let posted = try #require(access.first { $0["route"] as? String == "/api/v1/channels/mobile/test" }, "\(access)")
        #expect(posted["request_id"] as? String == "proxy-id.42" && posted["status"] as? String == "201" && posted["method"] as? String == "POST")
        #expect(Double(posted["duration_ms"] as? String ?? "") != nil && posted["bytes"] as? String != nil)
        // A malformed id is replaced, never echoed; the path's own id stays out (the pattern stands for it).
        let read = try #require(access.first { $0["route"] as? String == "/api/v1/mobile/deliveries/:id" })
        #expect((read["request_id"] as? String).map { $0 != "bad id with spaces" && !$0.isEmpty } == true)
        #expect(access.contains { $0["route"] as? String == "/health" })
        let text = gateway.output.split(separator: "\n").filter { !$0.hasPrefix("SOULACY_ADMIN_KEY=") && !$0.hasPrefix("  ") }.joined(separator: "\n")
        for secret in [key, canary, deliveryID] { #expect(!text.contains(secret), "a log line carries \(secret.prefix(12))…") }
    }

    @Test("a plain line: the time exactly as Foundation's ISO 8601 writes it, then level, message and key=value pairs sorted, the component named by the logger")
    func plainLine() {
        for seconds in [0.0, 59.999, 951_782_400, 1_796_588_684.76, 4_102_444_799, Date.distantFuture.timeIntervalSince1970,
                        Date.distantPast.timeIntervalSince1970, -12_219_292_800, -12_219_292_801, 253_402_300_799, 1e300, -1e16, .nan] {
            let date = Date(timeIntervalSince1970: seconds)
            let record = LogRecord(date: date, level: .info, label: "http", message: "GET /x 200",
                                   metadata: ["status": "200", "component": "shadowed", "a": "1", "request_id": "req_1"])
            #expect(record.line == "\(date.formatted(.iso8601)) info GET /x 200 a=1 component=http request_id=req_1 status=200", "\(record.line)")
        }
        let plain = LogRecord(date: Date(timeIntervalSince1970: 0), level: .warning, message: "m", metadata: [:])
        #expect(plain.line == "1970-01-01T00:00:00Z warning m")
    }

    @Test("SOULACY_ACCESS_LOG=off stops the access lines, never the answers' request ids or the HTTP metrics")
    func accessLogOff() async throws {
        let gateway = try GatewayProcess(directory: TestGateway.makeTemporaryDirectory(),
                                         environment: ["SOULACY_LOG_FORMAT": "json", "SOULACY_ACCESS_LOG": "off", "SOULACY_NODE_ID": "node-a"])
        let key = try #require(try await gateway.start())
        let health = try await gateway.call("GET", "/health", key: nil, headers: ["X-Request-Id": "off-1"])
        #expect(health.status == 200)
        var scrape = URLRequest(url: URL(string: gateway.baseURL + "/metrics")!)
        scrape.setValue("Bearer \(key)", forHTTPHeaderField: "Authorization")
        let (body, answer) = try await URLSession.shared.data(for: scrape)
        let metrics = String(decoding: body, as: UTF8.self)
        #expect((answer as? HTTPURLResponse)?.statusCode == 200 && metrics.contains("soulacy_http_requests_total{"), "\(metrics.prefix(300))")
        try await Task.sleep(for: .milliseconds(300))
        #expect(gateway.terminate() == 0)
        let lines = gateway.output.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        #expect(!lines.isEmpty, "the gateway logged its start")
        // A node that names itself (several gateways on one database) says so on every line.
        #expect(lines.allSatisfy { $0["node_id"] as? String == "node-a" }, "\(lines.filter { $0["node_id"] as? String != "node-a" })")
        #expect(!lines.contains { $0["component"] as? String == "http" }, "an access line was written: \(lines.filter { $0["component"] as? String == "http" })")
        #expect(!gateway.output.contains("off-1"))
    }

    @Test("a run's lines name the run, not the request that started it (a run outlives its 202)")
    func runLinesNameTheRun() async throws {
        let logs = MemoryLogHandler()
        let config = """
            agents:
              - id: broken
                name: Broken
                runner:
                  command: ["/bin/sh", "-c", "exit 2"]
            """
        try await withTestGateway(config: config, log: Log(minimum: .info, handler: logs), mode: .router) { gw in
            let started = try await gw.request("POST", "/api/v1/agents/broken/run", headers: ["X-Request-Id": "req-run-1"])
            #expect(started.status == 202, "\(started.text)")
            let runID = try #require(started.json["run_id"]?.stringValue)
            #expect(await eventually { logs.records.contains { $0.message.contains("of agent broken failed") && $0.metadata["run_id"] == runID } },
                    "\(logs.lines)")
            #expect(!logs.records.contains { $0.metadata["run_id"] == runID && $0.metadata["request_id"] != nil }, "\(logs.lines)")
        }
    }

    @Test("a wrong SOULACY_LOG_LEVEL or SOULACY_LOG_FORMAT stops the start naming the variable")
    func badSettings() async throws {
        for (name, value) in [("SOULACY_LOG_LEVEL", "loud"), ("SOULACY_LOG_FORMAT", "xml")] {
            let gateway = try GatewayProcess(directory: TestGateway.makeTemporaryDirectory(), environment: [name: value])
            await #expect(throws: (any Error).self) { try await gateway.start() }
            #expect(gateway.output.contains(name), "\(gateway.output)")
        }
    }
}
