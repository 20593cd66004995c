import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Glibc
import APIKit

/// The real `soulacy serve` binary as a child process, for restarts and kill -9.
public final class GatewayProcess: @unchecked Sendable {
    public let dataDirectory: String
    public let configPath: String
    public private(set) var port: UInt16
    public let environment: [String: String]
    private var process: TestProcess?
    private let logPath: String

    public init(directory: String, config: String = TestGateway.defaultConfig, environment: [String: String] = [:]) throws {
        dataDirectory = directory + "/data"
        configPath = directory + "/SOUL.yaml"
        logPath = directory + "/gateway-\(UUID().uuidString.prefix(8)).log"
        port = freePort()
        self.environment = environment
        try config.write(toFile: configPath, atomically: true, encoding: .utf8)
    }

    public var baseURL: String { "http://127.0.0.1:\(port)" }

    /// One call to the running process: its status and JSON body (null when the body is not JSON).
    public func call(_ method: String, _ path: String, key: String?, json: JSONValue? = nil, headers: [String: String] = [:]) async throws -> (status: Int, json: JSONValue) {
        try await call(method, path, key: key, body: json.map { Array($0.serialized().utf8) }, headers: headers)
    }

    /// The same with a body given as bytes (a document no `JSONValue` could hold, such as one nested too deeply).
    public func call(_ method: String, _ path: String, key: String?, body: [UInt8]?, headers: [String: String] = [:]) async throws -> (status: Int, json: JSONValue) {
        var request = URLRequest(url: URL(string: baseURL + path)!)
        request.httpMethod = method
        request.timeoutInterval = 10
        if let key { request.setValue("Bearer \(key)", forHTTPHeaderField: "Authorization") }
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        if let body { request.httpBody = Data(body) }
        let (data, response) = try await URLSession.shared.data(for: request)
        return ((response as! HTTPURLResponse).statusCode, (try? JSONValue.parse(Array(data))) ?? .null)
    }

    /// Starts the binary and waits until it listens; returns the admin key when this start printed one.
    @discardableResult
    public func start() async throws -> String? {
        // A first start that lost its port still created and printed the admin key: it is kept across the retry.
        var printedKey: String?
        try await retryingTakenPorts({
            defer { printedKey = printedKey ?? adminKeyPrinted }
            try await launch()
        }, freshPorts: { port = freePort() })
        return printedKey
    }

    private var adminKeyPrinted: String? {
        guard let line = output.split(separator: "\n").last(where: { $0.contains("SOULACY_ADMIN_KEY=") }) else { return nil }
        return String(line.split(separator: "=", maxSplits: 1).last ?? "")
    }

    /// One start of the binary, until it says it is listening; exiting first is a failure with its output.
    private func launch() async throws {
        _ = FileManager.default.createFile(atPath: logPath, contents: nil)
        let log = FileHandle(forWritingAtPath: logPath)!
        let process = TestProcess()
        process.executableURL = URL(fileURLWithPath: RepositoryPaths.soulacyBinary)
        process.arguments = ["serve", "--config", configPath, "--data", dataDirectory, "--listen", "127.0.0.1:\(port)"]
        // No request limit unless the test sets one: the suite sends far more than 600 a minute from loopback.
        var env = ["PATH": "/usr/bin:/bin", "HOME": NSTemporaryDirectory(), "SOULACY_RATE_LIMIT_PER_MINUTE": "0"]
        env.merge(sanitizerEnvironment()) { $1 }
        env.merge(environment) { $1 }
        process.environment = env
        process.standardOutput = log
        process.standardError = log
        try GatewayTestSupport.launch(process)
        self.process = process
        let deadline = ContinuousClock.now + .seconds(20)
        while ContinuousClock.now < deadline {
            if output.contains("is listening on") { return }
            guard process.isRunning else { throw TestFailure("soulacy exited: \(output)") }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    public var output: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    public var pid: Int32 { process?.processIdentifier ?? 0 }

    /// kill -9: no shutdown code runs. Returns once the process is dead (see `waitUntilEnded`).
    public func kill9() {
        guard let process, process.isRunning else { return }
        kill(process.processIdentifier, SIGKILL)
        waitUntilEnded(process.processIdentifier)
        // Reaped too, not a zombie: a gateway started next on the same data asks whether the old owner still lives.
        process.waitUntilExit()
        self.process = nil
    }

    /// SIGTERM and wait: the graceful path. Returns the exit status (nil when it was not running).
    @discardableResult
    public func terminate() -> Int32? {
        guard let process, process.isRunning else { return nil }
        let pid = process.processIdentifier
        kill(pid, SIGTERM)
        waitUntilEnded(pid)
        self.process = nil
        // Foundation reaps the child and keeps its status, normally at once; if it has not within 5 s, it is reaped here.
        let deadline = ContinuousClock.now + .seconds(5)
        while process.isRunning, ContinuousClock.now < deadline { usleep(10_000) }
        if !process.isRunning { return process.terminationStatus }
        var status: Int32 = 0
        guard waitpid(pid, &status, 0) == pid else { return nil }
        // As Foundation reports it: the exit code, or the signal that ended the process.
        return status & 0x7f == 0 ? (status >> 8) & 0xff : status & 0x7f
    }

    deinit { kill9() }
}

/// The sanitizer settings of this test run (scripts/test sets them), for the binaries it starts: they run under the
/// same rules (ASan's leak check is off there, its error checks on).
public func sanitizerEnvironment() -> [String: String] {
    ProcessInfo.processInfo.environment.filter { ["ASAN_OPTIONS", "LSAN_OPTIONS", "UBSAN_OPTIONS", "TSAN_OPTIONS"].contains($0.key) }
}
