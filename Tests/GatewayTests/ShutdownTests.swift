import Foundation
import GatewayTestSupport
import Glibc
import HTTPClient
import APIKit
import Testing

/// Both executables run a service group: SIGTERM drains and exits 0, and the port is closed afterwards.
@Suite("Clean shutdown of soulacy and soulacy-relay")
struct ShutdownTests {
    @Test("soulacy-relay on SIGTERM stops taking connections, closes its database and exits 0")
    func relay() async throws {
        let relay = RelayServerProcess()
        try await relay.start()
        let mailbox = try await HTTP2Client(configuration: HTTP2ClientConfiguration()).send(ClientRequest(method: "GET", url: relay.url + "/health"))
        #expect(mailbox.status == 200)
        let ended = try #require(relay.terminate())
        #expect(ended.status == 0, "\(ended.output)")
        #expect(ended.output.contains("shutting down gracefully") && ended.output.contains("stopped"))
        #expect(RawHTTP.connect(port: relay.port, timeout: 1) == nil)
        // The database was closed cleanly: no write-ahead log left to replay.
        let wal = (try? FileManager.default.attributesOfItem(atPath: relay.databasePath + "-wal")[.size] as? NSNumber)?.intValue ?? 0
        #expect(wal == 0)
    }

    @Test("soulacy on SIGTERM drains the API, lets a run in flight finish and deliver, and exits 0")
    func gateway() async throws {
        let directory = TestGateway.makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let config = """
            agents:
              - id: slow
                name: Slow
                runner:
                  command: ["/bin/sh", "-c", "sleep 1; echo finished after the signal"]
                  timeout: 30s
            """
        let process = try GatewayProcess(directory: directory, config: config)
        let admin = try #require(try await process.start())
        let run = try await process.call("POST", "/api/v1/agents/slow/run", key: admin, json: ["input": "go", "to": "all"])
        #expect(run.status == 202 || run.status == 200, "\(run.json)")
        let status = process.terminate()
        #expect(status == 0, "\(process.output)")
        #expect(process.output.contains("shutting down gracefully"))
        // The run that was going when the signal came finished and its line is in the inbox.
        _ = try await process.start()
        let inbox = try await process.call("GET", "/api/v1/mobile/deliveries", key: admin)
        #expect(inbox.json["deliveries"]?.arrayValue?.contains { $0["body"]?.stringValue?.contains("finished after the signal") == true } == true, "\(inbox.json)")
        process.terminate()
    }
}
