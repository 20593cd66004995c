import ChannelAPI
import Foundation

/// An absolute http(s) URL as the webhook-like channels take it, with the rules on where a send may go.
/// The URL itself is treated as a secret (Google Chat's carries its key and token, many others a path token):
/// it never appears in a reason or an error; `display` names only the scheme and host.
struct WebhookURL: Sendable, Equatable {
    let text: String
    let scheme: String
    /// Lower-cased, without brackets for IPv6.
    let host: String
    let port: Int?

    /// nil for anything that is not an absolute http:// or https:// URL with a host.
    init?(_ text: String) {
        guard let components = URLComponents(string: text), let scheme = components.scheme?.lowercased(),
              scheme == "https" || scheme == "http", let host = components.host, !host.isEmpty,
              components.user == nil, components.password == nil else { return nil }
        self.text = text
        self.scheme = scheme
        self.host = host.lowercased().trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        port = components.port
    }

    /// `https://host/…`: enough to tell endpoints apart in a reason, nothing that may be a credential.
    var display: String { "\(scheme)://\(host)\(port.map { ":\($0)" } ?? "")/…" }

    /// 127.0.0.0/8, ::1 and `localhost`: the only hosts plain http:// may reach from a SOUL.yaml `to`.
    var isLoopback: Bool {
        if host == "localhost" || host.hasSuffix(".localhost") || host == "::1" { return true }
        let octets = host.split(separator: ".")
        return octets.count == 4 && octets.first == "127" && octets.allSatisfy { UInt8($0) != nil }
    }

    /// Link-local addresses and the cloud metadata names, which the original's netguard always blocks (checked on
    /// the literal host only; a name that resolves there is not caught).
    var isLinkLocalOrMetadata: Bool {
        let octets = host.split(separator: ".").compactMap { UInt8($0) }
        if octets.count == 4, octets[0] == 169, octets[1] == 254 { return true }
        if host.hasPrefix("fe80:") { return true }
        return host == "metadata.google.internal" || host == "metadata"
    }

    /// The rule for a URL that arrives as `to` from an agent file: https, or http on a loopback host; never
    /// link-local or cloud metadata.
    static func parseDestination(_ text: String, channel: String) throws(DestinationError) -> WebhookURL {
        guard let url = WebhookURL(text) else {
            throw .invalid("\(channel): `to` is not an absolute https:// URL with a host")
        }
        if url.scheme == "http" && !url.isLoopback {
            throw .invalid("\(channel): a destination URL must be https:// (plain http:// is allowed only for loopback hosts: 127.0.0.1, ::1, localhost), got \(url.display)")
        }
        if url.isLinkLocalOrMetadata {
            throw .invalid("\(channel): refusing \(url.display): link-local and cloud-metadata addresses are never a webhook destination")
        }
        return url
    }

    /// A configured URL (the gateway config, written by the operator): http or https, with a host.
    static func parseConfigured(_ text: String, field: String, httpsOnly: Bool = false) throws(ChannelConfigError) -> WebhookURL {
        guard let url = WebhookURL(text) else {
            throw ChannelConfigError(field: field, problem: "must be an absolute http:// or https:// URL with a host")
        }
        if httpsOnly && url.scheme == "http" && !url.isLoopback {
            throw ChannelConfigError(field: field, problem: "must be https:// (the service serves nothing else; http:// is accepted only for loopback hosts)")
        }
        if url.isLinkLocalOrMetadata {
            throw ChannelConfigError(field: field, problem: "names a link-local or cloud-metadata address, which is never a webhook destination")
        }
        return url
    }
}

/// Takes every secret out of a text meant for a reason: configured secrets, URLs and their query values.
struct SecretScrubber: Sendable {
    private var secrets: [String]

    init(secrets: [String], urls: [String] = []) {
        var all = secrets
        for url in urls {
            all.append(url)
            if let components = URLComponents(string: url) {
                all += (components.queryItems ?? []).compactMap(\.value)
                all += components.path.split(separator: "/").map(String.init).filter { $0.count >= 16 }
            }
        }
        // Longest first, so a URL goes before the token inside it.
        self.secrets = Array(Set(all.filter { $0.count >= 6 })).sorted { $0.count > $1.count }
    }

    func scrub(_ text: String) -> String {
        secrets.reduce(text) { $0.replacingOccurrences(of: $1, with: "***") }
    }

    /// The same scrubber that also hides `url` and the tokens in it: an ad-hoc URL an agent named, which a
    /// receiver's answer may quote back.
    func including(url: String) -> SecretScrubber {
        var widened = SecretScrubber(secrets: [], urls: [url])
        widened.secrets = Array(Set(widened.secrets + secrets)).sorted { $0.count > $1.count }
        return widened
    }
}
