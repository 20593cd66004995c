import Foundation
import JSON
import LLM

/// A tool an LLM run may call in-process (the phone builtins).
public protocol AgentTool: Sendable {
    var spec: ToolSpec { get }
    /// The tool's result as the model reads it (JSON text); a failure is `error: <message>`, and the run goes on.
    func call(_ arguments: JSONValue, run: ToolRunContext) async -> String
}

/// Who a tool call acts for.
public struct ToolRunContext: Sendable {
    public var runID: String
    public var sessionID: String
    public var agentID: String
    public var subject: String
}

/// What an LLM run needs from the gateway besides the model: tools, approvals, facts and progress.
public struct LLMRunEnvironment: Sendable {
    /// Every in-process tool by name; an agent is offered those its `builtins` allow.
    public var tools: [String: any AgentTool] = [:]
    /// Asks the run's person to approve a tool call (`confirm_tools`) under `callID`; true means approved.
    public var approve: (@Sendable (_ callID: String, _ call: ToolCall, _ run: ToolRunContext, _ timeout: Duration) async -> Bool)?
    /// The person's remembered facts, newest first, for the memory-and-preferences block.
    public var facts: (@Sendable (_ subject: String) async -> [String])?
    /// Told about each tool call, so a Live Activity can count the steps.
    public var toolCalled: (@Sendable (_ sessionID: String, _ tool: String) async -> Void)?
    /// Told about each retry of a model call (a `retry` event of the run): the provider's status, the attempt
    /// that failed and the wait. Never the prompt or the answer.
    public var providerRetried: (@Sendable (_ run: ToolRunContext, _ retry: ProviderRetry) async -> Void)?

    public init() {}
}

/// Voice mode (the watch, Siri): a display reply and a short spoken one.
public enum VoiceReply {
    static let marker = "SPOKEN:"
    static let instruction = """
        The person is listening to this answer (voice mode). Write your answer as usual, then end with one line that \
        starts with "SPOKEN:" followed by one or two short sentences to be read aloud, without markdown.
        """

    /// Splits a model's voice-mode answer at its `SPOKEN:` line; without one, the spoken version is the reply's start.
    public static func split(_ text: String) -> (display: String, spoken: String) {
        if let range = text.range(of: marker, options: .backwards) {
            let display = text[..<range.lowerBound].trimmingCharacters(in: .whitespacesAndNewlines)
            let spoken = text[range.upperBound...].trimmingCharacters(in: .whitespacesAndNewlines)
            if !spoken.isEmpty { return (display.isEmpty ? spoken : display, spoken) }
        }
        return (text, shorten(text))
    }

    /// The first sentence or two, without markdown, at most about 240 characters.
    public static func shorten(_ text: String) -> String {
        let plain = text.replacingOccurrences(of: "**", with: "").replacingOccurrences(of: "#", with: "").replacingOccurrences(of: "`", with: "")
            .split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }.joined(separator: " ")
        var result = ""
        for sentence in plain.split(separator: ".", omittingEmptySubsequences: true) {
            let next = result + sentence.trimmingCharacters(in: .whitespaces) + "."
            if !result.isEmpty && next.count > 240 { break }
            result = next + " "
            if result.count > 120 { break }
        }
        let trimmed = result.trimmingCharacters(in: .whitespaces)
        return trimmed.isEmpty ? String(plain.prefix(240)) : String(trimmed.prefix(240))
    }
}

/// Runs a Soulacy agent that is a prompt: the system message (persona, `system_prompt`, the person's facts),
/// the input, and up to `max_turns` model turns with the phone tools it is allowed.
public struct LLMRunner: AgentRunner {
    public static let maximumTurnsCeiling = 50
    let agent: AgentConfig
    let settings: LLMSettings
    let providers: LLMProviders
    let environment: LLMRunEnvironment

    public init(agent: AgentConfig, providers: LLMProviders, environment: LLMRunEnvironment = LLMRunEnvironment()) {
        self.agent = agent
        if case .llm(let settings) = agent.runner { self.settings = settings } else { self.settings = LLMSettings() }
        self.providers = providers
        self.environment = environment
    }

    /// The tools this agent is offered: the phone builtins only when named exactly (Soulacy personal's gate).
    var offeredTools: [any AgentTool] {
        guard let names = agent.builtins else { return [] }
        return names.compactMap { environment.tools[$0] }
    }

    /// The user text Soulacy sends for each kind of start.
    static func userText(input: String, trigger: RunTrigger, regionLabel: String? = nil) -> String {
        switch trigger {
        case .location:
            // The crossing as the original words it: `__trigger:location__ enter Home`.
            let crossing = try? JSONCoding.decode(JSONValue.self, from: Data(input.utf8))
            let label = regionLabel ?? crossing?["region_name"]?.stringValue ?? "the region"
            return "__trigger:location__ \(crossing?["event"]?.stringValue ?? "enter") \(label)"
        default:
            // Scheduled and manual starts have no input: Soulacy's `__trigger:cron__`, `__trigger:manual__`, ….
            return input.isEmpty ? "__trigger:\(trigger.soulacyName)__" : input
        }
    }

    func systemMessage(subject: String, trigger: RunTrigger) async -> String {
        var sections: [String] = []
        let prefix = Self.personaPrefix(agent.persona)
        if !prefix.isEmpty { sections.append(prefix) }
        if !agent.systemPrompt.isEmpty { sections.append(agent.systemPrompt) }
        // Facts go to runs on a person's behalf; scheduled runs act for nobody in particular.
        let personal = !trigger.isScheduled
        if personal, agent.adaptiveMemory != false, let facts = await environment.facts?(subject), !facts.isEmpty {
            sections.append("### 🧠 MEMORY & PREFERENCES\n" + facts.prefix(5).map { "- \($0)" }.joined(separator: "\n"))
        }
        return sections.joined(separator: "\n\n")
    }

    static func personaPrefix(_ p: Persona) -> String {
        var blocks: [String] = []
        var identity: [String] = []
        if let role = p.role { identity.append("You are \(role).") }
        if !p.expertise.isEmpty { identity.append("Expertise: \(p.expertise.joined(separator: ", ")).") }
        if let audience = p.audience { identity.append("Audience: \(audience).") }
        if let backstory = p.backstory { identity.append(backstory) }
        if !identity.isEmpty { blocks.append("## Identity\n" + identity.joined(separator: "\n")) }
        var style: [String] = []
        if let tone = p.tone { style.append("Tone: \(tone).") }
        if let voice = p.voice { style.append("Voice: \(voice).") }
        if !p.prefer.isEmpty { style.append("Prefer: " + p.prefer.joined(separator: "; ") + ".") }
        if !p.avoid.isEmpty { style.append("Avoid: " + p.avoid.joined(separator: "; ") + ".") }
        if !style.isEmpty { blocks.append("## Style\n" + style.joined(separator: "\n")) }
        var rules: [String] = p.must.map { "- MUST: \($0)" } + p.mustNot.map { "- MUST NOT: \($0)" }
        if let max = p.maxLength { rules.append("- Output at most \(max) words.") }
        if let min = p.minLength { rules.append("- Output at least \(min) words.") }
        if let format = p.format { rules.append("- Output format: \(format).") }
        if !rules.isEmpty { blocks.append("## Hard rules (non-negotiable)\n" + rules.joined(separator: "\n")) }
        return blocks.isEmpty ? "" : blocks.joined(separator: "\n\n") + "\n\n---"
    }

    public func run(_ request: RunRequest) async throws(RunError) -> RunResult {
        let started = ContinuousClock.now
        let outcome: Result<String, RunError> = await withTaskGroup(of: Result<String, RunError>?.self) { group in
            group.addTask { await self.conversation(request, deadline: started + request.timeout) }
            group.addTask {
                try? await Task.sleep(for: request.timeout)
                return Task.isCancelled ? nil : .failure(.timedOut(after: request.timeout))
            }
            // The caller cancelled the run (`/chat/cancel`): the conversation ends at its next step.
            var first: Result<String, RunError>?
            while let next = await group.next() {
                if let next { first = next; break }
            }
            group.cancelAll()
            return first ?? .failure(Task.isCancelled ? .cancelled : .timedOut(after: request.timeout))
        }
        switch outcome {
        case .success(let reply) where request.voice:
            let (display, spoken) = VoiceReply.split(reply)
            return RunResult(reply: display, duration: ContinuousClock.now - started, spoken: spoken)
        case .success(let reply): return RunResult(reply: reply, duration: ContinuousClock.now - started)
        case .failure(let error): throw error
        }
    }

    private func conversation(_ request: RunRequest, deadline: ContinuousClock.Instant) async -> Result<String, RunError> {
        let provider: any ChatProvider
        do {
            if !settings.allowedProviders.isEmpty, !settings.allowedProviders.contains(settings.provider) {
                return .failure(.model("provider '\(settings.provider)' is not in this agent's allowed_providers (\(settings.allowedProviders.joined(separator: ", ")))"))
            }
            provider = try providers.provider(named: settings.provider, baseURL: settings.baseURL)
        } catch {
            return .failure(.model(error.description))
        }
        let model = settings.model.isEmpty ? provider.defaultModel : settings.model
        guard !model.isEmpty else { return .failure(.model("no model: set llm.model in the agent file or the provider's default model")) }
        let context = ToolRunContext(runID: request.runID, sessionID: request.sessionID, agentID: request.agentID, subject: request.subject)
        let retried = environment.providerRetried
        // Retries wait within the run's own deadline, so a run that gives up names the provider's status, not a timeout.
        var onRetry: (@Sendable (ProviderRetry) async -> Void)?
        if let retried { onRetry = { retry in await retried(context, retry) } }
        let tools = offeredTools
        var messages: [ChatMessage] = []
        var system = await systemMessage(subject: request.subject, trigger: request.trigger)
        if request.voice { system += (system.isEmpty ? "" : "\n\n") + VoiceReply.instruction }
        if !system.isEmpty { messages.append(.system(system)) }
        messages += request.history
        messages.append(.user(Self.userText(input: request.input, trigger: request.trigger, regionLabel: agent.location?.name)))
        let turns = min(agent.maxTurns <= 0 ? 10 : agent.maxTurns, Self.maximumTurnsCeiling)
        var seen: [String: String] = [:]
        for turn in 1...turns {
            if Task.isCancelled { return .failure(.cancelled) }
            var chat = ChatRequest(model: model, messages: messages)
            chat.tools = tools.map(\.spec)
            chat.temperature = settings.temperature
            chat.topP = settings.topP
            chat.maxTokens = settings.maxTokens
            chat.toolChoice = turn == 1 && !tools.isEmpty ? settings.toolChoice : nil
            chat.timeout = request.timeout
            chat.deadline = deadline
            chat.onRetry = onRetry
            let reply: ChatReply
            do {
                // A tool-less turn streams when someone listens; a turn with tools needs the whole answer first.
                if let onText = request.onText, chat.tools.isEmpty {
                    reply = try await provider.stream(chat, onText: onText)
                } else {
                    reply = try await provider.complete(chat)
                }
            } catch {
                // The provider's own deadline is the run's: report it as the run's timeout.
                return .failure(error.kind == .timedOut ? .timedOut(after: request.timeout) : .model(error.description))
            }
            guard !reply.toolCalls.isEmpty else { return .success(reply.text) }
            messages.append(.assistant(reply.text, toolCalls: reply.toolCalls))
            var onlyRepeats = true
            for call in reply.toolCalls {
                let key = call.name + "\u{0}" + call.arguments.serialized()
                if let earlier = seen[key] {
                    messages.append(.toolResult(earlier + "\n(This is the earlier result of the same call; do not repeat it.)", for: call))
                    continue
                }
                onlyRepeats = false
                let result = await callTool(call, tools: tools, context: context, timeout: request.timeout, onToolConfirm: request.onToolConfirm)
                seen[key] = result
                messages.append(.toolResult(result, for: call))
            }
            if onlyRepeats { break }
        }
        // Out of turns (or only repeats): one tool-free call for the answer, as Soulacy does.
        var final = ChatRequest(model: model, messages: messages)
        final.temperature = settings.temperature
        final.maxTokens = settings.maxTokens
        final.timeout = request.timeout
        final.deadline = deadline
        final.onRetry = onRetry
        do {
            let reply = try await provider.complete(final)
            return .success(reply.text.isEmpty ? "(no final response produced)" : reply.text)
        } catch {
            return .failure(error.kind == .timedOut ? .timedOut(after: request.timeout) : .model(error.description))
        }
    }

    private func callTool(_ call: ToolCall, tools: [any AgentTool], context: ToolRunContext, timeout: Duration,
                          onToolConfirm: (@Sendable (String, ToolCall) -> Void)?) async -> String {
        guard let tool = tools.first(where: { $0.spec.name == call.name }) else {
            return "error: there is no tool \"\(call.name)\" for this agent"
        }
        await environment.toolCalled?(context.sessionID, call.name)
        let gated = agent.confirmTools.contains(call.name) || agent.confirmTools.contains("*") || agent.confirmTools.contains("all")
        if gated {
            // The seed's override: a background run waits for a phone decision rather than failing closed.
            let callID = "call_" + UUID().uuidString.lowercased()
            onToolConfirm?(callID, call)
            let approved = await environment.approve?(callID, call, context, timeout) ?? false
            guard approved else { return "error: tool \"\(call.name)\" was denied by the user" }
        }
        return await tool.call(call.arguments, run: context)
    }
}
