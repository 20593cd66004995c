import ChannelAPI
import Foundation
import Gateway
import GatewayTestSupport
import Synchronization
import Testing

/// A channel an embedder adds: it keeps what it is given (in memory) and takes only https destinations.
final class WebhookChannel: Channel, Sendable {
    let name = "webhook"
    private let received = Mutex<[(String, Output)]>([])
    var deliveries: [(String, Output)] { received.withLock { $0 } }

    func validate(destination: String) throws(DestinationError) {
        guard destination.hasPrefix("https://") else { throw .invalid("webhook destination '\(destination)' must be an https:// URL") }
    }

    func deliver(_ output: Output, to destination: String) async throws -> DeliveryReceipt {
        received.withLock { $0.append((destination, output)) }
        return DeliveryReceipt(channel: name, deliveryID: "hook_\(deliveries.count)", recipientCount: 1)
    }
}

@Suite("Settings and embedding")
struct SettingsAndEmbeddingTests {
    @Test("SOULACY_* settings are read once from a dictionary: defaults, values, and errors that name the variable")
    func settings() throws {
        let defaults = try GatewaySettings.fromEnvironment([:])
        #expect(defaults.autoTLS && defaults.watchAgentFiles && defaults.publicURL == nil && defaults.longPoll == .seconds(25) && defaults.lanListen == nil)
        let set = try GatewaySettings.fromEnvironment([
            "SOULACY_PUBLIC_URL": "https://soulacy.example.com/", "SOULACY_TLS": "off", "SOULACY_LAN_LISTEN": "[::]:8443",
            "SOULACY_DB_MAX_MB": "64", "SOULACY_LONG_POLL_SECONDS": "5", "SOULACY_AGENT_WATCH": "no", "SOULACY_APPROVAL_TIMEOUT_SECONDS": "30",
            "SOULACY_HTTP_THREADS": "12",
        ])
        #expect(defaults.httpThreads >= 4 && set.httpThreads == 12)
        #expect(set.publicURL == "https://soulacy.example.com" && !set.autoTLS && set.lanListen?.host == "::" && set.lanListen?.port == 8443)
        #expect(set.databaseMaximumBytes == 64 * 1_048_576 && set.longPoll == .seconds(5) && !set.watchAgentFiles && set.approvalTimeout == 30)
        for (variable, value) in [("SOULACY_DB_MAX_MB", "lots"), ("SOULACY_TLS", "maybe"), ("SOULACY_LAN_LISTEN", "8443"),
                                  ("SOULACY_PUBLIC_URL", "soulacy.example.com"), ("SOULACY_LONG_POLL_SECONDS", "-1"),
                                  ("SOULACY_HTTP_THREADS", "0"), ("SOULACY_HTTP_THREADS", "1000")] {
            #expect(throws: GatewaySettings.Invalid.self) { _ = try GatewaySettings.fromEnvironment([variable: value]) }
            do { _ = try GatewaySettings.fromEnvironment([variable: value]) } catch {
                #expect(error.variable == variable && error.description.contains(value), "\(error)")
            }
        }
    }

    @Test("a gateway with a malformed setting does not start, and says which variable")
    func refusesBadSettings() async throws {
        await #expect { try await TestGateway.start(environment: ["SOULACY_DB_MAX_MB": "lots"]) } throws: { error in
            "\(error)".contains("SOULACY_DB_MAX_MB") && "\(error)".contains("lots")
        }
    }

    @Test("an embedder's channel takes outputs beside mobile; its destinations are checked when the agent files load")
    func extraChannel() async throws {
        let hook = WebhookChannel()
        let config = """
            id: echo
            enabled: true
            trigger: internal
            runner: {command: [/bin/cat]}
            schedule: {output: {channel: webhook, to: "https://hooks.example/soulacy"}}
            """
        try await withTestGateway(config: config, channels: [hook]) { (gw) async throws in
            _ = try await gw.runAgent("echo", input: "to the hook")
            #expect(await eventually { hook.deliveries.count == 1 })
            #expect(hook.deliveries.first?.0 == "https://hooks.example/soulacy" && hook.deliveries.first?.1.parts == ["to the hook"])
        }
        // A destination the channel refuses parks the agent (Soulacy's validation tier), with the channel's words.
        let wrong = config.replacingOccurrences(of: "https://hooks.example/soulacy", with: "http://plain.example")
        try await withTestGateway(config: wrong, channels: [WebhookChannel()]) { (gw) async throws in
            let parked = try #require(gw.gateway.config.agents.first { $0.id == "echo" })
            #expect(parked.disabledReason?.contains("must be an https:// URL") == true, "\(String(describing: parked.disabledReason))")
            #expect(try await gw.request("POST", "/api/v1/agents/echo/run", json: ["input": "x"]).status == 409)
        }
    }
}
