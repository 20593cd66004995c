import ChannelAPI
import Foundation
import YAML

/// The Soulacy user's gateway config (`~/.soulacy/config.yaml`), read as Soulacy reads it: the `channels:` block
/// (one block per channel kind, on only with `enabled: true`) with `SOULACY_CHANNELS_<KIND>_<KEY>` overriding the
/// file, and the `llm:` block (default provider, each provider's base URL, key and model), which the environment's
/// own variables override as well. Nothing read here is stored in the database; secrets stay in memory.
public struct GatewayConfigFile: Sendable {
    /// The file read, nil when there is none.
    public var path: String?
    /// The blocks with `enabled: true`, by kind, overrides applied.
    public var channels: [ChannelSettings] = []
    /// Kinds present but not enabled (said at start, so a user knows why nothing arrives).
    public var disabledChannels: [String] = []
    /// The `llm:` block as the variables the model providers read (`OPENAI_API_KEY`, `SOULACY_LLM_DEFAULT_PROVIDER`,
    /// …); the environment's own values win over these.
    public var llmEnvironment: [String: String] = [:]

    public init() {}

    /// `--gateway-config` / `SOULACY_GATEWAY_CONFIG`, else `~/.soulacy/config.yaml` when it exists.
    public static func defaultPath(environment: [String: String]) -> String? {
        if let given = environment["SOULACY_GATEWAY_CONFIG"], !given.isEmpty { return given }
        guard let home = environment["HOME"], !home.isEmpty else { return nil }
        let path = home + "/.soulacy/config.yaml"
        return FileManager.default.fileExists(atPath: path) ? path : nil
    }

    /// Reads `path` (nil: no file, only the environment); an error names the file, the position and the key.
    public static func load(path: String?, environment: [String: String]) throws(GatewayConfigError) -> GatewayConfigFile {
        var config = GatewayConfigFile()
        config.path = path
        var root: [(key: String, value: YAMLNode)] = []
        if let path {
            let text: String
            do { text = try String(contentsOfFile: path, encoding: .utf8) } catch {
                throw GatewayConfigError(file: path, message: "cannot read the gateway config: \(error.localizedDescription)")
            }
            do {
                guard let document = try YAMLParser.parse(text) else { return config.withLLM(from: nil, environment: environment) }
                guard let entries = document.mappingEntries else {
                    throw GatewayConfigError(file: path, message: "\(document.mark): the gateway config must be a mapping (channels:, llm:, …)")
                }
                root = entries.map { (key: $0.key, value: $0.value) }
            } catch let error as YAMLSyntaxError {
                throw GatewayConfigError(file: path, message: "\(error.mark): \(error.message)")
            } catch let error as GatewayConfigError {
                throw error
            } catch {
                throw GatewayConfigError(file: path, message: "\(error)")
            }
        }
        let file = path ?? "the environment"
        if let channels = root.first(where: { $0.key == "channels" })?.value, !channels.isNull {
            guard let blocks = channels.mappingEntries else { throw GatewayConfigError(file: file, message: "\(channels.mark): channels must be a mapping of channel blocks") }
            for entry in blocks {
                let (kind, node) = (entry.key.lowercased(), entry.value)
                // The original keeps `http` always on; it is this gateway's API, not a channel to build.
                if kind == "http" { continue }
                // The sidecars are a list of blocks of their own (`channels.sidecars: [{channel, command, …}]`).
                if kind == "sidecars", case .list = Self.setting(node) {
                    config.channels.append(ChannelSettings(kind: kind, values: ["sidecars": Self.setting(node), "enabled": .bool(true)]))
                    continue
                }
                guard case .map(var values) = Self.setting(node) else {
                    throw GatewayConfigError(file: file, message: "\(node.mark): channels.\(kind) must be a mapping")
                }
                Self.applyOverrides(kind: kind, to: &values, environment: environment)
                let settings = ChannelSettings(kind: kind, values: values)
                let enabled: Bool
                do { enabled = try settings.bool("enabled") ?? false } catch { throw GatewayConfigError(file: file, message: "\(node.mark): \(error)") }
                if enabled { config.channels.append(settings) } else { config.disabledChannels.append(kind) }
            }
        }
        return config.withLLM(from: root.first(where: { $0.key == "llm" })?.value, environment: environment)
    }

    /// `SOULACY_CHANNELS_<KIND>_<KEY>` over the block's keys (the kind upper-cased; `google_chat` is `GOOGLE_CHAT`).
    static func applyOverrides(kind: String, to values: inout [String: ChannelSetting], environment: [String: String]) {
        let prefix = "SOULACY_CHANNELS_\(kind.uppercased())_"
        for (name, value) in environment where name.hasPrefix(prefix) {
            let key = String(name.dropFirst(prefix.count)).lowercased()
            guard !key.isEmpty else { continue }
            values[key] = .string(value)
        }
    }

    /// The `llm:` block as provider variables, under whatever the environment already says.
    func withLLM(from node: YAMLNode?, environment: [String: String]) -> GatewayConfigFile {
        var config = self
        guard let node, case .map(let llm) = Self.setting(node) else { return config }
        var derived: [String: String] = [:]
        if let provider = llm["default_provider"]?.text, !provider.isEmpty { derived["SOULACY_LLM_DEFAULT_PROVIDER"] = provider }
        if case .list(let allowed)? = llm["allowed_providers"] {
            derived["SOULACY_LLM_ALLOWED_PROVIDERS"] = allowed.compactMap(\.text).joined(separator: ",")
        }
        if case .map(let providers)? = llm["providers"] {
            for (id, block) in providers {
                guard case .map(let fields) = block else { continue }
                let (base, key, model) = (fields["base_url"]?.text, fields["api_key"]?.text, fields["model"]?.text)
                switch id.lowercased() {
                case "openai":
                    derived["OPENAI_BASE_URL"] = base; derived["OPENAI_API_KEY"] = key; derived["SOULACY_OPENAI_MODEL"] = model
                case "anthropic":
                    derived["ANTHROPIC_BASE_URL"] = base; derived["ANTHROPIC_API_KEY"] = key; derived["SOULACY_ANTHROPIC_MODEL"] = model
                case "nvidia":
                    derived["NVIDIA_BASE_URL"] = base; derived["NVIDIA_API_KEY"] = key; derived["SOULACY_NVIDIA_MODEL"] = model
                case "ollama":
                    derived["OLLAMA_HOST"] = base; derived["OLLAMA_API_KEY"] = key; derived["SOULACY_OLLAMA_MODEL"] = model
                default:
                    let upper = id.uppercased().replacingOccurrences(of: "-", with: "_")
                    derived["SOULACY_LLM_\(upper)_BASE_URL"] = base; derived["SOULACY_LLM_\(upper)_API_KEY"] = key; derived["SOULACY_LLM_\(upper)_MODEL"] = model
                }
            }
        }
        // The original's precedence: the environment over the file.
        config.llmEnvironment = derived.filter { !$0.value.isEmpty && environment[$0.key] == nil }
        return config
    }

    /// A YAML node as a channel setting: quoted scalars are strings; plain ones read as YAML 1.1 booleans, numbers
    /// or null where they look like them (as Go's YAML decoder gives them to the original).
    /// Keys are case-insensitive as the original reads them, except the names under `env:`, which are a sidecar's
    /// variable names (`MATRIX_TOKEN` stays `MATRIX_TOKEN`).
    static func setting(_ node: YAMLNode, keepingKeys: Bool = false) -> ChannelSetting {
        switch node {
        case .scalar(let s):
            if s.isQuoted { return .string(s.value) }
            if node.isNull { return .null }
            switch s.value {
            case "true", "True", "TRUE", "yes", "Yes", "on", "On": return .bool(true)
            case "false", "False", "FALSE", "no", "No", "off", "Off": return .bool(false)
            default: break
            }
            if let n = Double(s.value), n.isFinite, s.value.first.map({ $0.isNumber || $0 == "-" || $0 == "+" }) == true { return .number(n) }
            return .string(s.value)
        case .sequence(let items, _): return .list(items.map { setting($0) })
        case .mapping:
            var fields: [String: ChannelSetting] = [:]
            for entry in node.mappingEntries ?? [] {
                let key = keepingKeys ? entry.key : entry.key.lowercased()
                fields[key] = setting(entry.value, keepingKeys: !keepingKeys && key == "env")
            }
            return .map(fields)
        }
    }
}

/// A gateway config that cannot be read, naming the file and where.
public struct GatewayConfigError: Error, Sendable, CustomStringConvertible {
    public let file: String
    public let message: String
    public var description: String { "\(file): \(message)" }
}
