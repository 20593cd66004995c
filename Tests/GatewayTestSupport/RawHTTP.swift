import Foundation
import Glibc

/// Sends raw bytes to a loopback port and reads the reply until the server closes or `timeout` passes.
/// For what a well-behaved client library would never send: chunked oversize bodies, huge headers, garbage.
public enum RawHTTP {
    /// A TCP connection to a loopback port whose reads give up after `timeout` seconds; the caller closes it.
    /// `from` binds another loopback source address first (`127.0.0.2`: a second client on the same machine).
    public static func connect(port: UInt16, timeout: Double = 5, from source: String? = nil) -> Int32? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return nil }
        var tv = timeval(tv_sec: Int(timeout), tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        if let source {
            var local = sockaddr_in()
            local.sin_family = sa_family_t(AF_INET)
            local.sin_addr.s_addr = inet_addr(source)
            let bound = withUnsafePointer(to: &local) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard bound == 0 else {
                close(fd)
                return nil
            }
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            close(fd)
            return nil
        }
        return fd
    }

    /// The exchange runs on a thread of its own: blocking reads on the cooperative pool would starve the gateway
    /// that runs in the same test process.
    /// `halfClose` shuts the sending side once the request is out, for garbage the server must answer or drop without
    /// waiting for more. A well-formed request with `Connection: close` should pass `false`: libmicrohttpd may close a
    /// connection whose client half-closed before the reply was queued, which reads as an empty reply now and then.
    public static func exchange(port: UInt16, _ request: [UInt8], timeout: Double = 5, from source: String? = nil, halfClose: Bool = true) async -> String {
        await onOwnThread { exchangeBlocking(port: port, request, timeout: timeout, from: source, halfClose: halfClose) }
    }

    static func exchangeBlocking(port: UInt16, _ request: [UInt8], timeout: Double, from source: String? = nil, halfClose: Bool = true) -> String {
        guard let fd = connect(port: port, timeout: timeout, from: source) else { return "" }
        defer { close(fd) }
        var offset = 0
        while offset < request.count {
            let n = request[offset...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n <= 0 { break }
            offset += n
        }
        if halfClose { shutdown(fd, Int32(SHUT_WR)) }
        var reply: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = recv(fd, &buffer, buffer.count, 0)
            if n <= 0 { break }
            reply.append(contentsOf: buffer[0..<n])
        }
        return String(decoding: reply, as: UTF8.self)
    }

    public static func exchange(port: UInt16, _ text: String, from source: String? = nil) async -> String {
        await exchange(port: port, Array(text.utf8), from: source)
    }
}

/// Runs blocking work (socket reads that wait on the gateway) on a thread of its own: on the cooperative pool it
/// would starve the gateway that runs in the same test process.
public func onOwnThread<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
    await withCheckedContinuation { continuation in
        Thread.detachNewThread { continuation.resume(returning: body()) }
    }
}

/// `onOwnThread` for work that throws.
public func onOwnThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread.detachNewThread { continuation.resume(with: Result { try body() }) }
    }
}
