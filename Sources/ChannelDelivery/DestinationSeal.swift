import Crypto
import Foundation

/// Seals a channel send's destination in the outbox: a `to` may carry a secret (a Teams or Google Chat incoming-
/// webhook URL holds its key, an ad-hoc webhook URL its token), and no secret is readable from the database at rest.
/// AES-256-GCM under a key kept beside the database (never in it), the header binding what the value is; a row
/// written before sealing existed reads as it was.
public struct DestinationSeal: Sendable {
    static let prefix = "sealed:v1:"
    /// What a sealed destination reads as when it does not open under this key: two lines, which no channel takes
    /// as a chat, an address, a URL or an endpoint's name.
    public static let unreadable = "(a destination sealed under another key)\n(not readable)"
    static let header = "soulacy channel destination v1"
    let key: [UInt8]

    /// `key`: 32 bytes (the gateway's `relay-secrets.key`, which also seals the phones' relay secrets).
    public init(key: [UInt8]) {
        precondition(key.count == 32, "a destination seal needs a 32-byte key")
        self.key = key
    }

    /// The value to store for `destination` (an empty one stays empty: it names the channel's default).
    public func seal(_ destination: String) throws -> String {
        guard !destination.isEmpty else { return destination }
        return Self.prefix + (try SealedBox.seal(Array(destination.utf8), key: key, header: Self.header))
    }

    /// The destination a stored value holds; a value stored in the clear (before sealing) is returned as it is.
    public func open(_ stored: String) throws -> String {
        guard stored.hasPrefix(Self.prefix) else { return stored }
        return String(decoding: try SealedBox.open(String(stored.dropFirst(Self.prefix.count)), key: key, header: Self.header), as: UTF8.self)
    }

    /// How a destination is shown (a run's outputs, the console): a URL by its scheme and host alone, since its path
    /// and query may hold the endpoint's key; anything else (a chat id, an address, an endpoint's name) as it is.
    public static func display(_ destination: String) -> String {
        guard let separator = destination.range(of: "://") else { return destination }
        let scheme = destination[..<separator.lowerBound].trimmingCharacters(in: .whitespacesAndNewlines)
        // A URL that does not parse is shown by its scheme alone, never whole.
        guard let url = URLComponents(string: destination.trimmingCharacters(in: .whitespacesAndNewlines)), let host = url.host, !host.isEmpty else {
            return "\(scheme)://…"
        }
        return "\(url.scheme ?? scheme)://\(host)/…"
    }
}
