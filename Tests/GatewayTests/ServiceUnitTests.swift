import Foundation
import Gateway
import GatewayTestSupport
import Glibc
import Testing

/// deploy/*.service as systemd reads them, and the notification protocol the units rely on, on the real binaries.
@Suite("systemd units and sd_notify", .serialized)
struct ServiceUnitTests {
    /// A unix datagram socket standing in for systemd's notification socket: every datagram, as text.
    final class NotifySocket: @unchecked Sendable {
        let path: String
        let fd: Int32
        private let lock = NSLock()
        private var received: [String] = []
        private var thread: Thread?

        init() throws {
            path = TestGateway.makeTemporaryDirectory() + "/notify.sock"
            fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            let name = Array(path.utf8)
            withUnsafeMutableBytes(of: &address.sun_path) { for (i, byte) in name.enumerated() { $0[i] = byte } }
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
            }
            guard fd >= 0, bound == 0 else { throw TestFailure("cannot bind \(path): errno \(errno)") }
            var timeout = timeval(tv_sec: 0, tv_usec: 100_000)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            let thread = Thread { [self] in
                var buffer = [UInt8](repeating: 0, count: 4096)
                while !Thread.current.isCancelled {
                    let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                    if n > 0 {
                        let text = String(decoding: buffer[0..<n], as: UTF8.self)
                        lock.withLock { received.append(text) }
                    }
                }
            }
            thread.start()
            self.thread = thread
        }

        var messages: [String] { lock.withLock { received } }

        func waitFor(_ line: String, count: Int = 1, seconds: Double = 10) async -> Bool {
            let deadline = Date().addingTimeInterval(seconds)
            while Date() < deadline {
                if messages.filter({ $0.split(separator: "\n").contains(Substring(line)) }).count >= count { return true }
                try? await Task.sleep(for: .milliseconds(20))
            }
            return false
        }

        func close() {
            thread?.cancel()
            usleep(200_000)
            Glibc.close(fd)
        }
    }

    @Test("the gateway says READY=1 once it listens, sends WATCHDOG=1 at half WATCHDOG_USEC, and STOPPING=1 when SIGTERM starts the drain")
    func gatewayNotifies() async throws {
        let notify = try NotifySocket()
        defer { notify.close() }
        let directory = TestGateway.makeTemporaryDirectory()
        let gateway = try GatewayProcess(directory: directory, environment: ["NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "200000"])
        try await gateway.start()
        #expect(await notify.waitFor("READY=1"), "\(notify.messages)")
        let ready = try #require(notify.messages.first { $0.contains("READY=1") })
        #expect(ready.contains("MAINPID=\(gateway.pid)") && ready.contains("STATUS=listening on"))
        #expect(await notify.waitFor("WATCHDOG=1", count: 3, seconds: 3), "keep-alives every 100 ms: \(notify.messages)")
        #expect(gateway.terminate() == 0)
        #expect(await notify.waitFor("STOPPING=1"), "\(notify.messages)")
    }

    @Test("the relay says READY=1 and keeps its watchdog fed too; a WATCHDOG_PID naming another process gets no keep-alives")
    func relayNotifies() async throws {
        let notify = try NotifySocket()
        defer { notify.close() }
        let data = TestGateway.makeTemporaryDirectory()
        let relay = TestProcess()
        relay.executableURL = URL(fileURLWithPath: RepositoryPaths.relayBinary)
        relay.arguments = ["--data", data, "--listen", "127.0.0.1:0"]
        relay.environment = ["PATH": "/usr/bin:/bin", "NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "200000"].merging(sanitizerEnvironment()) { $1 }
        relay.standardOutput = FileHandle.nullDevice
        relay.standardError = FileHandle.nullDevice
        try launch(relay)
        defer { if relay.isRunning { relay.terminate(); relay.waitUntilExit() } }
        #expect(await notify.waitFor("READY=1"), "\(notify.messages)")
        #expect(await notify.waitFor("WATCHDOG=1", count: 2, seconds: 3), "\(notify.messages)")
        relay.terminate()
        relay.waitUntilExit()
        #expect(await notify.waitFor("STOPPING=1"), "\(notify.messages)")

        let other = try NotifySocket()
        defer { other.close() }
        let gateway = try GatewayProcess(directory: TestGateway.makeTemporaryDirectory(),
                                         environment: ["NOTIFY_SOCKET": other.path, "WATCHDOG_USEC": "100000", "WATCHDOG_PID": "1"])
        try await gateway.start()
        #expect(await other.waitFor("READY=1"))
        try await Task.sleep(for: .milliseconds(400))
        #expect(!other.messages.contains { $0.contains("WATCHDOG=1") }, "\(other.messages)")
        gateway.terminate()
    }

    @Test("LoadCredential= files in $CREDENTIALS_DIRECTORY become the APNs key and FCM account files unless a setting names its own")
    func credentials() throws {
        let directory = TestGateway.makeTemporaryDirectory()
        try "key".write(toFile: directory + "/apns.p8", atomically: true, encoding: .utf8)
        let applied = SystemdCredentials.apply(to: ["CREDENTIALS_DIRECTORY": directory])
        #expect(applied["SOULACY_MOBILE_APNS_PRIVATE_KEY_FILE"] == directory + "/apns.p8")
        #expect(applied["SOULACY_MOBILE_FCM_CREDENTIALS_FILE"] == nil, "no file, no setting")
        let own = SystemdCredentials.apply(to: ["CREDENTIALS_DIRECTORY": directory, "SOULACY_MOBILE_APNS_PRIVATE_KEY_FILE": "/etc/own.p8"])
        #expect(own["SOULACY_MOBILE_APNS_PRIVATE_KEY_FILE"] == "/etc/own.p8")
        #expect(SystemdCredentials.apply(to: [:]).isEmpty)
    }

    @Test("deploy/soulacy.service and deploy/soulacy-relay.service pass systemd-analyze verify, and their exposure is what the README states")
    func unitsVerify() async throws {
        let analyze = "/usr/bin/systemd-analyze"
        #expect(FileManager.default.isExecutableFile(atPath: analyze), "scripts/install-deps --test installs systemd")
        let directory = TestGateway.makeTemporaryDirectory()
        var exposures: [String: Double] = [:]
        for (unit, binary) in [("soulacy.service", "soulacy"), ("soulacy-relay.service", "soulacy-relay")] {
            // verify checks that ExecStart's binary exists: the units point at the binaries this build made.
            let text = try String(contentsOfFile: RepositoryPaths.root + "/deploy/" + unit, encoding: .utf8)
                .replacingOccurrences(of: "/usr/local/bin/\(binary) ", with: RepositoryPaths.buildDirectory + "/" + binary + " ")
            try text.write(toFile: directory + "/" + unit, atomically: true, encoding: .utf8)
            let verified = try await runProgram(analyze, ["verify", directory + "/" + unit])
            #expect(verified.status == 0 && verified.output.isEmpty, "\(unit): \(verified.output)")
            let security = try await runProgram(analyze, ["security", "--offline=true", directory + "/" + unit])
            let line = security.output.split(separator: "\n").first { $0.contains("Overall exposure level") }
            let score = line.flatMap { $0.split(separator: ":").last?.split(separator: " ").first }.flatMap { Double($0) }
            #expect(score != nil, "\(unit): \(security.output)")
            exposures[unit] = score
        }
        let readme = try String(contentsOfFile: RepositoryPaths.root + "/README.md", encoding: .utf8)
        for (unit, score) in exposures {
            #expect(score <= 2.0, "\(unit) exposure \(score)")
            #expect(readme.contains("`\(unit)`: \(String(format: "%.1f", score))"), "the README states \(unit)'s exposure as \(score)")
        }
    }
}
