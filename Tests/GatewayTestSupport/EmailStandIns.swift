import Foundation
import Glibc
import APIKit

/// The SMTP submission stand-in (aiosmtpd): STARTTLS before AUTH, AUTH before mail, scripted replies per stage,
/// and every message it took. `tlsPort` is the STARTTLS port (as 587), `smtpsPort` implicit TLS (as 465).
public final class SMTPStandIn: StandInProcess, @unchecked Sendable {
    public static let user = "gateway@soulacy.test"
    public static let password = "smtp-test-password"
    public let smtpsPort: UInt16

    public static func start() async throws -> SMTPStandIn {
        // The implicit-TLS port is fixed per instance: a start that loses it to another process (a port picked free
        // and taken before the bind) starts again on fresh ports, as the other ports' retries do.
        var attempt = 0
        while true {
            let standIn = SMTPStandIn(directory: TestGateway.makeTemporaryDirectory(), smtpsPort: freePort())
            do {
                try await standIn.start()
                return standIn
            } catch where attempt < 4 && "\(error)".contains("address already in use") {
                attempt += 1
            }
        }
    }

    init(directory: String, smtpsPort: UInt16) {
        self.smtpsPort = smtpsPort
        super.init(script: "smtp_standin.py", directory: directory,
                   arguments: ["--user", Self.user, "--password", Self.password, "--smtps-port", String(smtpsPort)])
    }

    override var ports: [UInt16] { super.ports + [smtpsPort] }

    /// Every message taken, oldest first (`mail_from`, `rcpt_tos`, `headers`, `subject`, `body`, `raw`, `tls`…).
    public func messages() async throws -> [JSONValue] {
        try await control("GET", "/control/messages")["messages"]?.arrayValue ?? []
    }

    /// Every AUTH tried (`mechanism`, `login`, `success`, `tls`).
    public func authAttempts() async throws -> [JSONValue] {
        try await control("GET", "/control/auth")["attempts"]?.arrayValue ?? []
    }

    /// The next MAIL, RCPT or DATA answers `code` with `message`.
    public func scriptReply(stage: String, code: Int, message: String) async throws {
        try await script([["stage": .string(stage), "code": .number(Double(code)), "message": .string(message)]])
    }
}

/// Debian's Dovecot on private ports (imap_standin.py), one user, a Maildir in a temporary directory.
/// `tlsPort` is IMAPS (implicit TLS).
public final class IMAPStandIn: StandInProcess, @unchecked Sendable {
    public static let user = "agent@soulacy.test"
    public static let password = "imap-test-password"

    public static func start() async throws -> IMAPStandIn {
        let standIn = IMAPStandIn(directory: TestGateway.makeTemporaryDirectory())
        try await standIn.start()
        return standIn
    }

    init(directory: String) {
        super.init(script: "imap_standin.py", directory: directory, arguments: ["--user", Self.user, "--password", Self.password])
    }

    /// APPENDs a message through Dovecot itself; returns its UID and the mailbox's UIDVALIDITY.
    @discardableResult
    public func append(_ message: [String: JSONValue]) async throws -> (uid: Int, uidValidity: Int) {
        let answer = try await control("POST", "/control/append", json: .object(message))
        guard let uid = answer["uid"]?.numberValue, let validity = answer["uidvalidity"]?.numberValue else {
            throw TestFailure("APPEND failed: \(answer.serialized())")
        }
        return (Int(uid), Int(validity))
    }

    /// APPENDs a message given as raw RFC 5322 text.
    @discardableResult
    public func append(raw: String) async throws -> (uid: Int, uidValidity: Int) {
        try await append(["raw": .string(raw)])
    }

    /// Dovecot's logins (`user`, `method`, `tls`), parsed from its own log.
    public func logins() async throws -> [JSONValue] {
        try await control("GET", "/control/logins")["logins"]?.arrayValue ?? []
    }
}

/// A real SMTP server (aiosmtpd) that does NOT offer STARTTLS but does invite AUTH in plain text: what a
/// stripping attacker or a misconfigured server shows a client. It writes each AUTH and DATA it sees to `recordFile`.
public final class PlaintextSMTPServer: @unchecked Sendable {
    public let port = freePort()
    public let directory = TestGateway.makeTemporaryDirectory()
    public var recordFile: String { directory + "/seen.jsonl" }
    private var process: TestProcess?

    private static let program = #"""
    import json, sys, threading
    from aiosmtpd.controller import Controller
    from aiosmtpd.smtp import AuthResult

    port, record = int(sys.argv[1]), sys.argv[2]

    def note(entry):
        with open(record, "a") as f:
            f.write(json.dumps(entry) + "\n")

    class Handler:
        async def handle_DATA(self, server, session, envelope):
            note({"data": len(envelope.content or b"")})
            return "250 OK"

    def authenticator(server, session, envelope, mechanism, auth_data):
        note({"auth": mechanism})
        return AuthResult(success=True)

    controller = Controller(Handler(), hostname="127.0.0.1", port=port, authenticator=authenticator,
                            auth_require_tls=False, auth_required=False)
    controller.start()
    print("READY", flush=True)
    threading.Event().wait()
    """#

    public init() {}

    public func start() async throws {
        let script = directory + "/plaintext_smtp.py"
        try Self.program.write(toFile: script, atomically: true, encoding: .utf8)
        _ = FileManager.default.createFile(atPath: recordFile, contents: nil)
        let process = TestProcess()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", script, String(port), recordFile]
        let log = directory + "/server.log"
        _ = FileManager.default.createFile(atPath: log, contents: nil)
        process.standardOutput = FileHandle(forWritingAtPath: log)
        process.standardError = FileHandle(forWritingAtPath: log)
        try launch(process)
        self.process = process
        for _ in 0..<200 {
            if let fd = RawHTTP.connect(port: port, timeout: 1) {
                close(fd)
                return
            }
            guard process.isRunning else { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw TestFailure("the plain-text SMTP server did not start: " + ((try? String(contentsOfFile: log, encoding: .utf8)) ?? ""))
    }

    /// What the server saw: `{"auth": mechanism}` and `{"data": bytes}` lines.
    public func seen() -> [String] {
        ((try? String(contentsOfFile: recordFile, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

    public func stop() {
        guard let process, process.isRunning else { return }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    deinit { stop() }
}
