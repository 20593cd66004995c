import ChannelAPI
import Foundation

/// One environment variable's value for a sidecar, resolved at every start (so a rotated secret is picked up by
/// the next restart).
public enum SidecarEnvValue: Sendable, Equatable {
    /// Text in which each `${NAME}` is replaced by the gateway's own variable NAME (which must be set).
    case text(String)
    /// The contents of a file (a secret mounted by systemd or Docker), without its final newline.
    case file(String)
}

/// Why a sidecar's environment cannot be built. Names the variable, never its value.
public struct SidecarEnvError: Error, Sendable, Equatable, CustomStringConvertible {
    public let description: String

    public init(description: String) { self.description = description }
}

/// A sidecar: the channel id SOUL.yaml names, and how to start the program that serves it.
public struct SidecarConfig: Sendable, Equatable {
    /// The channel id (`matrix`): `schedule.output.channel` names it, and sessions are `<name>-<chat_id>`.
    public var name: String
    public var command: String
    public var args: [String]
    public var env: [String: SidecarEnvValue]
    public var workingDirectory: String?
    /// Advertised in `hello_ack` as `shared_dir` (the original's per-run scratch directory), when set.
    public var sharedDirectory: String?
    /// How long a send waits for the `ack` of a sidecar that declared acks.
    public var ackTimeout: Duration
    /// The agent its `message` frames run (`agent_id`, as the original's external channel takes it); nil for a
    /// sidecar that only delivers, whose inbound messages are dropped with a log line.
    public var agentID: String?

    public init(name: String, command: String, args: [String] = [], env: [String: SidecarEnvValue] = [:],
                workingDirectory: String? = nil, sharedDirectory: String? = nil, ackTimeout: Duration = .seconds(30), agentID: String? = nil) {
        self.name = name
        self.command = command
        self.args = args
        self.env = env
        self.workingDirectory = workingDirectory
        self.sharedDirectory = sharedDirectory
        self.ackTimeout = ackTimeout
        self.agentID = agentID
    }

    /// The sidecar's whole environment: a minimal base (PATH, HOME from the gateway's, LANG), then its own
    /// variables. Nothing else of the gateway's environment reaches it, so the gateway's secrets stay with it.
    public func environment(host: [String: String]) throws(SidecarEnvError) -> [String: String] {
        var result: [String: String] = [
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": host["HOME"] ?? "/",
            "LANG": "C.UTF-8",
        ]
        for (key, value) in env {
            switch value {
            case .text(let text): result[key] = try Self.interpolate(text, key: key, host: host)
            case .file(let path):
                guard let data = FileManager.default.contents(atPath: path) else {
                    throw SidecarEnvError(description: "env \(key): cannot read the file \(path)")
                }
                var text = String(decoding: data, as: UTF8.self)
                if text.hasSuffix("\r\n") { text.removeLast(2) } else if text.hasSuffix("\n") { text.removeLast() }
                result[key] = text
            }
        }
        return result
    }

    static func interpolate(_ text: String, key: String, host: [String: String]?) throws(SidecarEnvError) -> String {
        var out = ""
        var rest = Substring(text)
        while let open = rest.range(of: "${") {
            out += rest[..<open.lowerBound]
            guard let close = rest[open.upperBound...].firstIndex(of: "}") else {
                throw SidecarEnvError(description: "env \(key): '${' without a closing '}'")
            }
            let name = String(rest[open.upperBound..<close])
            guard Self.isVariableName(name) else { throw SidecarEnvError(description: "env \(key): '${\(name)}' is not a variable name") }
            if let host {
                guard let value = host[name] else { throw SidecarEnvError(description: "env \(key): ${\(name)} is not set in the gateway's environment") }
                out += value
            }
            rest = rest[rest.index(after: close)...]
        }
        return out + rest
    }

    static func isVariableName(_ name: String) -> Bool {
        guard let first = name.unicodeScalars.first, first == "_" || (first.isASCII && first.properties.isAlphabetic) else { return false }
        return name.unicodeScalars.allSatisfy { $0 == "_" || ($0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0))) }
    }
}

/// Builds sidecar channels from the gateway config. The `sidecars` kind is a list; each item is one sidecar:
///
/// ```yaml
/// channels:
///   sidecars:
///     - channel: matrix                     # the channel id SOUL.yaml names (required)
///       command: python3                    # required; looked up in PATH
///       args: [/opt/soulacy/matrix.py]      # a list, or one string split at whitespace
///       env:                                # the sidecar's only variables, besides PATH, HOME and LANG
///         MATRIX_HOMESERVER: https://matrix.example.org
///         MATRIX_TOKEN: ${MATRIX_TOKEN}     # from the gateway's environment
///         MATRIX_PASSWORD: {file: /run/secrets/matrix_password}
///       working_dir: /var/lib/soulacy/matrix
///       shared_dir: /var/lib/soulacy/matrix/scratch   # optional, sent in hello_ack
///       ack_timeout: 30                     # seconds a send waits for an ack (sidecars that declare acks)
///       agent_id: assistant                 # its message frames run this agent (omit for an outbound-only sidecar)
///       enabled: true                       # false: skipped
/// ```
///
/// `make` takes one item (errors name `channels.sidecars[0].command` when the host passes the item as
/// `blocks(from:)` builds it), or the whole list under the key `sidecars`.
public struct SidecarChannelFactory: ChannelFactory {
    public var kind: String { "sidecars" }
    public let hostEnvironment: [String: String]
    public let log: Log
    public let clock: any WallClock

    public init(hostEnvironment: [String: String] = ProcessInfo.processInfo.environment, log: Log = Log(), clock: any WallClock = SystemWallClock()) {
        self.hostEnvironment = hostEnvironment
        self.log = log
        self.clock = clock
    }

    /// Each item of the `channels.sidecars` list as settings whose errors name `channels.sidecars[i].<key>`.
    public static func blocks(from list: ChannelSetting) throws(ChannelConfigError) -> [ChannelSettings] {
        switch list {
        case .null: return []
        case .list(let items):
            var blocks: [ChannelSettings] = []
            for (index, item) in items.enumerated() {
                guard case .map(let fields) = item else { throw ChannelConfigError(field: "channels.sidecars[\(index)]", problem: "must be a mapping") }
                blocks.append(ChannelSettings(kind: "sidecars[\(index)]", values: fields))
            }
            return blocks
        default: throw ChannelConfigError(field: "channels.sidecars", problem: "must be a list of sidecars")
        }
    }

    public func make(_ settings: ChannelSettings) throws(ChannelConfigError) -> [any OutboundChannel] {
        try configs(settings).map { SidecarChannel(config: $0, hostEnvironment: hostEnvironment, log: log, clock: clock) }
    }

    /// The configs a block describes (one item, or the list under `sidecars`), checked; disabled ones left out.
    public func configs(_ settings: ChannelSettings) throws(ChannelConfigError) -> [SidecarConfig] {
        guard settings.values["command"] == nil, let list = settings.values["sidecars"] else {
            return try Self.config(settings).map { [$0] } ?? []
        }
        var configs: [SidecarConfig] = []
        for block in try Self.blocks(from: list) {
            guard let config = try Self.config(block) else { continue }
            if configs.contains(where: { $0.name == config.name }) {
                throw ChannelConfigError(field: block.field("channel"), problem: "'\(config.name)' is used by another sidecar")
            }
            configs.append(config)
        }
        return configs
    }

    /// One sidecar's config; nil when `enabled: false`.
    public static func config(_ settings: ChannelSettings) throws(ChannelConfigError) -> SidecarConfig? {
        if try settings.bool("enabled") == false { return nil }
        let name = try settings.requiredString("channel")
        guard name.unicodeScalars.allSatisfy({ $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || $0 == "-" || $0 == "_") }) else {
            throw ChannelConfigError(field: settings.field("channel"), problem: "must be letters, digits, '-' and '_', got '\(name)'")
        }
        let command = try settings.requiredString("command")
        let args: [String]
        switch settings.values["args"] {
        case nil, .null?: args = []
        case .list(let items)?:
            args = try items.enumerated().map { (index, item) throws(ChannelConfigError) -> String in
                guard let text = item.text else { throw ChannelConfigError(field: "\(settings.field("args"))[\(index)]", problem: "must be a string") }
                return text
            }
        case .string(let text)?: args = text.split(whereSeparator: \.isWhitespace).map(String.init)
        default: throw ChannelConfigError(field: settings.field("args"), problem: "must be a list of strings")
        }
        var env: [String: SidecarEnvValue] = [:]
        switch settings.values["env"] {
        case nil, .null?: break
        case .map(let fields)?:
            for (key, value) in fields {
                let field = "\(settings.field("env")).\(key)"
                guard SidecarConfig.isVariableName(key) else { throw ChannelConfigError(field: field, problem: "is not a variable name") }
                switch value {
                case .map(let spec):
                    guard spec.count == 1, let path = spec["file"]?.text, !path.isEmpty else {
                        throw ChannelConfigError(field: field, problem: "must be a string or {file: PATH}")
                    }
                    env[key] = .file(path)
                case .list, .null: throw ChannelConfigError(field: field, problem: "must be a string or {file: PATH}")
                default:
                    let text = value.text ?? ""
                    do { _ = try SidecarConfig.interpolate(text, key: key, host: nil) } catch {
                        let problem = error.description.hasPrefix("env \(key): ") ? String(error.description.dropFirst("env \(key): ".count)) : error.description
                        throw ChannelConfigError(field: field, problem: problem)
                    }
                    env[key] = .text(text)
                }
            }
        default: throw ChannelConfigError(field: settings.field("env"), problem: "must be a mapping of variable names to values")
        }
        let ackSeconds = try settings.int("ack_timeout", in: 1...3600) ?? 30
        return SidecarConfig(name: name, command: command, args: args, env: env, workingDirectory: settings.string("working_dir"),
                             sharedDirectory: settings.string("shared_dir"), ackTimeout: .seconds(ackSeconds), agentID: settings.string("agent_id"))
    }
}
