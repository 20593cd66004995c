import ChannelAPI
import ChannelTesting
import Foundation
import Gateway
import HTTPClient
import JSON
import NtfyChannel
import Testing

/// The example channel registered the way an embedder registers it, in a real gateway on a loopback port with its
/// own SQLite file, driven through the HTTP API.
@Suite("Example: ntfy channel in a gateway")
struct NtfyGatewayTests {
    static let agent = """
        # A backup report to the household's phones through ntfy.
        id: nightly-backup
        name: Nightly backup
        enabled: true
        trigger: cron
        runner:
          command: ["/bin/sh", "-c", "echo 'Backup finished: 3 snapshots kept.'"]
          timeout: 10s
        schedule:
          cron: "0 3 * * *"
          output:
            channel: ntfy
            to: home-alerts
        """

    @Test("registered with GatewayOptions.extraChannelFactories: a SOUL.yaml agent's output arrives at ntfy and its run shows it delivered")
    func embedded() async throws {
        let ntfy = try NtfyStandIn(writable: ["home-alerts"])
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("ntfy-example-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try Self.agent.write(toFile: directory + "/SOUL.yaml", atomically: true, encoding: .utf8)
        try """
            channels:
              ntfy:
                enabled: true
                api_url: \(ntfy.url)
                token: \(NtfyStandIn.token)
                priority: high
                tags: [floppy_disk]
            """.write(toFile: directory + "/config.yaml", atomically: true, encoding: .utf8)
        let logs = MemoryLogHandler()

        // What an embedder writes (README: "Add a channel in ten lines"), with a port of its own and a quiet log.
        var options = GatewayOptions(configPath: directory + "/SOUL.yaml", dataDirectory: directory + "/data", port: 0,
                                     log: Log(minimum: .info, handler: logs), environment: [:])
        options.gatewayConfigPath = directory + "/config.yaml"
        options.extraChannelFactories = [NtfyChannelFactory()]
        let gateway = try Gateway(options: options)
        let key = try #require(try await gateway.bootstrapAdminKey())
        try gateway.start()

        do {
            let api = OwnerClient(base: "http://127.0.0.1:\(gateway.port)", key: key)
            let started = try await api.send("POST", "/api/v1/agents/nightly-backup/run", body: ["input": ""])
            #expect(started.status == 202, "\(started.json)")
            let runID = try #require(started.json["run_id"]?.stringValue)
            let run = try await api.send("GET", "/api/v1/runs/\(runID)?wait=true").json
            #expect(run["status"] == "succeeded", "\(run)")

            // The hand-off attempts it after the run's end: wait for the state, with a generous deadline.
            var output: JSONValue?
            let deadline = ContinuousClock.now + .seconds(30)
            while ContinuousClock.now < deadline {
                output = try await api.send("GET", "/api/v1/runs/\(runID)").json["outputs"]?[0]
                if output?["state"] == "delivered" { break }
                try await Task.sleep(for: .milliseconds(50))
            }
            #expect(output?["state"] == "delivered", "\(String(describing: output))")
            #expect(output?["channel"] == "ntfy" && output?["destination"] == "home-alerts" && output?["attempts"] == 1)

            let message = try #require(ntfy.published.first)
            #expect(ntfy.published.count == 1)
            #expect(message.topic == "home-alerts" && message.message == "Backup finished: 3 snapshots kept.")
            #expect(message.title == "Result from nightly-backup" && message.priority == 4 && message.tags == ["floppy_disk"])
            #expect(message.token == NtfyStandIn.token)
            // The channel was built from the config block, and neither the token nor the output is in a log line.
            #expect(logs.lines.contains { $0.contains("channels: ntfy") }, "\(logs.lines)")
            #expect(!logs.lines.contains { $0.contains(NtfyStandIn.token) || $0.contains("snapshots kept") }, "\(logs.lines)")
        } catch {
            await gateway.stop()
            await ntfy.stop()
            throw error
        }
        await gateway.stop()
        await ntfy.stop()
    }
}

/// The gateway's HTTP API as a client sees it, with the owner's key.
struct OwnerClient {
    let base: String
    let key: String
    let client = HTTP2Client()

    func send(_ method: String, _ path: String, body: JSONValue? = nil) async throws -> (status: Int, json: JSONValue) {
        var headers = [("Authorization", "Bearer \(key)")]
        if body != nil { headers.append(("Content-Type", "application/json")) }
        let response = try await client.send(ClientRequest(method: method, url: base + path, headers: headers,
                                                           body: body?.serializedBytes() ?? [], timeout: .seconds(30)))
        return (response.status, (try? JSONValue.parse(response.body)) ?? .null)
    }
}
