import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import ChannelAPI
import ChannelTesting
import Mobile
import Gateway
import GatewayTestSupport
import Testing

/// `GET /metrics` as a real Prometheus scrapes it (Debian's prometheus, started here), and as promtool lints it.
@Suite("Metrics scraped by Prometheus", .serialized)
struct MetricsScrapeTests {
    static let agents = """
        agents:
          - id: echo
            name: Echo
            runner:
              command: ["/bin/cat"]
              timeout: 10s
          - id: broken
            name: Broken
            runner:
              command: ["/bin/sh", "-c", "exit 3"]
              timeout: 10s
        """

    /// A Prometheus server scraping `target` every second, its data in a temporary directory.
    final class PrometheusServer: @unchecked Sendable {
        let process = TestProcess()
        let port = freePort()
        let directory = TestGateway.makeTemporaryDirectory()

        init(target: String) throws {
            let config = """
                global:
                  scrape_interval: 1s
                  scrape_timeout: 900ms
                scrape_configs:
                  - job_name: soulacy
                    static_configs:
                      - targets: ['\(target)']
                """
            try config.write(toFile: directory + "/prometheus.yml", atomically: true, encoding: .utf8)
            process.executableURL = URL(fileURLWithPath: "/usr/bin/prometheus")
            process.arguments = ["--config.file=\(directory)/prometheus.yml", "--storage.tsdb.path=\(directory)/data",
                                 "--web.listen-address=127.0.0.1:\(port)", "--log.level=warn"]
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try launch(process)
        }

        /// An instant query's result vector as (labels, value).
        func query(_ expression: String) async throws -> [([String: String], Double)] {
            var components = URLComponents(string: "http://127.0.0.1:\(port)/api/v1/query")!
            components.queryItems = [URLQueryItem(name: "query", value: expression)]
            // A literal + in a query string reads as a space (`le="+Inf"`).
            components.percentEncodedQuery = components.percentEncodedQuery?.replacingOccurrences(of: "+", with: "%2B")
            let (data, _) = try await URLSession.shared.data(from: components.url!)
            guard let json = try JSONSerialization.jsonObject(with: data) as? [String: Any], json["status"] as? String == "success",
                  let result = (json["data"] as? [String: Any])?["result"] as? [[String: Any]] else { return [] }
            return result.compactMap { row in
                guard let labels = row["metric"] as? [String: String], let value = row["value"] as? [Any], let text = value.last as? String,
                      let number = Double(text) else { return nil }
                return (labels, number)
            }
        }

        /// Polls until `expression` has a sample for which `accept` holds (Prometheus scrapes every second).
        func waitFor(_ expression: String, seconds: Double = 20, _ accept: (([String: String], Double)) -> Bool = { _ in true }) async throws -> Bool {
            let deadline = Date().addingTimeInterval(seconds)
            while Date() < deadline {
                if (try? await query(expression))?.contains(where: accept) == true { return true }
                try await Task.sleep(for: .milliseconds(250))
            }
            return false
        }

        func stop() {
            process.terminate()
            process.waitUntilExit()
        }
    }

    @Test("Prometheus scrapes the keyless listener: run counters move, histogram buckets fill, a rate is computed, and promtool finds nothing to lint")
    func scrapedByPrometheus() async throws {
        let metricsPort = freePort()
        try await withTestGateway(config: Self.agents, environment: ["SOULACY_METRICS_LISTEN": "127.0.0.1:\(metricsPort)"]) { gw in
            #expect(gw.gateway.metricsPort == metricsPort)
            let prometheus = try PrometheusServer(target: "127.0.0.1:\(metricsPort)")
            defer { prometheus.stop() }
            #expect(try await prometheus.waitFor("up{job=\"soulacy\"}") { $0.1 == 1 }, "Prometheus never scraped the gateway")

            for _ in 0..<3 {
                let run = try await gw.request("POST", "/api/v1/agents/echo/run", json: ["input": "hello"])
                if let id = run.json["run_id"]?.stringValue { _ = try await gw.request("GET", "/api/v1/runs/\(id)?wait=true") }
            }
            let failed = try await gw.request("POST", "/api/v1/agents/broken/run", json: [:])
            if let id = failed.json["run_id"]?.stringValue { _ = try await gw.request("GET", "/api/v1/runs/\(id)?wait=true") }

            #expect(try await prometheus.waitFor("soulacy_runs_total{outcome=\"succeeded\"}") { $0.1 >= 3 })
            #expect(try await prometheus.waitFor("soulacy_runs_total{outcome=\"failed\"}") { $0.1 >= 1 })
            #expect(try await prometheus.waitFor("soulacy_deliveries_stored_total{channel=\"mobile\"}") { $0.1 >= 3 })
            // Histogram buckets are cumulative: everything is under +Inf, and a quick /bin/cat under 10 s.
            #expect(try await prometheus.waitFor("soulacy_run_duration_seconds_bucket{outcome=\"succeeded\",le=\"+Inf\"}") { $0.1 >= 3 })
            #expect(try await prometheus.waitFor("soulacy_run_duration_seconds_bucket{outcome=\"succeeded\",le=\"10\"}") { $0.1 >= 3 })
            // A window of minutes: the runs above stay in it however long a loaded machine took over the waits before.
            #expect(try await prometheus.waitFor("rate(soulacy_runs_total{outcome=\"succeeded\"}[10m])") { $0.1 > 0 }, "a rate over the scrapes")
            #expect(try await prometheus.waitFor("soulacy_outbox_pending{lane=\"push\"}"))
            #expect(try await prometheus.waitFor("soulacy_build_info") { $0.0["version"] == GatewayVersion.current })
            #expect(try await prometheus.waitFor("process_resident_memory_bytes") { $0.1 > 1_000_000 })
            #expect(try await prometheus.waitFor("soulacy_tls_certificate_expiry_timestamp_seconds") { $0.1 > Date().timeIntervalSince1970 })
            #expect(try await prometheus.waitFor("soulacy_database_write_duration_seconds_count") { $0.1 > 0 })

            // No label carries an id of a device, delivery, person or key.
            let text = try await scrape(port: metricsPort)
            let labelSets = text.split(separator: "\n").filter { !$0.hasPrefix("#") }.compactMap { line -> Substring? in
                guard let open = line.firstIndex(of: "{"), let close = line.lastIndex(of: "}") else { return nil }
                return line[open...close]
            }
            for id in ["dlv_", "run_", "sk_", "owner", "chs_"] {
                #expect(!labelSets.contains { $0.contains(id) }, "a metric label carries \(id)")
            }
            let linted = try await runProgram("/bin/sh", ["-c", "printf '%s' \"$0\" | /usr/bin/promtool check metrics", text])
            #expect(linted.status == 0 && linted.output.isEmpty, "\(linted.output)")
        }
    }

    @Test("on the gateway's own port /metrics needs an admin key; the keyless listener serves nothing else")
    func access() async throws {
        let metricsPort = freePort()
        try await withTestGateway(environment: ["SOULACY_METRICS_LISTEN": "127.0.0.1:\(metricsPort)"]) { gw in
            let admin = try await gw.request("GET", "/metrics")
            #expect(admin.status == 200 && admin.headers["content-type"]?.hasPrefix("text/plain; version=0.0.4") == true)
            #expect(admin.text.contains("# TYPE soulacy_runs_total counter"))
            #expect(try await gw.request("GET", "/metrics", key: .none).status == 401)
            let viewer = try await gw.mintKey(subject: "ana", role: "viewer")
            #expect(try await gw.request("GET", "/metrics", key: .some(viewer)).status == 403)
            let (_, other) = try await URLSession.shared.data(from: URL(string: "http://127.0.0.1:\(metricsPort)/api/v1/agents")!)
            #expect((other as? HTTPURLResponse)?.statusCode == 404)
        }
        await #expect(throws: (any Error).self) {
            try await withTestGateway(environment: ["SOULACY_METRICS_LISTEN": "nonsense"]) { _ in }
        }
    }

    @Test("the README's alert rules are valid Prometheus rules and name metrics the gateway exports")
    func readmeRules() async throws {
        let readme = try String(contentsOfFile: RepositoryPaths.root + "/README.md", encoding: .utf8)
        let start = try #require(readme.range(of: "# rules.yml\n"))
        let end = try #require(readme.range(of: "```", range: start.upperBound..<readme.endIndex))
        let rules = String(readme[start.upperBound..<end.lowerBound])
        let file = TestGateway.makeTemporaryDirectory() + "/rules.yml"
        try rules.write(toFile: file, atomically: true, encoding: .utf8)
        let checked = try await runProgram("/usr/bin/promtool", ["check", "rules", file])
        #expect(checked.status == 0 && checked.output.contains("3 rules found"), "\(checked.output)")
        try await withTestGateway { gw in
            let exported = try await gw.request("GET", "/metrics").text
            for name in ["soulacy_outbox_oldest_pending_age_seconds", "soulacy_push_attempts_total", "soulacy_tls_certificate_expiry_timestamp_seconds",
                         "soulacy_credential_issued_timestamp_seconds", "soulacy_credential_expiry_timestamp_seconds"] {
                #expect(rules.contains(name) && exported.contains("# TYPE \(name) "), "\(name)")
            }
        }
    }

    @Test("wake-ups and channel sends count by transport or channel and outcome, with the service's status and durations; fetches measure stored → fetched")
    func pushAndChannelCounters() async throws {
        let transport = ScriptedTransport(name: "scripted", script: [.retry(after: nil, reason: "service unavailable")], fallback: .delivered)
        let chat = ScriptedChannel(name: "chat", script: [.rejected(reason: "no such chat")])
        let agents = """
            agents:
              - id: echo
                name: Echo
                runner: {command: ["/bin/cat"], timeout: 10s}
                schedule: {output: {channel: chat, to: room}}
            """
        try await withTestGateway(config: agents, transports: [transport], retryPolicy: RetryPolicy(initialDelay: 0.05, maximumDelay: 0.1), outbound: [chat]) { gw in
            #expect(try await gw.registerDevice(id: "phone", key: nil, token: String(repeating: "a", count: 64)).status == 201)
            let sent = try await gw.request("POST", "/api/v1/channels/mobile/test", json: [:])
            #expect(sent.status == 201)
            let run = try await gw.request("POST", "/api/v1/agents/echo/run", json: ["input": "hi"])
            if let id = run.json["run_id"]?.stringValue { _ = try await gw.request("GET", "/api/v1/runs/\(id)?wait=true") }
            _ = try await gw.request("GET", "/api/v1/mobile/deliveries?device_id=phone")
            try await Task.sleep(for: .milliseconds(600))
            var text = ""
            let deadline = Date().addingTimeInterval(10)
            while Date() < deadline {
                text = try await gw.request("GET", "/metrics").text
                if text.contains("soulacy_channel_sends_total{channel=\"chat\",outcome=\"rejected\"} 1"), text.contains("soulacy_delivery_fetch_delay_seconds_count 1"),
                   text.contains("soulacy_push_attempts_total{transport=\"scripted\",outcome=\"sent\"} 1") { break }
                try await Task.sleep(for: .milliseconds(100))
            }
            #expect(text.contains("soulacy_wakeups_queued_total{transport=\"scripted\"} 1\n"), "\(text)")
            #expect(text.contains("soulacy_push_attempts_total{transport=\"scripted\",outcome=\"retry\"} 1\n"))
            #expect(text.contains("soulacy_push_attempts_total{transport=\"scripted\",outcome=\"sent\"} 1\n"))
            #expect(text.contains("soulacy_push_responses_total{transport=\"scripted\",status=\"none\"} 2\n"))
            #expect(text.contains("soulacy_push_send_duration_seconds_count{transport=\"scripted\"} 2\n"))
            #expect(text.contains("soulacy_channel_sends_total{channel=\"chat\",outcome=\"rejected\"} 1\n"))
            #expect(text.contains("soulacy_deliveries_stored_total{channel=\"chat\"} 1\n"))
            #expect(text.contains("soulacy_delivery_fetch_delay_seconds_count 1\n"))
        }
    }

    @Test("credential times: the APNs provider token's signing time and the FCM access token's expiry, once each is made, labelled by credential only")
    func credentialTimes() async throws {
        let apns = try await APNsStandIn.start()
        defer { apns.stop() }
        let fcm = try await FCMStandIn.start()
        defer { fcm.stop() }
        try await withTestGateway(environment: apns.environment.merging(fcm.environment) { $1 }) { gw in
            let before = try await gw.request("GET", "/metrics").text
            // Nothing is made before the first push: the families are there, with no sample to mislead an alert.
            #expect(before.contains("# TYPE soulacy_credential_issued_timestamp_seconds gauge"), "\(before)")
            #expect(!before.contains("soulacy_credential_issued_timestamp_seconds{"), "\(before)")
            let started = Date().timeIntervalSince1970
            #expect(try await gw.registerDevice(id: "iphone", key: nil, token: String(repeating: "ab", count: 32)).status == 201)
            #expect(try await gw.registerDevice(id: "pixel", key: nil, platform: "android", token: "fcm-registration-token-1").status == 201)
            #expect(try await gw.request("POST", "/api/v1/channels/mobile/test", json: [:]).status == 201)
            func sample(_ line: String, in text: String) -> Double? {
                text.split(separator: "\n").first { $0.hasPrefix(line + " ") }.flatMap { Double($0.split(separator: " ").last ?? "") }
            }
            var text = ""
            let deadline = Date().addingTimeInterval(10)
            while Date() < deadline {
                text = try await gw.request("GET", "/metrics").text
                if sample("soulacy_credential_issued_timestamp_seconds{credential=\"apns_provider_token\"}", in: text) != nil,
                   sample("soulacy_credential_expiry_timestamp_seconds{credential=\"fcm_access_token\"}", in: text) != nil { break }
                try await Task.sleep(for: .milliseconds(100))
            }
            let issued = try #require(sample("soulacy_credential_issued_timestamp_seconds{credential=\"apns_provider_token\"}", in: text), "\(text)")
            #expect(issued >= started.rounded(.down) - 1 && issued <= Date().timeIntervalSince1970 + 1, "signed during this test: \(issued)")
            let expires = try #require(sample("soulacy_credential_expiry_timestamp_seconds{credential=\"fcm_access_token\"}", in: text), "\(text)")
            // Google's token endpoint (and the stand-in written from its docs) gives an hour.
            #expect(expires > Date().timeIntervalSince1970 + 50 * 60 && expires < Date().timeIntervalSince1970 + 3700, "\(expires)")
            // Only the credential's fixed name labels it: no key id, team, project or token.
            let credentialLines = text.split(separator: "\n").filter { $0.hasPrefix("soulacy_credential_") }
            #expect(credentialLines.count == 2, "\(credentialLines)")
            for secret in [APNsStandIn.keyID, APNsStandIn.teamID, FCMStandIn.clientEmail, "fcm-registration-token-1"] {
                #expect(!text.contains(secret), "the metrics carry \(secret)")
            }
        }
    }

    func scrape(port: UInt16) async throws -> String {
        let (data, _) = try await URLSession.shared.data(from: URL(string: "http://127.0.0.1:\(port)/metrics")!)
        return String(decoding: data, as: UTF8.self)
    }
}
