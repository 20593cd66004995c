import ChannelAPI
import Foundation

/// Reads an agent's mailbox over IMAP (libcurl): the messages that arrived since the cursor, each once.
///
/// The cursor is `<UIDVALIDITY>:<next UID>` (RFC 3501 §2.3.1.1): a message's UID never changes while the
/// mailbox's UIDVALIDITY stays, so "UIDs from the next one on" is exactly the new mail. A first poll (no cursor)
/// and a changed UIDVALIDITY (the mailbox was rebuilt) start from the mailbox's UIDNEXT: old mail is left alone.
/// Messages from the gateway's own From address, and robots' messages (`Auto-Submitted`), are passed over, so
/// no reply can start a mail loop.
public struct IMAPPoller: InboundPoller {
    public let channel: String
    public let configuration: IMAPConfiguration
    /// The gateway's own address (`from`): mail from it is never an agent's input.
    public let ownAddress: String
    /// The agent the mailbox's messages are for.
    public var agentID: String { configuration.agentID }
    private let log: Log
    private let worker: MailWorker
    /// Messages fetched per poll at most; the cursor says where the next poll goes on.
    static let batchLimit = 25
    /// A message is read up to this size; its text part almost always comes first.
    static let messageLimit = 4 << 20

    public init(channel: String = "email", configuration: IMAPConfiguration, ownAddress: String, log: Log = Log()) {
        self.channel = channel
        self.configuration = configuration
        self.ownAddress = ownAddress.lowercased()
        self.log = log.with("channel", channel)
        worker = MailWorker(label: "soulacy-imap-\(channel)")
    }

    public func poll(after cursor: String?, timeout: Duration) async throws -> InboundBatch {
        let deadline = ContinuousClock.now + timeout
        while true {
            let batch = try await check(after: cursor)
            // Mail, a moved cursor (a first poll, skipped mail) or the end of the wait: the framework stores it now.
            if !batch.messages.isEmpty || batch.cursor != cursor { return batch }
            let left = deadline - ContinuousClock.now
            guard left > .zero else { return batch }
            try await Task.sleep(for: min(left, configuration.checkInterval))
        }
    }

    private struct Cursor {
        var uidValidity: UInt64
        var nextUID: UInt64
        init(uidValidity: UInt64, nextUID: UInt64) {
            self.uidValidity = uidValidity
            self.nextUID = nextUID
        }
        init?(_ text: String?) {
            guard let parts = text?.split(separator: ":"), parts.count == 2, let v = UInt64(parts[0]), let n = UInt64(parts[1]), n > 0 else { return nil }
            uidValidity = v
            nextUID = n
        }
        var text: String { "\(uidValidity):\(nextUID)" }
    }

    private var mailboxURL: String {
        let path = configuration.mailbox.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed.subtracting(CharacterSet(charactersIn: ";/?#%"))) ?? configuration.mailbox
        return MailRequest.url(scheme: configuration.security == .implicit ? "imaps" : "imap", host: configuration.host, port: configuration.port, path: path)
    }

    private func request(url: String, command: String? = nil, bodyLimit: Int = 1 << 20) -> MailRequest {
        MailRequest(url: url, requireTLS: configuration.security != .none, username: configuration.username, password: configuration.password,
                    caFile: configuration.caFile, timeout: configuration.timeout, customRequest: command, bodyLimit: bodyLimit)
    }

    /// One look at the mailbox: SELECT (UIDVALIDITY, UIDNEXT), UID SEARCH from the cursor, then each new message.
    private func check(after cursorText: String?) async throws -> InboundBatch {
        let given = Cursor(cursorText)
        if cursorText != nil && given == nil { log.warning("email: the stored IMAP cursor '\(cursorText!)' is not <uidvalidity>:<uid>; starting from the mailbox's next message") }
        let search = request(url: mailboxURL, command: "UID SEARCH UID \(given?.nextUID ?? 1):*")
        let batch = await worker.run { [self] () -> Result<InboundBatch, IMAPPollError> in
            let session = MailSession()
            let searched = session.perform(search)
            guard searched.succeeded else { return .failure(failure(searched, doing: "search \(configuration.mailbox)")) }
            guard let uidValidity = Self.responseCode("UIDVALIDITY", in: searched.replies), let uidNext = Self.responseCode("UIDNEXT", in: searched.replies) else {
                return .failure(IMAPPollError(reason: "IMAP server \(server) did not give the mailbox's UIDVALIDITY and UIDNEXT on SELECT"))
            }
            guard let cursor = given, cursor.uidValidity == uidValidity else {
                if let given {
                    log.warning("email: \(configuration.mailbox) on \(server) changed its UIDVALIDITY from \(given.uidValidity) to \(uidValidity); starting over from UID \(uidNext), older mail is left unread")
                } else {
                    log.info("email: reading \(configuration.mailbox) on \(server) from UID \(uidNext) on (mail already there is left alone)")
                }
                return .success(InboundBatch(messages: [], cursor: Cursor(uidValidity: uidValidity, nextUID: uidNext).text))
            }
            // `n:*` also matches the highest UID when it is below n (RFC 3501 §6.4.8): only UIDs from the cursor on count.
            let uids = Self.newUIDs(in: searched.body, from: cursor.nextUID)
            var messages: [InboundMessage] = []
            var next = cursor.nextUID
            for uid in uids {
                let fetched = session.perform(request(url: mailboxURL + ";UIDVALIDITY=\(uidValidity)/;UID=\(uid)", bodyLimit: Self.messageLimit))
                guard fetched.succeeded || (fetched.truncated && !fetched.body.isEmpty) else {
                    // What was read so far stands: the cursor stops before the message that failed.
                    if messages.isEmpty && next == cursor.nextUID { return .failure(failure(fetched, doing: "fetch UID \(uid)")) }
                    log.warning("email: fetching UID \(uid) failed; it is tried again on the next poll")
                    break
                }
                next = uid + 1
                if let message = message(uid: uid, uidValidity: uidValidity, raw: fetched.body) { messages.append(message) }
            }
            return .success(InboundBatch(messages: messages, cursor: Cursor(uidValidity: uidValidity, nextUID: next).text))
        }
        return try batch.get()
    }

    private var server: String { "\(configuration.host):\(configuration.port)" }

    /// The agent's message, or nil (with a log line naming only the UID) for mail that is not for it.
    private func message(uid: UInt64, uidValidity: UInt64, raw: [UInt8]) -> InboundMessage? {
        let mail = InboundMail(raw)
        guard let from = mail.from else {
            log.info("email: UID \(uid) has no readable From address; skipped")
            return nil
        }
        if from.address.lowercased() == ownAddress {
            log.debug("email: UID \(uid) is from the gateway's own address; skipped")
            return nil
        }
        if mail.isAutoSubmitted {
            log.info("email: UID \(uid) is an automatic message (Auto-Submitted); skipped")
            return nil
        }
        let body = (mail.text ?? "").replacingOccurrences(of: "\r\n", with: "\n").trimmingCharacters(in: .whitespacesAndNewlines)
        // A message whose request is all in its subject still reaches the agent.
        let text = body.isEmpty ? InboundMail.decodeWords(mail.header("subject") ?? "").trimmingCharacters(in: .whitespaces) : body
        guard !text.isEmpty else {
            log.info("email: UID \(uid) has no text/plain part and no subject; skipped")
            return nil
        }
        return InboundMessage(id: "\(uidValidity):\(uid)", replyTo: (mail.replyTo ?? from).address, senderID: from.address,
                              senderName: from.name, text: text, isDirect: true)
    }

    private func failure(_ result: MailResult, doing what: String) -> IMAPPollError {
        let words = result.replies.last(where: { $0.range(of: #"^[A-Z0-9]+ (NO|BAD) "#, options: .regularExpression) != nil }).map { " (\($0))" } ?? ""
        var reason = "IMAP \(what) on \(server) failed: \(result.errorText)\(words)"
        if result.tlsRefused { reason = "IMAP server \(server) does not offer STARTTLS; nothing was sent (TLS is required)" }
        if let password = configuration.password, !password.isEmpty { reason = reason.replacingOccurrences(of: password, with: "***") }
        return IMAPPollError(reason: reason)
    }

    /// `* OK [UIDVALIDITY 3857529045]`, `* OK [UIDNEXT 4392]` from SELECT's untagged answers.
    static func responseCode(_ name: String, in replies: [String]) -> UInt64? {
        for line in replies {
            guard let range = line.range(of: "[\(name) ", options: .caseInsensitive) else { continue }
            let digits = line[range.upperBound...].prefix { $0.isNumber }
            if let value = UInt64(digits) { return value }
        }
        return nil
    }

    /// The numbers of `* SEARCH 2 84 882` lines.
    /// The UIDs a SEARCH answered from `nextUID` on, lowest first, at most a batch. A UID is a 32-bit number
    /// (RFC 3501 §2.3.1.1): a larger one from a broken server is no message (and its successor cannot overflow).
    public static func newUIDs(in body: [UInt8], from nextUID: UInt64) -> [UInt64] {
        Array(searchResults(body).filter { $0 >= nextUID && $0 <= UInt64(UInt32.max) }.sorted().prefix(batchLimit))
    }

    static func searchResults(_ body: [UInt8]) -> [UInt64] {
        String(decoding: body, as: UTF8.self).split(whereSeparator: \.isNewline).flatMap { line -> [UInt64] in
            let words = line.split(separator: " ")
            guard words.count >= 2, words[0] == "*", words[1].uppercased() == "SEARCH" else { return [] }
            return words.dropFirst(2).compactMap { UInt64($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
        }
    }
}

/// A poll that could not read the mailbox (no connection, a refused login), in words fit for a log line.
public struct IMAPPollError: Error, Sendable, CustomStringConvertible {
    public let reason: String
    public var description: String { reason }
}
