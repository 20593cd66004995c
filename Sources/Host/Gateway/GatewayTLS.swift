import Crypto
import Foundation
import Glibc

/// The gateway's one TLS identity: a self-signed ECDSA P-256 certificate made on first start and kept forever
/// (phones pin its key), served on the main port beside plain HTTP and on the same-Wi-Fi listener.
public struct GatewayTLSIdentity: Sendable {
    public let keyPEM: String
    public let certificatePEM: String
    /// What phones pin (`fp` in pairing links): `SelfSignedCertificate.publicKeyPin`, the original's definition.
    public let pin: String

    public static func certificatePath(dataDirectory: String) -> String { dataDirectory + "/tls/gateway.crt" }
    static func keyPath(dataDirectory: String) -> String { dataDirectory + "/tls/gateway.key" }

    /// Loads the identity, or makes it once. A certificate from before (the LAN listener's `lan-cert.pem`) moves
    /// to its new place, so phones paired with it keep their pin.
    static func loadOrCreate(dataDirectory: String, hosts: [String]) throws(GatewayStartError) -> GatewayTLSIdentity {
        let certPath = certificatePath(dataDirectory: dataDirectory), keyPath = keyPath(dataDirectory: dataDirectory)
        let files = FileManager.default
        do {
            try files.createDirectory(atPath: dataDirectory + "/tls", withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            let oldCert = dataDirectory + "/lan-cert.pem", oldKey = dataDirectory + "/lan-key.pem"
            if !files.fileExists(atPath: certPath), files.fileExists(atPath: oldCert), files.fileExists(atPath: oldKey) {
                try files.moveItem(atPath: oldKey, toPath: keyPath)
                try files.moveItem(atPath: oldCert, toPath: certPath)
            }
            if files.fileExists(atPath: certPath) || files.fileExists(atPath: keyPath) {
                // Never silently replaced: a missing or unreadable half is an error to fix, not a new pin.
                guard let key = try? String(contentsOfFile: keyPath, encoding: .utf8), let cert = try? String(contentsOfFile: certPath, encoding: .utf8) else {
                    throw GatewayStartError.listen("the TLS certificate in \(dataDirectory)/tls is incomplete (gateway.crt and gateway.key go together); restore it, or remove both to make a new one (paired phones then pair again)")
                }
                return GatewayTLSIdentity(keyPEM: key, certificatePEM: cert, pin: try SelfSignedCertificate.publicKeyPin(pem: cert))
            }
            let name = LocalAddresses.hostName
            let made = try SelfSignedCertificate.generate(commonName: "Soulacy gateway", organization: "Soulacy",
                                                          ipAddresses: ["127.0.0.1", "::1"] + LocalAddresses.ipv4() + hosts.filter(LocalAddresses.isSpecific),
                                                          dnsNames: name.isEmpty ? [] : [name, name + ".local"])
            try SecretFile.write(made.keyPEM, to: keyPath)
            try made.certificatePEM.write(toFile: certPath, atomically: true, encoding: .utf8)
            return GatewayTLSIdentity(keyPEM: made.keyPEM, certificatePEM: made.certificatePEM, pin: try SelfSignedCertificate.publicKeyPin(pem: made.certificatePEM))
        } catch let error as GatewayStartError {
            throw error
        } catch {
            throw .listen("cannot make the gateway's TLS certificate in \(dataDirectory)/tls: \(error)")
        }
    }
}

/// This machine's name and addresses, for certificates and for links a phone on the same network can follow.
enum LocalAddresses {
    static var hostName: String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return "" }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The non-loopback IPv4 addresses of the interfaces that are up.
    static func ipv4() -> [String] {
        var first: UnsafeMutablePointer<ifaddrs>?
        guard getifaddrs(&first) == 0 else { return [] }
        defer { freeifaddrs(first) }
        var result: [String] = []
        var cursor = first
        while let entry = cursor {
            defer { cursor = entry.pointee.ifa_next }
            guard let address = entry.pointee.ifa_addr, address.pointee.sa_family == sa_family_t(AF_INET),
                  entry.pointee.ifa_flags & UInt32(IFF_UP) != 0, entry.pointee.ifa_flags & UInt32(IFF_LOOPBACK) == 0 else { continue }
            var text = [CChar](repeating: 0, count: Int(INET_ADDRSTRLEN))
            let ok = address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { sin in
                withUnsafePointer(to: sin.pointee.sin_addr) { inet_ntop(AF_INET, $0, &text, socklen_t(text.count)) != nil }
            }
            if ok { result.append(String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)) }
        }
        return result
    }

    static func isSpecific(_ host: String) -> Bool { host != "0.0.0.0" && host != "::" && !host.isEmpty }

    /// The host a link should name for a listen address: a wildcard becomes this machine's first LAN address
    /// (loopback when it has none), IPv6 goes in brackets.
    static func linkHost(for listenHost: String) -> String {
        let host = isSpecific(listenHost) ? listenHost : (ipv4().first ?? "127.0.0.1")
        return host.contains(":") ? "[\(host)]" : host
    }
}
