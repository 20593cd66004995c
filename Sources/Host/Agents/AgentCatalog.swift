import ChannelAPI
import Foundation
import Synchronization

/// The agents the gateway runs right now, reloaded when their files change.
///
/// Everything that needs an agent (runs, schedules, triggers, the API) asks the catalog at the moment it needs
/// it, so an edit applies at the next run; a run in flight keeps the definition it started with.
public final class AgentCatalog: Sendable {
    /// What one reload did, for logs and tests.
    public struct ReloadOutcome: Sendable, Equatable {
        public var added: [String] = []
        public var changed: [String] = []
        public var removed: [String] = []
        /// Files that no longer load or validate; their previous agents keep running.
        public var keptPrevious: [String] = []
        public var isEmpty: Bool { added.isEmpty && changed.isEmpty && removed.isEmpty }
    }

    private struct State {
        var config: SoulConfig
        /// The agents each file last loaded without errors, in walk order.
        var files: [(path: String, agents: [AgentConfig])]
        /// What each file's text was when last read, so an unchanged file is not reported again.
        var texts: [String: String]
        var observers: [Int: AsyncStream<SoulConfig>.Continuation] = [:]
        var nextObserver = 0
        var lastReload: ReloadOutcome?
        /// Each file's problems from its latest read (warnings too), so the console shows why a file did not load.
        var problems: [String: [ConfigError]] = [:]
    }

    public let path: String
    let destinations: [String: DestinationValidator]
    let defaults: [String: DefaultOutput]
    let environment: [String: String]
    let log: Log
    private let state: Mutex<State>

    /// Loads the agents once; a file that does not load stops the start (nothing is running yet to fall back on).
    public init(path: String, destinations: [String: DestinationValidator], defaults: [String: DefaultOutput] = [:], environment: [String: String],
                log: Log) throws(ConfigErrors) {
        self.path = path
        self.destinations = destinations
        self.defaults = defaults
        self.environment = environment
        self.log = log
        let result = AgentFiles.load(path: path, destinations: destinations, defaults: defaults, environment: environment)
        let fileErrors = result.problems.filter { p in p.severity == .error && result.rejectedFiles.contains(p.file) }
        if !fileErrors.isEmpty || (result.files.isEmpty && result.problems.contains { $0.severity == .error }) {
            throw ConfigErrors(errors: result.problems.filter { $0.severity == .error })
        }
        for problem in result.problems { Self.report(problem, log: log) }
        let files = result.files.map { ($0.path, $0.agents ?? []) }
        state = Mutex(State(config: AgentFiles.merge(files.map(\.1)), files: files, texts: Self.texts(files.map(\.0)),
                            problems: Dictionary(grouping: result.problems, by: \.file)))
        for agent in result.config.agents { Self.announce(agent, log: log) }
    }

    /// For tests and embedders: a fixed set of agents, never reloaded.
    public init(config: SoulConfig, log: Log = Log()) {
        path = ""
        destinations = [:]
        defaults = [:]
        environment = [:]
        self.log = log
        state = Mutex(State(config: config, files: [], texts: [:]))
    }

    public var current: SoulConfig { state.withLock { $0.config } }

    /// What the latest reload did (nil before the first): a save that did not load shows in `keptPrevious`.
    public var lastReload: ReloadOutcome? { state.withLock { $0.lastReload } }

    public func agent(id: String) -> AgentConfig? { current.agent(id: id) }

    /// The problems of every agent file as last read, in file order then position: errors of a file that did not
    /// load (its previous version, if any, stays in use) and warnings of files that did.
    public var problems: [ConfigError] {
        state.withLock { s in
            s.problems.keys.sorted().flatMap { file in (s.problems[file] ?? []).sorted { ($0.line, $0.column) < ($1.line, $1.column) } }
        }
    }

    /// The current agents now, then again after every reload that changes them.
    public func updates() -> AsyncStream<SoulConfig> {
        let (stream, continuation) = AsyncStream.makeStream(of: SoulConfig.self, bufferingPolicy: .bufferingNewest(1))
        let id = state.withLock { s in
            let id = s.nextObserver
            s.nextObserver += 1
            s.observers[id] = continuation
            continuation.yield(s.config)
            return id
        }
        continuation.onTermination = { [weak self] _ in self?.state.withLock { _ = $0.observers.removeValue(forKey: id) } }
        return stream
    }

    /// Reads every agent file again. A file that no longer loads, or whose agents no longer validate, keeps its
    /// previous agents (the errors are logged with their positions); a deleted file's agents go.
    @discardableResult
    public func reload() -> ReloadOutcome {
        guard !path.isEmpty else { return ReloadOutcome() }
        let paths = AgentFiles.paths(under: path)
        let texts = Self.texts(paths)
        var outcome = ReloadOutcome()
        let (previousFiles, previousTexts) = state.withLock { ($0.files, $0.texts) }
        var files: [(path: String, agents: [AgentConfig])] = []
        var problemsRead: [String: [ConfigError]] = [:]
        for file in paths {
            let previous = previousFiles.first { $0.path == file }?.agents
            // An unchanged file keeps what it had (including a fall-back to its last good version).
            if let previous, texts[file] == previousTexts[file] {
                files.append((file, previous))
                continue
            }
            let (agents, problems) = AgentFiles.loadFile(file, text: texts[file], destinations: destinations, defaults: defaults, environment: environment, strict: false)
            let failed = agents == nil || problems.contains { $0.severity == .error }
            for problem in problems { Self.report(problem, log: log) }
            problemsRead[file] = problems
            if failed, let previous {
                log.error("\(file) did not load; its previous version stays in use until the file is fixed")
                outcome.keptPrevious.append(file)
                files.append((file, previous))
            } else {
                files.append((file, agents ?? []))
            }
        }
        let config = AgentFiles.merge(files.map(\.agents))
        let observers: [AsyncStream<SoulConfig>.Continuation] = state.withLock { s in
            let before = Dictionary(s.config.agents.map { ($0.id, $0) }, uniquingKeysWith: { $1 })
            let after = Dictionary(config.agents.map { ($0.id, $0) }, uniquingKeysWith: { $1 })
            outcome.added = after.keys.filter { before[$0] == nil }.sorted()
            outcome.removed = before.keys.filter { after[$0] == nil }.sorted()
            outcome.changed = after.keys.filter { id in before[id].map { Self.fingerprint($0) != Self.fingerprint(after[id]!) } ?? false }.sorted()
            s.files = files
            // Unchanged files keep the problems of their last read; deleted files' go.
            s.problems = Dictionary(uniqueKeysWithValues: paths.compactMap { file in
                (problemsRead[file] ?? s.problems[file]).map { (file, $0) }
            })
            s.texts = texts
            s.config = config
            s.lastReload = outcome
            return outcome.isEmpty ? [] : Array(s.observers.values)
        }
        if !outcome.isEmpty {
            log.info("agents reloaded: \([("added", outcome.added), ("changed", outcome.changed), ("removed", outcome.removed)].filter { !$0.1.isEmpty }.map { "\($0.0) \($0.1.joined(separator: ", "))" }.joined(separator: "; "))")
            for id in outcome.added + outcome.changed { if let agent = config.agent(id: id) { Self.announce(agent, log: log) } }
        }
        for observer in observers { observer.yield(config) }
        return outcome
    }

    /// The files as they are now, for `watch(from:)`: taken when the gateway starts, so a change made between the
    /// start and the watcher's first look is not taken for the baseline.
    public func fileSignature() -> [String: String] { path.isEmpty ? [:] : Self.signature(path) }

    /// Polls the agent files and reloads when they change and then hold still for one interval, until cancelled.
    /// Polling a few stat calls a quarter second is cheap and works on every file system (bind mounts included).
    public func watch(from baseline: [String: String]? = nil, interval: Duration = .milliseconds(250)) async {
        guard !path.isEmpty else { return }
        var seen = baseline ?? Self.signature(path)
        var pending = false
        while !Task.isCancelled {
            do { try await Task.sleep(for: interval) } catch { return }
            let now = Self.signature(path)
            if now != seen {
                seen = now
                pending = true
            } else if pending {
                pending = false
                reload()
            }
        }
    }

    private static func signature(_ path: String) -> [String: String] {
        var result: [String: String] = [:]
        for file in AgentFiles.paths(under: path) {
            let attributes = try? FileManager.default.attributesOfItem(atPath: file)
            let modified = (attributes?[.modificationDate] as? Date)?.timeIntervalSince1970 ?? 0
            result[file] = "\(modified)/\(attributes?[.size] as? Int ?? -1)/\(attributes?[.systemFileNumber] as? Int ?? 0)"
        }
        return result
    }

    private static func texts(_ paths: [String]) -> [String: String] {
        var result: [String: String] = [:]
        for path in paths { result[path] = try? String(contentsOfFile: path, encoding: .utf8) }
        return result
    }

    /// What decides whether an agent changed: its file's text for it is not at hand, so the definition's own description.
    private static func fingerprint(_ agent: AgentConfig) -> String { String(reflecting: agent) }

    static func report(_ problem: ConfigError, log: Log) {
        // The log line carries its level already; the position and message follow it.
        if problem.severity == .error { log.error(problem.description) } else { log.warning("\(problem.position): \(problem.message)") }
    }

    /// Says once per agent at start (and when it changes) what it is, and what of its file this gateway does not run.
    static func announce(_ agent: AgentConfig, log: Log) {
        if let reason = agent.disabledReason {
            log.error("agent \(agent.id) is parked until its file is fixed: \(reason)")
        } else if !agent.enabled {
            log.info("agent \(agent.id) is disabled (enabled: false)")
        }
        if !agent.notRunHere.isEmpty {
            log.warning("agent \(agent.id): accepted, not run here: \(agent.notRunHere.joined(separator: "; "))")
        }
    }
}
