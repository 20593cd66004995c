import APIKit
import ChannelAPI
import ChannelTesting
import Foundation
import Gateway
import GatewayTestSupport
import Lifecycle
import Synchronization
import Testing

/// A channel plugin brings its kind of channel, its services and its routes in one registration.
@Suite("Gateway plugins")
struct GatewayPluginTests {
    final class Events: Sendable {
        let list = Mutex<[String]>([])
        func add(_ event: String) { list.withLock { $0.append(event) } }
        var all: [String] { list.withLock { $0 } }
    }

    struct PagerPlugin: GatewayPlugin {
        let channel: ScriptedChannel
        let events: Events

        struct Factory: ChannelFactory {
            let channel: ScriptedChannel
            var kind: String { "pager" }
            func make(_ settings: ChannelSettings) throws(ChannelConfigError) -> [any OutboundChannel] { [channel] }
        }

        var channelFactories: [any ChannelFactory] { [Factory(channel: channel)] }

        func services(_ context: GatewayPluginContext) -> [ServiceGroup.Entry] {
            [("pager connection", StartedThenStopped(start: { [events] in events.add("connected to \(context.outbound.names.joined(separator: ","))") },
                                                       stop: { [events] in events.add("disconnected") }))]
        }

        func routes(_ context: GatewayPluginContext) -> [Route] {
            [Route(.GET, "/api/v1/pager/status", role: .viewer, summary: "the pager plugin's state") { _, caller in
                .json(["channels": .array(context.outbound.names.map { .string($0) }), "caller": .string(caller.subject)])
            }]
        }
    }

    @Test("its channel is built from its channels: block and delivers an agent's output; its service runs with the gateway; its route answers authenticated callers only")
    func oneRegistration() async throws {
        let pager = ScriptedChannel(name: "pager")
        let events = Events()
        let agent = "id: page\nenabled: true\nrunner: {command: [/bin/sh, -c, 'echo disk full']}\nschedule: {output: {channel: pager}}\n"
        try await withTestGateway(config: agent, plugins: [PagerPlugin(channel: pager, events: events)],
                                  gatewayConfig: "channels:\n  pager:\n    enabled: true\n    default_output_to: on-call\n") { (gw) async throws in
            #expect(await eventually { events.all == ["connected to pager"] })
            let run = try await gw.runAgent("page", input: "")
            #expect(run["outputs"]?.arrayValue?.first?["destination"] == "on-call", "\(run)")
            #expect(await eventually { pager.sends.first?.output.parts == ["disk full"] })

            let status = try await gw.request("GET", "/api/v1/pager/status")
            #expect(status.status == 200 && status.json["channels"] == ["pager"])
            #expect(try await gw.request("GET", "/api/v1/pager/status", key: .none).status == 401)
        }
        #expect(events.all == ["connected to pager", "disconnected"])
    }
}
