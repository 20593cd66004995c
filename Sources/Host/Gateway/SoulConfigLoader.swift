import ChannelAPI
import Crypto
import Foundation
import YAML

public typealias DestinationValidator = @Sendable (String) throws(DestinationError) -> Void

/// Reads SOUL.yaml into a `SoulConfig`, reporting every problem with its line and column.
/// Unknown keys are errors: a misspelt key must not silently turn a schedule off.
public struct SoulConfigLoader {
    public static let reservedAgentIDs: Set<String> = ["system"]
    public static let maximumTimeout: Duration = .seconds(24 * 3600)

    let file: String
    /// Channel names SOUL.yaml may use, each with its destination check.
    let destinations: [String: DestinationValidator]
    /// Where `secret_env` names are looked up.
    let environment: [String: String]
    private var errors: [ConfigError] = []

    public init(file: String, destinations: [String: DestinationValidator], environment: [String: String] = ProcessInfo.processInfo.environment) {
        self.file = file
        self.destinations = destinations
        self.environment = environment
    }

    public static func load(path: String, destinations: [String: DestinationValidator],
                            environment: [String: String] = ProcessInfo.processInfo.environment) throws(ConfigErrors) -> SoulConfig {
        let text: String
        do {
            text = try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            throw ConfigErrors(errors: [ConfigError(file: path, line: 1, column: 1, message: "cannot read the file: \(error.localizedDescription)")])
        }
        var loader = SoulConfigLoader(file: path, destinations: destinations, environment: environment)
        return try loader.load(text: text)
    }

    public mutating func load(text: String) throws(ConfigErrors) -> SoulConfig {
        let root: YAMLNode?
        do {
            root = try YAMLParser.parse(text)
        } catch {
            throw ConfigErrors(errors: [ConfigError(file: file, line: error.mark.line, column: error.mark.column, message: error.message)])
        }
        guard let root, !root.isNull else {
            throw ConfigErrors(errors: [ConfigError(file: file, line: 1, column: 1, message: "the file is empty; it needs an 'agents' list")])
        }
        let config = parseRoot(root)
        if !errors.isEmpty { throw ConfigErrors(errors: errors) }
        return config
    }

    private mutating func fail(_ node: YAMLNode, _ message: String) {
        errors.append(ConfigError(file: file, line: node.mark.line, column: node.mark.column, message: message))
    }

    private mutating func fail(_ mark: Mark, _ message: String) {
        errors.append(ConfigError(file: file, line: mark.line, column: mark.column, message: message))
    }

    /// The entries of a mapping, with unknown keys reported.
    private mutating func mapping(_ node: YAMLNode, _ what: String, allowed: [String], required: [String] = []) -> [String: YAMLNode]? {
        guard let entries = node.mappingEntries else {
            fail(node, "\(what) must be a mapping, got \(node.kindName)")
            return nil
        }
        var result: [String: YAMLNode] = [:]
        for entry in entries {
            if allowed.contains(entry.key) {
                result[entry.key] = entry.value
            } else {
                fail(entry.keyMark, "unknown key '\(entry.key)' in \(what); allowed: \(allowed.joined(separator: ", "))")
            }
        }
        for key in required where result[key] == nil {
            fail(node, "\(what) is missing '\(key)'")
        }
        return result
    }

    private mutating func string(_ node: YAMLNode?, _ what: String) -> String? {
        guard let node else { return nil }
        guard case .scalar(let s) = node, !node.isNull else {
            fail(node, "\(what) must be text, got \(node.isNull ? "nothing" : node.kindName)")
            return nil
        }
        return s.value
    }

    private mutating func bool(_ node: YAMLNode?, _ what: String) -> Bool? {
        guard let node else { return nil }
        guard case .scalar(let s) = node, !s.isQuoted else {
            fail(node, "\(what) must be true or false")
            return nil
        }
        switch s.value {
        case "true", "True", "TRUE", "yes", "on": return true
        case "false", "False", "FALSE", "no", "off": return false
        default:
            fail(node, "\(what) must be true or false, got '\(s.value)'")
            return nil
        }
    }

    private mutating func duration(_ node: YAMLNode?, _ what: String, range: ClosedRange<Duration>) -> Duration? {
        guard let text = string(node, what), let node else { return nil }
        guard let d = DurationText.parse(text) else {
            fail(node, "\(what) '\(text)' is not a duration such as 30s, 5m, 1h30m or 2d")
            return nil
        }
        guard range.contains(d) else {
            fail(node, "\(what) must be from \(DurationText.format(range.lowerBound)) to \(DurationText.format(range.upperBound)), got \(text)")
            return nil
        }
        return d
    }

    private mutating func parseRoot(_ root: YAMLNode) -> SoulConfig {
        guard let top = mapping(root, "the top level", allowed: ["version", "agents"], required: ["agents"]) else {
            return SoulConfig(agents: [])
        }
        if let version = top["version"], string(version, "version") != "1" {
            fail(version, "version must be 1")
        }
        guard let list = top["agents"] else { return SoulConfig(agents: []) }
        guard case .sequence(let items, _) = list else {
            fail(list, "agents must be a list, got \(list.kindName)")
            return SoulConfig(agents: [])
        }
        var agents: [AgentConfig] = []
        var seen: [String: Mark] = [:]
        for item in items {
            // Duplicates are reported even when the first agent has errors of its own.
            if let id = item.mappingEntries?.first(where: { $0.key == "id" })?.value.scalarValue {
                if let first = seen[id] {
                    fail(item, "agent id '\(id)' is already used at line \(first.line)")
                    continue
                }
                seen[id] = item.mark
            }
            if let agent = parseAgent(item) { agents.append(agent) }
        }
        return SoulConfig(agents: agents)
    }

    private static func isValidID(_ id: String) -> Bool {
        guard let first = id.unicodeScalars.first, id.count <= 64 else { return false }
        guard ("a"..."z").contains(first) || ("0"..."9").contains(first) else { return false }
        return id.unicodeScalars.allSatisfy { ("a"..."z").contains($0) || ("0"..."9").contains($0) || $0 == "-" || $0 == "_" }
    }

    private mutating func parseAgent(_ node: YAMLNode) -> AgentConfig? {
        guard let fields = mapping(node, "an agent", allowed: ["id", "name", "description", "runner", "trigger", "schedule", "location", "webhook", "notify_on_failure"], required: ["id", "runner"]) else { return nil }
        let errorCount = errors.count
        let id = string(fields["id"], "id") ?? ""
        if let idNode = fields["id"], !id.isEmpty || idNode.scalarValue != nil {
            if !Self.isValidID(id) {
                fail(idNode, "agent id '\(id)' must be 1-64 lower-case letters, digits, - or _, starting with a letter or digit")
            } else if Self.reservedAgentIDs.contains(id) {
                fail(idNode, "agent id '\(id)' is reserved for the gateway's own System agent")
            }
        }
        let name = string(fields["name"], "name") ?? id
        let description = string(fields["description"], "description")
        let runner = fields["runner"].flatMap { parseRunner($0) }
        var trigger: AgentConfig.Trigger = fields["schedule"] != nil ? .cron : fields["location"] != nil ? .location : fields["webhook"] != nil ? .webhook : .manual
        if let triggerNode = fields["trigger"], let text = string(triggerNode, "trigger") {
            if let t = AgentConfig.Trigger(rawValue: text) {
                trigger = t
            } else {
                let later = ["channel", "oneshot", "internal"]
                fail(triggerNode, later.contains(text)
                     ? "trigger '\(text)' is not supported by this gateway yet; use cron, location, webhook or manual"
                     : "trigger must be one of cron, location, webhook, manual; got '\(text)'")
            }
        }
        // Each trigger has its block, and a block belongs to its trigger only.
        let blocks: [(AgentConfig.Trigger, String)] = [(.cron, "schedule"), (.location, "location"), (.webhook, "webhook")]
        for (kind, key) in blocks {
            if trigger == kind, fields[key] == nil {
                fail(fields["trigger"] ?? node, "trigger \(kind.rawValue) needs a '\(key)' block")
            } else if trigger != kind, let block = fields[key] {
                fail(block, "a '\(key)' block needs trigger: \(kind.rawValue) (this agent's trigger is \(trigger.rawValue))")
            }
        }
        let schedule = trigger == .cron ? fields["schedule"].flatMap { parseSchedule($0) } : nil
        let location = trigger == .location ? fields["location"].flatMap { parseLocation($0) } : nil
        let webhook = trigger == .webhook ? fields["webhook"].flatMap { parseWebhook($0) } : nil
        let notice = fields["notify_on_failure"].flatMap { parseFailureNotice($0) }
        guard errors.count == errorCount, let runner else { return nil }
        return AgentConfig(id: id, name: name, description: description, runner: runner, trigger: trigger,
                           schedule: schedule, location: location, webhook: webhook, notifyOnFailure: notice)
    }

    private mutating func number(_ node: YAMLNode?, _ what: String, range: ClosedRange<Double>) -> Double? {
        guard let node else { return nil }
        guard case .scalar(let s) = node, !s.isQuoted, let value = Double(s.value), value.isFinite else {
            fail(node, "\(what) must be a number")
            return nil
        }
        guard range.contains(value) else {
            fail(node, "\(what) must be from \(range.lowerBound.formatted()) to \(range.upperBound.formatted()), got \(s.value)")
            return nil
        }
        return value
    }

    private mutating func parseLocation(_ node: YAMLNode) -> LocationTrigger? {
        guard let fields = mapping(node, "location", allowed: ["name", "latitude", "longitude", "radius_m", "on", "device", "cooldown"],
                                   required: ["latitude", "longitude", "radius_m", "on"]) else { return nil }
        let name = string(fields["name"], "name") ?? "Region"
        let latitude = number(fields["latitude"], "latitude", range: -90...90)
        let longitude = number(fields["longitude"], "longitude", range: -180...180)
        let radius = number(fields["radius_m"], "radius_m", range: LocationTrigger.radiusRange)
        var event: LocationTrigger.Event?
        if let onNode = fields["on"], let text = string(onNode, "on") {
            event = LocationTrigger.Event(rawValue: text)
            if event == nil { fail(onNode, "on must be enter or exit, got '\(text)'") }
        }
        var devices: [String] = []
        if let deviceNode = fields["device"] {
            switch deviceNode {
            case .sequence(let items, _):
                devices = items.compactMap { string($0, "each device") }
            default:
                if !deviceNode.isNull, let one = string(deviceNode, "device"), !one.isEmpty { devices = [one] }
            }
        }
        let cooldown = duration(fields["cooldown"], "cooldown", range: .seconds(0) ... .seconds(7 * 86400)) ?? .seconds(30 * 60)
        guard let latitude, let longitude, let radius, let event else { return nil }
        return LocationTrigger(name: name, latitude: latitude, longitude: longitude, radiusMeters: radius, on: event, devices: devices, cooldown: cooldown)
    }

    private mutating func parseWebhook(_ node: YAMLNode) -> WebhookTrigger? {
        guard let fields = mapping(node, "webhook", allowed: ["secret", "secret_env", "output"]) else { return nil }
        var secret: String?
        switch (fields["secret"], fields["secret_env"]) {
        case (nil, nil):
            fail(node, "webhook needs secret_env (the name of an environment variable holding the secret) or secret")
        case (.some, .some(let envNode)):
            fail(envNode, "give either secret or secret_env, not both")
        case (.some(let secretNode), nil):
            secret = string(secretNode, "secret")
        case (nil, .some(let envNode)):
            if let name = string(envNode, "secret_env") {
                secret = environment[name]
                if secret == nil { fail(envNode, "environment variable \(name) is not set") }
            }
        }
        if let s = secret, s.utf8.count < 16 {
            fail(fields["secret"] ?? fields["secret_env"] ?? node, "the webhook secret must be at least 16 characters")
            secret = nil
        }
        let output = fields["output"].flatMap { parseOutput($0) }
        guard let secret else { return nil }
        return WebhookTrigger(secretSHA256: SHA256.hash(secret), output: output)
    }

    private mutating func parseRunner(_ node: YAMLNode) -> CommandRunnerConfig? {
        guard let fields = mapping(node, "runner", allowed: ["type", "command", "env", "timeout", "working_directory"], required: ["command"]) else { return nil }
        if let typeNode = fields["type"], let type = string(typeNode, "runner type"), type != "command" {
            fail(typeNode, "runner type must be 'command', got '\(type)'")
        }
        var argv: [String] = []
        if let command = fields["command"] {
            if case .sequence(let items, _) = command {
                for item in items { if let s = string(item, "each command argument") { argv.append(s) } }
                if items.isEmpty { fail(command, "command must name a program: [\"/usr/bin/program\", \"arg\"]") }
            } else {
                fail(command, "command must be a list of arguments, for example [\"/bin/sh\", \"-c\", \"echo hi\"]")
            }
        }
        var environment: [String: String] = [:]
        if let envNode = fields["env"] {
            if let entries = envNode.mappingEntries {
                for entry in entries {
                    if entry.key.isEmpty || entry.key.contains("=") || entry.key.contains(where: \.isWhitespace) {
                        fail(entry.keyMark, "environment variable name '\(entry.key)' is not valid")
                    } else if let value = string(entry.value, "env \(entry.key)") {
                        environment[entry.key] = value
                    }
                }
            } else {
                fail(envNode, "env must be a mapping of NAME: value")
            }
        }
        let timeout = duration(fields["timeout"], "timeout", range: .seconds(1) ... Self.maximumTimeout) ?? .seconds(300)
        let directory = string(fields["working_directory"], "working_directory")
        return CommandRunnerConfig(argv: argv, environment: environment, timeout: timeout, workingDirectory: directory)
    }

    private mutating func parseSchedule(_ node: YAMLNode) -> ScheduleConfig? {
        guard let fields = mapping(node, "schedule", allowed: ["cron", "timezone", "timeout", "run_missed_on_startup", "missed_startup_window", "output"], required: ["cron", "output"]) else { return nil }
        var cron: CronSchedule?
        if let cronNode = fields["cron"], let text = string(cronNode, "cron") {
            do { cron = try CronSchedule(text) } catch { fail(cronNode, error.message) }
        }
        var timeZone = TimeZone.current
        if let tzNode = fields["timezone"], let name = string(tzNode, "timezone") {
            if let tz = TimeZone(identifier: name) { timeZone = tz } else {
                fail(tzNode, "unknown time zone '\(name)'; use an IANA name such as Europe/Berlin or UTC")
            }
        }
        let timeout = duration(fields["timeout"], "timeout", range: .seconds(1) ... Self.maximumTimeout)
        let runMissed = bool(fields["run_missed_on_startup"], "run_missed_on_startup") ?? false
        let window = duration(fields["missed_startup_window"], "missed_startup_window", range: .seconds(60) ... .seconds(30 * 86400)) ?? .seconds(86400)
        let output = fields["output"].flatMap { parseOutput($0) }
        guard let cron, let output else { return nil }
        return ScheduleConfig(cron: cron, timeZone: timeZone, timeout: timeout, runMissedOnStartup: runMissed,
                              missedStartupWindow: window, output: output)
    }

    /// Checks `channel` is registered and `to` is a destination that channel understands.
    private mutating func destination(channelNode: YAMLNode?, toNode: YAMLNode?) -> (String, String)? {
        guard let channelNode, let channelName = string(channelNode, "channel") else { return nil }
        guard let validate = destinations[channelName] else {
            fail(channelNode, "unknown channel '\(channelName)'; registered: \(destinations.keys.sorted().joined(separator: ", "))")
            return nil
        }
        guard let toNode, let to = string(toNode, "to") else { return nil }
        do {
            try validate(to)
        } catch {
            fail(toNode, error.description)
            return nil
        }
        return (channelName, to)
    }

    private mutating func parseOutput(_ node: YAMLNode) -> OutputConfig? {
        guard let fields = mapping(node, "output", allowed: ["channel", "to", "template", "bot_name"], required: ["channel", "to"]) else { return nil }
        let template = string(fields["template"], "template")
        if let template, let templateNode = fields["template"], !template.contains("{reply}") {
            fail(templateNode, "template must contain {reply}, where the agent's reply goes")
        }
        let botName = string(fields["bot_name"], "bot_name")
        guard let (channel, to) = destination(channelNode: fields["channel"], toNode: fields["to"]) else { return nil }
        return OutputConfig(channel: channel, to: to, template: template, botName: botName)
    }

    private mutating func parseFailureNotice(_ node: YAMLNode) -> FailureNotice? {
        guard let fields = mapping(node, "notify_on_failure", allowed: ["channel", "to", "include_error"], required: ["channel", "to"]) else { return nil }
        let include = bool(fields["include_error"], "include_error") ?? false
        guard let (channel, to) = destination(channelNode: fields["channel"], toNode: fields["to"]) else { return nil }
        return FailureNotice(channel: channel, to: to, includeError: include)
    }
}
