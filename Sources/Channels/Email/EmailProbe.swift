import ChannelAPI
import Foundation

/// `soulacy doctor`'s dry call for the SMTP server: connect, EHLO, STARTTLS (or implicit TLS), AUTH with the
/// configured account, then NOOP (RFC 5321 §4.1.1.9) and QUIT. No MAIL, RCPT or DATA is ever sent. libcurl does the
/// greeting, TLS and AUTH before the NOOP, exactly as it does before a message.
extension EmailChannel: ServiceProbe {
    public func probe() async -> ProbeResult {
        let c = configuration
        let server = "\(c.host):\(c.port)"
        let request = MailRequest(
            url: MailRequest.url(scheme: c.security == .implicit ? "smtps" : "smtp", host: c.host, port: c.port, path: c.from.domain),
            requireTLS: c.security != .none, username: c.username, password: c.password, caFile: c.caFile, timeout: c.timeout,
            customRequest: "NOOP", bodyLimit: 4096)
        let result = await MailWorker(label: "soulacy-email-probe-\(name)").run { MailSession().perform(request) }
        let fix = "check host, port and tls under channels.\(name)"
        let credentialsFix = "check username and password under channels.\(name) (an app password where the provider asks for one)"
        let outcome: ProbeResult
        if result.succeeded {
            // 235 (RFC 4954 §6): the server took the credentials. A server that offers no AUTH is never sent them.
            let authenticated = result.replies.contains { $0.hasPrefix("235") }
            let tls = c.security == .none ? "no TLS (tls: none)" : c.security == .implicit ? "implicit TLS" : "STARTTLS"
            if c.password == nil {
                outcome = .ok("SMTP \(server): connected over \(tls), EHLO answered; no password configured, so no AUTH tried; nothing sent")
            } else if authenticated {
                outcome = .ok("SMTP \(server): connected over \(tls), EHLO answered, AUTH accepted for \(c.username ?? "?"); nothing sent")
            } else {
                outcome = .warn("SMTP \(server): connected over \(tls), but the server offered no AUTH, so the password was not tried",
                                fix: "check that host and port name the provider's submission server (port 587 or 465)")
            }
        } else if result.tlsRefused {
            outcome = .fail("SMTP \(server) does not offer STARTTLS; no password was sent", fix: "use tls: implicit for a port-465 server, or a server that offers STARTTLS")
        } else if result.loginDenied {
            let code = result.replyCode == 0 ? 535 : result.replyCode
            let words = result.reply(for: code).map { ": \($0)" } ?? ""
            outcome = (400..<500).contains(code) ? .warn("SMTP \(server) AUTH: \(code)\(words) (for now; try again later)")
                : .fail("SMTP \(server) refused the credentials: AUTH \(code)\(words)", fix: credentialsFix)
        } else if result.replyCode >= 400 {
            let words = result.reply(for: result.replyCode).map { ": \($0)" } ?? ""
            outcome = (400..<500).contains(result.replyCode) ? .warn("SMTP \(server) answered \(result.replyCode)\(words); try again later")
                : .fail("SMTP \(server) answered \(result.replyCode)\(words)", fix: fix)
        } else if result.timedOut {
            outcome = .fail("SMTP \(server) did not answer within \(c.timeout): \(result.errorText)", fix: fix)
        } else {
            outcome = .fail("could not reach SMTP server \(server): \(result.errorText)", fix: fix)
        }
        return outcome.redacting(probeSecrets)
    }

    /// The password, and the AUTH PLAIN and LOGIN forms it travels in, should a server ever echo one.
    private var probeSecrets: [String] {
        guard let password = configuration.password, !password.isEmpty else { return [] }
        let user = configuration.username ?? ""
        return [password, Data("\u{0}\(user)\u{0}\(password)".utf8).base64EncodedString(), Data(password.utf8).base64EncodedString()]
    }
}
