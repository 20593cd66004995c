import ChannelAPI
import Crypto
import Foundation
import JSON
import YAML

public typealias DestinationValidator = @Sendable (String) throws(DestinationError) -> Void

/// Reads agent files into a `SoulConfig`: Soulacy's form (one agent per file, fields at the top level) and this
/// gateway's older bundle (`version: 1` + `agents:`), with Soulacy's three tiers of problems
/// (SOULACY-AGENTS.md §2–3):
/// - a YAML or type error, or a missing id, **rejects the file**;
/// - a failed validation (a bad cron, an unknown trigger, a bad duration, …) **parks the agent**: it loads, and is
///   neither scheduled nor run until the file is fixed;
/// - unknown keys and questionable settings are **warnings** (errors with `strict`, like Soulacy's validator).
public struct SoulConfigLoader {
    public static let reservedAgentIDs: Set<String> = ["system"]
    public static let maximumTimeout: Duration = .seconds(24 * 3600)

    let file: String
    /// Channel names agents may deliver to, each with its destination check.
    let destinations: [String: DestinationValidator]
    /// Channels' configured `default_output_to`: an output naming one of them may leave out `to`.
    let defaults: [String: DefaultOutput]
    /// Where `secret_env` names are looked up.
    let environment: [String: String]
    /// Unknown keys are errors (Soulacy's save-time validator) instead of warnings (its loader).
    let strict: Bool
    public private(set) var problems: [ConfigError] = []
    private var rejected = false
    private var agentErrors: [String] = []

    public init(file: String, destinations: [String: DestinationValidator], defaults: [String: DefaultOutput] = [:],
                environment: [String: String] = ProcessInfo.processInfo.environment, strict: Bool = false) {
        self.file = file
        self.destinations = destinations
        self.defaults = defaults
        self.environment = environment
        self.strict = strict
    }

    /// The workspace's allowed providers (`llm.allowed_providers` of the gateway config, or
    /// `SOULACY_LLM_ALLOWED_PROVIDERS`, comma-separated); nil when none is set.
    static func workspaceProviders(_ environment: [String: String]) -> [String]? {
        let list = (environment["SOULACY_LLM_ALLOWED_PROVIDERS"] ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        return list.isEmpty ? nil : list
    }

    // MARK: - Entry points

    /// Loads a file or an agents directory; any error (rejected file or parked agent) throws, warnings do not.
    public static func load(path: String, destinations: [String: DestinationValidator], defaults: [String: DefaultOutput] = [:],
                            environment: [String: String] = ProcessInfo.processInfo.environment, strict: Bool = false) throws(ConfigErrors) -> SoulConfig {
        let result = AgentFiles.load(path: path, destinations: destinations, defaults: defaults, environment: environment, strict: strict)
        if result.hasErrors { throw ConfigErrors(errors: result.problems.filter { $0.severity == .error }) }
        return result.config
    }

    /// Parses one file's text; any error throws (warnings are in `problems`).
    public mutating func load(text: String) throws(ConfigErrors) -> SoulConfig {
        let agents = parse(text: text)
        let errors = problems.filter { $0.severity == .error }
        if !errors.isEmpty { throw ConfigErrors(errors: errors) }
        return SoulConfig(agents: agents ?? [])
    }

    /// Parses one file's text: its agents, or nil when the file is rejected. Problems collect in `problems`.
    public mutating func parse(text: String) -> [AgentConfig]? {
        let root: YAMLNode?
        do {
            root = try YAMLParser.parse(text)
        } catch {
            problems.append(ConfigError(file: file, line: error.mark.line, column: error.mark.column, message: error.message))
            return nil
        }
        guard let root, !root.isNull else {
            reject(Mark(line: 1, column: 1), "the file is empty; an agent file needs at least an id")
            return nil
        }
        guard let entries = root.mappingEntries else {
            reject(root.mark, "an agent file must be a mapping of fields (id, name, trigger, …), got \(root.kindName)")
            return nil
        }
        let isBundle = entries.contains { $0.key == "agents" } && !entries.contains { $0.key == "id" }
        let agents = isBundle ? parseBundle(root) : parseAgent(root, bundle: false).map { [$0] } ?? []
        return rejected ? nil : agents
    }

    // MARK: - Problems

    private mutating func reject(_ mark: Mark, _ message: String) {
        rejected = true
        problems.append(ConfigError(file: file, line: mark.line, column: mark.column, message: message))
    }

    private mutating func reject(_ node: YAMLNode, _ message: String) { reject(node.mark, message) }

    /// A validation error: the agent loads but is parked.
    private mutating func invalid(_ mark: Mark, _ message: String) {
        agentErrors.append(message)
        problems.append(ConfigError(file: file, line: mark.line, column: mark.column, message: message))
    }

    private mutating func invalid(_ node: YAMLNode, _ message: String) { invalid(node.mark, message) }

    private mutating func warn(_ mark: Mark, _ message: String) {
        problems.append(ConfigError(file: file, line: mark.line, column: mark.column, message: message, severity: .warning))
    }

    private mutating func warn(_ node: YAMLNode, _ message: String) { warn(node.mark, message) }

    // MARK: - Typed reads (a mismatch rejects the file, as Soulacy's decoder does)

    /// The entries of a mapping; unknown keys warn (or, strict, fail validation) with a did-you-mean.
    private mutating func mapping(_ node: YAMLNode, _ what: String, known: [String], open: Bool = false) -> [String: YAMLNode]? {
        if node.isNull { return [:] }
        guard let entries = node.mappingEntries else {
            reject(node, "\(what) must be a mapping, got \(node.kindName)")
            return nil
        }
        var result: [String: YAMLNode] = [:]
        for entry in entries {
            result[entry.key] = entry.value
            guard !open, !known.contains(entry.key), !entry.key.hasPrefix("studio_") || what != "the agent" else { continue }
            var message = "unknown key '\(entry.key)' in \(what)"
            if let near = Self.nearest(entry.key, in: known) { message += "; did you mean '\(near)'?" }
            if strict { invalid(entry.keyMark, message) } else { warn(entry.keyMark, message + " (ignored)") }
        }
        return result
    }

    static func nearest(_ key: String, in candidates: [String]) -> String? {
        let scored = candidates.map { ($0, editDistance(key.lowercased(), $0)) }.min { $0.1 < $1.1 }
        guard let (name, distance) = scored, distance <= max(1, min(3, name.count / 3)) else { return nil }
        return name
    }

    static func editDistance(_ a: String, _ b: String) -> Int {
        let a = Array(a), b = Array(b)
        var previous = Array(0...b.count)
        for i in 1...max(a.count, 1) where !a.isEmpty {
            var current = [i] + Array(repeating: 0, count: b.count)
            for j in 1...max(b.count, 1) where !b.isEmpty {
                current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
            }
            previous = current
        }
        return a.isEmpty ? b.count : previous[b.count]
    }

    /// A string field takes any scalar's text (`version: 1.0` is "1.0", `to: 123` is "123"); null is absent.
    private mutating func string(_ node: YAMLNode?, _ what: String) -> String? {
        guard let node, !node.isNull else { return nil }
        guard case .scalar(let s) = node else {
            reject(node, "\(what) must be text, got \(node.kindName)")
            return nil
        }
        return s.value
    }

    private mutating func bool(_ node: YAMLNode?, _ what: String) -> Bool? {
        guard let node, !node.isNull else { return nil }
        guard case .scalar(let s) = node, !s.isQuoted else {
            reject(node, "\(what) must be true or false, got \(node.kindName == "a scalar" ? "a quoted string" : node.kindName)")
            return nil
        }
        switch s.value {
        case "true", "True", "TRUE", "yes", "Yes", "YES", "y", "Y", "on", "On", "ON": return true
        case "false", "False", "FALSE", "no", "No", "NO", "n", "N", "off", "Off", "OFF": return false
        default:
            reject(node, "\(what) must be true or false, got '\(s.value)'")
            return nil
        }
    }

    private mutating func integer(_ node: YAMLNode?, _ what: String) -> Int? {
        guard let node, !node.isNull else { return nil }
        guard case .scalar(let s) = node, !s.isQuoted, let value = Int(s.value.replacingOccurrences(of: "_", with: "")) else {
            reject(node, "\(what) must be a whole number, got \(node.scalarValue.map { "'\($0)'" } ?? node.kindName)")
            return nil
        }
        return value
    }

    private mutating func number(_ node: YAMLNode?, _ what: String) -> Double? {
        guard let node, !node.isNull else { return nil }
        guard case .scalar(let s) = node, !s.isQuoted, let value = Double(s.value), value.isFinite else {
            reject(node, "\(what) must be a number, got \(node.scalarValue.map { "'\($0)'" } ?? node.kindName)")
            return nil
        }
        return value
    }

    /// A list of strings; null is absent (nil), `[]` is empty.
    private mutating func strings(_ node: YAMLNode?, _ what: String) -> [String]? {
        guard let node, !node.isNull else { return nil }
        guard case .sequence(let items, _) = node else {
            reject(node, "\(what) must be a list, got \(node.kindName)")
            return nil
        }
        return items.compactMap { string($0, "each item of \(what)") }
    }

    /// Text or a list of texts (`must:` is either in real files).
    private mutating func lines(_ node: YAMLNode?, _ what: String) -> [String] {
        guard let node, !node.isNull else { return [] }
        if case .scalar = node { return string(node, what).map { [$0] } ?? [] }
        return strings(node, what) ?? []
    }

    private mutating func duration(_ node: YAMLNode?, _ what: String) -> Duration? {
        guard let node, let text = string(node, what) else { return nil }
        guard let d = DurationText.parse(text) else {
            invalid(node, "\(what) '\(text)' is not a duration such as 30s, 500ms, 5m, 1.5h or 1h30m")
            return nil
        }
        return d
    }

    // MARK: - The bundle (`version: 1` + `agents:`)

    private mutating func parseBundle(_ root: YAMLNode) -> [AgentConfig] {
        guard let top = mapping(root, "the top level", known: ["version", "agents"]) else { return [] }
        if let version = top["version"], string(version, "version") != "1" {
            reject(version, "version must be 1")
        }
        guard let list = top["agents"], case .sequence(let items, _) = list else {
            if let list = top["agents"] { reject(list, "agents must be a list, got \(list.kindName)") }
            return []
        }
        var agents: [AgentConfig] = []
        var seen: [String: Mark] = [:]
        for item in items {
            guard let agent = parseAgent(item, bundle: true) else { continue }
            if let first = seen[agent.id] {
                warn(item, "agent id '\(agent.id)' is already used at line \(first.line); the later one wins")
                agents.removeAll { $0.id == agent.id }
            }
            seen[agent.id] = item.mark
            agents.append(agent)
        }
        return agents
    }

    // MARK: - One agent

    static let topLevelKeys = [
        "id", "name", "description", "version", "tags", "labels", "kind", "routes", "surfaces", "trigger", "channels", "schedule",
        "location", "webhook", "system_prompt", "llm", "identity", "personality", "non_negotiables", "tools", "builtins", "skills",
        "knowledge", "agents", "parallel_peer_calls", "structured_peer_results", "mcp_servers", "mcp_tools", "plugin_tools",
        "system_tools", "allow_shell", "capabilities", "env", "confirm_tools", "unattended", "memory", "reasoning", "brain_memory",
        "learning", "policy", "execution", "dry_run", "hooks", "workflow", "outcome", "mission", "tool_schemas", "budget", "max_turns",
        "stream_reply", "enabled", "run_timeout", "notify_on_failure", "security",
        // This gateway's own: a program instead of a model.
        "runner",
    ]

    /// The builtins this gateway runs; any other named builtin is reported as not run here.
    public static let runnableBuiltins: Set<String> = ["mobile.list_nodes", "mobile.invoke", "mobile.command_status"]

    private mutating func parseAgent(_ node: YAMLNode, bundle: Bool) -> AgentConfig? {
        let rejectedBefore = rejected
        rejected = false
        agentErrors = []
        defer { rejected = rejected || rejectedBefore }
        guard let fields = mapping(node, "the agent", known: Self.topLevelKeys) else { return nil }
        guard let id = string(fields["id"], "id"), !id.trimmingCharacters(in: .whitespaces).isEmpty else {
            reject(fields["id"] ?? node, "id is missing; every agent needs an id")
            return nil
        }
        if let idNode = fields["id"] {
            if id.contains(where: { $0.isWhitespace || $0 == "/" || $0 == "\\" }) {
                warn(idNode, "id '\(id)' has whitespace or a path separator; it still works, but URLs must escape it")
            }
        }
        let name = string(fields["name"], "name").flatMap { $0.isEmpty ? nil : $0 } ?? id
        let description = string(fields["description"], "description")

        // The trigger; without one, the blocks say what starts the agent (the seed's bare `schedule:` is scheduled).
        var trigger: AgentConfig.Trigger = .unset
        if let triggerNode = fields["trigger"], let text = string(triggerNode, "trigger"), !text.isEmpty {
            if let known = AgentConfig.Trigger(rawValue: text), known != .unset {
                trigger = known
            } else {
                invalid(triggerNode, "trigger must be one of cron, oneshot, webhook, location, internal, channel; got '\(text)'")
            }
        } else if fields["trigger"] == nil || fields["trigger"]?.isNull == true || fields["trigger"]?.scalarValue == "" {
            let schedule = fields["schedule"]?.mappingEntries
            if schedule?.contains(where: { $0.key == "cron" }) == true { trigger = .cron }
            else if schedule?.contains(where: { $0.key == "at" }) == true { trigger = .oneshot }
            else if fields["location"] != nil { trigger = .location }
            else if fields["webhook"] != nil { trigger = .webhook }
            else if bundle { trigger = .manual }
            else { warn(node, "agent '\(id)' has no trigger; it runs only when asked (chat or the API)") }
        }

        var enabled = bundle
        if let enabledNode = fields["enabled"] {
            enabled = bool(enabledNode, "enabled") ?? false
        } else if !bundle {
            warn(node, "agent '\(id)' has no 'enabled: true', so it is off (Soulacy's default); add enabled: true to run it")
        }

        let runner = parseRunner(fields, agentID: id)
        var agent = AgentConfig(id: id, name: name, description: description, runner: runner ?? .llm(LLMSettings()), trigger: trigger, enabled: enabled)
        agent.file = file

        if let scheduleNode = fields["schedule"] { agent.schedule = parseSchedule(scheduleNode) }
        switch trigger {
        case .cron:
            let cronWritten = fields["schedule"]?.mappingEntries?.contains { $0.key == "cron" && !($0.value.scalarValue ?? "").isEmpty } == true
            if !cronWritten {
                invalid(fields["schedule"] ?? fields["trigger"] ?? node, "trigger cron needs a 'schedule' block with a cron expression")
            }
            if let schedule = agent.schedule, schedule.cron != nil, schedule.output == nil,
               fields["schedule"]?.mappingEntries?.contains(where: { $0.key == "output" }) != true {
                warn(fields["schedule"] ?? node, "agent '\(id)' has no schedule.output; its fires are recorded in the run history only")
            }
        case .oneshot:
            if fields["schedule"]?.mappingEntries?.contains(where: { $0.key == "at" && !$0.value.isNull }) != true {
                invalid(fields["schedule"] ?? fields["trigger"] ?? node, "trigger oneshot needs schedule.at, the instant to fire (RFC 3339)")
            }
        case .channel:
            if (strings(fields["channels"], "channels") ?? []).isEmpty {
                warn(fields["trigger"] ?? node, "trigger channel without 'channels'; it answers chat (POST /api/v1/chat) here")
            }
        default:
            break
        }

        if let locationNode = fields["location"] {
            if trigger == .location {
                agent.location = parseLocation(locationNode)
            } else {
                warn(locationNode, "a 'location' block needs trigger: location (this agent's trigger is \(trigger == .unset ? "not set" : trigger.rawValue)); it is ignored")
            }
        } else if trigger == .location {
            invalid(fields["trigger"] ?? node, "trigger location needs a 'location' block (latitude, longitude, radius_m, on)")
        }
        if let webhookNode = fields["webhook"] {
            let hook = parseWebhook(webhookNode)
            if trigger == .webhook { agent.webhook = hook } else {
                warn(webhookNode, "a 'webhook' block needs trigger: webhook (this agent's trigger is \(trigger == .unset ? "not set" : trigger.rawValue)); it is ignored")
            }
        } else if trigger == .webhook {
            agent.webhook = WebhookTrigger()
        }
        if let notice = fields["notify_on_failure"] { agent.notifyOnFailure = parseFailureNotice(notice) }
        if let timeoutNode = fields["run_timeout"], let d = duration(timeoutNode, "run_timeout") {
            agent.runTimeout = d > .zero ? d : nil
        }

        agent.version = string(fields["version"], "version") ?? ""
        agent.streamReply = bool(fields["stream_reply"], "stream_reply") ?? false
        agent.systemPrompt = string(fields["system_prompt"], "system_prompt") ?? ""
        agent.persona = parsePersona(fields)
        agent.builtins = strings(fields["builtins"], "builtins")
        agent.confirmTools = strings(fields["confirm_tools"], "confirm_tools") ?? []
        agent.unattended = bool(fields["unattended"], "unattended") ?? false
        agent.channels = strings(fields["channels"], "channels") ?? []
        agent.surfaces = strings(fields["surfaces"], "surfaces") ?? []
        if let maxTurns = fields["max_turns"] { agent.maxTurns = integer(maxTurns, "max_turns") ?? 0 }
        if let memoryNode = fields["memory"],
           let memory = mapping(memoryNode, "memory", known: ["read_scopes", "write_scopes", "max_tokens", "adaptive"]) {
            _ = strings(memory["read_scopes"], "memory.read_scopes")
            _ = strings(memory["write_scopes"], "memory.write_scopes")
            if let entries = integer(memory["max_tokens"], "memory.max_tokens") {
                if entries < 0 { invalid(memory["max_tokens"]!, "memory.max_tokens must not be negative, got \(entries)") }
                agent.memoryEntries = max(0, entries)
            }
            agent.adaptiveMemory = bool(memory["adaptive"], "memory.adaptive")
        }
        checkAcceptedFields(fields, agent: &agent)
        if case .llm(let settings) = agent.runner, !settings.allowedProviders.isEmpty, !settings.allowedProviders.contains(settings.provider) {
            invalid(fields["llm"] ?? node, "llm.provider '\(settings.provider)' is not in allowed_providers (\(settings.allowedProviders.joined(separator: ", ")))")
        } else if case .llm(let settings) = agent.runner, settings.allowedProviders.isEmpty, !settings.provider.isEmpty,
                  let workspace = Self.workspaceProviders(environment), !workspace.contains(settings.provider) {
            // The gateway config's llm.allowed_providers (SOULACY_LLM_ALLOWED_PROVIDERS) for agents without a list of their own.
            invalid(fields["llm"]?.mappingEntries?.first(where: { $0.key == "provider" })?.value ?? fields["llm"] ?? node,
                    "llm.provider '\(settings.provider)' is not in the gateway config's llm.allowed_providers (\(workspace.joined(separator: ", ")))")
        }

        if Self.reservedAgentIDs.contains(id) {
            // The System agent: always on, on the gateway's own channel only, never shown to phones.
            agent.enabled = true
            agent.channels = ["http"]
            if agent.confirmTools.isEmpty { agent.confirmTools = ["*"] }
        }
        if rejected { return nil }
        if let first = agentErrors.first { agent.disabledReason = first }
        return agent
    }

    private mutating func parseRunner(_ fields: [String: YAMLNode], agentID: String) -> AgentRunnerConfig? {
        let llm = fields["llm"].flatMap { parseLLM($0) } ?? LLMSettings()
        guard let node = fields["runner"] else { return .llm(llm) }
        if let llmNode = fields["llm"] { warn(llmNode, "agent '\(agentID)' has a runner; its llm block is not used") }
        guard let runner = mapping(node, "runner", known: ["type", "command", "env", "timeout", "working_directory"]) else { return nil }
        if let typeNode = runner["type"], let type = string(typeNode, "runner type"), type != "command" {
            invalid(typeNode, "runner type must be 'command', got '\(type)'")
        }
        var argv: [String] = []
        if let command = runner["command"] {
            if case .sequence(let items, _) = command {
                for item in items { if let s = string(item, "each command argument") { argv.append(s) } }
                if items.isEmpty { invalid(command, "command must name a program: [\"/usr/bin/program\", \"arg\"]") }
            } else {
                reject(command, "command must be a list of arguments, for example [\"/bin/sh\", \"-c\", \"echo hi\"]")
            }
        } else {
            invalid(node, "runner is missing 'command'")
        }
        var environment: [String: String] = [:]
        if let envNode = runner["env"] {
            if let entries = envNode.mappingEntries {
                for entry in entries {
                    if entry.key.isEmpty || entry.key.contains("=") || entry.key.contains(where: \.isWhitespace) {
                        invalid(entry.keyMark, "environment variable name '\(entry.key)' is not valid")
                    } else if let value = string(entry.value, "env \(entry.key)") {
                        environment[entry.key] = value
                    }
                }
            } else {
                reject(envNode, "env must be a mapping of NAME: value")
            }
        }
        var timeout = Duration.seconds(300)
        if let timeoutNode = runner["timeout"], let d = duration(timeoutNode, "timeout") {
            if d < .seconds(1) || d > Self.maximumTimeout {
                invalid(timeoutNode, "timeout must be from 1s to \(DurationText.format(Self.maximumTimeout)), got \(timeoutNode.scalarValue ?? "")")
            } else {
                timeout = d
            }
        }
        let directory = string(runner["working_directory"], "working_directory")
        return .command(CommandRunnerConfig(argv: argv, environment: environment, timeout: timeout, workingDirectory: directory))
    }

    private mutating func parseLLM(_ node: YAMLNode) -> LLMSettings? {
        guard let fields = mapping(node, "llm", known: [
            "provider", "model", "temperature", "top_p", "presence_penalty", "frequency_penalty", "reasoning_effort", "response_format",
            "max_tokens", "base_url", "tool_choice", "allowed_providers", "output_schema", "allowed_models", "data_classification",
        ]) else { return nil }
        var llm = LLMSettings()
        llm.provider = string(fields["provider"], "llm.provider")?.trimmingCharacters(in: .whitespaces) ?? ""
        llm.model = string(fields["model"], "llm.model")?.trimmingCharacters(in: .whitespaces) ?? ""
        llm.temperature = number(fields["temperature"], "llm.temperature")
        if let t = llm.temperature, t < 0 { invalid(fields["temperature"]!, "llm.temperature must not be negative, got \(t)") }
        llm.topP = number(fields["top_p"], "llm.top_p")
        _ = number(fields["presence_penalty"], "llm.presence_penalty")
        _ = number(fields["frequency_penalty"], "llm.frequency_penalty")
        _ = string(fields["reasoning_effort"], "llm.reasoning_effort")
        _ = string(fields["response_format"], "llm.response_format")
        if let maxTokens = integer(fields["max_tokens"], "llm.max_tokens") {
            if maxTokens < 0 { invalid(fields["max_tokens"]!, "llm.max_tokens must not be negative, got \(maxTokens)") }
            llm.maxTokens = max(0, maxTokens)
        }
        llm.baseURL = string(fields["base_url"], "llm.base_url").flatMap { $0.isEmpty ? nil : $0 }
        llm.toolChoice = string(fields["tool_choice"], "llm.tool_choice").flatMap { $0.isEmpty ? nil : $0 }
        llm.allowedProviders = strings(fields["allowed_providers"], "llm.allowed_providers") ?? []
        _ = strings(fields["allowed_models"], "llm.allowed_models")
        if let schema = fields["output_schema"], !schema.isNull { llm.outputSchema = Self.json(schema).serialized() }
        return llm
    }

    /// A YAML value as JSON (for `output_schema`): plain scalars that read as numbers or booleans stay typed.
    static func json(_ node: YAMLNode) -> JSONValue {
        switch node {
        case .scalar(let s):
            if node.isNull { return .null }
            if !s.isQuoted {
                if ["true", "True", "TRUE"].contains(s.value) { return .bool(true) }
                if ["false", "False", "FALSE"].contains(s.value) { return .bool(false) }
                if let n = Double(s.value), n.isFinite { return .number(n) }
            }
            return .string(s.value)
        case .sequence(let items, _): return .array(items.map(json))
        case .mapping:
            var object: [String: JSONValue] = [:]
            for entry in node.mappingEntries ?? [] { object[entry.key] = json(entry.value) }
            return .object(object)
        }
    }

    private mutating func parsePersona(_ fields: [String: YAMLNode]) -> Persona {
        var persona = Persona()
        if let node = fields["identity"], let identity = mapping(node, "identity", known: ["role", "expertise", "audience", "backstory"]) {
            persona.role = string(identity["role"], "identity.role")
            persona.expertise = lines(identity["expertise"], "identity.expertise")
            persona.audience = string(identity["audience"], "identity.audience")
            persona.backstory = string(identity["backstory"], "identity.backstory")
        }
        if let node = fields["personality"], let personality = mapping(node, "personality", known: ["tone", "voice", "avoid", "prefer"]) {
            persona.tone = string(personality["tone"], "personality.tone")
            persona.voice = string(personality["voice"], "personality.voice")
            persona.avoid = lines(personality["avoid"], "personality.avoid")
            persona.prefer = lines(personality["prefer"], "personality.prefer")
        }
        if let node = fields["non_negotiables"], let rules = mapping(node, "non_negotiables", known: ["must", "must_not", "output_constraints"]) {
            persona.must = lines(rules["must"], "non_negotiables.must")
            persona.mustNot = lines(rules["must_not"], "non_negotiables.must_not")
            if let constraintsNode = rules["output_constraints"],
               let constraints = mapping(constraintsNode, "output_constraints", known: ["max_length", "min_length", "format"]) {
                persona.maxLength = integer(constraints["max_length"], "output_constraints.max_length")
                persona.minLength = integer(constraints["min_length"], "output_constraints.min_length")
                persona.format = string(constraints["format"], "output_constraints.format")
            }
        }
        return persona
    }

    /// Type-checks the fields this gateway accepts but does not execute, and lists them on the agent.
    private mutating func checkAcceptedFields(_ fields: [String: YAMLNode], agent: inout AgentConfig) {
        var notRun: [String] = []
        if let toolsNode = fields["tools"] {
            guard case .sequence(let items, _) = toolsNode else {
                if !toolsNode.isNull { reject(toolsNode, "tools must be a list, got \(toolsNode.kindName)") }
                return
            }
            var names: [String] = []
            for item in items {
                guard let tool = mapping(item, "a tool", known: ["name", "description", "python_file", "inline", "parameters", "timeout", "retries", "retry_backoff"]) else { continue }
                let name = string(tool["name"], "tools[].name") ?? ""
                if name.isEmpty { invalid(item, "a tool needs a name") } else { names.append(name) }
                _ = duration(tool["timeout"], "tools[].timeout")
                _ = integer(tool["retries"], "tools[].retries")
            }
            if !names.isEmpty { notRun.append("Python tools (\(names.joined(separator: ", ")))") }
            agent.toolNames = names
        }
        for key in ["skills", "knowledge", "agents", "mcp_servers", "mcp_tools", "plugin_tools", "env", "capabilities"] {
            if let list = strings(fields[key], key), !list.isEmpty { notRun.append(key) }
        }
        agent.tags = strings(fields["tags"], "tags") ?? []
        for key in ["system_tools", "allow_shell", "parallel_peer_calls", "structured_peer_results", "dry_run"] {
            if bool(fields[key], key) == true { notRun.append(key) }
        }
        if let kind = string(fields["kind"], "kind"), kind == "router" { notRun.append("kind: router") }
        for key in ["reasoning", "brain_memory", "learning", "policy", "execution", "hooks", "workflow", "outcome", "mission", "tool_schemas", "budget", "routes"]
        where fields[key].map({ !$0.isNull }) == true {
            notRun.append(key)
        }
        for key in fields.keys.sorted() where key.hasPrefix("studio_") { notRun.append(key) }
        if let security = fields["security"], let block = mapping(security, "security", known: ["passphrase", "passphrase_prompt", "intent_gate"]) {
            if block["passphrase"] != nil { notRun.append("security.passphrase") }
            if block["intent_gate"] != nil { notRun.append("security.intent_gate") }
        }
        // Chat adapters this gateway does not have: the agent answers chat through the API only. Telegram, email and
        // sidecars carry messages in when configured; the others here only send (their inbound needs a sidecar).
        let foreignChannels = agent.channels.filter { !["http", "internal", "mobile"].contains($0) && destinations[$0] == nil }
        if !foreignChannels.isEmpty { notRun.append("channels \(foreignChannels.joined(separator: ", ")) (chat here is POST /api/v1/chat)") }
        let sendOnly = agent.channels.filter { name in
            destinations[name] != nil && ["slack", "discord", "whatsapp", "teams", "google_chat"].contains { name == $0 || name.hasPrefix($0 + "-") }
        }
        if !sendOnly.isEmpty { notRun.append("messages in from \(sendOnly.joined(separator: ", ")) (sent to only; inbound comes through a sidecar)") }
        let otherBuiltins = (agent.builtins ?? []).filter { !Self.runnableBuiltins.contains($0) && $0 != "*" && $0 != "all" }
        if !otherBuiltins.isEmpty { notRun.append("builtins \(otherBuiltins.joined(separator: ", "))") }
        if case .llm(let llm) = agent.runner, llm.outputSchema != nil { notRun.append("llm.output_schema repair") }
        agent.notRunHere = notRun
    }

    private mutating func parseLocation(_ node: YAMLNode) -> LocationTrigger? {
        guard let fields = mapping(node, "location", known: ["name", "latitude", "longitude", "radius_m", "on", "device", "cooldown"]) else { return nil }
        let name = string(fields["name"], "location.name").flatMap { $0.isEmpty ? nil : $0 } ?? "Region"
        func ranged(_ key: String, _ range: ClosedRange<Double>) -> Double? {
            guard let valueNode = fields[key] else {
                invalid(node, "location is missing '\(key)'")
                return nil
            }
            guard let value = number(valueNode, key) else { return nil }
            guard range.contains(value) else {
                invalid(valueNode, "\(key) must be from \(range.lowerBound.formatted()) to \(range.upperBound.formatted()), got \(valueNode.scalarValue ?? "")")
                return nil
            }
            return value
        }
        let latitude = ranged("latitude", -90...90)
        let longitude = ranged("longitude", -180...180)
        let radius = ranged("radius_m", LocationTrigger.radiusRange)
        var event: LocationTrigger.Event?
        if let onNode = fields["on"], let text = string(onNode, "on") {
            event = LocationTrigger.Event(rawValue: text)
            if event == nil { invalid(onNode, "on must be enter or exit, got '\(text)'") }
        } else {
            invalid(node, "location is missing 'on' (enter or exit)")
        }
        var devices: [String] = []
        if let deviceNode = fields["device"] {
            if case .sequence = deviceNode {
                devices = strings(deviceNode, "device") ?? []
            } else if let one = string(deviceNode, "device"), !one.isEmpty {
                devices = [one]
            }
        }
        // Absent, invalid or negative means 30 minutes, as in Soulacy; 0s means none.
        var cooldown = Duration.seconds(30 * 60)
        if let cooldownNode = fields["cooldown"], let d = duration(cooldownNode, "cooldown") {
            if d > .seconds(7 * 86400) {
                invalid(cooldownNode, "cooldown must be at most 7d, got \(cooldownNode.scalarValue ?? "")")
            } else if d >= .zero {
                cooldown = d
            }
        }
        guard let latitude, let longitude, let radius, let event else { return nil }
        return LocationTrigger(name: name, latitude: latitude, longitude: longitude, radiusMeters: radius, on: event, devices: devices, cooldown: cooldown)
    }

    private mutating func parseWebhook(_ node: YAMLNode) -> WebhookTrigger? {
        guard let fields = mapping(node, "webhook", known: [
            "secret", "secret_env", "output", "text_path", "user_id_path", "username_path", "session_id_path", "thread_id_path", "include_raw",
        ]) else { return nil }
        var hook = WebhookTrigger()
        hook.textPath = string(fields["text_path"], "webhook.text_path").flatMap { $0.isEmpty ? nil : $0 }
        for key in ["user_id_path", "username_path", "session_id_path", "thread_id_path"] { _ = string(fields[key], "webhook.\(key)") }
        _ = bool(fields["include_raw"], "webhook.include_raw")
        var secret: String?
        switch (fields["secret"], fields["secret_env"]) {
        case (nil, nil):
            break
        case (.some, .some(let envNode)):
            invalid(envNode, "give either secret or secret_env, not both")
        case (.some(let secretNode), nil):
            secret = string(secretNode, "secret")
        case (nil, .some(let envNode)):
            if let name = string(envNode, "secret_env") {
                secret = environment[name]
                if secret == nil { invalid(envNode, "environment variable \(name) is not set") }
            }
        }
        if let s = secret {
            if s.utf8.count < 16 {
                invalid(fields["secret"] ?? fields["secret_env"] ?? node, "the webhook secret must be at least 16 characters")
            } else {
                hook.secretSHA256 = SHA256.hash(s)
            }
        }
        hook.output = fields["output"].flatMap { parseOutput($0, "webhook.output") }
        return hook
    }

    private mutating func parseSchedule(_ node: YAMLNode) -> ScheduleConfig? {
        guard let fields = mapping(node, "schedule", known: ["cron", "at", "timeout", "run_missed_on_startup", "missed_startup_window", "output", "timezone"]) else { return nil }
        var cron: CronSchedule?
        if let cronNode = fields["cron"], let text = string(cronNode, "cron"), !text.isEmpty {
            do { cron = try CronSchedule(text) } catch { invalid(cronNode, error.message) }
        }
        var at: Date?
        if let atNode = fields["at"], !atNode.isNull, case .scalar(let s) = atNode {
            at = Self.timestamp(s.value, quoted: s.isQuoted)
            // Soulacy's decoder cannot read such a value into its time field: the file is rejected.
            if at == nil { reject(atNode, "schedule.at '\(s.value)' is not a timestamp; write RFC 3339, for example 2026-06-01T09:00:00+02:00") }
        } else if let atNode = fields["at"], !atNode.isNull {
            reject(atNode, "schedule.at must be a timestamp, got \(atNode.kindName)")
        }
        var timeZone = TimeZone.current
        if let tzNode = fields["timezone"], let name = string(tzNode, "timezone") {
            if let tz = TimeZone(identifier: name) { timeZone = tz } else {
                invalid(tzNode, "unknown time zone '\(name)'; use an IANA name such as Europe/Berlin or UTC")
            }
        }
        let timeout = duration(fields["timeout"], "schedule.timeout").flatMap { $0 > .zero ? $0 : nil }
        let runMissed = bool(fields["run_missed_on_startup"], "run_missed_on_startup") ?? false
        // Soulacy does not validate the window: invalid or not positive falls back to 24h.
        var window = Duration.seconds(86400)
        if let text = string(fields["missed_startup_window"], "missed_startup_window"), let d = DurationText.parse(text), d > .zero { window = d }
        let output = fields["output"].flatMap { parseOutput($0, "schedule.output") }
        return ScheduleConfig(cron: cron, at: at, timeZone: timeZone, timeout: timeout, runMissedOnStartup: runMissed,
                              missedStartupWindow: window, output: output)
    }

    /// A YAML timestamp as Soulacy's decoder reads one: RFC 3339; unquoted also `2026-6-1 9:00:00` (UTC) or a bare date.
    public static func timestamp(_ text: String, quoted: Bool) -> Date? {
        let t = text.trimmingCharacters(in: .whitespaces)
        // ASCII digits only: a regex's \d is any Unicode digit, which Int(_:) does not read.
        let rfc = /([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})/
        let loose = /([0-9]{4})-([0-9]{1,2})-([0-9]{1,2})(?:(?:[Tt]|[ \t]+)([0-9]{1,2}):([0-9]{2}):([0-9]{2})(\.[0-9]+)?(?:[ \t]*([Zz]|[+-][0-9]{1,2}(?::[0-9]{2})?))?)?/
        var parts: (Int, Int, Int, Int, Int, Int, Double, Int)?
        func offset(_ zone: Substring?) -> Int? {
            guard let zone, !zone.isEmpty, zone != "Z", zone != "z" else { return 0 }
            let sign = zone.first == "-" ? -1 : 1
            let digits = zone.dropFirst().split(separator: ":")
            guard let hours = Int(digits[0]) else { return nil }
            let minutes = digits.count > 1 ? Int(digits[1]) ?? 0 : 0
            return sign * (hours * 3600 + minutes * 60)
        }
        if let m = t.wholeMatch(of: rfc), let o = offset(m.8) {
            parts = (Int(m.1)!, Int(m.2)!, Int(m.3)!, Int(m.4)!, Int(m.5)!, Int(m.6)!, m.7.flatMap { Double("0" + $0) } ?? 0, o)
        } else if !quoted, let m = t.wholeMatch(of: loose), let o = offset(m.8) {
            parts = (Int(m.1)!, Int(m.2)!, Int(m.3)!, m.4.flatMap { Int($0) } ?? 0, m.5.flatMap { Int($0) } ?? 0, m.6.flatMap { Int($0) } ?? 0,
                     m.7.flatMap { Double("0" + $0) } ?? 0, o)
        }
        guard let p = parts, (1...12).contains(p.1), (1...31).contains(p.2), p.3 < 24, p.4 < 60, p.5 < 61 else { return nil }
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        guard let date = calendar.date(from: DateComponents(year: p.0, month: p.1, day: p.2, hour: p.3, minute: p.4, second: p.5)),
              calendar.component(.day, from: date) == p.2 else { return nil }
        let instant = date.addingTimeInterval(p.6 - Double(p.7))
        // An offset may carry year 0000 or 9999 past what a timestamp can be written as.
        return JSONValue.writableDates.contains(instant) ? instant : nil
    }

    /// `channel` and `to`: a channel this gateway lacks is a warning (its runs record it), a bad `to` for one it has is an error.
    private mutating func destination(_ fields: [String: YAMLNode], _ node: YAMLNode, _ what: String) -> (String, String)? {
        let channel = string(fields["channel"], "\(what).channel")?.trimmingCharacters(in: .whitespaces) ?? ""
        let to = string(fields["to"], "\(what).to")?.trimmingCharacters(in: .whitespaces) ?? ""
        if channel.isEmpty && to.isEmpty { return nil }
        // A channel without `to` borrows the channel's default_output_to (SOULACY-AGENTS.md §6), when it has one.
        if to.isEmpty, !channel.isEmpty, defaults[channel] != nil { return (channel, to) }
        guard !channel.isEmpty, !to.isEmpty else {
            let missing = channel.isEmpty ? "to" : "channel"
            invalid(node, "\(what) needs both channel and to (got only \(missing))"
                    + (channel.isEmpty ? "" : "; or give channels.\(channel).default_output_to in the gateway config"))
            return nil
        }
        if let validate = destinations[channel] {
            do { try validate(to) } catch {
                invalid(fields["to"] ?? node, error.description)
                return nil
            }
        } else {
            // The original's fallback: with exactly one channel default configured, such results go there.
            let fate = defaults.count == 1 && what != "notify_on_failure" ? "its results go to the default channel \(defaults.keys.first!) with a notice"
                                           : "\(what) delivers nothing and each run records that"
            warn(fields["channel"] ?? node, "no channel '\(channel)' registered on this gateway (registered: \(destinations.keys.sorted().joined(separator: ", "))); \(fate)")
        }
        return (channel, to)
    }

    private mutating func parseOutput(_ node: YAMLNode, _ what: String) -> OutputConfig? {
        guard let fields = mapping(node, what, known: ["channel", "to", "template", "bot_name"]) else { return nil }
        let template = string(fields["template"], "\(what).template")
        let botName = string(fields["bot_name"], "\(what).bot_name").flatMap { $0.isEmpty ? nil : $0 }
        guard let (channel, to) = destination(fields, node, what) else { return nil }
        return OutputConfig(channel: channel, to: to, template: template.flatMap { $0.isEmpty ? nil : $0 }, botName: botName)
    }

    private mutating func parseFailureNotice(_ node: YAMLNode) -> FailureNotice? {
        guard let fields = mapping(node, "notify_on_failure", known: ["channel", "to", "include_error", "template"]) else { return nil }
        let include = bool(fields["include_error"], "include_error") ?? false
        let template = string(fields["template"], "notify_on_failure.template").flatMap { $0.isEmpty ? nil : $0 }
        guard let (channel, to) = destination(fields, node, "notify_on_failure") else { return nil }
        return FailureNotice(channel: channel, to: to, includeError: include, template: template)
    }
}
