import Foundation

/// The phone (or browser) a wake-up goes to, as its registration describes it.
public struct WakeTarget: Sendable, Equatable {
    /// `web` is a browser subscribed through Web Push; its push token is the sealed subscription.
    public enum Platform: String, Sendable, Codable { case ios, android, web }
    public enum Environment: String, Sendable, Codable { case production, development }

    public var deviceID: String
    public var platform: Platform
    public var pushToken: String
    public var environment: Environment
    public var bundleID: String

    public init(deviceID: String, platform: Platform, pushToken: String, environment: Environment, bundleID: String) {
        self.deviceID = deviceID
        self.platform = platform
        self.pushToken = pushToken
        self.environment = environment
        self.bundleID = bundleID
    }
}

/// A discreet wake-up: generic text and identifiers only, never an agent's output.
public struct WakeSignal: Sendable, Equatable, Codable {
    /// Open set of categories: new ones break no caller.
    public struct Category: RawRepresentable, Sendable, Hashable, Codable {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public static let delivery = Category(rawValue: "SOULACY_DELIVERY")
        public static let approval = Category(rawValue: "SOULACY_APPROVAL")
        public static let trigger = Category(rawValue: "SOULACY_TRIGGER")
        public static let command = Category(rawValue: "SOULACY_COMMAND")
    }

    public enum Kind: String, Sendable, Codable {
        /// Shown to the person.
        case alert
        /// Wakes the app silently.
        case background
        /// Updates a Live Activity.
        case liveActivity
    }

    public enum Priority: Int, Sendable, Codable {
        case low = 5
        case high = 10
    }

    public var kind: Kind
    public var category: Category
    public var title: String
    public var body: String
    public var deepLink: String
    public var threadID: String
    public var timeSensitive: Bool
    /// Present only for inbox deliveries.
    public var deliveryID: String?
    /// Feature keys that ride along (call_id, agent_id, session_id, tool …); strings only.
    public var extra: [String: String]
    public var priority: Priority
    /// After this the service may drop the wake-up; nil lets the service decide.
    public var expiresAt: Date?
    /// Wake-ups with the same key replace each other on the phone.
    public var collapseID: String?
    /// Stable across retries of the same wake-up (APNs apns-id), so a resend after a crash can be recognised.
    public var wakeID: UUID?
    /// For `.liveActivity`: the event and the exact APNs body the phone draws from.
    public var liveActivity: LiveActivityUpdate?

    public init(kind: Kind = .alert, category: Category, title: String, body: String, deepLink: String, threadID: String,
                timeSensitive: Bool = false, deliveryID: String? = nil, extra: [String: String] = [:],
                priority: Priority = .high, expiresAt: Date? = nil, collapseID: String? = nil) {
        self.kind = kind
        self.category = category
        self.title = title
        self.body = body
        self.deepLink = deepLink
        self.threadID = threadID
        self.timeSensitive = timeSensitive
        self.deliveryID = deliveryID
        self.extra = extra
        self.priority = priority
        self.expiresAt = expiresAt
        self.collapseID = collapseID
    }

    /// A Live Activity push: APNs gets `update.apnsBody` unchanged; a relay gets it inside `POST /v1/live`.
    public static func liveActivity(_ update: LiveActivityUpdate, title: String, deepLink: String, threadID: String, priority: Priority) -> WakeSignal {
        var signal = WakeSignal(kind: .liveActivity, category: Category(rawValue: "SOULACY_ACTIVITY"), title: title, body: "", deepLink: deepLink,
                                threadID: threadID, timeSensitive: priority == .high, priority: priority)
        signal.liveActivity = update
        return signal
    }

    /// The wake-up for a new inbox line: the same generic words whatever the agent said.
    public static func delivery(id: String, agentID: String) -> WakeSignal {
        // The delivery id collapses repeats: a wake-up resent after a crash replaces the first on the phone.
        WakeSignal(category: .delivery, title: "Soulacy", body: "An agent result is ready to review.",
                   deepLink: "soulacy://delivery/\(id)", threadID: "delivery-\(agentID)", deliveryID: id, collapseID: id)
    }
}

/// What a push service said about one wake-up. Expected remote results are values, not errors.
public enum WakeOutcome: Sendable, Equatable {
    /// The service accepted it; never send it again.
    case delivered
    /// Try again later, after at least this long when the service said so.
    case retry(after: Duration?, reason: String)
    /// The service says this token is dead: clear it until the app registers a fresh one.
    case tokenRejected(reason: String)
    /// It will never go through as it is; record and stop.
    case failed(reason: String)
}

extension WakeOutcome {
    /// The outcome's name as the console shows it: `delivered`, `retry`, `token_rejected` or `failed`.
    public var label: String {
        switch self {
        case .delivered: "delivered"
        case .retry: "retry"
        case .tokenRejected: "token_rejected"
        case .failed: "failed"
        }
    }

    /// Why it did not go through (nil when it did).
    public var reason: String? {
        switch self {
        case .delivered: nil
        case .retry(_, let reason), .tokenRejected(let reason), .failed(let reason): reason
        }
    }
}

/// One try of a wake-up as the push service answered it: the outcome the dispatcher acts on, and what a person
/// tracing a notification wants to see of the answer (the console's delivery timeline, its test push).
public struct WakeAttempt: Sendable, Equatable {
    public var outcome: WakeOutcome
    /// The service's HTTP status; nil when no answer came (unreachable, or refused before anything was sent).
    public var status: Int?
    /// The service's own reason (APNs `reason`, FCM's error code, the relay's `reason`); nil when it gave none.
    public var reason: String?
    /// The service's id of this message (APNs `apns-id`, FCM's message `name`), when it gave one.
    public var serviceID: String?
    /// From the start of the send to the answer.
    public var latency: Duration

    public init(outcome: WakeOutcome, status: Int? = nil, reason: String? = nil, serviceID: String? = nil, latency: Duration = .zero) {
        self.outcome = outcome
        self.status = status
        self.reason = reason
        self.serviceID = serviceID
        self.latency = latency
    }

    /// Whole milliseconds, as stored and shown.
    public var latencyMilliseconds: Int64 {
        let (seconds, attoseconds) = latency.components
        return max(0, seconds * 1000 + attoseconds / 1_000_000_000_000_000)
    }
}

/// A push service plugin (APNs, FCM, a relay, …) that wakes phones.
public protocol WakeTransport: Sendable {
    /// Shown in logs and stored with each outcome.
    var name: String { get }
    /// Whether this transport can reach the target at all (platform, token kind).
    func canWake(_ target: WakeTarget) -> Bool
    func send(_ signal: WakeSignal, to target: WakeTarget) async -> WakeOutcome
    /// The same send, with the service's answer in detail (status, reason, message id, latency). The dispatcher
    /// calls this one; a transport that implements only `send` reports its outcome and the time it took.
    func attempt(_ signal: WakeSignal, to target: WakeTarget) async -> WakeAttempt
}

extension WakeTransport {
    public func attempt(_ signal: WakeSignal, to target: WakeTarget) async -> WakeAttempt {
        let start = ContinuousClock.now
        let outcome = await send(signal, to: target)
        return WakeAttempt(outcome: outcome, reason: outcome.reason, latency: ContinuousClock.now - start)
    }
}

/// Transports in order of preference; the first that can wake a target is its transport.
public struct WakeTransportRegistry: Sendable {
    public private(set) var transports: [any WakeTransport] = []

    public init(_ transports: [any WakeTransport] = []) {
        self.transports = transports
    }

    public mutating func register(_ transport: any WakeTransport) {
        transports.append(transport)
    }

    public func transport(for target: WakeTarget) -> (any WakeTransport)? {
        transports.first { $0.canWake(target) }
    }
}

/// Reads an HTTP `Retry-After` header (seconds or an HTTP date), as push services send it.
public enum RetryAfter {
    public static func parse(_ header: String?, now: Date = Date()) -> Duration? {
        guard let header = header?.trimmingCharacters(in: .whitespaces), !header.isEmpty else { return nil }
        if let seconds = Int(header) { return seconds >= 0 ? .seconds(seconds) : nil }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        guard let date = formatter.date(from: header) else { return nil }
        return .seconds(max(0, Int64(date.timeIntervalSince(now))))
    }
}

/// A Live Activity event, as APNs and the original app name them (an open set: a struct with the known values).
public struct LiveActivityEvent: RawRepresentable, Sendable, Hashable, Codable {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public static let start = LiveActivityEvent(rawValue: "start")
    public static let update = LiveActivityEvent(rawValue: "update")
    public static let end = LiveActivityEvent(rawValue: "end")
}

/// One Live Activity push: its event and the APNs body, encoded once by the channel (the transports never
/// rebuild it, so the app reads the same bytes whichever way they travel).
public struct LiveActivityUpdate: Sendable, Equatable, Codable {
    public var event: LiveActivityEvent
    public var apnsBody: [UInt8]
    public init(event: LiveActivityEvent, apnsBody: [UInt8]) {
        self.event = event
        self.apnsBody = apnsBody
    }
}

/// How every push body is written: sorted keys, slashes as they are (one policy for APNs, FCM and relay bodies).
public enum WireJSON {
    public static func encode<T: Encodable>(_ value: T) throws -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return Array(try encoder.encode(value))
    }
}
