import Agents
import ChannelAPI
import ChannelTesting
import Foundation
import Gateway
import GatewayTestSupport
import JSON
import Testing

/// SOULACY-AGENTS.md §6's output resolution, in the one place that does it, and through a real gateway whose
/// channels come from the gateway config's `channels:` block.
@Suite("Output router")
struct OutputRouterTests {
    /// An agent as a SOUL.yaml declares it; `chat` and `mobile` are the channels this gateway has.
    func agent(_ yaml: String, defaults: [String: DefaultOutput] = [:]) throws -> AgentConfig {
        var destinations = Gateway.destinationValidators
        destinations["chat"] = Gateway.validator(of: ScriptedChannel(name: "chat"))
        var loader = SoulConfigLoader(file: "a.yaml", destinations: destinations, defaults: defaults, environment: [:])
        return try #require(try loader.load(text: "enabled: true\nrunner: {command: [/bin/cat]}\n" + yaml).agents.first)
    }

    func router(_ defaults: [String: DefaultOutput]) -> OutputRouter {
        OutputRouter(defaults: defaults, isRegistered: { ["mobile", "chat", "mail"].contains($0) })
    }

    func destination(_ route: OutputRoute) -> RunDestination? {
        if case .deliver(let destination) = route { destination } else { nil }
    }

    @Test("a channel without to borrows its default_output_to and default_output_template; a written to and template win")
    func ruleOneBorrows() throws {
        let defaults = ["chat": DefaultOutput(to: "room-1", template: "[{agent_id}] {reply}", botName: "Herald")]
        let bare = try agent("id: a\ntrigger: cron\nschedule: {cron: '0 7 * * *', output: {channel: chat}}\n", defaults: defaults)
        let borrowed = try #require(destination(router(defaults).route(.scheduled, agent: bare)))
        #expect(borrowed.channel == "chat" && borrowed.to == "room-1" && borrowed.template == "[{agent_id}] {reply}" && borrowed.botName == "Herald")
        #expect(borrowed.fallbackFrom == nil)

        let written = try agent("id: a\ntrigger: cron\nschedule: {cron: '0 7 * * *', output: {channel: chat, to: room-9, template: '{reply}!'}}\n")
        let own = try #require(destination(router(defaults).route(.scheduled, agent: written)))
        #expect(own.to == "room-9" && own.template == "{reply}!")
    }

    @Test("no output: the first of the agent's channels with a default; then the only default anywhere, marked as a fallback")
    func ruleTwoAndThree() throws {
        let viaChannels = try agent("id: a\ntrigger: cron\nchannels: [mobile, chat]\nschedule: {cron: '0 7 * * *'}\n")
        let defaults = ["chat": DefaultOutput(to: "room-1"), "mail": DefaultOutput(to: "me@example.org")]
        let second = try #require(destination(router(defaults).route(.scheduled, agent: viaChannels)))
        #expect(second.channel == "chat" && second.to == "room-1" && second.fallbackFrom == nil)

        let orphan = try agent("id: a\ntrigger: cron\nschedule: {cron: '0 7 * * *'}\n")
        let fallback = try #require(destination(router(["mail": DefaultOutput(to: "me@example.org")]).route(.scheduled, agent: orphan)))
        #expect(fallback.channel == "mail" && fallback.to == "me@example.org" && fallback.fallbackFrom == .noOutputConfigured)
        // Two defaults are ambiguous: the run records why nothing went out.
        #expect(router(defaults).route(.scheduled, agent: orphan) == .undelivered(.noOutputConfigured))
        #expect(router([:]).route(.scheduled, agent: orphan) == .undelivered(.noOutputConfigured))
    }

    @Test("a channel the gateway lacks falls back to the only default, else is recorded as adapter_not_registered; a channel without to and without a default is incomplete")
    func unregisteredAndIncomplete() throws {
        let telegram = try agent("id: a\ntrigger: cron\nschedule: {cron: '0 7 * * *', output: {channel: telegram, to: '123'}}\n")
        let only = ["chat": DefaultOutput(to: "room-1")]
        #expect(destination(router(only).route(.scheduled, agent: telegram))?.fallbackFrom == .adapterNotRegistered(channel: "telegram"))
        #expect(router([:]).route(.scheduled, agent: telegram) == .undelivered(.adapterNotRegistered(channel: "telegram")))
        #expect(OutputProblem.adapterNotRegistered(channel: "telegram").code == "adapter_not_registered")

        // A default of a channel that is not registered does not count.
        let unregistered = OutputRouter(defaults: ["telegram": DefaultOutput(to: "1")], isRegistered: { $0 == "mobile" })
        #expect(unregistered.defaults.isEmpty)
    }

    @Test("a manual run delivers as a fire only on the schedule surface; otherwise only a target that resolves without the fallback, else the gateway's own choice")
    func manualRuns() throws {
        let defaults = ["chat": DefaultOutput(to: "room-1")]
        let phone = RunDestination(channel: "mobile", to: "user:alice")
        // trigger: cron puts the agent on the schedule surface: the fallback applies.
        let scheduled = try agent("id: a\ntrigger: cron\nschedule: {cron: '0 7 * * *'}\n")
        #expect(destination(router(defaults).route(.manual(otherwise: phone), agent: scheduled))?.channel == "chat")
        // No trigger, no target of its own: the caller's phones, not the fallback.
        let asked = try agent("id: a\n")
        #expect(destination(router(defaults).route(.manual(otherwise: phone), agent: asked)) == phone)
        #expect(router(defaults).route(.manual(), agent: asked) == .replyOnly)
        // A declared output that does not resolve is recorded, not sent to the phones instead.
        let declared = try agent("id: a\nschedule: {output: {channel: telegram, to: '1'}}\n")
        #expect(router(defaults).route(.manual(otherwise: phone), agent: declared) == .undelivered(.adapterNotRegistered(channel: "telegram")))
        let webhook = try agent("id: a\ntrigger: webhook\n")
        #expect(router(defaults).route(.declared(nil), agent: webhook) == .replyOnly)
        #expect(router(defaults).route(.to(RunDestination(channel: "sms", to: "1")), agent: webhook) == .undelivered(.adapterNotRegistered(channel: "sms")))
    }

    @Test("the loader takes a channel without to when that channel has a default, and otherwise names default_output_to in its error")
    func loaderKnowsDefaults() throws {
        let yaml = "id: a\ntrigger: cron\nschedule: {cron: '0 7 * * *', output: {channel: chat}}\n"
        #expect(try agent(yaml, defaults: ["chat": DefaultOutput(to: "room-1")]).schedule?.output?.channel == "chat")
        var loader = SoulConfigLoader(file: "a.yaml", destinations: ["chat": Gateway.validator(of: ScriptedChannel(name: "chat"))], environment: [:])
        #expect { try loader.load(text: "enabled: true\nrunner: {command: [/bin/cat]}\n" + yaml) } throws: { error in
            "\(error)".contains("needs both channel and to") && "\(error)".contains("channels.chat.default_output_to")
        }
    }

    @Test("a Teams, Google Chat or webhook block whose default_output_to is its URL defaults to its own target (an empty to), never to the URL, which carries its key")
    func urlDefaultsStayInTheConfig() throws {
        let factories = Dictionary(Gateway.builtInChannelFactories().map { ($0.kind, $0) }, uniquingKeysWith: { first, _ in first })
        let urls = ["teams": "https://example.webhook.office.com/webhookb2/key-123", "google_chat": "https://chat.googleapis.com/v1/spaces/AAA/messages?key=k&token=t",
                    "webhook": "https://hooks.example.org/in/key-123"]
        for (kind, url) in urls {
            let factory = try #require(factories[kind])
            let settings = ChannelSettings(kind: kind, values: ["enabled": .bool(true), "default_output_to": .string(url), "secret": .string("whsec_" + String(repeating: "A", count: 32))])
            #expect(try factory.defaultOutputs(settings) == [kind: DefaultOutput(to: "")], "\(kind)")
            let channel = try #require(try factory.make(settings).first)
            try channel.validate(destination: "")
            let bare = try agent("id: a\ntrigger: cron\nschedule: {cron: '0 7 * * *', output: {channel: \(kind)}}\n", defaults: [kind: DefaultOutput(to: "")])
            let routed = OutputRouter(defaults: [kind: DefaultOutput(to: "")], isRegistered: { $0 == kind })
            #expect(destination(routed.route(.scheduled, agent: bare))?.to == "", "\(kind)")
        }
        // Beside a url, a webhook's default_output_to names where its results go (an endpoint).
        let named = ChannelSettings(kind: "webhook", values: ["url": .string("https://hooks.example.org/in"), "default_output_to": .string("alerts")])
        #expect(try factories["webhook"]?.defaultOutputs(named) == ["webhook": DefaultOutput(to: "alerts")])
    }

    @Test("an agent's channels: a configured one that carries messages in raises no note; a send-only one and an absent one are said")
    func channelsNotRunHere() throws {
        var destinations = Gateway.destinationValidators
        for name in ["telegram", "slack"] { destinations[name] = Gateway.validator(of: ScriptedChannel(name: name)) }
        var loader = SoulConfigLoader(file: "a.yaml", destinations: destinations, environment: [:])
        let agent = try #require(try loader.load(text: "id: a\nenabled: true\ntrigger: channel\nchannels: [telegram, slack, discord]\nrunner: {command: [/bin/cat]}\n").agents.first)
        #expect(agent.notRunHere == ["channels discord (chat here is POST /api/v1/chat)", "messages in from slack (sent to only; inbound comes through a sidecar)"])
    }

    /// A channel kind for the gateway config, answered by a scripted channel (the default `defaultOutputs`).
    struct ChatFactory: ChannelFactory {
        let channel: ScriptedChannel
        var kind: String { "chat" }
        func make(_ settings: ChannelSettings) throws(ChannelConfigError) -> [any OutboundChannel] { [channel] }
    }

    @Test("through the gateway: default_output_to from the config fills a bare channel, catches an output to a channel it lacks with a notice, and a bad default stops the block")
    func throughTheGateway() async throws {
        let chat = ScriptedChannel(name: "chat")
        let dir = TestGateway.makeTemporaryDirectory() + "/agents"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        try "id: bare\nenabled: true\ntrigger: cron\nrunner: {command: [/bin/sh, -c, 'echo morning']}\nschedule: {cron: '0 7 * * *', output: {channel: chat}}\n"
            .write(toFile: dir + "/bare.yaml", atomically: true, encoding: .utf8)
        try "id: lost\nenabled: true\ntrigger: cron\nrunner: {command: [/bin/sh, -c, 'echo evening']}\nschedule: {cron: '0 19 * * *', output: {channel: telegram, to: '123'}}\n"
            .write(toFile: dir + "/lost.yaml", atomically: true, encoding: .utf8)
        let config = "channels:\n  chat:\n    enabled: true\n    default_output_to: room-1\n    default_output_template: '[{agent_id}] {reply}'\n"
        try await withTestGateway(agents: dir, factories: [ChatFactory(channel: chat)], gatewayConfig: config) { (gw) async throws in
            let bare = try await gw.runAgent("bare", input: "")
            #expect(bare["status"] == "succeeded")
            let outputs = try #require(bare["outputs"]?.arrayValue)
            #expect(outputs.count == 1 && outputs.first?["channel"] == "chat" && outputs.first?["destination"] == "room-1", "\(bare)")

            let lost = try await gw.runAgent("lost", input: "")
            #expect(lost["note"]?.stringValue?.hasPrefix("delivered_via_fallback: no channel 'telegram' registered") == true, "\(lost)")
            #expect(lost["outputs"]?.arrayValue?.first?["destination"] == "room-1")

            #expect(await eventually { chat.sends.count == 2 })
            let texts = Dictionary(chat.sends.map { ($0.output.agentID, $0.output.parts.first ?? "") }, uniquingKeysWith: { a, _ in a })
            #expect(texts["bare"] == "[bare] morning")
            #expect(texts["lost"]?.hasPrefix("⚠ The result of lost had no delivery target") == true)
            #expect(texts["lost"]?.hasSuffix("[lost] evening") == true)
            #expect(chat.sends.allSatisfy { $0.destination == "room-1" })
        }

        // A default the channel refuses is the block's error, named by its key; the block is left out.
        let file = TestGateway.makeTemporaryDirectory() + "/bad-default.yaml"
        try "channels:\n  chat:\n    enabled: true\n    default_output_to: 'two words'\n".write(toFile: file, atomically: true, encoding: .utf8)
        let problems = Gateway.channelProblems(config: try GatewayConfigFile.load(path: file, environment: [:]),
                                               factories: [ChatFactory(channel: ScriptedChannel(name: "chat"))], built: { _ in })
        #expect(problems.count == 1 && problems[0].contains("channels.chat.default_output_to") && problems[0].contains("without spaces"), "\(problems)")
    }
}
