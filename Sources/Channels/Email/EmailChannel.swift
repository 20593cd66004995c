import ChannelAPI
import ChannelSupport
import Foundation

/// Sends each output as one plain-text message through an SMTP submission server (libcurl): STARTTLS required
/// (or implicit TLS), AUTH with the configured account, one message per attempt, the same Message-ID every time.
///
/// `to` is one address or a comma-separated list, each `addr@example.com` or `Name <addr@example.com>`; empty means
/// the output's metadata `to`, else `default_output_to`, as the original. The subject is the output's metadata
/// `subject`, else the configured one.
public struct EmailChannel: OutboundChannel {
    public let name: String
    public let configuration: SMTPConfiguration
    private let worker: MailWorker

    public init(name: String = "email", configuration: SMTPConfiguration) {
        self.name = name
        self.configuration = configuration
        worker = MailWorker(label: "soulacy-email-\(name)")
    }

    public func validate(destination: String) throws(DestinationError) {
        _ = try recipients(destination, metadata: [:])
    }

    private func recipients(_ destination: String, metadata: [String: String]) throws(DestinationError) -> [MailAddress] {
        let trimmed = destination.trimmingCharacters(in: .whitespaces)
        guard let text = trimmed.isEmpty ? (metadata["to"].flatMap { $0.isEmpty ? nil : $0 } ?? configuration.defaultRecipients) : destination else {
            throw DestinationError.invalid("email: no recipient: give `to` an address, or set channels.\(name).default_output_to")
        }
        do { return try MailAddress.parseList(text) } catch { throw DestinationError.invalid("email: \(error.description)") }
    }

    public func attempt(_ send: ChannelSend) async -> ChannelSendOutcome {
        let to: [MailAddress]
        do { to = try recipients(send.destination, metadata: send.output.metadata) } catch { return .failed(reason: error.description) }
        let body = MessageText.body(of: send.output)
        guard !body.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty else { return .failed(reason: "email: the output has no text to send") }
        let subject = send.output.metadata["subject"].map(OutgoingMail.singleLine).flatMap { $0.isEmpty ? nil : $0 } ?? configuration.subject
        let messageID = OutgoingMail.messageID(for: send.id)
        let mail = OutgoingMail(from: configuration.from, to: to, subject: subject, body: body, messageID: messageID, date: send.createdAt)
        let c = configuration
        let request = MailRequest(
            url: MailRequest.url(scheme: c.security == .implicit ? "smtps" : "smtp", host: c.host, port: c.port, path: c.from.domain),
            requireTLS: c.security != .none, username: c.username, password: c.password, caFile: c.caFile, timeout: c.timeout,
            mailFrom: c.from.address, recipients: to.map(\.address), upload: mail.bytes, bodyLimit: 64 * 1024)
        let result = await worker.run { MailSession().perform(request) }
        return redacted(outcome(of: result, messageID: messageID))
    }

    private var server: String { "\(configuration.host):\(configuration.port)" }

    /// What libcurl's result and the last SMTP reply mean (RFC 5321 §4.2.1: 4yz transient, 5yz permanent).
    func outcome(of result: MailResult, messageID: String) -> ChannelSendOutcome {
        if result.succeeded { return .delivered(remoteID: messageID) }
        let code = result.replyCode
        let words = result.reply(for: code).map { ": \($0)" } ?? ""
        if result.tlsRefused {
            return .failed(reason: "SMTP server \(server) does not offer STARTTLS; the message was not sent and no password was sent "
                + "(TLS is required: use tls: implicit for a port-465 server, or a server that offers STARTTLS)")
        }
        if result.loginDenied {
            if (400..<500).contains(code) { return .retry(after: nil, reason: "SMTP \(code): authentication failed for now\(words)") }
            return .rejected(reason: "SMTP \(code == 0 ? 535 : code): authentication failed\(words)")
        }
        if code >= 400 {
            let stage = Self.stage(of: result.errorText)
            let reason = "SMTP \(code)\(stage.map { " on \($0)" } ?? "")\(words)"
            return (400..<500).contains(code) ? .retry(after: nil, reason: reason) : .rejected(reason: reason)
        }
        if result.timedOut { return .retry(after: nil, reason: "SMTP server \(server) did not answer within \(configuration.timeout): \(result.errorText)") }
        return .retry(after: nil, reason: "could not reach SMTP server \(server): \(result.errorText)")
    }

    /// libcurl names the command that failed: "MAIL failed: 451", "RCPT failed: 550".
    private static func stage(of errorText: String) -> String? {
        for command in ["MAIL", "RCPT", "DATA", "STARTTLS"] where errorText.contains(command) { return command }
        return nil
    }

    /// No reason ever carries the password, whatever a server or libcurl echoed.
    private func redacted(_ outcome: ChannelSendOutcome) -> ChannelSendOutcome {
        guard let password = configuration.password, !password.isEmpty else { return outcome }
        func clean(_ text: String) -> String { text.replacingOccurrences(of: password, with: "***") }
        switch outcome {
        case .delivered: return outcome
        case .retry(let after, let reason): return .retry(after: after, reason: clean(reason))
        case .rejected(let reason): return .rejected(reason: clean(reason))
        case .failed(let reason): return .failed(reason: clean(reason))
        }
    }
}
