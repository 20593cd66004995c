import Foundation

/// What the Web Push transport needs, read from SOULACY_WEBPUSH_*: on unless turned off, since the gateway makes
/// its own VAPID key (nothing to sign up for) and browsers subscribe themselves from the console.
public struct WebPushConfiguration: Sendable, Equatable {
    /// The default `sub` of the VAPID token: the project's public page. RFC 8292 asks for a contact the push
    /// service's operator can reach; `mailto:…@localhost` is refused by Apple's service (403 BadJwtToken), and a
    /// made-up domain may be too, so the default is a real, resolvable https: URL. Set SOULACY_WEBPUSH_CONTACT to
    /// your own `mailto:` or `https:` address to be the one reached.
    public static let defaultContact = "https://github.com/vmodekurti/soulacy"

    /// RFC 8292's `sub`: a `mailto:` or `https:` URI.
    public var contact: String
    /// Trust this CA bundle instead of the system's (a local stand-in, an inspecting proxy).
    public var caFile: String?

    public init(contact: String = Self.defaultContact, caFile: String? = nil) {
        self.contact = contact
        self.caFile = caFile
    }

    /// nil when Web Push is turned off (`SOULACY_WEBPUSH=off`); an error naming the variable when a value is wrong.
    public static func fromEnvironment(_ env: [String: String]) throws(WebPushConfigurationError) -> WebPushConfiguration? {
        func value(_ name: String) -> String? {
            guard let text = env[name]?.trimmingCharacters(in: .whitespaces), !text.isEmpty else { return nil }
            return text
        }
        switch value("SOULACY_WEBPUSH")?.lowercased() {
        case nil, "on", "1", "true", "yes": break
        case "off", "0", "false", "no": return nil
        case let other?: throw .invalid("SOULACY_WEBPUSH", "must be on or off, got '\(other)'")
        }
        var configuration = WebPushConfiguration(caFile: value("SOULACY_WEBPUSH_CA_FILE"))
        if let contact = value("SOULACY_WEBPUSH_CONTACT") {
            guard Self.isContact(contact) else {
                throw .invalid("SOULACY_WEBPUSH_CONTACT", "must be a mailto: address or an https: URL where a push service's operator can reach you (not localhost, which Apple's service refuses), got '\(contact)'")
            }
            configuration.contact = contact
        }
        return configuration
    }

    /// `mailto:someone@example.org` or `https://example.org/…`, never a local-only host.
    static func isContact(_ text: String) -> Bool {
        guard !text.unicodeScalars.contains(where: { $0.properties.isWhitespace || $0.properties.generalCategory == .control }) else { return false }
        let lower = text.lowercased()
        let host: String
        if lower.hasPrefix("mailto:") {
            let address = lower.dropFirst("mailto:".count)
            guard let at = address.lastIndex(of: "@"), at != address.startIndex else { return false }
            host = String(address[address.index(after: at)...])
        } else if lower.hasPrefix("https://"), let parsed = URLComponents(string: text), let name = parsed.host?.lowercased(), !name.isEmpty {
            host = name
        } else {
            return false
        }
        let local = host == "localhost" || host.hasSuffix(".localhost") || host.hasSuffix(".local") || host.hasPrefix("127.") || host == "::1" || host == "[::1]"
        return !local && host.contains(".")
    }
}

public enum WebPushConfigurationError: Error, Sendable, Equatable, CustomStringConvertible {
    case invalid(String, String)
    /// The VAPID key or the subscription key in the data directory cannot be read or made.
    case keyFile(String, String)

    public var description: String {
        switch self {
        case let .invalid(variable, why): return "\(variable): \(why)"
        case let .keyFile(path, why): return "Web Push: \(path): \(why)"
        }
    }
}
