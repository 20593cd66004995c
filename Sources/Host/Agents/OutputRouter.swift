import ChannelAPI

/// What a caller asks for a run's reply; the router turns it into a destination.
public enum RunOutput: Sendable, Equatable {
    /// A schedule's fire (cron, one-shot, a missed fire): the agent's `schedule.output` with every rule of
    /// SOULACY-AGENTS.md §6, the fallback to the only channel default included; a result that goes nowhere says why.
    case scheduled
    /// A manual run (`/trigger`, `/run`): delivered as a fire is when the agent is on the `schedule` surface,
    /// else only to a target that resolves without the fallback (as the original's manual path). An agent that
    /// declares no output goes to `otherwise` (a gateway's own choice, such as the caller's phones) or keeps the
    /// reply with the run; one whose declared output does not resolve records why.
    case manual(otherwise: RunDestination? = nil)
    /// An output block an agent declares for another trigger (a webhook hook's `output`), resolved like
    /// `schedule.output`; none keeps the reply with the caller.
    case declared(OutputConfig?, metadata: [String: String] = [:])
    /// A destination the gateway chose itself: the phone whose crossing started the run, the chat a message came from.
    case to(RunDestination)
    /// The caller takes the reply itself (a chat, a webhook's synchronous answer).
    case replyOnly
}

/// Where a run's reply went, once resolved.
public enum OutputRoute: Sendable, Equatable {
    case deliver(RunDestination)
    /// Nothing resolved: recorded on the run (the original's `schedule.output` event reasons).
    case undelivered(OutputProblem)
    case replyOnly
}

/// Why a result went nowhere, with the original's reason codes.
public enum OutputProblem: Sendable, Equatable, CustomStringConvertible {
    case noOutputConfigured
    case incompleteOutput(channel: String)
    case adapterNotRegistered(channel: String)

    public var code: String {
        switch self {
        case .noOutputConfigured: "no_output_configured"
        case .incompleteOutput: "incomplete_output"
        case .adapterNotRegistered: "adapter_not_registered"
        }
    }

    public var description: String {
        switch self {
        case .noOutputConfigured: "no output configured (no schedule.output, and no channel of the agent's has a default_output_to)"
        case .incompleteOutput(let channel): "the output names \(channel) without a to, and channels.\(channel) has no default_output_to"
        case .adapterNotRegistered(let channel): "no channel '\(channel)' registered"
        }
    }
}

/// The one place a run's reply finds its destination: the agent's output block, the channels this gateway has,
/// and their configured defaults, with the original's rules (SOULACY-AGENTS.md §6):
/// 1. the output block, trimmed; a `channel` without `to` borrows that channel's `default_output_to` (and its
///    `default_output_template` when the block has no template);
/// 2. failing that, the first of the agent's `channels` that has a default;
/// 3. if nothing resolves, or the channel is not registered, and exactly one channel has a default, there, with a
///    "had no delivery target" notice in front;
/// 4. otherwise the run records why nothing was sent.
public struct OutputRouter: Sendable {
    /// Configured defaults of registered channels, by channel id.
    public let defaults: [String: DefaultOutput]
    let isRegistered: @Sendable (String) -> Bool

    public init(defaults: [String: DefaultOutput], isRegistered: @escaping @Sendable (String) -> Bool) {
        self.isRegistered = isRegistered
        self.defaults = defaults.filter { isRegistered($0.key) }
    }

    public func route(_ request: RunOutput, agent: AgentConfig) -> OutputRoute {
        switch request {
        case .replyOnly:
            return .replyOnly
        case .to(let destination):
            return isRegistered(destination.channel) ? .deliver(destination) : .undelivered(.adapterNotRegistered(channel: destination.channel))
        case .scheduled:
            return resolve(agent.schedule?.output, agent: agent, metadata: [:], fallback: true)
        case .declared(let output, let metadata):
            guard output != nil else { return .replyOnly }
            return resolve(output, agent: agent, metadata: metadata, fallback: true)
        case .manual(let otherwise):
            let onSchedule = agent.effectiveSurfaces.contains("schedule")
            let route = resolve(agent.schedule?.output, agent: agent, metadata: [:], fallback: onSchedule)
            if case .deliver = route { return route }
            // An output the agent declares that went nowhere is said on the run, never quietly redirected.
            guard agent.schedule?.output == nil else { return route }
            if let otherwise { return .deliver(otherwise) }
            return onSchedule ? route : .replyOnly
        }
    }

    private func resolve(_ output: OutputConfig?, agent: AgentConfig, metadata: [String: String], fallback: Bool) -> OutputRoute {
        let problem: OutputProblem
        if let output, let destination = destination(output, metadata: metadata) {
            if isRegistered(destination.channel) { return .deliver(destination) }
            problem = .adapterNotRegistered(channel: destination.channel)
        } else if let channel = agent.channels.first(where: { defaults[$0] != nil }), let own = defaults[channel] {
            return .deliver(RunDestination(channel: channel, to: own.to, template: own.template, botName: own.botName, metadata: metadata))
        } else if let output {
            problem = .incompleteOutput(channel: output.channel)
        } else {
            problem = .noOutputConfigured
        }
        guard fallback, let only = soleDefault else { return .undelivered(problem) }
        var destination = RunDestination(channel: only.channel, to: only.output.to, template: only.output.template, botName: only.output.botName,
                                         metadata: metadata)
        destination.fallbackFrom = problem
        return .deliver(destination)
    }

    /// Rule 1: the block as written, or its channel's default filling what it leaves out.
    private func destination(_ output: OutputConfig, metadata: [String: String]) -> RunDestination? {
        let channel = output.channel.trimmingCharacters(in: .whitespaces)
        var to = output.to.trimmingCharacters(in: .whitespaces)
        var template = output.template
        var botName = output.botName
        var borrowed = false
        if to.isEmpty, let own = defaults[channel] {
            // A default may itself be empty: the channel's own configured target (a Teams block's webhook).
            (to, borrowed) = (own.to, true)
            template = template ?? own.template
            botName = botName ?? own.botName
        }
        guard !channel.isEmpty, !to.isEmpty || borrowed else { return nil }
        return RunDestination(channel: channel, to: to, template: template, botName: botName, metadata: metadata)
    }

    /// Rule 3's channel: the only registered one with a default.
    var soleDefault: (channel: String, output: DefaultOutput)? {
        defaults.count == 1 ? defaults.first.map { ($0.key, $0.value) } : nil
    }
}
