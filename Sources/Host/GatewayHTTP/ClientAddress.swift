import Foundation
import HTTPServer
#if canImport(Glibc)
import Glibc
#endif

/// Who a request comes from, for counting it against an allowance (the request rate limit, wrong pairing codes,
/// wrong console keys and codes): the peer, or behind a trusted reverse proxy the client it names, and then the
/// unit one party controls as a whole.
public struct ClientAddresses: Sendable {
    let trustedProxies: Set<String>

    /// `trustedProxies`: `SOULACY_TRUSTED_PROXIES`, the only peers whose `X-Forwarded-For` is believed.
    public init(trustedProxies: [String] = []) {
        self.trustedProxies = Set(trustedProxies.map(Self.normalized))
    }

    /// The key `request` is counted under: its client's `allowanceKey`.
    public func allowanceKey(of request: HTTPRequest) -> String {
        Self.allowanceKey(client(of: request))
    }

    /// The peer, or behind a trusted proxy the right-most `X-Forwarded-For` entry that is not itself a trusted proxy
    /// (entries further left are whatever the client chose to send).
    public func client(of request: HTTPRequest) -> String {
        let peer = Self.normalized(request.remoteAddress)
        guard !trustedProxies.isEmpty, trustedProxies.contains(peer), let forwarded = request.header("x-forwarded-for") else { return peer }
        var client = peer
        for entry in forwarded.split(separator: ",").reversed() {
            // An entry that is no address (a name, garbage) ends the walk: the last one believed is the client.
            guard let address = Self.address(entry.trimmingCharacters(in: .whitespaces)) else { break }
            client = address
            if !trustedProxies.contains(address) { break }
        }
        return client
    }

    /// An `X-Forwarded-For` entry as an address, without the port some proxies add (`192.0.2.7:5678`,
    /// `[2001:db8::1]:443`); nil for anything that is not an IP address.
    static func address(_ entry: String) -> String? {
        guard !entry.isEmpty, entry.utf8.count <= 64 else { return nil }
        var text = entry
        if text.hasPrefix("["), let close = text.firstIndex(of: "]") {
            text = String(text[text.index(after: text.startIndex)..<close])
        } else if text.contains("."), let colon = text.firstIndex(of: ":"), text.filter({ $0 == ":" }).count == 1 {
            text = String(text[..<colon])
        }
        text = normalized(text)
        var v4 = in_addr()
        guard inet_pton(AF_INET, text, &v4) == 1 || ipv6(text) != nil else { return nil }
        return text
    }

    /// An IPv6 address parsed by libc, its zone (`fe80::1%eth0`: the interface, not the host) left aside; nil for
    /// anything else.
    static func ipv6(_ text: String) -> in6_addr? {
        let bare = text.split(separator: "%", maxSplits: 1).first.map(String.init) ?? text
        var parsed = in6_addr()
        return inet_pton(AF_INET6, bare, &parsed) == 1 ? parsed : nil
    }

    /// An IPv4 client of a dual-stack listener is the same client as over IPv4.
    static func normalized(_ address: String) -> String {
        address.hasPrefix("::ffff:") && address.contains(".") ? String(address.dropFirst(7)) : address
    }

    /// What one party controls as a whole: an IPv4 address itself, but an IPv6 address's /64, because a host given
    /// a /64 (any home or cloud subscriber) may send from each of its 2^64 addresses at will, and counting them one
    /// by one would give it as many allowances. Anything else (an in-process caller) is its own key.
    public static func allowanceKey(_ address: String) -> String {
        guard address.contains(":"), var parsed = ipv6(address) else { return address }
        let bytes = withUnsafeBytes(of: &parsed) { Array($0.prefix(8)) }
        let groups = stride(from: 0, to: 8, by: 2).map { String(UInt16(bytes[$0]) << 8 | UInt16(bytes[$0 + 1]), radix: 16) }
        return groups.joined(separator: ":") + "::/64"
    }
}
