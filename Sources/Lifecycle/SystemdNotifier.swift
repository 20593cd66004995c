import Foundation
import Glibc

/// systemd's notification protocol (sd_notify(3)): datagrams of `KEY=VALUE` lines to `$NOTIFY_SOCKET`, so a
/// `Type=notify` unit is started only once the gateway listens, and its watchdog restarts a gateway that hangs.
/// Outside systemd (`NOTIFY_SOCKET` unset) every call does nothing.
public struct SystemdNotifier: Sendable {
    /// The socket's address: a path, or an abstract name (written `@name` in the variable).
    let socketPath: String?
    /// How often systemd expects `WATCHDOG=1` (`WatchdogSec=`), when it watches this process.
    public let watchdogInterval: Duration?

    public init(environment: [String: String] = ProcessInfo.processInfo.environment, pid: Int32 = getpid()) {
        let path = environment["NOTIFY_SOCKET"].flatMap { $0.isEmpty ? nil : $0 }
        socketPath = path
        // WATCHDOG_PID, when set, names the process meant; a child that inherited the variables is not it.
        let meant = environment["WATCHDOG_PID"].flatMap(Int32.init).map { $0 == pid } ?? true
        if path != nil, meant, let text = environment["WATCHDOG_USEC"], let usec = Int64(text), usec > 0 {
            watchdogInterval = .microseconds(usec)
        } else {
            watchdogInterval = nil
        }
    }

    public var isEnabled: Bool { socketPath != nil }

    /// The service is up (`READY=1`), with a status line for `systemctl status`.
    public func ready(status: String) { send("READY=1\nSTATUS=\(status)\nMAINPID=\(getpid())") }

    /// The service is draining (`STOPPING=1`).
    public func stopping() { send("STOPPING=1\nSTATUS=draining") }

    /// A keep-alive for the watchdog.
    public func keepAlive() { send("WATCHDOG=1") }

    /// Sends keep-alives at half the watchdog's interval for as long as `healthy()` says so, until cancelled: a
    /// gateway whose database stopped answering (or whose tasks stopped running) misses them and is restarted.
    public func runWatchdog(healthy: @escaping @Sendable () async -> Bool) async {
        guard let interval = watchdogInterval else { return }
        while !Task.isCancelled {
            if await healthy() { keepAlive() }
            try? await Task.sleep(for: interval / 2)
        }
    }

    /// One datagram; failures are ignored, as sd_notify's callers do (the service runs on without systemd's word).
    @discardableResult
    public func send(_ message: String) -> Bool {
        guard let socketPath else { return false }
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        var name = Array(socketPath.utf8)
        if name.first == UInt8(ascii: "@") { name[0] = 0 }  // the abstract namespace
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard name.count < capacity else { return false }
        withUnsafeMutableBytes(of: &address.sun_path) { path in
            for (index, byte) in name.enumerated() { path[index] = byte }
        }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + name.count)
        let bytes = Array(message.utf8)
        let sent = bytes.withUnsafeBytes { buffer in
            withUnsafePointer(to: &address) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { sendto(fd, buffer.baseAddress, buffer.count, Int32(MSG_NOSIGNAL), $0, length) }
            }
        }
        return sent == bytes.count
    }
}
