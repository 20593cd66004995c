import ChannelAPI
import Foundation

/// How a connection to a mail server is secured.
public enum MailSecurity: String, Sendable, Equatable {
    /// A plain port upgraded with STARTTLS before anything else; a server that does not offer it is refused.
    case starttls
    /// TLS from the first byte (`smtps://` on 465, `imaps://` on 993).
    case implicit
    /// No TLS at all (a relay on the same host); no credentials are sent over it.
    case none
}

/// Where and how to send: `channels.email`'s SMTP keys, the original's names and defaults.
public struct SMTPConfiguration: Sendable {
    public var host: String
    public var port: Int
    public var security: MailSecurity
    public var username: String?
    public var password: String?
    public var from: MailAddress
    public var subject: String
    public var timeout: Duration
    /// `default_output_to`: where a send without `to` goes.
    public var defaultRecipients: String?
    public var caFile: String?
}

/// The mailbox to read for an agent: `channels.email`'s `imap_*` keys (beyond the original, which has no inbound).
public struct IMAPConfiguration: Sendable {
    public var host: String
    public var port: Int
    public var security: MailSecurity
    public var username: String?
    public var password: String?
    public var mailbox: String
    public var agentID: String
    public var caFile: String?
    public var timeout: Duration
    /// How often the mailbox is checked while a poll waits for mail.
    public var checkInterval: Duration
}

/// `channels.email`, checked: every problem names its key.
public struct EmailConfiguration: Sendable {
    public var smtp: SMTPConfiguration
    /// Set when both `agent_id` and `imap_host` are.
    public var imap: IMAPConfiguration?

    public init(_ settings: ChannelSettings) throws(ChannelConfigError) {
        let host = try Self.host(settings, "host", required: true)!
        let explicitPort = try settings.int("port", in: 1...65535)
        let security = try Self.security(settings, "tls", port: explicitPort, implicitPort: 465)
        let port = explicitPort ?? (security == .implicit ? 465 : 587)
        let username = settings.string("username")
        let password = try Self.secret(settings, "password")
        if security == .none, password != nil {
            throw ChannelConfigError(field: settings.field("password"), problem: "is never sent without TLS: set tls to starttls or implicit, or remove the password")
        }
        guard let fromText = settings.string("from") ?? username else {
            throw ChannelConfigError(field: settings.field("from"), problem: "is required when there is no username (the address mail is sent from)")
        }
        let from: MailAddress
        do { from = try MailAddress.parse(fromText) } catch {
            throw ChannelConfigError(field: settings.field(settings.string("from") == nil ? "username" : "from"), problem: "\(error) (it is the From address)")
        }
        let timeout = Duration.seconds(try settings.int("timeout_seconds", in: 1...600) ?? 20)
        let defaultRecipients = settings.string("default_output_to")
        if let defaultRecipients {
            do { _ = try MailAddress.parseList(defaultRecipients) } catch {
                throw ChannelConfigError(field: settings.field("default_output_to"), problem: error.description)
            }
        }
        let subject = OutgoingMail.singleLine(settings.string("subject") ?? "Soulacy update")
        smtp = SMTPConfiguration(host: host, port: port, security: security, username: username, password: password, from: from,
                                 subject: subject.isEmpty ? "Soulacy update" : subject, timeout: timeout,
                                 defaultRecipients: defaultRecipients, caFile: settings.caFile)

        let imapHost = try Self.host(settings, "imap_host", required: false)
        let agentID = settings.string("agent_id")
        guard let imapHost, let agentID else {
            imap = nil
            return
        }
        let imapExplicitPort = try settings.int("imap_port", in: 1...65535)
        let imapSecurity: MailSecurity
        if settings.string("imap_tls") == nil {
            imapSecurity = imapExplicitPort == 143 ? .starttls : .implicit
        } else {
            imapSecurity = try Self.security(settings, "imap_tls", port: imapExplicitPort, implicitPort: 993)
        }
        let imapPassword = try Self.secret(settings, "imap_password") ?? password
        if imapSecurity == .none, imapPassword != nil {
            throw ChannelConfigError(field: settings.field("imap_password"), problem: "is never sent without TLS: set imap_tls to implicit or starttls")
        }
        let mailbox = settings.string("imap_mailbox") ?? "INBOX"
        guard mailbox.unicodeScalars.allSatisfy({ $0.isASCII && $0.value >= 0x20 && $0 != "\"" && $0 != "\\" }) else {
            throw ChannelConfigError(field: settings.field("imap_mailbox"), problem: "must be an ASCII mailbox name without quotes or backslashes, got '\(mailbox)'")
        }
        imap = IMAPConfiguration(host: imapHost, port: imapExplicitPort ?? (imapSecurity == .implicit ? 993 : 143), security: imapSecurity,
                                 username: settings.string("imap_username") ?? username, password: imapPassword, mailbox: mailbox,
                                 agentID: agentID, caFile: settings.caFile, timeout: timeout,
                                 checkInterval: .seconds(try settings.int("imap_check_seconds", in: 1...3600) ?? 30))
    }

    /// A host name or IP address, nothing that could change the URL it goes into.
    private static func host(_ settings: ChannelSettings, _ key: String, required: Bool) throws(ChannelConfigError) -> String? {
        guard let host = required ? try settings.requiredString(key) : settings.string(key) else { return nil }
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        guard bare.unicodeScalars.allSatisfy({ $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || ".-:".unicodeScalars.contains($0)) }) else {
            throw ChannelConfigError(field: settings.field(key), problem: "must be a host name or IP address (no scheme, port or path), got '\(host)'")
        }
        return bare
    }

    /// `tls`: starttls, implicit or none; empty means implicit on the implicit-TLS port, else starttls.
    private static func security(_ settings: ChannelSettings, _ key: String, port: Int?, implicitPort: Int) throws(ChannelConfigError) -> MailSecurity {
        guard let text = settings.string(key)?.lowercased() else { return port == implicitPort ? .implicit : .starttls }
        switch text {
        case "starttls": return .starttls
        case "implicit", "tls", "ssl": return .implicit
        case "none", "off", "false": return .none
        default: throw ChannelConfigError(field: settings.field(key), problem: "must be starttls, implicit or none, got '\(text)'")
        }
    }

    /// `<key>` or `<key>_file` (the file's content without its final line break); both at once is an error.
    private static func secret(_ settings: ChannelSettings, _ key: String) throws(ChannelConfigError) -> String? {
        let inline = settings.values[key]?.text.flatMap { $0.isEmpty ? nil : $0 }
        guard let path = settings.string(key + "_file") else { return inline }
        guard inline == nil else { throw ChannelConfigError(field: settings.field(key + "_file"), problem: "cannot be set together with \(key)") }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ChannelConfigError(field: settings.field(key + "_file"), problem: "cannot read '\(path)'")
        }
        var text = String(decoding: data, as: UTF8.self)
        while text.hasSuffix("\n") || text.hasSuffix("\r") { text.removeLast() }
        guard !text.isEmpty else { throw ChannelConfigError(field: settings.field(key + "_file"), problem: "'\(path)' is empty") }
        return text
    }
}
