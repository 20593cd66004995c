import ChannelAPI
import Foundation

/// What loading a SOUL.yaml or an agents directory found: the agents, and every problem with its position.
public struct AgentLoadResult: Sendable {
    /// Each file read, in the order read: its agents, or nil when the file was rejected.
    public var files: [(path: String, agents: [AgentConfig]?)]
    public var problems: [ConfigError]

    /// The agents of every file that loaded; a later file's id replaces an earlier one (Soulacy's walk order).
    public var config: SoulConfig { AgentFiles.merge(files.compactMap(\.agents)) }
    public var rejectedFiles: [String] { files.filter { $0.agents == nil }.map(\.path) }
    public var hasErrors: Bool { problems.contains { $0.severity == .error } }
}

/// Finds and reads agent files: a single file, or every `*.yaml`/`*.yml` at any depth under a directory.
public enum AgentFiles {
    /// Hidden folders (`.agent-history` snapshots, `.git`, other workspaces under `.workspaces`) and `node_modules` are skipped.
    public static func paths(under path: String) -> [String] {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else { return [path] }
        guard isDirectory.boolValue else { return [path] }
        var found: [String] = []
        func walk(_ directory: String) {
            guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return }
            for name in names.sorted() where !name.hasPrefix(".") && name != "node_modules" {
                let full = directory + "/" + name
                var dir: ObjCBool = false
                guard FileManager.default.fileExists(atPath: full, isDirectory: &dir) else { continue }
                if dir.boolValue { walk(full) } else if name.hasSuffix(".yaml") || name.hasSuffix(".yml") { found.append(full) }
            }
        }
        walk(path.hasSuffix("/") && path.count > 1 ? String(path.dropLast()) : path)
        return found
    }

    public static func load(path: String, destinations: [String: DestinationValidator], defaults: [String: DefaultOutput] = [:],
                            environment: [String: String] = ProcessInfo.processInfo.environment, strict: Bool = false) -> AgentLoadResult {
        var result = AgentLoadResult(files: [], problems: [])
        let files = paths(under: path)
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue, files.isEmpty {
            result.problems.append(ConfigError(file: path, line: 1, column: 1, message: "no agent files (*.yaml) in this directory", severity: .warning))
        }
        for file in files {
            let (agents, problems) = loadFile(file, destinations: destinations, defaults: defaults, environment: environment, strict: strict)
            result.files.append((file, agents))
            result.problems += problems
        }
        // The same id in two files: the later file wins, as in Soulacy; say so.
        var seen: [String: String] = [:]
        for (file, agents) in result.files {
            for agent in agents ?? [] {
                if let earlier = seen[agent.id], earlier != file {
                    result.problems.append(ConfigError(file: file, line: 1, column: 1,
                                                       message: "agent id '\(agent.id)' is also defined in \(earlier); this file's agent is used", severity: .warning))
                }
                seen[agent.id] = file
            }
        }
        return result
    }

    /// `text`: the file's contents when the caller has read them already (a reload compares them first).
    public static func loadFile(_ file: String, text known: String? = nil, destinations: [String: DestinationValidator],
                                defaults: [String: DefaultOutput] = [:], environment: [String: String],
                                strict: Bool) -> (agents: [AgentConfig]?, problems: [ConfigError]) {
        let text: String
        do {
            text = try known ?? String(contentsOfFile: file, encoding: .utf8)
        } catch {
            return (nil, [ConfigError(file: file, line: 1, column: 1, message: "cannot read the file: \(error.localizedDescription)")])
        }
        var loader = SoulConfigLoader(file: file, destinations: destinations, defaults: defaults, environment: environment, strict: strict)
        let agents = loader.parse(text: text)
        return (agents, loader.problems)
    }

    static func merge(_ lists: [[AgentConfig]]) -> SoulConfig {
        var order: [String] = []
        var byID: [String: AgentConfig] = [:]
        for agent in lists.joined() {
            if byID[agent.id] == nil { order.append(agent.id) }
            byID[agent.id] = agent
        }
        return SoulConfig(agents: order.compactMap { byID[$0] })
    }
}
