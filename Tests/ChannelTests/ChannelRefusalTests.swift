import ChannelAPI
import ChannelTesting
import Foundation
import GatewayTestSupport
import JSON
import Testing

/// Each built-in channel's refusals as its service gives them (a bad token, a chat it does not know, its rate
/// limit), through the real gateway from a SOUL.yaml agent: each ends in the state it means, with the service's own
/// words on the run (`GET /api/v1/runs/:id` → `outputs`), and no secret in them.
/// One channel at a time: each case takes seconds, fewer than the outage suite beside it, and its stand-ins need not
/// start all at once with that suite's and every other channel suite's.
@Suite("Channel refusals", .serialized)
struct ChannelRefusalTests {
    static func expectReason(_ output: JSONValue, carries words: [String], hiding secrets: [String], sourceLocation: SourceLocation = #_sourceLocation) {
        let reason = output["last_reason"]?.stringValue ?? ""
        for word in words { #expect(reason.contains(word), "the reason lacks '\(word)': \(output)", sourceLocation: sourceLocation) }
        for secret in secrets { #expect(!reason.contains(secret), "a secret in the reason: \(reason)", sourceLocation: sourceLocation) }
    }

    /// How a run shows a destination: an incoming-webhook URL by its scheme and host alone (its path and query hold
    /// the endpoint's key), anything else as it is.
    static func shown(_ destination: String) -> String {
        guard destination.contains("://"), let url = URL(string: destination), let scheme = url.scheme, let host = url.host else { return destination }
        return "\(scheme)://\(host)/…"
    }

    /// Nothing the channel's config holds as a secret is in any log line (at debug level) or anywhere in the
    /// database's bytes at rest (the file and its WAL): refusals, retries and deliveries alike.
    static func expectNoSecretAtRest(_ gw: TestGateway, logs: MemoryLogHandler, hiding secrets: [String], sourceLocation: SourceLocation = #_sourceLocation) {
        let lines = logs.lines
        #expect(!lines.isEmpty, "the log was captured", sourceLocation: sourceLocation)
        var stored = Data()
        for suffix in ["", "-wal"] {
            if let bytes = FileManager.default.contents(atPath: gw.directory + "/data/soulacy.db" + suffix) { stored.append(bytes) }
        }
        #expect(!stored.isEmpty, "the database was read", sourceLocation: sourceLocation)
        for secret in secrets where !secret.isEmpty {
            #expect(!lines.contains { $0.contains(secret) }, "a log line holds a secret of the channel's config", sourceLocation: sourceLocation)
            #expect(stored.range(of: Data(secret.utf8)) == nil, "the database holds a secret of the channel's config", sourceLocation: sourceLocation)
        }
    }

    @Test("a bad token and an unknown chat end rejected at the first attempt; a rate limit is retried (after its retry_after) and then delivered once",
          arguments: BuiltInChannel.allCases)
    func refusals(_ kind: BuiltInChannel) async throws {
        let service = try await ChannelService.start(kind)
        defer { service.stop() }
        let words = service.expectedReasons
        let finished: Set = ["delivered", "rejected", "failed"]

        // Credentials the service refuses: rejected for good, not retried (another try would be refused the same).
        let wrong = service.setup(.wrong)
        let logs = MemoryLogHandler()
        try await withTestGateway(config: service.soul([("reporter", wrong.destination)]), retryPolicy: ChannelService.quickRetries,
                                  log: Log(minimum: .debug, handler: logs), gatewayConfig: wrong.gatewayConfig) { gw in
            let token = "bad-credentials-\(UUID().uuidString.prefix(8))"
            let run = try #require(try await gw.runAgent("reporter", input: token)["id"]?.stringValue)
            let output = try #require(try await gw.outputs(ofRun: run, until: finished).first)
            #expect(output["state"] == "rejected" && output["attempts"] == 1, "\(output)")
            #expect(output["channel"]?.stringValue == kind.rawValue && output["destination"]?.stringValue == Self.shown(wrong.destination))
            #expect(output["delivered_at"] == .null)
            Self.expectReason(output, carries: words.badCredentials, hiding: service.secrets)
            #expect(try await service.receivedCount(containing: token) == 0)
            #expect(logs.records.contains { $0.message.contains("refused send") && $0.metadata["run_id"] == run && $0.metadata["channel"] == kind.rawValue },
                    "the refusal's line names its run and channel as fields")
            Self.expectNoSecretAtRest(gw, logs: logs, hiding: service.secrets)
        }

        let setup = service.setup()
        let soul = service.soul([("reporter", setup.destination), ("misaddressed", setup.unknownDestination)])
        let goodLogs = MemoryLogHandler()
        try await withTestGateway(config: soul, retryPolicy: ChannelService.quickRetries, log: Log(minimum: .debug, handler: goodLogs),
                                  gatewayConfig: setup.gatewayConfig) { gw in
            // A chat, channel, mailbox or space the service does not know: rejected with its answer.
            try await service.prepareUnknownDestination()
            let lost = try #require(try await gw.runAgent("misaddressed", input: "unknown-destination")["id"]?.stringValue)
            let refused = try #require(try await gw.outputs(ofRun: lost, until: finished).first)
            #expect(refused["state"] == "rejected" && refused["attempts"] == 1, "\(refused)")
            #expect(refused["destination"]?.stringValue == Self.shown(setup.unknownDestination) && refused["delivered_at"] == .null)
            Self.expectReason(refused, carries: words.unknownDestination, hiding: service.secrets)

            // The service's rate limit: tried again (not before the wait it asked for), then delivered, exactly once.
            let retryAfter = 2
            try await service.scriptRateLimit(retryAfter: retryAfter)
            let token = "rate-limited-\(UUID().uuidString.prefix(8))"
            let run = try #require(try await gw.runAgent("reporter", input: token)["id"]?.stringValue)
            let output = try #require(try await gw.outputs(ofRun: run, until: finished).first)
            #expect(output["state"] == "delivered" && output["attempts"] == 2, "\(output)")
            #expect(output["delivered_at"]?.stringValue != nil)
            // The refused attempt's reason stays on the run after the delivery: why it took two.
            Self.expectReason(output, carries: words.rateLimited, hiding: service.secrets)
            #expect(try await service.receivedCount(containing: token) == 1)
            if service.announcesRetryAfter, let times = try await service.requestTimes(), times.count >= 2 {
                let waited = times[times.count - 1] - times[times.count - 2]
                #expect(waited >= Double(retryAfter), "the retry came \(waited) s after the 429 that asked for \(retryAfter) s")
            }
            Self.expectNoSecretAtRest(gw, logs: goodLogs, hiding: service.secrets)
        }
    }
}
