import Foundation
import PostgreSQL

/// Every `SOULACY_*` setting the gateway itself reads, parsed once from an environment dictionary (the process's
/// in `soulacy serve`, a literal one in tests). Transports and model providers read their own variables through
/// their `fromEnvironment` (`APNsConfiguration`, `FCMConfiguration`, `RelayConfiguration`, `LLMProviders`).
/// A malformed value is an error naming the variable, never a silent default.
public struct GatewaySettings: Sendable, Equatable {
    /// `SOULACY_PUBLIC_URL`: where pairing links send phones (a proxy's address; never pinned).
    public var publicURL: String?
    /// `SOULACY_TLS`: the gateway's port serves TLS beside plain HTTP (default on; `off` for plain only).
    public var autoTLS = true
    /// `ADDR:PORT`, as `--listen` and `--lan` take it.
    public struct ListenAddress: Sendable, Equatable {
        public var host: String
        public var port: UInt16
    }

    /// `SOULACY_LAN_LISTEN` (`ADDR:PORT`): the pinned same-Wi-Fi door.
    public var lanListen: ListenAddress?
    /// `SOULACY_ACCESS_LOG` (on by default): one info line per request; `off` stops them.
    public var accessLog = true
    /// `SOULACY_METRICS_LISTEN` (`ADDR:PORT`): a keyless listener for `GET /metrics` only.
    public var metricsListen: ListenAddress?
    /// `SOULACY_APPROVAL_TIMEOUT_SECONDS`: how long an approval waits before the run sees a denial.
    public var approvalTimeout: TimeInterval?
    /// `SOULACY_LONG_POLL_SECONDS`: the longest one request waits for an approval (default 25).
    public var longPoll: Duration = .seconds(25)
    /// `SOULACY_DB_MAX_MB`: a size cap for the database.
    public var databaseMaximumBytes: Int?
    /// `SOULACY_RELAY_MAILBOX_URL`, `SOULACY_RELAY_MAILBOX_CA_FILE`: the end-to-end encrypted relay mailbox.
    public var relayMailboxURL: String?
    /// `SOULACY_RELAY_MAILBOX_TOKEN`: the relay's enrollment token (its `SOULACY_RELAY_ENROLL_TOKEN`), presented once,
    /// to make this gateway's mailbox; never logged.
    public var relayMailboxToken: String?
    public var relayMailboxCAFile: String?
    /// `SOULACY_AGENT_WATCH`: poll the agent files for changes (default on; `off` leaves reloads to SIGHUP).
    public var watchAgentFiles = true
    /// `SOULACY_RATE_LIMIT_PER_MINUTE`: requests a minute one client address may send (the original's 600; 0 = no limit).
    public var rateLimitPerMinute = 600
    /// `SOULACY_TRUSTED_PROXIES`: comma-separated addresses of reverse proxies whose `X-Forwarded-For` names the client.
    public var trustedProxies: [String] = []
    /// `SOULACY_FAULT_KILL_AFTER_EFFECT=1`, test builds' fault: die between an effect's commit and its answer's.
    public var killAfterEffect = false
    /// `SOULACY_NODE_ID`: this process's name among the gateway's nodes (default: the host name and the data directory).
    public var nodeID: String?
    /// `SOULACY_DATABASE_URL` (`postgres://…`): the gateway's stores on PostgreSQL, which several gateway processes
    /// may share; without it, SQLite in the data directory. Never printed whole (it may hold a password).
    public var databaseURL: String?
    /// `SOULACY_DATABASE_POOL_SIZE`: connections this node holds to PostgreSQL (default 8).
    public var databasePoolSize = 8
    /// `SOULACY_HTTP_THREADS`: threads that answer HTTP requests (default: one a CPU, at least 4, as quick reads are
    /// answered on them and one that waits must not hold up the rest).
    public var httpThreads = max(4, ProcessInfo.processInfo.activeProcessorCount)
    /// `SOULACY_OUTBOX_LEASE_SECONDS`: how long a claimed wake-up or channel send is this node's (default 60). When a
    /// node dies, another takes its claimed rows over once this has passed.
    public var outboxLease: TimeInterval = 60

    public struct Invalid: Error, CustomStringConvertible, Equatable {
        public let variable: String
        public let message: String
        public var description: String { "\(variable): \(message)" }
    }

    public init() {}

    /// The node id to use: `SOULACY_NODE_ID`, or the host name and the data directory (stable across restarts, distinct
    /// for two gateways on one host).
    public func resolvedNodeID(dataDirectory: String) -> String {
        nodeID ?? "\(ProcessInfo.processInfo.hostName):\(dataDirectory)"
    }

    public static func fromEnvironment(_ environment: [String: String]) throws(Invalid) -> GatewaySettings {
        var settings = GatewaySettings()
        func value(_ name: String) -> String? {
            guard let text = environment[name]?.trimmingCharacters(in: .whitespaces), !text.isEmpty else { return nil }
            return text
        }
        func switchValue(_ name: String, default fallback: Bool) throws(Invalid) -> Bool {
            guard let text = value(name)?.lowercased() else { return fallback }
            if ["on", "1", "true", "yes"].contains(text) { return true }
            if ["off", "0", "false", "no"].contains(text) { return false }
            throw Invalid(variable: name, message: "must be on or off, got '\(text)'")
        }
        func positive(_ name: String, unit: String) throws(Invalid) -> Int? {
            guard let text = value(name) else { return nil }
            guard let number = Int(text), number > 0 else { throw Invalid(variable: name, message: "must be a whole number of \(unit) above 0, got '\(text)'") }
            return number
        }
        func url(_ name: String) throws(Invalid) -> String? {
            guard let text = value(name) else { return nil }
            guard let parsed = URLComponents(string: text), ["http", "https"].contains(parsed.scheme?.lowercased() ?? ""), parsed.host?.isEmpty == false else {
                throw Invalid(variable: name, message: "must be an http:// or https:// URL, got '\(text)'")
            }
            return text.hasSuffix("/") ? String(text.dropLast()) : text
        }
        settings.publicURL = try url("SOULACY_PUBLIC_URL")
        settings.autoTLS = try switchValue("SOULACY_TLS", default: true)
        if let text = value("SOULACY_LAN_LISTEN") {
            guard let address = Self.listenAddress(text) else {
                throw Invalid(variable: "SOULACY_LAN_LISTEN", message: "must be ADDR:PORT, for example 0.0.0.0:8443, got '\(text)'")
            }
            settings.lanListen = address
        }
        settings.accessLog = try switchValue("SOULACY_ACCESS_LOG", default: true)
        if let text = value("SOULACY_METRICS_LISTEN") {
            guard let address = Self.listenAddress(text) else {
                throw Invalid(variable: "SOULACY_METRICS_LISTEN", message: "must be ADDR:PORT, for example 127.0.0.1:9464, got '\(text)'")
            }
            settings.metricsListen = address
        }
        settings.approvalTimeout = try positive("SOULACY_APPROVAL_TIMEOUT_SECONDS", unit: "seconds").map(TimeInterval.init)
        settings.longPoll = .seconds(try positive("SOULACY_LONG_POLL_SECONDS", unit: "seconds") ?? 25)
        settings.databaseMaximumBytes = try positive("SOULACY_DB_MAX_MB", unit: "megabytes").map { $0 * 1_048_576 }
        settings.relayMailboxURL = try url("SOULACY_RELAY_MAILBOX_URL")
        settings.relayMailboxCAFile = value("SOULACY_RELAY_MAILBOX_CA_FILE")
        settings.relayMailboxToken = value("SOULACY_RELAY_MAILBOX_TOKEN")
        settings.watchAgentFiles = try switchValue("SOULACY_AGENT_WATCH", default: true)
        settings.killAfterEffect = value("SOULACY_FAULT_KILL_AFTER_EFFECT") == "1"
        if let node = value("SOULACY_NODE_ID") {
            guard (1...128).contains(node.utf8.count), node.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F }) else {
                throw Invalid(variable: "SOULACY_NODE_ID", message: "must be 1 to 128 visible ASCII characters, got '\(node.prefix(40))'")
            }
            settings.nodeID = node
        }
        if let url = value("SOULACY_DATABASE_URL") {
            // The value is never echoed: a database URL may carry its password.
            guard PostgresURL.isPostgresURL(url) else {
                throw Invalid(variable: "SOULACY_DATABASE_URL", message: "must be a postgres:// or postgresql:// URL (unset it for SQLite in the data directory)")
            }
            settings.databaseURL = url
        }
        if let size = try positive("SOULACY_DATABASE_POOL_SIZE", unit: "connections") {
            guard size <= 200 else { throw Invalid(variable: "SOULACY_DATABASE_POOL_SIZE", message: "must be at most 200, got '\(size)'") }
            settings.databasePoolSize = size
        }
        if let threads = try positive("SOULACY_HTTP_THREADS", unit: "threads") {
            guard threads <= 256 else { throw Invalid(variable: "SOULACY_HTTP_THREADS", message: "must be at most 256, got '\(threads)'") }
            settings.httpThreads = threads
        }
        if let lease = try positive("SOULACY_OUTBOX_LEASE_SECONDS", unit: "seconds") {
            guard lease <= 3600 else { throw Invalid(variable: "SOULACY_OUTBOX_LEASE_SECONDS", message: "must be at most 3600, got '\(lease)'") }
            settings.outboxLease = TimeInterval(lease)
        }
        if let text = value("SOULACY_RATE_LIMIT_PER_MINUTE") {
            guard let limit = Int(text), limit >= 0 else {
                throw Invalid(variable: "SOULACY_RATE_LIMIT_PER_MINUTE", message: "must be a whole number of requests, 0 for no limit, got '\(text)'")
            }
            settings.rateLimitPerMinute = limit
        }
        if let text = value("SOULACY_TRUSTED_PROXIES") {
            let addresses = text.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            let ipCharacters = CharacterSet(charactersIn: "0123456789abcdefABCDEF.:")
            for address in addresses where address.rangeOfCharacter(from: ipCharacters.inverted) != nil || !(address.contains(".") || address.contains(":")) {
                throw Invalid(variable: "SOULACY_TRUSTED_PROXIES", message: "must be IP addresses separated by commas (no names or ranges), got '\(address)'")
            }
            settings.trustedProxies = addresses
        }
        return settings
    }

    /// `ADDR:PORT` (IPv6 in brackets or not); nil when it is not one.
    public static func listenAddress(_ text: String) -> ListenAddress? {
        guard let colon = text.lastIndex(of: ":"), let port = UInt16(text[text.index(after: colon)...]) else { return nil }
        let host = String(text[..<colon]).trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        return host.isEmpty ? nil : ListenAddress(host: host, port: port)
    }
}
