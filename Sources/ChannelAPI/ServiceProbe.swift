import Foundation

/// A dry call to a channel's or transport's service, for `soulacy doctor`: does the service answer, and does it take
/// the configured credentials? A probe never sends anything a person would see: it uses the service's own
/// read-only or validate-only call (Telegram's `getMe`, Slack's `auth.test`, FCM's `validate_only`), or a request
/// the service must refuse after it has checked the credentials (APNs to a device token that cannot exist).
public protocol ServiceProbe: Sendable {
    /// One round with the service. Expected refusals are results, never thrown.
    func probe() async -> ProbeResult
}

/// What a probe found. `message` says what was called and what came back, in words a person can act on; it never
/// carries a secret (a token, a password, a key), not even one the service or libcurl quoted back.
public struct ProbeResult: Sendable, Equatable {
    public enum Status: String, Sendable, Comparable {
        case ok, warn, fail

        private var rank: Int { self == .ok ? 0 : self == .warn ? 1 : 2 }
        public static func < (lhs: Status, rhs: Status) -> Bool { lhs.rank < rhs.rank }
    }

    public var status: Status
    public var message: String
    /// What to change when the status is not ok ("check SOULACY_MOBILE_APNS_KEY_ID"), nil when there is nothing to say.
    public var fix: String?
    /// The service's clock as its `Date` header gave it, for the doctor's clock check.
    public var clock: ServiceClockReading?

    public init(_ status: Status, _ message: String, fix: String? = nil, clock: ServiceClockReading? = nil) {
        self.status = status
        self.message = message
        self.fix = fix
        self.clock = clock
    }

    public static func ok(_ message: String, clock: ServiceClockReading? = nil) -> ProbeResult { ProbeResult(.ok, message, clock: clock) }
    public static func warn(_ message: String, fix: String? = nil, clock: ServiceClockReading? = nil) -> ProbeResult {
        ProbeResult(.warn, message, fix: fix, clock: clock)
    }
    public static func fail(_ message: String, fix: String? = nil, clock: ServiceClockReading? = nil) -> ProbeResult {
        ProbeResult(.fail, message, fix: fix, clock: clock)
    }

    /// The same result with every occurrence of each secret replaced: the last guard before the text is printed.
    public func redacting(_ secrets: [String]) -> ProbeResult {
        var copy = self
        for secret in secrets where !secret.isEmpty {
            copy.message = copy.message.replacingOccurrences(of: secret, with: "<redacted>")
            copy.fix = copy.fix?.replacingOccurrences(of: secret, with: "<redacted>")
        }
        return copy
    }
}

/// One comparison of this machine's clock with a service's: the `Date` header of an answer and the local time the
/// answer arrived. HTTP dates have whole seconds, so a skew under a second or two means nothing.
public struct ServiceClockReading: Sendable, Equatable {
    /// Who answered (`APNs`, `Telegram`).
    public var service: String
    public var serviceDate: Date
    public var localDate: Date
    /// The service refuses credentials stamped with a wrong time (APNs provider tokens, Google's OAuth assertions).
    public var credentialsAreTimeBound: Bool

    public init(service: String, serviceDate: Date, localDate: Date, credentialsAreTimeBound: Bool) {
        self.service = service
        self.serviceDate = serviceDate
        self.localDate = localDate
        self.credentialsAreTimeBound = credentialsAreTimeBound
    }

    /// From an answer's `Date` header (RFC 9110 §5.6.7: IMF-fixdate, or the obsolete RFC 850 and asctime forms);
    /// nil when there is none or it cannot be read.
    public init?(service: String, dateHeader: String?, localDate: Date = Date(), credentialsAreTimeBound: Bool) {
        guard let dateHeader, let date = Self.httpDate(dateHeader) else { return nil }
        self.init(service: service, serviceDate: date, localDate: localDate, credentialsAreTimeBound: credentialsAreTimeBound)
    }

    /// Seconds this machine is ahead of the service (negative: behind).
    public var skew: TimeInterval { localDate.timeIntervalSince(serviceDate) }

    /// An HTTP date in any of the three forms a recipient must accept (RFC 9110 §5.6.7).
    public static func httpDate(_ text: String) -> Date? {
        // asctime pads a one-digit day with a space ("Nov  6"); one space between fields reads every form.
        let trimmed = text.split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ")
        for format in ["EEE, dd MMM yyyy HH:mm:ss 'GMT'", "EEEE, dd-MMM-yy HH:mm:ss 'GMT'", "EEE MMM d HH:mm:ss yyyy"] {
            let formatter = DateFormatter()
            formatter.locale = Locale(identifier: "en_US_POSIX")
            formatter.timeZone = TimeZone(identifier: "GMT")
            formatter.dateFormat = format
            if let date = formatter.date(from: trimmed) { return date }
        }
        return nil
    }
}
