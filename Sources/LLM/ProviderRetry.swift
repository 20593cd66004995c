import Foundation
import HTTPClient
import JSON

/// When a provider call is tried again: on 429 and 5xx answers and on connections that broke on the way, with
/// exponential backoff and jitter, or after the provider's own `Retry-After`; never past the run's deadline.
public struct ProviderRetryPolicy: Sendable, Equatable {
    /// Attempts in all, the first included.
    public var maximumAttempts: Int
    /// The wait before the first retry; each later one doubles, up to `maximumBackoff`. Jitter takes it down to half.
    public var initialBackoff: Duration
    public var maximumBackoff: Duration

    public init(maximumAttempts: Int = 4, initialBackoff: Duration = .milliseconds(500), maximumBackoff: Duration = .seconds(30)) {
        self.maximumAttempts = max(1, maximumAttempts)
        self.initialBackoff = initialBackoff
        self.maximumBackoff = maximumBackoff
    }

    public static let standard = ProviderRetryPolicy()

    /// The wait before retry `retry` (1 for the first), without the provider's say: full backoff, less up to half.
    func backoff(beforeRetry retry: Int) -> Duration {
        let doubled = initialBackoff * (1 << min(max(retry - 1, 0), 20))
        let ceiling = min(doubled, maximumBackoff)
        return ceiling / 2 + ceiling / 2 * Double.random(in: 0...1)
    }

    /// 429 and every 5xx (Anthropic's 529 `overloaded_error` among them), except a 429 that means money ran out
    /// (OpenAI's `insufficient_quota`, Anthropic's `enforced_spend_limit_reached`): waiting does not fix those.
    static func retries(status: Int, body: JSONValue?) -> Bool {
        guard status == 429 || (500...599).contains(status) else { return false }
        let error = body?["error"]
        let codes = [error?["code"], error?["type"], error?["details"]?["error_code"]].compactMap { $0?.stringValue }
        return !codes.contains { $0 == "insufficient_quota" || $0 == "enforced_spend_limit_reached" }
    }

    /// How long the provider asks for: `retry-after-ms` (milliseconds; OpenAI's SDKs and Azure OpenAI send and
    /// honour it), else `Retry-After` as seconds or as an HTTP date (RFC 9110 §10.2.3; Anthropic sends seconds).
    /// A wait longer than a day is a day (past any run's deadline anyway): `Duration` traps on a count it cannot hold,
    /// and a header is the provider's (or a proxy's) to write.
    public static func requestedWait(_ headers: [String: String], now: Date = Date()) -> Duration? {
        func wait(milliseconds: Double) -> Duration { .milliseconds(min(milliseconds, longestWaitMilliseconds)) }
        if let text = headers["retry-after-ms"], let ms = Double(text.trimmingCharacters(in: .whitespaces)), ms >= 0, ms.isFinite {
            return wait(milliseconds: ms)
        }
        guard let text = headers["retry-after"]?.trimmingCharacters(in: .whitespaces), !text.isEmpty else { return nil }
        if let seconds = Double(text), seconds >= 0, seconds.isFinite { return wait(milliseconds: seconds * 1000) }
        guard let date = httpDate(text) else { return nil }
        return wait(milliseconds: max(0, date.timeIntervalSince(now)) * 1000)
    }

    static let longestWaitMilliseconds: Double = 86_400_000

    /// IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), and the two obsolete forms RFC 9110 asks a recipient to read.
    static func httpDate(_ text: String) -> Date? {
        for format in ["EEE, dd MMM yyyy HH:mm:ss zzz", "EEEE, dd-MMM-yy HH:mm:ss zzz", "EEE MMM d HH:mm:ss yyyy"] {
            let formatter = DateFormatter()
            formatter.locale = Locale(identifier: "en_US_POSIX")
            formatter.timeZone = TimeZone(identifier: "GMT")
            formatter.dateFormat = format
            if let date = formatter.date(from: text) { return date }
        }
        return nil
    }
}

/// One retry of a provider call, as the run's events record it: who, why, which attempt failed and how long the
/// gateway waits. Never the prompt, the answer or the provider's message text.
public struct ProviderRetry: Sendable, Equatable {
    public var provider: String
    /// The attempt that failed (1 for the first call).
    public var attempt: Int
    /// The provider's HTTP status; nil when the connection broke before an answer.
    public var status: Int?
    /// `answered 429`, or the transport's failure (`Failure when receiving data from the peer`).
    public var reason: String
    public var wait: Duration

    public init(provider: String, attempt: Int, status: Int?, reason: String, wait: Duration) {
        self.provider = provider
        self.attempt = attempt
        self.status = status
        self.reason = reason
        self.wait = wait
    }
}

/// A failed attempt: the error a run would report, and whether (and after how long) to try again.
struct AttemptFailure: Error {
    var error: LLMError
    var status: Int?
    var retryable: Bool
    var requestedWait: Duration?
    var reason: String
}

extension JSONPost {
    /// Runs `attempt` until it succeeds, fails for good, runs out of attempts, or the next wait would pass the
    /// deadline; each attempt gets what is left of the call's time. `mayRetry` says whether a failure may still be
    /// retried (a stream that passed text on may not). The last failure is the error, with how many attempts it took.
    func retrying<T>(_ request: ChatRequest, mayRetry: () -> Bool = { true },
                     _ attempt: (_ timeout: Duration) async throws(AttemptFailure) -> T) async throws(LLMError) -> T {
        let clock = ContinuousClock()
        let deadline = request.deadline ?? clock.now + request.timeout
        var number = 1
        while true {
            let left = deadline - clock.now
            guard left > .zero else { throw LLMError(.timedOut, "\(providerID) did not answer within \(request.timeout)") }
            let failure: AttemptFailure
            do {
                return try await attempt(min(request.timeout, left))
            } catch {
                failure = error
            }
            guard failure.retryable, mayRetry(), !Task.isCancelled else { throw Self.final(failure, attempts: number) }
            guard number < retry.maximumAttempts else { throw Self.final(failure, attempts: number) }
            let wait = failure.requestedWait ?? retry.backoff(beforeRetry: number)
            guard clock.now + wait < deadline else {
                var error = failure.error
                let asked = failure.requestedWait.map { " (it asked for \($0))" } ?? ""
                error.message += " (attempt \(number); the next try\(asked) would come after the run's deadline)"
                throw error
            }
            await request.onRetry?(ProviderRetry(provider: providerID, attempt: number, status: failure.status, reason: failure.reason, wait: wait))
            do { try await Task.sleep(for: wait) } catch { throw Self.final(failure, attempts: number) }
            number += 1
        }
    }

    static func final(_ failure: AttemptFailure, attempts: Int) -> LLMError {
        guard attempts > 1 else { return failure.error }
        var error = failure.error
        error.message += " (after \(attempts) attempts)"
        return error
    }
}
