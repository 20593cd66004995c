import ChannelAPI
import ChannelTesting
import Foundation
import Glibc
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Gateway
import APIKit
import Mobile
import SQLite

/// How a test reaches its gateway (Hummingbird's `.live` and `.router` test modes).
public enum TestGatewayMode: Sendable {
    /// Real libmicrohttpd on a loopback port (plain HTTP and TLS on one port), requests through URLSession, the
    /// database fsync'd on every commit: for what the socket does (framing, limits, TLS, the same-Wi-Fi listener,
    /// streams, the real binary's peers calling back).
    case live
    /// No socket and no TLS: each request goes in process to the main listener's responder (its middleware, the
    /// real router, the real stores on a real SQLite file with synchronous=NORMAL), admitted and answered at once
    /// or in a task as the server would. Services (dispatcher, scheduler, …) run as in `live`.
    case router
}

/// A real gateway for tests: real SQLite file in a temp directory, real libmicrohttpd on a loopback port (or, in
/// `.router` mode, the same gateway answered in process).
public final class TestGateway: Sendable {
    public static let defaultConfig = """
        agents:
          - id: echo
            name: Echo
            runner:
              command: ["/bin/cat"]
              timeout: 10s
        """

    public let directory: String
    public let gateway: Gateway
    public let adminKey: String
    /// Where a live gateway listens; in `.router` mode nothing listens there.
    public let baseURL: String
    public let mode: TestGatewayMode
    /// What a browser on this gateway's page sends as `Origin` (and the `Host` it names).
    public var origin: String { mode == .live ? baseURL : "http://" + Self.routerHost }
    static let routerHost = "127.0.0.1"

    /// Starts a gateway on a fresh (or the given) data directory; the config text is written to SOUL.yaml there.
    /// With `agents`, the gateway reads that file or directory instead (hot-reload tests edit it while it runs).
    public static func start(config: String = defaultConfig, agents: String? = nil, directory: String? = nil, clock: any WallClock = SystemWallClock(),
                             maximumBodyBytes: Int = 1 << 20, environment: [String: String] = [:],
                             transports: [any WakeTransport] = [], channels: [any Channel] = [], retryPolicy: RetryPolicy = RetryPolicy(),
                             lan: Bool = false, log: Log = Log(minimum: .warning), outbound: [any OutboundChannel] = [],
                             factories: [any ChannelFactory] = [], plugins: [any GatewayPlugin] = [], gatewayConfig: String? = nil,
                             mode: TestGatewayMode = .live) async throws -> TestGateway {
        precondition(!(lan && mode == .router), "the same-Wi-Fi listener is a socket: use .live")
        // SOULACY_TEST_GATEWAY_MODE=live runs router-mode suites over the socket too (to compare, or to debug).
        let mode = ProcessInfo.processInfo.environment["SOULACY_TEST_GATEWAY_MODE"] == "live" ? .live : mode
        let dir = directory ?? makeTemporaryDirectory()
        // Tests send far more than the original's 600 requests a minute from loopback: no limit unless a test sets one.
        var environment = environment
        if environment["SOULACY_RATE_LIMIT_PER_MINUTE"] == nil { environment["SOULACY_RATE_LIMIT_PER_MINUTE"] = "0" }
        var configPath = dir + "/SOUL.yaml"
        if let agents { configPath = agents } else { try config.write(toFile: configPath, atomically: true, encoding: .utf8) }
        var options = GatewayOptions(configPath: configPath, dataDirectory: dir + "/data", host: "127.0.0.1", port: 0,
                                     clock: clock, log: log, maximumBodyBytes: maximumBodyBytes,
                                     environment: environment, extraTransports: transports, retryPolicy: retryPolicy)
        if lan { options.lanHost = "127.0.0.1" }
        if mode == .router {
            // Nothing a socket needs, and no fsync: what a route test does not test.
            options.autoTLS = false
            options.durability = .normal
        }
        options.extraChannels = channels
        options.extraOutboundChannels = outbound
        options.extraChannelFactories = factories
        options.plugins = plugins
        // Never the developer's own ~/.soulacy/config.yaml: a test reads the gateway config it writes, or none.
        let gatewayConfigPath = dir + "/gateway-config.yaml"
        try (gatewayConfig ?? "").write(toFile: gatewayConfigPath, atomically: true, encoding: .utf8)
        options.gatewayConfigPath = gatewayConfigPath
        // SQLite in the data directory, or PostgreSQL when the environment names SOULACY_DATABASE_URL.
        let gateway = try await Gateway.open(options: options)
        let bootstrap = try await gateway.bootstrapAdminKey()
        try gateway.start(listening: mode == .live)
        let keyFile = dir + "/admin.key"
        let key: String
        if let bootstrap {
            key = bootstrap
            try key.write(toFile: keyFile, atomically: true, encoding: .utf8)
        } else {
            key = try String(contentsOfFile: keyFile, encoding: .utf8)
        }
        return TestGateway(directory: dir, gateway: gateway, adminKey: key, baseURL: "http://127.0.0.1:\(gateway.port)", mode: mode)
    }

    init(directory: String, gateway: Gateway, adminKey: String, baseURL: String, mode: TestGatewayMode) {
        self.directory = directory
        self.gateway = gateway
        self.adminKey = adminKey
        self.baseURL = baseURL
        self.mode = mode
    }

    /// A fresh directory under this test process's own root, which goes when the process exits.
    public static func makeTemporaryDirectory() -> String {
        let path = TemporaryRoot.path + "/\(UUID().uuidString)"
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    public func stop() async {
        await gateway.stop()
    }

    /// Sends a request; `key` nil sends no Authorization header, the default sends the admin key. `address`: the
    /// client address the request comes from (in-process gateways only; a socket's is the loopback's).
    public func request(_ method: String, _ path: String, json: JSONValue? = nil, body: [UInt8]? = nil,
                        key: String?? = .some(nil), headers: [String: String] = [:], from address: String? = nil) async throws -> TestResponse {
        precondition(address == nil || mode == .router, "a chosen client address needs withTestGateway(mode: .router)")
        if mode == .router { return await answerInProcess(method, path, json: json, body: body, key: key, headers: headers, from: address ?? "127.0.0.1") }
        var request = URLRequest(url: URL(string: baseURL + path)!)
        request.httpMethod = method
        let token: String? = switch key {
        case .none: nil
        case .some(.none): adminKey
        case .some(.some(let k)): k
        }
        if let token { request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization") }
        if let json {
            request.httpBody = Data(json.serialized().utf8)
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        } else if let body {
            request.httpBody = Data(body)
        }
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        let (data, response) = try await TestHTTP.session.data(for: request)
        let http = response as! HTTPURLResponse
        var headerMap: [String: String] = [:]
        for (name, value) in http.allHeaderFields { headerMap[String(describing: name).lowercased()] = String(describing: value) }
        return TestResponse(status: http.statusCode, headers: headerMap, body: Array(data))
    }

    /// The request as libmicrohttpd would hand it over (path and query decoded, header names lower-cased), through
    /// the main listener's admission, its server-thread answer and else its task, as `Responder.server` does.
    func answerInProcess(_ method: String, _ target: String, json: JSONValue?, body: [UInt8]?, key: String??, headers: [String: String],
                         from address: String) async -> TestResponse {
        let (path, query) = Self.split(target)
        var lowered: [String: String] = ["host": Self.routerHost, "user-agent": "soulacy-tests", "accept": "*/*"]
        let token: String? = switch key {
        case .none: nil
        case .some(.none): adminKey
        case .some(.some(let k)): k
        }
        if let token { lowered["authorization"] = "Bearer \(token)" }
        var bytes: [UInt8] = []
        if let json {
            bytes = Array(json.serialized().utf8)
            lowered["content-type"] = "application/json"
        } else if let body {
            bytes = body
        }
        if !bytes.isEmpty { lowered["content-length"] = String(bytes.count) }
        for (name, value) in headers { lowered[name.lowercased()] = value }
        let request = HTTPRequest(method: method, path: path, query: query, headers: lowered, body: bytes, remoteAddress: address)
        let responder = gateway.api
        let answer: HTTPResponse
        let limit = gateway.options.maximumBodyBytes
        if bytes.count > limit {
            // The server's own refusal, before any middleware.
            answer = APIError(status: 413, code: "body_too_large", message: "the request body is larger than the limit of \(limit) bytes").response
        } else if let atOnce = responder.admission(request) ?? responder.respondImmediately(request) {
            answer = atOnce
        } else {
            answer = await responder.respond(request)
        }
        let whole = await answer.collected()
        var headerMap: [String: String] = [:]
        // As URLSession reports them: one value per name, repeated headers joined by ", ".
        for (name, value) in whole.headers {
            let lower = name.lowercased()
            headerMap[lower] = headerMap[lower].map { $0 + ", " + value } ?? value
        }
        if headerMap["content-length"] == nil { headerMap["content-length"] = String(whole.body.count) }
        return TestResponse(status: whole.status, headers: headerMap, body: method == "HEAD" ? [] : whole.body)
    }

    /// `/a%20b?x=1&y=two+words` → (`/a b`, [x: 1, y: two words]), decoded as libmicrohttpd decodes them.
    static func split(_ target: String) -> (String, [String: String]) {
        func decoded(_ text: Substring) -> String {
            String(text).replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? String(text)
        }
        guard let mark = target.firstIndex(of: "?") else { return (String(target).removingPercentEncoding ?? target, [:]) }
        var query: [String: String] = [:]
        for pair in target[target.index(after: mark)...].split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let name = decoded(parts[0])
            if query[name] == nil { query[name] = parts.count > 1 ? decoded(parts[1]) : "" }
        }
        return (String(target[..<mark]).removingPercentEncoding ?? String(target[..<mark]), query)
    }

    /// A key for `subject` and its token, as a household gets one: the owner's own through the admin API; anyone
    /// else's through a pairing code the admin makes for them (`name` = the subject, so the subject is the slug)
    /// and redeems as that person's phone would. Only operator and viewer keys exist for anyone but the owner.
    public func mintKey(subject: String, role: String, name: String = "test key") async throws -> String {
        if subject == "owner" {
            let response = try await request("POST", "/admin/api-keys", json: .object(["name": .string(name), "subject": .string(subject), "role": .string(role)]))
            guard response.status == 201, let token = response.json["key"]?.stringValue else {
                throw TestFailure("could not mint a key: \(response.status) \(response.text)")
            }
            return token
        }
        let offer = try await request("POST", "/api/v1/pairing/tokens", json: .object(["name": .string(subject), "role": .string(role)]))
        guard offer.status == 200, offer.json["subject"]?.stringValue == subject, let code = offer.json["code"]?.stringValue else {
            throw TestFailure("could not make a pairing code for \(subject) as \(role): \(offer.status) \(offer.text)")
        }
        let redeemed = try await request("POST", "/api/v1/pairing/redeem", json: .object(["code": .string(code), "name": .string(name)]), key: .none)
        guard redeemed.status == 200, let token = redeemed.json["token"]?.stringValue else {
            throw TestFailure("could not redeem the pairing code for \(subject): \(redeemed.status) \(redeemed.text)")
        }
        return token
    }

    /// Registers an iOS device for the key's subject.
    @discardableResult
    public func registerDevice(id: String, key: String?, platform: String = "ios", token: String? = nil) async throws -> TestResponse {
        var body: [String: JSONValue] = ["id": .string(id), "name": .string("Phone \(id)"), "platform": .string(platform)]
        if let token { body["push_token"] = .string(token); body["notifications_enabled"] = true }
        return try await request("POST", "/api/v1/mobile/devices", json: .object(body), key: .some(key))
    }

    /// Runs an agent through the API and waits for the run to finish; returns the run's JSON.
    public func runAgent(_ id: String, input: String, to: String? = nil, key: String? = nil) async throws -> JSONValue {
        var body: [String: JSONValue] = ["input": .string(input)]
        if let to { body["to"] = .string(to) }
        let started = try await request("POST", "/api/v1/agents/\(id)/run", json: .object(body), key: .some(key))
        guard started.status == 202, let runID = started.json["run_id"]?.stringValue else {
            throw TestFailure("run did not start: \(started.status) \(started.text)")
        }
        // A run is its person's: it is read back with the key that started it.
        return try await request("GET", "/api/v1/runs/\(runID)?wait=true", key: .some(key)).json
    }
}

public struct TestResponse: Sendable {
    public let status: Int
    public let headers: [String: String]
    public let body: [UInt8]
    public var text: String { String(decoding: body, as: UTF8.self) }
    public var json: JSONValue { (try? JSONValue.parse(body)) ?? .null }
    /// The `error.code` of a JSON error body.
    public var errorCode: String? { json["code"]?.stringValue }
    public var errorField: String? { json["field"]?.stringValue }
    /// The original's `error`: the message as a string.
    public var errorMessage: String? { json["error"]?.stringValue }
}

public struct TestFailure: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

enum TestHTTP {
    static let session: URLSession = {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = 30
        // No cookie jar: one shared by every test would send a session cookie one gateway set to every other gateway
        // on 127.0.0.1 (cookies ignore the port), beside the cookie a test sends itself. A test that signs in to the
        // console sends its cookie explicitly.
        configuration.httpCookieStorage = nil
        configuration.httpShouldSetCookies = false
        configuration.httpCookieAcceptPolicy = .never
        return URLSession(configuration: configuration)
    }()
}

/// Polls `condition` until it holds or `timeout` passes.
public func eventually(timeout: Duration = .seconds(10), _ condition: @Sendable () async throws -> Bool) async rethrows -> Bool {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if try await condition() { return true }
        try? await Task.sleep(for: .milliseconds(20))
    }
    return try await condition()
}

/// Starts a gateway, runs `body` with it, and stops it afterwards whatever happened.
public func withTestGateway<T>(config: String = TestGateway.defaultConfig, agents: String? = nil, directory: String? = nil, clock: any WallClock = SystemWallClock(),
                               maximumBodyBytes: Int = 1 << 20, environment: [String: String] = [:], transports: [any WakeTransport] = [],
                               channels: [any Channel] = [], retryPolicy: RetryPolicy = RetryPolicy(), lan: Bool = false,
                               log: Log = Log(minimum: .warning), outbound: [any OutboundChannel] = [], factories: [any ChannelFactory] = [],
                               plugins: [any GatewayPlugin] = [], gatewayConfig: String? = nil, mode: TestGatewayMode = .live,
                               _ body: (TestGateway) async throws -> T) async throws -> T {
    let gateway = try await TestGateway.start(config: config, agents: agents, directory: directory, clock: clock, maximumBodyBytes: maximumBodyBytes,
                                              environment: environment, transports: transports, channels: channels, retryPolicy: retryPolicy, lan: lan,
                                              log: log, outbound: outbound, factories: factories, plugins: plugins, gatewayConfig: gatewayConfig,
                                              mode: mode)
    do {
        let result = try await body(gateway)
        await gateway.stop()
        return result
    } catch {
        await gateway.stop()
        throw error
    }
}

/// A database at `path` with the whole schema in place, as the gateway's composition root leaves it, for tests that
/// build a store on its own.
public func migratedDatabase(_ path: String) throws -> DatabasePool {
    let database = try DatabasePool(path: path)
    try GatewaySchema.migrator().migrate(database)
    return database
}

/// Where a test process keeps its files: `soulacy-tests-<pid>` in the temporary directory, removed at exit (and
/// roots of test processes that died without cleaning up are removed by the next one).
enum TemporaryRoot {
    static func path(for pid: Int32) -> String { FileManager.default.temporaryDirectory.appendingPathComponent("soulacy-tests-\(pid)").path }

    static let path: String = {
        let files = FileManager.default
        let base = FileManager.default.temporaryDirectory.path
        for name in (try? files.contentsOfDirectory(atPath: base)) ?? [] where name.hasPrefix("soulacy-tests-") {
            if let pid = Int32(name.dropFirst("soulacy-tests-".count)), kill(pid, 0) != 0, errno == ESRCH {
                try? files.removeItem(atPath: base + "/" + name)
            }
        }
        let root = path(for: getpid())
        try? files.createDirectory(atPath: root, withIntermediateDirectories: true)
        atexit { try? FileManager.default.removeItem(atPath: TemporaryRoot.path(for: getpid())) }
        return root
    }()
}

extension TestGateway {
    /// A run's `outputs` as `GET /api/v1/runs/:id` lists them (channel, destination, state, attempts, last_reason,
    /// delivered_at), read with the key that started it.
    public func outputs(ofRun id: String, key: String? = nil) async throws -> [JSONValue] {
        try await request("GET", "/api/v1/runs/\(id)", key: .some(key)).json["outputs"]?.arrayValue ?? []
    }

    /// The run's outputs once every one is in one of `states`, or as they were when `timeout` ran out.
    public func outputs(ofRun id: String, until states: Set<String>, timeout: Duration = .seconds(30)) async throws -> [JSONValue] {
        let deadline = ContinuousClock.now + timeout
        while true {
            let outputs = try await outputs(ofRun: id)
            if !outputs.isEmpty, outputs.allSatisfy({ $0["state"]?.stringValue.map(states.contains) == true }) { return outputs }
            if ContinuousClock.now >= deadline { return outputs }
            try await Task.sleep(for: .milliseconds(100))
        }
    }
}

extension Gateway {
    /// A SQLite gateway's mobile store (every `TestGateway` runs on SQLite unless a test says otherwise).
    public var mobileStore: MobileStore {
        guard let file = stores.sqlite else { preconditionFailure("mobileStore: this test's gateway runs on \(stores.engine), not SQLite") }
        return file.mobileStore
    }

    /// A SQLite gateway's database file.
    public var database: DatabasePool {
        guard let file = stores.sqlite else { preconditionFailure("database: this test's gateway runs on \(stores.engine), not SQLite") }
        return file.database
    }
}
