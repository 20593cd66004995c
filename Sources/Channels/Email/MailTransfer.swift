internal import CCurl
internal import CCurlShims
import Foundation

/// One libcurl SMTP or IMAP exchange: what to do, and what came of it.
struct MailRequest: Sendable {
    var url: String
    /// The connection must be TLS: STARTTLS on a plain port, refused when the server does not offer it
    /// (CURLUSESSL_ALL). Implicit TLS (`smtps://`, `imaps://`) is TLS from the first byte either way.
    var requireTLS: Bool
    var username: String?
    var password: String?
    var caFile: String?
    var timeout: Duration
    var mailFrom: String?
    var recipients: [String] = []
    var upload: [UInt8]?
    var customRequest: String?
    /// Bytes of the answer's body kept; the transfer stops there (a fetched message past its limit is truncated).
    var bodyLimit = 1 << 20
}

struct MailResult: Sendable {
    var code: Int32
    /// The last SMTP reply code, or 0 when none came.
    var replyCode: Int
    /// libcurl's own words for a failure ("RCPT failed: 550").
    var errorText: String
    /// The server's reply lines, in order (at most the last 64, each at most 400 characters).
    var replies: [String]
    var body: [UInt8]
    var truncated: Bool

    var succeeded: Bool { code == Int32(CURLE_OK.rawValue) }
    var loginDenied: Bool { code == Int32(CURLE_LOGIN_DENIED.rawValue) }
    var tlsRefused: Bool { code == Int32(CURLE_USE_SSL_FAILED.rawValue) }
    var timedOut: Bool { code == Int32(CURLE_OPERATION_TIMEDOUT.rawValue) }
    /// The last reply line that starts with `code`, without the code: the server's own words.
    func reply(for code: Int) -> String? {
        replies.last { $0.hasPrefix("\(code)") }.map { String($0.dropFirst(3)).trimmingCharacters(in: CharacterSet(charactersIn: " -")) }
    }
}

/// The state one exchange's callbacks share: the message going up, the answer coming down.
private final class MailExchange {
    let upload: [UInt8]
    var uploaded = 0
    let bodyLimit: Int
    var body: [UInt8] = []
    var truncated = false
    var replies: [String] = []

    init(upload: [UInt8], bodyLimit: Int) {
        self.upload = upload
        self.bodyLimit = bodyLimit
    }
}

private let globalInit: Void = { curl_global_init(Int(CURL_GLOBAL_DEFAULT)) }()

/// A libcurl easy handle for a run of mail exchanges on one connection (an IMAP search and its fetches). Blocking:
/// used only on a `MailWorker`'s thread, never on Swift's cooperative pool.
final class MailSession {
    private let easy: UnsafeMutableRawPointer?

    init() {
        _ = globalInit
        easy = curl_easy_init()
    }

    deinit { if let easy { curl_easy_cleanup(easy) } }

    func perform(_ request: MailRequest) -> MailResult {
        guard let easy else { return MailResult(code: -1, replyCode: 0, errorText: "curl_easy_init failed", replies: [], body: [], truncated: false) }
        // Back to defaults between exchanges; the connection (and its selected mailbox) stays in the handle's cache.
        curl_easy_reset(easy)
        let exchange = MailExchange(upload: request.upload ?? [], bodyLimit: request.bodyLimit)
        var errorBuffer = [CChar](repeating: 0, count: Int(CURL_ERROR_SIZE) + 1)
        var recipients: UnsafeMutablePointer<curl_slist>?
        for recipient in request.recipients { recipients = curl_slist_append(recipients, "<\(recipient)>") }
        defer { curl_slist_free_all(recipients) }
        var replyCode = 0
        let code: CURLcode = withExtendedLifetime(exchange) {
            errorBuffer.withUnsafeMutableBufferPointer { errors -> CURLcode in
                func text(_ option: CURLoption, _ value: String?) {
                    guard let value else { return }
                    value.withCString { _ = soulacy_curl_setopt_ptr(easy, option, $0) }  // libcurl copies strings
                }
                soulacy_curl_setopt_ptr(easy, CURLOPT_ERRORBUFFER, errors.baseAddress)
                text(CURLOPT_URL, request.url)
                soulacy_curl_setopt_long(easy, CURLOPT_NOSIGNAL, 1)
                soulacy_curl_setopt_long(easy, CURLOPT_USE_SSL, request.requireTLS ? Int(CURLUSESSL_ALL.rawValue) : Int(CURLUSESSL_NONE.rawValue))
                soulacy_curl_setopt_long(easy, CURLOPT_SSLVERSION, Int(CURL_SSLVERSION_TLSv1_2))
                let milliseconds = Int(request.timeout.components.seconds) * 1000 + Int(request.timeout.components.attoseconds / 1_000_000_000_000_000)
                soulacy_curl_setopt_long(easy, CURLOPT_TIMEOUT_MS, max(1, milliseconds))
                soulacy_curl_setopt_long(easy, CURLOPT_CONNECTTIMEOUT_MS, max(1, min(milliseconds, 10_000)))
                text(CURLOPT_CAINFO, request.caFile)
                text(CURLOPT_USERNAME, request.username)
                text(CURLOPT_PASSWORD, request.password)
                text(CURLOPT_CUSTOMREQUEST, request.customRequest)
                text(CURLOPT_MAIL_FROM, request.mailFrom.map { "<\($0)>" })
                if let recipients { soulacy_curl_setopt_ptr(easy, CURLOPT_MAIL_RCPT, recipients) }
                let context = Unmanaged.passUnretained(exchange).toOpaque()
                if request.upload != nil {
                    soulacy_curl_setopt_long(easy, CURLOPT_UPLOAD, 1)
                    soulacy_curl_setopt_off(easy, CURLOPT_INFILESIZE_LARGE, curl_off_t(exchange.upload.count))
                    soulacy_curl_set_read_callback(easy, { buffer, size, count, user in
                        let exchange = Unmanaged<MailExchange>.fromOpaque(user!).takeUnretainedValue()
                        guard let buffer else { return 0 }
                        let n = min(size * count, exchange.upload.count - exchange.uploaded)
                        guard n > 0 else { return 0 }
                        exchange.upload.withUnsafeBytes { source in
                            UnsafeMutableRawPointer(buffer).copyMemory(from: source.baseAddress! + exchange.uploaded, byteCount: n)
                        }
                        exchange.uploaded += n
                        return n
                    }, context)
                }
                soulacy_curl_set_callbacks(easy, { data, size, count, user in
                    let exchange = Unmanaged<MailExchange>.fromOpaque(user!).takeUnretainedValue()
                    let n = size * count
                    guard let data else { return n }
                    let room = exchange.bodyLimit - exchange.body.count
                    guard room > 0 else {
                        exchange.truncated = true
                        return 0  // stops the transfer: CURLE_WRITE_ERROR, what was kept stands
                    }
                    exchange.body.append(contentsOf: UnsafeRawBufferPointer(start: data, count: min(n, room)))
                    if n > room {
                        exchange.truncated = true
                        return 0
                    }
                    return n
                }, { data, size, count, user in
                    // SMTP and IMAP server replies come here, line by line (libcurl's "headers" for these protocols).
                    let exchange = Unmanaged<MailExchange>.fromOpaque(user!).takeUnretainedValue()
                    let n = size * count
                    guard let data else { return n }
                    let line = String(decoding: UnsafeRawBufferPointer(start: data, count: min(n, 400)), as: UTF8.self)
                        .trimmingCharacters(in: .whitespacesAndNewlines)
                    if exchange.replies.count == 64 { exchange.replies.removeFirst() }
                    exchange.replies.append(line)
                    return n
                }, context)
                let code = curl_easy_perform(easy)
                soulacy_curl_getinfo_long(easy, CURLINFO_RESPONSE_CODE, &replyCode)
                // The buffer, the recipient list and the callbacks' context are ours only for this exchange: the
                // handle keeps no pointer to them once it returns (a later QUIT or LOGOUT runs with the defaults).
                curl_easy_reset(easy)
                return code
            }
        }
        let errorText = errorBuffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        return MailResult(code: Int32(code.rawValue), replyCode: replyCode,
                          errorText: errorText.isEmpty ? String(cString: curl_easy_strerror(code)) : errorText,
                          replies: exchange.replies, body: exchange.body, truncated: exchange.truncated)
    }
}

/// A thread of its own for blocking libcurl calls: a serial queue, so one channel keeps one exchange at a time
/// and Swift's cooperative pool never waits on a mail server.
final class MailWorker: Sendable {
    private let queue: DispatchQueue

    init(label: String) {
        queue = DispatchQueue(label: label)
    }

    func run<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in
            queue.async { continuation.resume(returning: body()) }
        }
    }
}

extension MailRequest {
    /// `scheme://host:port/path`, an IPv6 literal in brackets.
    static func url(scheme: String, host: String, port: Int, path: String = "") -> String {
        let hostPart = host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host
        return "\(scheme)://\(hostPart):\(port)/\(path)"
    }
}
