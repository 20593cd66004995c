import Foundation
import GatewayTestSupport
import JSON
import Testing

/// Each built-in channel through the real gateway, from a SOUL.yaml agent, while its service is down for 30 s of
/// real time: runs end meanwhile, their outputs wait in the durable hand-off, and once the service is back each is
/// delivered exactly once. The channels' cases run side by side, so the whole costs one outage, not eight.
@Suite("Channel outage")
struct ChannelOutageTests {
    static let outage: Duration = .seconds(30)

    @Test("down for 30 s: runs end meanwhile, their outputs wait with the reason, and once the service is back each is delivered exactly once",
          arguments: BuiltInChannel.allCases)
    func serviceDownThirtySeconds(_ kind: BuiltInChannel) async throws {
        // The services' own pacing (Teams' 4 a second, Discord's bucket) is off: once the service is back the four
        // waiting outputs go at once, and a pacing refusal would replace the outage as the last reason recorded.
        let service = try await ChannelService.start(kind, limits: .off)
        defer { service.stop() }
        let setup = service.setup()
        let soul = service.soul([("reporter", setup.destination)])
        try await withTestGateway(config: soul, retryPolicy: ChannelService.quickRetries, gatewayConfig: setup.gatewayConfig) { gw in
            // Up: the path works before the outage.
            let early = "before-the-outage-\(kind.rawValue)-\(UUID().uuidString.prefix(8))"
            let first = try #require(try await gw.runAgent("reporter", input: early)["id"]?.stringValue)
            #expect(try await gw.outputs(ofRun: first, until: ["delivered"]).first?["state"] == "delivered")
            #expect(try await service.receivedCount(containing: early) == 1)

            service.goDown()
            let wentDown = ContinuousClock.now
            let tokens = (0..<4).map { "outage-\(kind.rawValue)-\($0)-\(UUID().uuidString.prefix(8))" }
            var runs: [String] = []
            for token in tokens {
                let run = try await gw.runAgent("reporter", input: token)
                #expect(run["status"] == "succeeded", "a run ends whether or not its channel's service answers: \(run)")
                runs.append(try #require(run["id"]?.stringValue))
            }
            // Each output waits, attempted again and again, with why it did not go.
            let waiting = runs
            #expect(try await eventually(timeout: .seconds(25)) {
                var all: [JSONValue] = []
                for run in waiting { all += try await gw.outputs(ofRun: run) }
                return all.count == waiting.count && all.allSatisfy { ($0["attempts"]?.numberValue ?? 0) >= 2 }
            })
            for run in runs {
                let output = try #require(try await gw.outputs(ofRun: run).first)
                #expect(output["state"] == "pending" && output["channel"]?.stringValue == kind.rawValue, "\(output)")
                #expect(output["destination"]?.stringValue == ChannelRefusalTests.shown(setup.destination) && output["delivered_at"] == .null)
                #expect(output["last_reason"]?.stringValue?.contains("could not reach") == true, "\(output)")
            }

            try await Task.sleep(until: wentDown + Self.outage)
            for run in runs { #expect(try await gw.outputs(ofRun: run).first?["state"] == "pending", "nothing is settled while the service is down") }
            try await service.restart()

            for run in runs {
                // Retries come at most 2 s apart; the minute is for a loaded machine restarting dozens of stand-ins.
                let output = try #require(try await gw.outputs(ofRun: run, until: ["delivered", "rejected", "failed"], timeout: .seconds(60)).first)
                #expect(output["state"] == "delivered", "\(output)")
                #expect(output["delivered_at"]?.stringValue != nil && (output["attempts"]?.numberValue ?? 0) >= 3, "\(output)")
                // The reason of the last refused attempt stays on the run: what the outage looked like.
                let reason = output["last_reason"]?.stringValue ?? ""
                #expect(reason.contains("could not reach"), "\(output)")
                for secret in service.secrets { #expect(!reason.contains(secret), "a secret in the reason: \(reason)") }
            }
            for token in tokens { #expect(try await service.receivedCount(containing: token) == 1, "\(token) delivered exactly once") }
            // The stand-in came back with an empty record: the output delivered before the outage was not sent again.
            #expect(try await service.receivedCount(containing: early) == 0)
        }
    }
}
