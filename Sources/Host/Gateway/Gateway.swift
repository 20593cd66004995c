import APNs
import FCM
import Relay
import WebPush
import ChannelAPI
import ChannelDelivery
import Console
import Foundation
import Lifecycle
import Glibc
import APIKit
import Identity
import Metrics
import LLM
import Mobile
import MobileHTTP
import Crypto
import SQLite
import SQLiteStores
import PostgreSQL
import PostgresStores
import Synchronization

public struct GatewayOptions: Sendable {
    public var configPath: String
    public var dataDirectory: String
    public var host: String
    public var port: UInt16
    public var clock: any WallClock
    public var log: Log
    public var maximumBodyBytes: Int
    public var durability: Durability
    /// Where SOULACY_MOBILE_* settings are read from (the process environment by default).
    public var environment: [String: String]
    /// Transports added by code (plugins, tests), tried before the ones the environment configures.
    public var extraTransports: [any WakeTransport]
    /// Channels added by code (a webhook, a sidecar), beside `mobile`: SOUL.yaml outputs may name them, and their
    /// destinations are checked when the agent files load.
    public var extraChannels: [any Channel] = []
    /// Channels reached through the durable hand-off that code adds (an embedder's own), beside the ones the
    /// gateway config's `channels:` block builds.
    public var extraOutboundChannels: [any OutboundChannel] = []
    /// What builds a channel from its `channels.<kind>` block, beside the built-in ones (a kind of the embedder's own).
    public var extraChannelFactories: [any ChannelFactory] = []
    /// Channel plugins: their kinds of channel, and the services and routes they bring.
    public var plugins: [any GatewayPlugin] = []
    /// The Soulacy user's gateway config (`channels:`, `llm:`); nil: `SOULACY_GATEWAY_CONFIG`, else
    /// `~/.soulacy/config.yaml` when it exists.
    public var gatewayConfigPath: String?
    public var retryPolicy: RetryPolicy
    /// How long an approval waits for an answer before the run sees a denial.
    public var approvalTimeout: TimeInterval
    /// The least time between two routine Live Activity updates of one run (the original's 2 s).
    public var liveActivityInterval: TimeInterval = 2
    /// The same-Wi-Fi listener (HTTPS on a self-signed certificate that pairing links pin), off when nil.
    public var lanHost: String?
    public var lanPort: UInt16 = 0
    /// The address pairing links point phones at; defaults to the listen address.
    public var publicURL: String?
    /// The main port serves TLS (the gateway's pinned certificate) and plain HTTP together, as the original's
    /// auto-TLS does; false (or `SOULACY_TLS=off`) serves plain HTTP only (behind a proxy that terminates TLS, say).
    public var autoTLS = true
    /// Called once when graceful shutdown begins (a signal, `stop()`), before anything drains: `STOPPING=1` to systemd.
    public var shutdownBegins: (@Sendable () -> Void)?
    /// Where the gateway's metrics are kept (a fresh registry each gateway; an embedder may pass its own).
    public var metrics = MetricsRegistry()
    /// A second listener serving only `GET /metrics`, without a key, for a local scraper (`SOULACY_METRICS_LISTEN`).
    public var metricsHost: String?
    public var metricsPort: UInt16 = 0

    public init(configPath: String, dataDirectory: String, host: String = "127.0.0.1", port: UInt16 = 8080,
                clock: any WallClock = SystemWallClock(), log: Log = Log(), maximumBodyBytes: Int = 1 << 20,
                durability: Durability = .full, environment: [String: String] = ProcessInfo.processInfo.environment,
                extraTransports: [any WakeTransport] = [], retryPolicy: RetryPolicy = RetryPolicy(),
                approvalTimeout: TimeInterval = 600, publicURL: String? = nil) {
        self.approvalTimeout = approvalTimeout
        self.publicURL = publicURL
        self.environment = environment
        self.extraTransports = extraTransports
        self.retryPolicy = retryPolicy
        self.configPath = configPath
        self.dataDirectory = dataDirectory
        self.host = host
        self.port = port
        self.clock = clock
        self.log = log
        self.maximumBodyBytes = maximumBodyBytes
        self.durability = durability
    }
}

public enum GatewayStartError: Error, CustomStringConvertible {
    case config(ConfigErrors)
    case dataDirectory(String)
    case storage(String)
    case listen(String)
    case transport(String)
    case settings(String)

    public var description: String {
        switch self {
        case .config(let errors): return errors.description
        case .dataDirectory(let message), .storage(let message), .listen(let message), .transport(let message), .settings(let message): return message
        }
    }
}

/// One running gateway: storage, channels, runs, schedules and the HTTP API, wired together.
public final class Gateway: Sendable {
    /// Channel names SOUL.yaml may use without a running gateway (for `soulacy check`).
    public static let destinationValidators: [String: DestinationValidator] = [
        "mobile": { text throws(DestinationError) in _ = try Destination(parsing: text) },
    ]

    public let options: GatewayOptions

    /// A channel's own destination check, as the agent-file loader calls it.
    static func validator(of channel: any Channel) -> DestinationValidator {
        return { text throws(DestinationError) in try channel.validate(destination: text) }
    }

    public static func validator(of channel: any OutboundChannel) -> DestinationValidator {
        return { text throws(DestinationError) in try channel.validate(destination: text) }
    }
    /// Every store, on the engine the composition root picked.
    public let stores: GatewayStores
    public let keys: any APIKeyStore
    public let runStore: any RunStore
    public let runs: AgentRuns
    public let household: any HouseholdStore
    /// The web console's sessions and one-time sign-in codes.
    public let consoleSessions: any ConsoleSessionStore
    public let approvals: ApprovalsBroker
    public let memory: any MemoryFactStore
    /// The agents, reloaded when their files change.
    public let catalog: AgentCatalog
    /// The agents as they are now.
    public var config: SoulConfig { catalog.current }
    public let channels: ChannelRegistry
    /// Channels reached through the durable hand-off, by configured id.
    public let outbound: OutboundChannelRegistry
    public let channelOutbox: any ChannelOutbox
    public let channelDispatcher: ChannelDispatcher
    /// Messages people send to agents' bots, carried into runs.
    public let inbound: ChannelInbound
    /// The gateway config that was read (its path, its channel blocks).
    public let gatewayConfig: GatewayConfigFile
    public let dispatcher: PushDispatcher
    public let liveActivities: LiveActivityPublisher
    public let scheduler: Scheduler
    let providers: LLMProviders
    let server: HTTPServer
    let lanServer: HTTPServer?
    /// The keyless metrics listener (`SOULACY_METRICS_LISTEN`), when set.
    let metricsServer: HTTPServer?
    /// The pin of the gateway's one certificate (`fp` in pairing links), when TLS is served at all.
    public let tlsPin: String?
    public let idempotency: IdempotencyLog
    public let housekeeping: Housekeeping
    public let carriage: RelayCarriage?
    let pinnedLink = PinnedLink()
    /// The host links name for the listen address (a wildcard resolved to this machine's LAN address, once).
    let linkHost: String
    public let router: Router
    /// What the main listener serves: the router behind its middleware (authentication, idempotency, …). Tests
    /// answer requests through it in process.
    public let api: Responder
    /// The running service group and the task that ends when it has stopped (and the database is closed).
    private let running = Mutex<(group: ServiceGroup, task: Task<Void, Never>)?>(nil)
    private let boundPort = BoundPort()

    /// The `SOULACY_*` settings read from `options.environment`, once.
    public let settings: GatewaySettings
    /// The plugins' own services, run between the channels they need and the dispatcher that sends through them.
    let pluginServices: [ServiceGroup.Entry]

    /// A gateway on SQLite in the data directory (tests, embedders); `open(options:)` honours `SOULACY_DATABASE_URL`.
    public convenience init(options: GatewayOptions) throws(GatewayStartError) {
        try self.init(options: options, postgres: nil)
    }

    /// The gateway on the engine the settings name: PostgreSQL at `SOULACY_DATABASE_URL` (migrated once under an
    /// advisory lock however many nodes start together; this node's interrupted runs marked; other nodes' writes
    /// followed), else SQLite in the data directory.
    public static func open(options: GatewayOptions) async throws(GatewayStartError) -> Gateway {
        let settings: GatewaySettings
        do { settings = try GatewaySettings.fromEnvironment(options.environment) } catch { throw .settings(error.description) }
        guard let url = settings.databaseURL else { return try Gateway(options: options) }
        let shown = PostgresURL.redacted(url)
        let opened: (pool: PostgresPool, applied: [PostgresMigration])
        do { opened = try await PostgresGatewaySchema.openPool(url: url, size: settings.databasePoolSize) } catch {
            throw .storage("cannot open the PostgreSQL database \(shown): \(error)")
        }
        let pool = opened.pool
        if !opened.applied.isEmpty { options.log.info("database: applied \(opened.applied.count) migration(s) to \(shown)") }
        do {
            // What every node shares is made once: the first node to get here writes the keys and the TLS identity
            // into the data directory they all mount, the others read them.
            try await pool.withAdvisoryLock(Self.identityLockKey) { try Self.prepareSharedIdentity(options: options, settings: settings) }
        } catch {
            pool.close()
            if let error = error as? GatewayStartError { throw error }
            throw .dataDirectory("cannot make the keys and certificate every node shares in \(options.dataDirectory): \(error)")
        }
        let gateway: Gateway
        do { gateway = try Gateway(options: options, postgres: pool) } catch {
            pool.close()
            throw error
        }
        do {
            let interrupted = try await gateway.runStore.markInterrupted(at: options.clock.now())
            if interrupted > 0 { options.log.warning("\(interrupted) run(s) of this node were interrupted by its last stop") }
            // Other nodes' writes reach this node's cached pages, and their decisions this node's waiters.
            try await gateway.stores.followOtherWriters()
            try await gateway.approvals.followOtherWriters()
        } catch {
            gateway.stores.close()
            throw .storage("cannot start on the PostgreSQL database \(shown): \(error)")
        }
        options.log.info("database: PostgreSQL at \(shown), node \(settings.resolvedNodeID(dataDirectory: options.dataDirectory))")
        return gateway
    }

    /// Serializes the first start of several nodes over the files they share (an advisory lock's key).
    static let identityLockKey: Int64 = 0x736F_756C_6163_7901

    /// The data directory and what in it is the gateway's identity: the sealing key, the console code key, the TLS
    /// certificate phones pin, the Web Push keys. Made when missing, read when there.
    static func prepareSharedIdentity(options: GatewayOptions, settings: GatewaySettings) throws {
        try FileManager.default.createDirectory(atPath: options.dataDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        _ = try SecretFile.key(at: options.dataDirectory + "/relay-secrets.key", variable: "relay secrets key")
        _ = try SecretFile.key(at: ConsoleSessionPolicy.codeKeyPath(dataDirectory: options.dataDirectory), variable: "console code key")
        let lanHost = options.lanHost ?? settings.lanListen?.host
        if (options.autoTLS && settings.autoTLS) || lanHost != nil {
            _ = try GatewayTLSIdentity.loadOrCreate(dataDirectory: options.dataDirectory, hosts: [options.host] + (lanHost.map { [$0] } ?? []))
        }
        if try WebPushConfiguration.fromEnvironment(options.environment) != nil {
            _ = try WebPushKeys.loadOrCreate(dataDirectory: options.dataDirectory)
        }
    }

    init(options given: GatewayOptions, postgres: PostgresPool?) throws(GatewayStartError) {
        let settings: GatewaySettings
        do { settings = try GatewaySettings.fromEnvironment(given.environment) } catch { throw .settings(error.description) }
        self.settings = settings
        // Code's choices first; the environment fills what code left open.
        var options = given
        options.publicURL = given.publicURL ?? settings.publicURL
        options.autoTLS = given.autoTLS && settings.autoTLS
        if let timeout = settings.approvalTimeout { options.approvalTimeout = timeout }
        if options.lanHost == nil, let lan = settings.lanListen {
            options.lanHost = lan.host
            options.lanPort = lan.port
        }
        if options.metricsHost == nil, let listen = settings.metricsListen {
            options.metricsHost = listen.host
            options.metricsPort = listen.port
        }
        // Several gateways on one database name themselves (SOULACY_NODE_ID): every line says which node wrote it.
        if let node = settings.nodeID { options.log = options.log.with("node_id", node) }
        let metrics = GatewayMetrics(options.metrics)
        self.options = options
        signal(SIGPIPE, SIG_IGN)
        let log = options.log
        let gatewayConfig: GatewayConfigFile
        do {
            gatewayConfig = try GatewayConfigFile.load(path: options.gatewayConfigPath ?? GatewayConfigFile.defaultPath(environment: options.environment),
                                                       environment: options.environment)
        } catch {
            throw .settings(error.description)
        }
        self.gatewayConfig = gatewayConfig
        if let path = gatewayConfig.path { log.info("gateway config: \(path)") }
        let factories = options.extraChannelFactories + options.plugins.flatMap(\.channelFactories) + Self.builtInChannelFactories(environment: options.environment, log: log, clock: options.clock)
        let built = Self.outboundChannels(config: gatewayConfig, factories: factories, extra: options.extraOutboundChannels, log: log)
        let outbound = built.registry
        self.outbound = outbound
        let catalog: AgentCatalog
        do {
            var destinations = Self.destinationValidators
            for channel in outbound.all { destinations[channel.name] = Self.validator(of: channel) }
            for channel in options.extraChannels where channel.name != "mobile" {
                destinations[channel.name] = Self.validator(of: channel)
            }
            // The gateway config's llm.allowed_providers reaches the agent files' check (the environment still wins).
            var agentEnvironment = options.environment
            if let allowed = gatewayConfig.llmEnvironment["SOULACY_LLM_ALLOWED_PROVIDERS"] { agentEnvironment["SOULACY_LLM_ALLOWED_PROVIDERS"] = allowed }
            catalog = try AgentCatalog(path: options.configPath, destinations: destinations, defaults: built.defaults, environment: agentEnvironment, log: log)
        } catch {
            throw .config(error)
        }
        self.catalog = catalog
        do {
            try FileManager.default.createDirectory(atPath: options.dataDirectory, withIntermediateDirectories: true,
                                                    attributes: [.posixPermissions: 0o700])
        } catch {
            throw .dataDirectory("cannot create the data directory \(options.dataDirectory): \(error.localizedDescription)")
        }
        DataDirectoryPermissions.tighten(options.dataDirectory, log: log)
        // The key that seals secrets in the database lives beside it, never in it: a send's destination (an incoming-
        // webhook URL holds its key) and the phones' relay secrets.
        let sealingKey: [UInt8]
        do {
            sealingKey = try SecretFile.key(at: options.dataDirectory + "/relay-secrets.key", variable: "relay secrets key")
        } catch {
            throw .dataDirectory("cannot read the key that seals secrets in the database: \(error)")
        }
        let codeKey: [UInt8]
        do { codeKey = try SecretFile.key(at: ConsoleSessionPolicy.codeKeyPath(dataDirectory: options.dataDirectory), variable: "console code key") } catch {
            throw .storage("cannot open the console code key: \(error)")
        }
        let storeKeys = GatewayStores.Keys(sealing: sealingKey, consoleCodes: codeKey)
        // This process among the gateway's nodes: its runs, leases and log lines carry it.
        let node = settings.resolvedNodeID(dataDirectory: options.dataDirectory)
        let stores: GatewayStores
        if let postgres {
            stores = GatewayStores.postgres(pool: postgres, listenURL: settings.databaseURL, node: node,
                                            keys: storeKeys, clock: options.clock, metrics: metrics.mobile, log: log.component("database"))
        } else {
            do {
                let database = try DatabasePool(path: options.dataDirectory + "/soulacy.db", durability: options.durability, maximumBytes: settings.databaseMaximumBytes,
                                                metrics: metrics.database)
                // The schema is brought up to date once, here, before any store exists.
                let opened = try GatewayStores.sqlite(database: database, keys: storeKeys, clock: options.clock, metrics: metrics.mobile)
                stores = opened.stores
                if opened.interrupted > 0 { log.warning("\(opened.interrupted) run(s) were interrupted by the last stop") }
            } catch {
                throw .storage("cannot open the database in \(options.dataDirectory): \(error)")
            }
        }
        self.stores = stores
        keys = stores.keys
        runStore = stores.runs
        household = stores.household
        memory = stores.memory
        let transports = try Self.wakeTransports(options: options, log: log)
        channelOutbox = stores.channelOutbox
        let mobileStorage = stores.mobile
        // The endpoints channels disabled: each attempt reads them (through a snapshot a second old at most; another
        // gateway's 410 shows within that), and the console's health page lists them.
        let endpointStates = EndpointStateSnapshot(stores.endpointStates)
        channelDispatcher = ChannelDispatcher(lane: ChannelLane(outbox: channelOutbox, channels: outbound, clock: options.clock, policy: options.retryPolicy, log: log.component("channels"),
                                                                  endpoints: endpointStates, metrics: metrics.channels),
                                              clock: options.clock, log: log, lease: settings.outboxLease)
        dispatcher = PushDispatcher(outbox: mobileStorage.outbox, devices: mobileStorage.devices, consoleEvents: mobileStorage.consoleEvents, transports: transports,
                                    clock: options.clock, policy: options.retryPolicy, log: log.component("push"), lease: settings.outboxLease,
                                    metrics: metrics.mobile)
        let liveActivities = LiveActivityPublisher(tokens: stores.liveActivityTokens, transports: transports, clock: options.clock, log: log,
                                                   progressInterval: options.liveActivityInterval)
        self.liveActivities = liveActivities
        let mobile = MobileChannel(store: mobileStorage.inbox, dispatcher: dispatcher)
        // Approvals and failed location runs wake phones through this seam; only the assembly knows it is the mobile channel.
        let deviceAlerts = MobileDeviceAlerts(storage: mobileStorage, dispatcher: dispatcher)
        approvals = ApprovalsBroker(store: stores.approvals, alerts: deviceAlerts, clock: options.clock,
                                    defaultTimeout: options.approvalTimeout)
        approvals.observe { [events = mobileStorage.consoleEvents] in events.publish(.approval($0.callID, state: $0.state.rawValue), to: .subject($0.subject)) }
        // The mobile channel is the durable sink every gateway has; an embedder's own channel may not replace it.
        channels = ChannelRegistry([mobile] + options.extraChannels.filter { $0.name != "mobile" })
        let boundPort = self.boundPort
        let hostForURL = options.host.contains(":") ? "[\(options.host)]" : options.host
        let hostEnvironment = options.environment
        // The gateway config's llm: block under the environment's own provider variables (the original's precedence).
        let providers = LLMProviders(environment: gatewayConfig.llmEnvironment.merging(options.environment) { _, environment in environment })
        self.providers = providers
        for agent in catalog.current.agents where agent.isOn {
            if case .llm(let settings) = agent.runner {
                do { _ = try providers.provider(named: settings.provider, baseURL: settings.baseURL) } catch {
                    log.warning("agent \(agent.id) cannot run until a model provider is configured: \(error)")
                }
            }
        }
        let nodes = DeviceNodes(store: stores.deviceNodes, inbox: mobileStorage.inbox, dispatcher: dispatcher, clock: options.clock)
        let runsBox = LateBound<AgentRuns>()
        let llmEnvironment = Self.llmEnvironment(tools: PhoneTools.all(nodes: nodes, clock: options.clock),
                                                 approvals: approvals, memory: memory, liveActivities: liveActivities, runs: runsBox,
                                                 runStore: runStore, clock: options.clock, log: log)
        runs = AgentRuns(catalog: catalog, channels: channels, store: runStore, clock: options.clock, log: log,
                         progress: ConsoleRunProgress(liveActivities, events: mobileStorage.consoleEvents),
                         alerts: deviceAlerts, outbound: outbound, channelOutbox: channelOutbox,
                         defaultOutputs: built.defaults,
                         sendsRecorded: { [channelDispatcher] in channelDispatcher.poke() }, metrics: metrics.agents) { agent in
            switch agent.runner {
            case .command(let command):
                // Agents call back into the gateway (mobile.invoke, approvals) at this address.
                return CommandRunner(config: command, gatewayEnvironment: ["SOULACY_API_URL": "http://\(hostForURL):\(boundPort.value.load(ordering: .relaxed))"],
                                     hostEnvironment: hostEnvironment)
            case .llm:
                return LLMRunner(agent: agent, providers: providers, environment: llmEnvironment)
            }
        }
        runsBox.set(runs)
        scheduler = Scheduler(catalog: catalog, runs: runs, store: runStore, clock: options.clock, log: log.component("scheduler"))
        inbound = ChannelInbound(pollers: built.pollers, store: stores.channelInbound, runs: runs, clock: options.clock, log: log,
                                  node: node)

        let keys = self.keys
        let credentials = runs.credentials
        // A run's own credential (its command calls back) or an API key; the console's session cookie on the main port.
        let bearer = BearerAuthentication(known: { token in credentials.principal(for: token) ?? keys.knownPrincipal(for: token) },
                                          lookUp: { token in await keys.authenticate(token) })
        var router = Router(log: log)
        router.errorResponder = StorageFailureResponder(log: log).respond
        let carriageBox = CarriageBox()
        var gatewayAPI = GatewayAPI(catalog: catalog, runs: runs, runStore: runStore, mobile: mobileStorage, scheduler: scheduler, clock: options.clock,
                                    transportNames: transports.transports.map(\.name))
        gatewayAPI.relayStatus = { await carriageBox.value?.status() }
        gatewayAPI.disabledEndpoints = { [outbound] in
            var disabled: [String: [DisabledEndpoint]] = [:]
            for case let channel as any EndpointDisablingChannel in outbound.all { disabled[channel.name] = try await channel.disabledEndpoints(in: endpointStates) }
            return disabled
        }
        gatewayAPI.nodeID = node
        router.add(gatewayAPI.routes)
        // The web console's sign-in; its codes are kept under a key beside the database, never in it.
        // Who a request comes from, the same for the rate limit and the counts of wrong codes and keys.
        let clients = ClientAddresses(trustedProxies: settings.trustedProxies)
        let consoleSessions = stores.consoleSessions
        self.consoleSessions = consoleSessions
        let consoleSession = ConsoleSessionAPI(sessions: consoleSessions, keys: keys, clients: clients)
        router.add(consoleSession.routes)
        router.add(APIKeysAPI(keys: keys, mobile: mobileStorage, revoking: { keyID, session in
            // A revoked key's console sessions end in its revocation's transaction (a key revoked below the API has
            // its sessions refused from the next request anyway).
            try consoleSessions.revoke(signedInWithKey: keyID, in: session)
        }, revoked: { keyID in
            await carriageBox.value?.revoke(keyID: keyID)
        }).routes)
        router.add(MobileAPI(storage: mobileStorage, channel: mobile, liveActivities: liveActivities).routes)
        router.add(ConsoleInboxAPI(store: mobileStorage, transports: transports, clock: options.clock).routes)
        let commandsAPI = DeviceCommandsAPI(devices: mobileStorage.devices, nodes: nodes)
        router.add(commandsAPI.routes)
        router.add(DeviceNodesAPI(nodes: nodes, clock: options.clock).routes)
        router.add(WebPushAPI(transport: transports.transports.lazy.compactMap { $0 as? WebPushTransport }.first, mobile: mobileStorage).routes)
        let port = boundPort
        let publicURL = options.publicURL
        let identity = options.autoTLS || options.lanHost != nil
            ? try GatewayTLSIdentity.loadOrCreate(dataDirectory: options.dataDirectory, hosts: [options.host] + (options.lanHost.map { [$0] } ?? []))
            : nil
        tlsPin = identity?.pin
        metrics.registerState(pushOutbox: mobileStorage.outbox, channelOutbox: channelOutbox, outbound: outbound, transports: transports, tlsCertificatePEM: identity?.certificatePEM, clock: options.clock)
        let registry = options.metrics
        router.add(Route(.GET, "/metrics", role: .admin, summary: "Metrics in the Prometheus text format") { _, _ in await GatewayMetrics.response(registry) })
        let pinnedLink = self.pinnedLink
        let linkHost = LocalAddresses.linkHost(for: options.host)
        self.linkHost = linkHost
        router.add(HouseholdAPI(household: household, keys: keys, mobile: mobileStorage, clients: clients,
                                gatewayURL: { publicURL ?? "http://\(linkHost):\(port.value.load(ordering: .relaxed))" },
                                pinned: { pinnedLink.value }, mainPortPin: options.autoTLS ? identity?.pin : nil, enroll: { keyID, subject in try? await carriageBox.value?.enroll(keyID: keyID, subject: subject) },
                                relayConfigured: { carriageBox.value != nil }).routes)
        let longPoll = settings.longPoll
        let approvalsAPI = ApprovalsAPI(broker: approvals, catalog: catalog, runs: runs, longPoll: longPoll)
        router.add(approvalsAPI.routes)
        router.add(ConsoleRoutes().routes)
        router.add(MemoryAPI(memory: memory, catalog: catalog).routes)
        router.add(AssistantAPI(runs: runs, catalog: catalog, sessions: ChatSessions()).routes)
        router.add(TriggersAPI(catalog: catalog, runs: runs, mobile: mobileStorage, cooldowns: stores.triggerCooldowns, clock: options.clock).routes)
        let pluginContext = GatewayPluginContext(outbound: outbound, clock: options.clock, log: log)
        for plugin in options.plugins { router.add(plugin.routes(pluginContext)) }
        pluginServices = options.plugins.flatMap { $0.services(pluginContext) }
        self.router = router
        let routerCopy = router
        // Calls that wait after their effect (for a run, a person, a phone) rebuild their answer on a retry after a crash.
        let idempotency = IdempotencyLog(store: stores.idempotency, clock: options.clock, killAfterEffect: settings.killAfterEffect,
                                         resumers: [AgentRuns.interruptedRunResumer(store: runStore), approvalsAPI.resumer, commandsAPI.resumer])
        self.idempotency = idempotency
        housekeeping = Housekeeping(outbox: mobileStorage.outbox, idempotency: idempotency, commands: stores.deviceNodes, memory: memory, clock: options.clock, log: log)
        // What each listener serves: the routes behind their middleware. Quick reads (the inbox) are answered on the
        // server thread; mutating calls always take the idempotent path.
        let idempotent = IdempotencyMiddleware(log: idempotency)
        // Request lines only when the log is at debug: the inbox's hot path pays nothing otherwise.
        // One access-log line per request at info (SOULACY_ACCESS_LOG=off stops the lines, never the HTTP metrics).
        let requestLog: [any Middleware] = [AccessLogMiddleware(log: settings.accessLog ? log : nil, metrics: options.metrics)]
        // One allowance per client address across both listeners; in-process answers (the relay carriage) are not counted.
        let rateLimit: [any Middleware] = settings.rateLimitPerMinute > 0
            ? [RateLimitMiddleware(limiter: RequestRateLimiter(perMinute: settings.rateLimitPerMinute, clock: options.clock), clients: clients)]
            : []
        // Authentication before idempotency: the log is scoped by the caller.
        let api = Responder(router: routerCopy, middleware: requestLog + rateLimit + [bearer, consoleSession.authentication, idempotent])
        self.api = api
        var serverConfiguration = HTTPServerConfiguration(host: options.host, port: options.port, maximumBodyBytes: options.maximumBodyBytes,
                                                          tls: options.autoTLS ? identity.map { ($0.keyPEM, $0.certificatePEM) } : nil)
        serverConfiguration.acceptsPlainHTTP = true
        serverConfiguration.threadPoolSize = settings.httpThreads
        // Handlers run on the database's own threads: a store call that waits on the write lock or an fsync holds
        // one of those, never one of Swift's few cooperative threads (quick reads still answer on the server thread).
        serverConfiguration.handlerExecutor = stores.handlerExecutor
        server = api.server(serverConfiguration)
        if let relayURL = settings.relayMailboxURL {
            let store: any RelayCarriageStore
            do {
                store = try stores.relayCarriage()
            } catch {
                throw .storage("cannot open the relay tables: \(error)")
            }
            carriage = RelayCarriage(url: relayURL, caFile: settings.relayMailboxCAFile, enrollToken: settings.relayMailboxToken, store: store, node: node,
                                     mobile: mobileStorage.inbox, keys: keys, log: log) { request, principal, secret in
                await idempotency.answer(request, principal: principal, sealingSecret: secret) { await routerCopy.handle($0, authenticated: principal) }
            }
            log.info("relay: phones can reach this gateway through the mailbox at \(relayURL)")
        } else {
            carriage = nil
        }
        carriageBox.set(carriage)
        if let carriage { metrics.registerRelay(carriage, started: options.clock.now(), clock: options.clock) }
        if let lanHost = options.lanHost, let identity {
            let door = Responder(router: routerCopy, middleware: requestLog + rateLimit + [bearer, LANDoorMiddleware(), idempotent])
            var doorConfiguration = HTTPServerConfiguration(host: lanHost, port: options.lanPort, maximumBodyBytes: options.maximumBodyBytes,
                                                            tls: (identity.keyPEM, identity.certificatePEM))
            doorConfiguration.handlerExecutor = stores.handlerExecutor
            lanServer = door.server(doorConfiguration)
        } else {
            lanServer = nil
        }
        if let metricsHost = options.metricsHost {
            // Only the metrics, without a key: meant for a scraper on this host or a private network.
            var metricsRouter = Router()
            metricsRouter.add(.GET, "/metrics", access: .open, summary: "Metrics in the Prometheus text format") { _ in await GatewayMetrics.response(registry) }
            metricsServer = Responder(router: metricsRouter).server(HTTPServerConfiguration(host: metricsHost, port: options.metricsPort, maximumBodyBytes: 1024))
        } else {
            metricsServer = nil
        }
    }

    /// Says at start, once, when agents that use Ollama cannot reach it or name a model it has not pulled.
    static func probeOllama(providers: LLMProviders, agents: SoulConfig, log: Log) async {
        guard let ollama = providers.ollama else { return }
        var users: [String: String] = [:]
        for agent in agents.agents where agent.isOn {
            guard case .llm(let llm) = agent.runner, llm.baseURL == nil,
                  (llm.provider.isEmpty ? providers.defaultProvider : llm.provider) == "ollama" else { continue }
            users[agent.id] = llm.model.isEmpty ? ollama.defaultModel : llm.model
        }
        guard !users.isEmpty else { return }
        do {
            let installed = try await ollama.installedModels()
            for (id, model) in users.sorted(by: { $0.key < $1.key })
            where !installed.contains(model) && !installed.contains(model + ":latest") {
                log.warning("agent \(id) uses the model '\(model)', which this Ollama has not pulled; run `ollama pull \(model)`")
            }
        } catch {
            log.warning("agents \(users.keys.sorted().joined(separator: ", ")) use Ollama and cannot run yet: \(error)")
        }
    }

    /// What LLM runs use in-process: the phone tools, approvals on the same broker phones answer (the run shows
    /// "waiting on you" on the lock screen), the person's facts, and a Live Activity step per tool call.
    static func llmEnvironment(tools: [String: any AgentTool], approvals: ApprovalsBroker, memory: any MemoryFactStore,
                               liveActivities: LiveActivityPublisher, runs: LateBound<AgentRuns>, runStore: any RunStore, clock: any WallClock,
                               log: Log) -> LLMRunEnvironment {
        var environment = LLMRunEnvironment()
        // Each retry of a model call is one of the run's events: the provider, its status and the wait, no more.
        environment.providerRetried = { run, retry in
            let status = retry.status.map { "answered \($0)" } ?? retry.reason
            let detail = "\(retry.provider) \(status); attempt \(retry.attempt) failed, trying again in \(retry.wait)"
            do { try await runStore.recordEvent(runID: run.runID, kind: "retry", detail: detail, at: clock.now()) } catch {
                log.error("run \(run.runID): could not record a retry: \(error)")
            }
            log.info("run \(run.runID): \(detail)")
        }
        environment.tools = tools
        environment.facts = { subject in
            ((try? await memory.facts(subject: subject, status: "active", agentID: nil, limit: MemoryFacts.promptFacts)) ?? []).map(\.content)
        }
        environment.toolCalled = { sessionID, tool in await liveActivities.toolCalled(sessionID: sessionID, tool: tool) }
        environment.approve = { callID, call, run, timeout in
            let activity = await runs.value?.activityRun(sessionID: run.sessionID)
            guard let approval = try? await approvals.open(callID: callID, subject: run.subject, agentID: run.agentID, agentName: activity?.agentName ?? run.agentID,
                                                     sessionID: run.sessionID, tool: call.name, arguments: call.arguments.serialized(),
                                                     timeout: TimeInterval(timeout.components.seconds)) else { return false }
            if let activity { await liveActivities.waitingForApproval(activity, callID: approval.callID, tool: call.name) }
            let state = await approvals.wait(callID: approval.callID)
            if activity != nil, state != .pending { await liveActivities.approvalAnswered(sessionID: run.sessionID, approved: state == .approved) }
            return state == .approved
        }
        return environment
    }

    /// The wake-up transports in order of preference; the choice is logged once at start.
    static func wakeTransports(options: GatewayOptions, log: Log) throws(GatewayStartError) -> WakeTransportRegistry {
        var registry = WakeTransportRegistry(options.extraTransports)
        do {
            if let apns = try APNsConfiguration.fromEnvironment(options.environment) {
                registry.register(try APNsTransport(configuration: apns, clock: options.clock))
                log.info("push: iOS devices are woken directly through APNs (team \(apns.teamID), key \(apns.keyID))")
            }
            if let relay = try RelayConfiguration.fromEnvironment(options.environment) {
                // Registered after APNs, so direct APNs wins for iOS when both are configured.
                let direct = registry.transports.contains { $0.name == "apns" }
                registry.register(RelayTransport(configuration: relay))
                log.info(direct ? "push: a relay is configured too, but iOS devices use direct APNs; the relay is not used"
                                : "push: iOS devices are woken through the relay at \(relay.baseURL)")
            }
            if let fcm = try FCMConfiguration.fromEnvironment(options.environment) {
                registry.register(try FCMTransport(configuration: fcm, clock: options.clock, log: log))
                log.info("push: Android devices are woken through FCM (project \(fcm.projectID))")
            }
            if let webPush = try WebPushConfiguration.fromEnvironment(options.environment) {
                // The gateway's own VAPID key, made on first start; browsers subscribe from the console.
                registry.register(WebPushTransport(configuration: webPush, keys: try WebPushKeys.loadOrCreate(dataDirectory: options.dataDirectory),
                                                   clock: options.clock, log: log))
                log.info("push: browsers subscribed from the console are woken through Web Push (VAPID contact \(webPush.contact))")
            }
        } catch let error as APNsConfigurationError {
            throw .transport(error.description)
        } catch let error as RelayConfigurationError {
            throw .transport(error.description)
        } catch let error as FCMConfigurationError {
            throw .transport(error.description)
        } catch let error as WebPushConfigurationError {
            throw .transport(error.description)
        } catch {
            throw .transport("\(error)")
        }
        if registry.transports.isEmpty {
            log.info("push: no push service configured; every delivery still lands in the inbox")
        }
        return registry
    }

    /// The LAN listener's port, when it is on.
    public var lanPort: UInt16? { lanServer?.port }
    /// The keyless metrics listener's port, when there is one.
    public var metricsPort: UInt16? { metricsServer?.port }

    /// The port the API listens on (the chosen one for port 0).
    public var port: UInt16 { server.port }

    /// A pairing code for the owner's own phone (printed at start and by `soulacy pair`): the console is the owner.
    public func ownerPairingOffer() async throws -> PairingOffer {
        try await household.createOffer(subject: Principal.ownerSubject, name: HouseholdNames.ownerName, role: .admin, createdBy: nil, madeBy: Principal.ownerSubject)
    }

    /// Where pairing links pin this gateway (`host:port`), once it listens; nil without TLS or behind a public URL.
    public var pinnedAddress: String? { pinnedLink.value?.address }

    public var pairingGatewayURL: String {
        options.publicURL ?? "http://\(linkHost):\(port)"
    }

    /// Creates the owner's admin key on first start; returns its token once, or nil when keys exist.
    public func bootstrapAdminKey() async throws -> String? {
        try await keys.mintFirstOwnerKey(name: "Owner (first start)")?.token
    }

    private func bindListeners() throws(GatewayStartError) {
        do {
            try server.start()
            // Pairing links pin the same-Wi-Fi listener when there is one, else the main port's TLS; a public URL
            // (a proxy's) is never pinned, as in the original.
            if let lanServer, let lanHost = options.lanHost, let tlsPin {
                try lanServer.start()
                pinnedLink.set((address: "\(LocalAddresses.linkHost(for: lanHost)):\(lanServer.port)", pin: tlsPin))
            } else if options.autoTLS, options.publicURL == nil, let tlsPin {
                pinnedLink.set((address: "\(linkHost):\(server.port)", pin: tlsPin))
            }
            try metricsServer?.start()
        } catch { throw .listen(error.description) }
    }

    /// Binds the listeners (so a taken port fails here, with its reason), then runs the gateway's services as one
    /// group. With `signals`, SIGTERM/SIGINT shut it down gracefully and SIGHUP reloads the agent files. Without
    /// `listening`, no socket is bound and requests are answered in process through `api` (the test kit's router mode).
    public func start(signals: [Int32] = [], listening: Bool = true) throws(GatewayStartError) {
        if listening { try bindListeners() }
        boundPort.value.store(server.port, ordering: .relaxed)
        let providers = self.providers
        let catalogForProbe = self.catalog
        let log = options.log
        Task { await Self.probeOllama(providers: providers, agents: catalogForProbe.current, log: log) }
        var services = self.services
        if signals.contains(SIGTERM) || signals.contains(SIGINT) {
            let catalog = self.catalog
            services.insert(("SIGHUP reload", SignalHandler(signal: SIGHUP) {
                log.info("SIGHUP: reloading the agent files")
                catalog.reload()
            }), at: 0)
        }
        let group = ServiceGroup(services: services, signals: signals, report: { log.info($0) })
        let (close, approvals) = (stores.close, self.approvals)
        let task = Task {
            do { try await group.run() } catch { log.error("the gateway stopped on an error: \(error)") }
            // Nothing of this gateway uses its files or connections any more.
            await approvals.stopFollowing()
            close()
        }
        running.withLock { $0 = (group, task) }
        options.log.info("soulacy \(GatewayVersion.current) listening on \(options.host):\(port) with \(config.agents.count) agent(s) from \(catalog.path)")
    }

    /// The gateway's services in start order; shutdown runs in reverse: the API drains first, then nothing new is
    /// scheduled, runs in flight finish, their wake-ups are sent, and the relay carriage stops last.
    var services: [ServiceGroup.Entry] {
        let (scheduler, catalog, runs, dispatcher, housekeeping) = (self.scheduler, self.catalog, self.runs, self.dispatcher, self.housekeeping)
        var list: [ServiceGroup.Entry] = []
        // Lines phones fetched during the drain are written last, before the database closes.
        let (fetches, consoleEvents) = (stores.mobile.fetches, stores.mobile.consoleEvents)
        list.append(("inbox fetch log", OnShutdown { await fetches.flush() }))
        if let carriage { list.append(("relay carriage", CancelledOnShutdown { await carriage.run() })) }
        list.append(("push dispatcher", CancelledOnShutdown { await dispatcher.run() }))
        let channelDispatcher = self.channelDispatcher
        // Channels with a process of their own start before the dispatcher needs them and stop after it.
        let supervised = outbound.all.compactMap { $0 as? any SupervisedChannel }
        if !supervised.isEmpty {
            list.append(("supervised channels", StartedThenStopped(start: { for channel in supervised { await channel.start() } },
                                                                  stop: { for channel in supervised { await channel.stop() } })))
        }
        list += pluginServices
        // With no channel configured nothing is ever recorded for one; sends left from an earlier config wait in the
        // outbox until their channel is back, instead of being polled every second for nothing.
        if !outbound.names.isEmpty {
            list.append(("channel dispatcher", CancelledOnShutdown { await channelDispatcher.run() }))
        }
        let inbound = self.inbound
        if !inbound.isEmpty { list.append(("channel inbound", CancelledOnShutdown { await inbound.run() })) }
        list.append(("housekeeping", CancelledOnShutdown { await housekeeping.run() }))
        // Wake-ups of the last runs settle before the process goes; the rest wait in the outbox.
        list.append(("runs in flight", OnShutdown {
            await runs.waitForAll()
            dispatcher.poke()
            channelDispatcher.poke()
        }))
        list.append(("scheduler", CancelledOnShutdown { await scheduler.run() }))
        // SOULACY_AGENT_WATCH=off leaves reloads to SIGHUP (read-only or network file systems where polling is unwanted).
        if settings.watchAgentFiles {
            let baseline = catalog.fileSignature()
            list.append(("agent file watcher", CancelledOnShutdown { await catalog.watch(from: baseline) }))
        }
        // A bound listener serves until shutdown reaches it, then stops taking connections and drains.
        let server = self.server
        if let lanServer { list.append(("same-Wi-Fi listener", OnShutdown { await lanServer.stop() })) }
        if let metricsServer { list.append(("metrics listener", OnShutdown { await metricsServer.stop() })) }
        list.append(("API listener", OnShutdown { await server.stop() }))
        // Open console event streams end first, so the listener's drain does not wait for them; reloads reach them as `agents`.
        list.append(("console event streams", CancelledOnShutdown {
            for await _ in catalog.updates().dropFirst() { consoleEvents.publish(.agents, to: .everyone) }
        }))
        list.append(("console event streams closed", OnShutdown { consoleEvents.close() }))
        // Last in the list, so first to hear of shutdown.
        if let begins = options.shutdownBegins { list.append(("shutdown notice", OnShutdown { begins() })) }
        return list
    }

    /// Shuts the services down gracefully (as SIGTERM does) and returns when the gateway has stopped.
    public func stop() async {
        guard let current = running.withLock({ $0 }) else {
            await approvals.stopFollowing()
            stores.close()
            return
        }
        current.group.triggerGracefulShutdown()
        await current.task.value
    }

    /// Returns when the gateway has stopped (after a signal or `stop()`).
    /// Whether the gateway can still do its work: its database answers a read (the watchdog's question).
    public func isHealthy() async -> Bool { (try? await stores.transactions.checkReadable()) != nil }

    public func waitUntilStopped() async {
        await running.withLock({ $0 })?.task.value
    }
}

/// The API's port once bound, read by runners that need the gateway's address.
final class BoundPort: Sendable {
    let value = Atomic<UInt16>(0)
}

/// A value filled in after what needs it is built (runs need tools that need the runs).
final class LateBound<Value: Sendable>: Sendable {
    private let box = Mutex<Value?>(nil)
    func set(_ v: Value) { box.withLock { $0 = v } }
    var value: Value? { box.withLock { $0 } }
}

/// Filled once the carriage exists (the routes that enroll phones are built before it).
final class CarriageBox: Sendable {
    private let box = Mutex<RelayCarriage?>(nil)
    func set(_ c: RelayCarriage?) { box.withLock { $0 = c } }
    var value: RelayCarriage? { box.withLock { $0 } }
}

/// Where pairing links send a phone over pinned TLS, and the pin (the port is known once the server listens).
final class PinnedLink: Sendable {
    private let box = Mutex<(address: String, pin: String)?>(nil)
    func set(_ v: (address: String, pin: String)) { box.withLock { $0 = v } }
    var value: (address: String, pin: String)? { box.withLock { $0 } }
}
