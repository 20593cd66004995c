import Foundation
import GatewayTestSupport
import Metrics
import Testing

/// The Prometheus exposition, as Prometheus' own linter and parser read it.
@Suite("Metrics: the Prometheus text format")
struct MetricsTests {
    /// On a thread of its own: a blocked cooperative thread would hold back every other suite of the process.
    func promtool(_ text: String) async throws -> (status: Int32, output: String) {
        try await onOwnThread {
            let process = TestProcess()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/promtool")
            process.arguments = ["check", "metrics"]
            let input = Pipe(), output = Pipe()
            process.standardInput = input
            process.standardOutput = output
            process.standardError = output
            try GatewayTestSupport.launch(process)
            input.fileHandleForWriting.write(Data(text.utf8))
            try input.fileHandleForWriting.close()
            let said = output.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            return (process.terminationStatus, String(decoding: said, as: UTF8.self))
        }
    }

    @Test("counters, gauges and histograms are written as Prometheus reads them, and promtool check metrics finds nothing to lint")
    func exposition() async throws {
        let registry = MetricsRegistry()
        let attempts = registry.counter("soulacy_push_attempts_total", "Wake-up attempts by transport and outcome.", labels: ["transport", "outcome"])
        attempts.increment("apns", "sent")
        attempts.increment("apns", "sent")
        attempts.increment("fcm", "retry")
        registry.gauge("soulacy_outbox_pending", "Wake-ups waiting to be sent.") { [([], 7)] }
        let duration = registry.histogram("soulacy_push_send_duration_seconds", "Time to send one wake-up.", labels: ["transport"], buckets: [0.01, 0.1, 1])
        duration.observe(0.005, "apns")
        duration.observe(0.05, "apns")
        duration.observe(5, "apns")
        ProcessMetrics.register(in: registry)
        let text = registry.exposition()
        #expect(text.contains("# TYPE soulacy_push_attempts_total counter\n"))
        #expect(text.contains("soulacy_push_attempts_total{transport=\"apns\",outcome=\"sent\"} 2\n"))
        #expect(text.contains("soulacy_push_attempts_total{transport=\"fcm\",outcome=\"retry\"} 1\n"))
        #expect(text.contains("soulacy_outbox_pending 7\n"))
        // Buckets are cumulative, +Inf counts everything, and sum and count agree with what was observed.
        #expect(text.contains("soulacy_push_send_duration_seconds_bucket{transport=\"apns\",le=\"0.01\"} 1\n"))
        #expect(text.contains("soulacy_push_send_duration_seconds_bucket{transport=\"apns\",le=\"0.1\"} 2\n"))
        #expect(text.contains("soulacy_push_send_duration_seconds_bucket{transport=\"apns\",le=\"1\"} 2\n"))
        #expect(text.contains("soulacy_push_send_duration_seconds_bucket{transport=\"apns\",le=\"+Inf\"} 3\n"))
        #expect(text.contains("soulacy_push_send_duration_seconds_count{transport=\"apns\"} 3\n"))
        #expect(text.contains("soulacy_push_send_duration_seconds_sum{transport=\"apns\"} 5.055"))
        for name in ["process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds", "process_max_fds", "process_start_time_seconds"] {
            #expect(text.contains("\n\(name) "), "\(name) missing")
        }
        let linted = try await promtool(text)
        #expect(linted.status == 0 && linted.output.isEmpty, "\(linted.output)")
    }

    @Test("label values are escaped; a family never grows past its series bound (later combinations share one overflow series)")
    func boundedAndEscaped() async throws {
        let registry = MetricsRegistry()
        let counter = registry.counter("soulacy_test_things_total", "Things.", labels: ["kind"])
        counter.increment("a \"quoted\"\\back\nslash")
        for index in 0..<(MetricsRegistry.maximumSeries + 100) { counter.increment("k\(index)") }
        let text = registry.exposition()
        #expect(text.contains(#"soulacy_test_things_total{kind="a \"quoted\"\\back\nslash"} 1"#))
        let series = text.split(separator: "\n").filter { $0.hasPrefix("soulacy_test_things_total{") }
        #expect(series.count == MetricsRegistry.maximumSeries + 1)
        #expect(text.contains("soulacy_test_things_total{kind=\"overflow\"} 101\n"))
        #expect(try await promtool(text).status == 0)
    }
}
