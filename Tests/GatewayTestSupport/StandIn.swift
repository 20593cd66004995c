import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Glibc
import Crypto
import HTTPClient
import APIKit

/// A free loopback TCP port (bound once and released).
public func freePort() -> UInt16 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = 0
    _ = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
    return UInt16(bigEndian: address.sin_port)
}

/// A socket bound to a loopback port and never listening: a connection there is refused as if nothing were bound,
/// and while it is held neither `freePort()` nor an outgoing connection is given the port. SO_REUSEADDR, so the
/// TIME_WAIT of a service just killed does not stand in the way, nor in the way of the service started there next.
func holdPort(_ port: UInt16) -> Int32? {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { return nil }
    var yes: Int32 = 1
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = port.bigEndian
    let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
    guard bound == 0 else {
        close(fd)
        return nil
    }
    return fd
}

/// Waits until process `pid` has ended (a zombie or gone), reading /proc, at most `limit` (nil: however long it
/// takes); false when the limit ran out first. Not `Process.waitUntilExit()`: it spins the run loop of the calling
/// (cooperative) thread until Foundation reaps the child, and Foundation was seen not to: with dozens of stand-ins
/// ending at once, and once for a killed gateway whose zombie a test process then waited on for 15 minutes.
@discardableResult
func waitUntilEnded(_ pid: Int32, limit: Duration? = nil) -> Bool {
    let deadline = limit.map { ContinuousClock.now + $0 }
    while deadline.map({ ContinuousClock.now < $0 }) ?? true {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return true }
        let state = stat[stat.index(after: close)...].trimmingCharacters(in: .whitespaces).prefix(1)
        if state == "Z" || state == "X" { return true }
        usleep(10_000)
    }
    return false
}

/// Starts something on ports `freePort()` chose, again on fresh ones (`freshPorts`) when its start failed because
/// another socket of the parallel suite took a port between the choice and the bind. Three tries; any other failure,
/// and the last, are the caller's.
func retryingTakenPorts(_ start: () async throws -> Void, freshPorts: () -> Void) async throws {
    for attempt in 1...3 {
        do {
            return try await start()
        } catch let failure as TestFailure where attempt < 3 && failure.description.contains("already in use") {
            freshPorts()
        }
    }
}

/// Runs a program to completion and returns its exit status and output, waiting on a thread of its own: a test that
/// waits for a program on Swift's cooperative pool holds one of its few threads, and every gateway and handler in
/// the test process waits with it.
@discardableResult
public func runProgram(_ path: String, _ arguments: [String], environment: [String: String]? = nil) async throws -> (status: Int32, output: String) {
    try await onOwnThread { try runProgramBlocking(path, arguments, environment: environment) }
}

/// Starts a child process, one at a time in this test process (`TestProcess`, posix_spawn: Foundation's
/// `Process.run()` over-reads its /proc/self/fd buffer on this toolchain and crashed the test process now and then).
/// Every test start of a program goes through it.
public func launch(_ process: TestProcess) throws {
    processLaunchLock.lock()
    defer { processLaunchLock.unlock() }
    try process.run()
}

private let processLaunchLock = NSLock()

/// `runProgram` for code already on a thread of its own.
@discardableResult
public func runProgramBlocking(_ path: String, _ arguments: [String], environment: [String: String]? = nil) throws -> (status: Int32, output: String) {
    let process = TestProcess()
    process.executableURL = URL(fileURLWithPath: path)
    process.arguments = arguments
    if let environment { process.environment = sanitizerEnvironment().merging(environment) { $1 } }
    let pipe = Pipe()
    process.standardOutput = pipe
    process.standardError = pipe
    try launch(process)
    let data = pipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: data, as: UTF8.self))
}

public enum RepositoryPaths {
    public static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../..").standardized.path
    public static let standIns = root + "/Tests/StandIns"
    /// Where the built executables are: `.build/debug` unless SOULACY_BUILD_DIR names another (the
    /// release AddressSanitizer run in scripts/test).
    public static let buildDirectory = ProcessInfo.processInfo.environment["SOULACY_BUILD_DIR"] ?? root + "/.build/debug"
    public static let soulacyBinary = buildDirectory + "/soulacy"
    public static let relayBinary = buildDirectory + "/soulacy-relay"
}

/// A stand-in service run as a Python process (hypercorn, HTTP/2 over TLS) with a plain-HTTP control port.
public class StandInProcess: @unchecked Sendable {
    /// Chosen free before the start; a start that loses its port to another process picks new ones.
    public private(set) var tlsPort: UInt16
    public private(set) var controlPort: UInt16
    public let directory: String
    let script: String
    let arguments: [String]
    private var process: TestProcess?
    private let lock = NSLock()

    init(script: String, directory: String, arguments: [String]) {
        self.script = script
        self.directory = directory
        self.arguments = arguments
        tlsPort = freePort()
        controlPort = freePort()
    }

    /// The stand-in's self-signed certificate, to trust it.
    public var caFile: String { directory + "/standin-cert.pem" }
    public var baseURL: String { "https://127.0.0.1:\(tlsPort)" }

    public func start() async throws {
        try await retryingTakenPorts(startOnce) {
            tlsPort = freePort()
            controlPort = freePort()
        }
    }

    private func startOnce() async throws {
        let process = TestProcess()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "\(RepositoryPaths.standIns)/\(script)", "--tls-port", String(tlsPort), "--control-port", String(controlPort),
                             "--cert-dir", directory] + arguments
        var env = ProcessInfo.processInfo.environment
        env["PYTHONPATH"] = RepositoryPaths.standIns
        env["PYTHONUNBUFFERED"] = "1"
        process.environment = env
        let log = FileHandle(forWritingAtPath: directory + "/standin.log") ?? {
            _ = FileManager.default.createFile(atPath: directory + "/standin.log", contents: nil)
            return FileHandle(forWritingAtPath: directory + "/standin.log")!
        }()
        log.seekToEndOfFile()
        process.standardOutput = log
        process.standardError = log
        try launch(process)
        lock.withLock { self.process = process }
        // Generous: dozens of Python stand-ins start at once when the channel suites begin, on two cores. One that
        // exits (its port taken, a bad argument) ends the wait at once.
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline {
            // Another test's stand-in may answer on this port if it bound it first: only our own pid counts.
            if let health = try? await control("GET", "/control/health"), health["ok"] == true,
               health["pid"]?.numberValue == Double(process.processIdentifier) { return }
            guard process.isRunning else { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        let output = (try? String(contentsOfFile: directory + "/standin.log", encoding: .utf8)) ?? ""
        throw TestFailure("the stand-in \(script) did not start:\n\(output)")
    }

    /// The ports the service listens on (a subclass adds its own), held while it is down.
    var ports: [UInt16] { [tlsPort, controlPort] }
    private var heldPorts: [Int32] = []

    /// An outage: the service stops and its ports refuse connections, held so that no other socket of the parallel
    /// suite takes them before `restart()`.
    public func stopHoldingPorts() {
        stop()
        let held = ports.compactMap(holdPort)
        lock.withLock { heldPorts += held }
    }

    /// Starts the service again after `stop()` or `stopHoldingPorts()`, on the same ports and with the same
    /// certificate, so a gateway configured with its URL finds it back (an outage ending). A port another socket
    /// holds is tried again for a few seconds, never exchanged: the gateway knows only this one.
    public func restart() async throws {
        stop()
        for fd in lock.withLock({ () -> [Int32] in defer { heldPorts = [] }; return heldPorts }) { close(fd) }
        let deadline = ContinuousClock.now + .seconds(10)
        while true {
            do {
                return try await startOnce()
            } catch let failure as TestFailure where failure.description.contains("already in use") && ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(200))
            }
        }
    }

    /// Stops the service (connections drop, its port refuses); recorded requests are lost with it.
    public func stop() {
        let process = lock.withLock { () -> TestProcess? in defer { self.process = nil }; return self.process }
        guard let process, process.isRunning else { return }
        let pid = process.processIdentifier
        kill(pid, SIGKILL)
        waitUntilEnded(pid, limit: .seconds(5))
    }

    deinit {
        stop()
        for fd in heldPorts { close(fd) }
    }

    @discardableResult
    public func control(_ method: String, _ path: String, json: JSONValue? = nil) async throws -> JSONValue {
        var request = URLRequest(url: URL(string: "http://127.0.0.1:\(controlPort)\(path)")!)
        request.httpMethod = method
        request.timeoutInterval = 5
        if let json { request.httpBody = Data(json.serialized().utf8) }
        let (data, _) = try await URLSession.shared.data(for: request)
        return try JSONValue.parse(Array(data))
    }

    /// Every request the service received, in order.
    public func requests() async throws -> [JSONValue] {
        try await control("GET", "/control/requests")["requests"]?.arrayValue ?? []
    }

    /// The next requests get these answers ({"status", "reason", "retry_after"?}); then 200 again.
    public func script(_ responses: [JSONValue]) async throws {
        try await control("POST", "/control/script", json: ["responses": .array(responses)])
    }

    public func delay(milliseconds: Int) async throws {
        try await control("POST", "/control/delay", json: ["ms": .number(Double(milliseconds))])
    }
}

/// The APNs stand-in: verifies the ES256 provider token with the key's public half, checks Apple's headers
/// and the 4 KB limit, and answers with Apple's reasons.
public final class APNsStandIn: StandInProcess, @unchecked Sendable {
    public static let teamID = "TEAM123456"
    public static let keyID = "KEY1234567"
    public let keyFile: String

    public static func start() async throws -> APNsStandIn {
        let directory = TestGateway.makeTemporaryDirectory()
        let keyFile = directory + "/AuthKey.p8"
        try await runProgram("/usr/bin/openssl", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", keyFile])
        chmod(keyFile, 0o600)
        try await runProgram("/usr/bin/openssl", ["pkey", "-in", keyFile, "-pubout", "-out", directory + "/AuthKey.pub"])
        let standIn = APNsStandIn(directory: directory, keyFile: keyFile)
        try await standIn.start()
        return standIn
    }

    init(directory: String, keyFile: String) {
        self.keyFile = keyFile
        super.init(script: "apns_standin.py", directory: directory,
                   arguments: ["--public-key", directory + "/AuthKey.pub", "--team-id", Self.teamID, "--key-id", Self.keyID])
    }

    /// The SOULACY_MOBILE_APNS_* settings that point a gateway at this stand-in.
    public var environment: [String: String] {
        ["SOULACY_MOBILE_APNS_TEAM_ID": Self.teamID, "SOULACY_MOBILE_APNS_KEY_ID": Self.keyID,
         "SOULACY_MOBILE_APNS_PRIVATE_KEY_FILE": keyFile, "SOULACY_MOBILE_APNS_PRODUCTION_URL": baseURL,
         "SOULACY_MOBILE_APNS_SANDBOX_URL": baseURL, "SOULACY_MOBILE_APNS_CA_FILE": caFile]
    }
}

/// The FCM stand-in: Google's token endpoint (verifies the RS256 assertion with the service account's public key)
/// and the HTTP v1 send API (checks the bearer token and each message's shape).
public final class FCMStandIn: StandInProcess, @unchecked Sendable {
    public static let project = "soulacy-test"
    public static let clientEmail = "gateway@soulacy-test.iam.gserviceaccount.com"
    public let credentialsFile: String

    public static func start() async throws -> FCMStandIn {
        let directory = TestGateway.makeTemporaryDirectory()
        let keyFile = directory + "/sa-key.pem"
        try await runProgram("/usr/bin/openssl", ["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", keyFile])
        try await runProgram("/usr/bin/openssl", ["pkey", "-in", keyFile, "-pubout", "-out", directory + "/sa-key.pub"])
        let standIn = FCMStandIn(directory: directory)
        let account: [String: JSONValue] = [
            "type": "service_account", "project_id": .string(project), "private_key_id": "0123456789abcdef",
            "private_key": .string(try String(contentsOfFile: keyFile, encoding: .utf8)), "client_email": .string(clientEmail),
            "client_id": "1", "token_uri": .string("https://127.0.0.1:\(standIn.tlsPort)/token"),
        ]
        try JSONValue.object(account).serialized().write(toFile: standIn.credentialsFile, atomically: true, encoding: .utf8)
        chmod(standIn.credentialsFile, 0o600)
        try await standIn.start()
        return standIn
    }

    init(directory: String) {
        credentialsFile = directory + "/service-account.json"
        super.init(script: "fcm_standin.py", directory: directory,
                   arguments: ["--public-key", directory + "/sa-key.pub", "--client-email", Self.clientEmail, "--project", Self.project])
    }

    public var environment: [String: String] {
        ["SOULACY_MOBILE_FCM_CREDENTIALS_FILE": credentialsFile, "SOULACY_MOBILE_FCM_URL": baseURL, "SOULACY_MOBILE_FCM_CA_FILE": caFile]
    }

    public func tokenRequests() async throws -> [JSONValue] {
        try await control("GET", "/control/tokens")["requests"]?.arrayValue ?? []
    }
}

/// The push-relay stand-in: checks the bearer token and the /v1/push and /v1/live bodies.
public final class RelayStandIn: StandInProcess, @unchecked Sendable {
    public static let token = "relay-test-token-0123456789"

    public static func start() async throws -> RelayStandIn {
        let standIn = RelayStandIn(directory: TestGateway.makeTemporaryDirectory())
        try await standIn.start()
        return standIn
    }

    init(directory: String) {
        super.init(script: "relay_standin.py", directory: directory, arguments: ["--token", Self.token])
    }

    public var environment: [String: String] {
        ["SOULACY_MOBILE_PUSH_RELAY_URL": baseURL, "SOULACY_MOBILE_PUSH_RELAY_TOKEN": Self.token, "SOULACY_MOBILE_PUSH_RELAY_CA_FILE": caFile]
    }
}

/// The real `soulacy-relay` binary on a loopback port with its own data directory.
public final class RelayServerProcess: @unchecked Sendable {
    /// Fixed once the relay first listens (a restart keeps its URL, which the gateway was given).
    public private(set) var port = freePort()
    private var listenedOnce = false
    public let directory = TestGateway.makeTemporaryDirectory()
    private var process: TestProcess?

    /// With `tls`, the relay serves HTTPS with a fresh self-signed certificate: `certificatePath` is its trust.
    public let tls: Bool
    public var certificatePath: String { directory + "/relay-cert.pem" }

    /// With a URL, the relay keeps its mailboxes on that PostgreSQL database (`--database-url`), as several relays do.
    public let databaseURL: String?

    public init(tls: Bool = false, databaseURL: String? = nil) {
        self.tls = tls
        self.databaseURL = databaseURL
    }

    public var url: String { "\(tls ? "https" : "http")://127.0.0.1:\(port)" }
    public var databasePath: String { directory + "/relay.db" }

    public func start(environment: [String: String] = [:]) async throws {
        if listenedOnce {
            try await launch(environment: environment)
        } else {
            try await retryingTakenPorts({ try await launch(environment: environment) }, freshPorts: { port = freePort() })
        }
        listenedOnce = true
    }

    /// One start, until `/health` answers; a relay that exited or never answered is a failure with its log.
    private func launch(environment: [String: String]) async throws {
        let process = TestProcess()
        process.executableURL = URL(fileURLWithPath: RepositoryPaths.relayBinary)
        process.environment = ["PATH": "/usr/bin:/bin"].merging(sanitizerEnvironment()) { $1 }.merging(environment) { $1 }
        process.arguments = ["--listen", "127.0.0.1:\(port)", "--max-item-bytes", "65536"]
            + (databaseURL.map { ["--database-url", $0, "--database-pool-size", "2"] } ?? ["--data", directory])
        if tls {
            let made = try SelfSignedCertificate.generate(commonName: "test relay", ipAddresses: ["127.0.0.1"])
            try SecretFile.write(made.keyPEM, to: directory + "/relay-key.pem")
            try made.certificatePEM.write(toFile: certificatePath, atomically: true, encoding: .utf8)
            process.arguments! += ["--tls-cert", certificatePath, "--tls-key", directory + "/relay-key.pem"]
        }
        _ = FileManager.default.createFile(atPath: directory + "/relay.log", contents: nil)
        let log = FileHandle(forWritingAtPath: directory + "/relay.log")
        process.standardOutput = log
        process.standardError = log
        try GatewayTestSupport.launch(process)
        self.process = process
        let client = HTTP2Client(configuration: HTTP2ClientConfiguration(caFile: tls ? certificatePath : nil))
        for _ in 0..<100 {
            if let answer = try? await client.send(ClientRequest(method: "GET", url: url + "/health", timeout: .seconds(1))), answer.status == 200 { return }
            // It exits when its port was taken first; another relay answering there must not pass for this one.
            guard process.isRunning else { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw TestFailure("soulacy-relay did not start: " + ((try? String(contentsOfFile: directory + "/relay.log", encoding: .utf8)) ?? ""))
    }

    public func stop() {
        guard let process, process.isRunning else { return }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        self.process = nil
    }

    /// SIGTERM and wait; returns the exit status and what the relay wrote (nil when it was not running).
    public func terminate() -> (status: Int32, output: String)? {
        guard let process, process.isRunning else { return nil }
        kill(process.processIdentifier, SIGTERM)
        process.waitUntilExit()
        self.process = nil
        return (process.terminationStatus, (try? String(contentsOfFile: directory + "/relay.log", encoding: .utf8)) ?? "")
    }

    deinit { stop() }

    /// Every byte the relay keeps on disk.
    public func storedBytes() -> Data {
        ["", "-wal", "-shm"].compactMap { try? Data(contentsOf: URL(fileURLWithPath: databasePath + $0)) }.reduce(Data(), +)
    }
}

/// One address in front of several relays (`tcp_front.py`), as a TCP load balancer puts it: each connection goes to
/// the next backend in turn, skipping one that refuses.
public final class TCPFront: @unchecked Sendable {
    public let port = freePort()
    private let process = TestProcess()
    public var url: String { "http://127.0.0.1:\(port)" }

    public init(backends: [UInt16]) throws {
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "\(RepositoryPaths.standIns)/tcp_front.py", "--port", String(port)] + backends.flatMap { ["--backend", "127.0.0.1:\($0)"] }
        process.standardOutput = FileHandle.nullDevice
        try launch(process)
    }

    /// Until the front accepts connections.
    public func waitUntilListening() async throws {
        for _ in 0..<100 {
            if let socket = RawHTTP.connect(port: port) {
                close(socket)
                return
            }
            guard process.isRunning else { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw TestFailure("the TCP front did not listen on \(port)")
    }

    public func stop() {
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    deinit { stop() }
}

/// The model-provider stand-in: OpenAI chat completions, Ollama chat and Anthropic Messages on one TLS port,
/// each request checked against the provider's documented shape, replies scripted per test.
public final class LLMStandIn: StandInProcess, @unchecked Sendable {
    public static let openAIKey = "sk-test-standin-openai-key"
    public static let anthropicKey = "sk-ant-test-standin-key"

    public static func start() async throws -> LLMStandIn {
        let standIn = LLMStandIn(directory: TestGateway.makeTemporaryDirectory())
        try await standIn.start()
        return standIn
    }

    init(directory: String) {
        super.init(script: "llm_standin.py", directory: directory, arguments: ["--openai-key", Self.openAIKey, "--anthropic-key", Self.anthropicKey])
    }

    /// The settings that point a gateway's providers at this stand-in (the names Soulacy users already set).
    public var environment: [String: String] {
        ["OPENAI_API_KEY": Self.openAIKey, "OPENAI_BASE_URL": baseURL + "/v1", "ANTHROPIC_API_KEY": Self.anthropicKey,
         "ANTHROPIC_BASE_URL": baseURL, "OLLAMA_HOST": baseURL, "SOULACY_LLM_CA_FILE": caFile]
    }
}
