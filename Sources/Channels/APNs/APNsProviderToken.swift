import ChannelAPI
import Crypto
import Foundation
import Synchronization

/// The ES256 provider token APNs authenticates us by, shared by every push.
///
/// Apple's rules: refresh no more often than every 20 minutes and before the token is 60 minutes old.
/// We renew at 50 minutes, and when APNs says the token expired, renew at most once per 20 minutes.
public actor APNsProviderToken {
    public static let renewAge: TimeInterval = 50 * 60
    public static let minimumRenewInterval: TimeInterval = 20 * 60

    private let teamID: String
    private let keyID: String
    private let key: SigningKey
    private let clock: any WallClock
    private var current: (token: String, issuedAt: Date)?
    private var lastForcedRenewal: Date?
    public private(set) var issuedCount = 0
    /// When the token in use was signed, readable without the actor (the metrics read it at scrape time).
    private let issuedAt = Mutex<Date?>(nil)

    public init(teamID: String, keyID: String, key: SigningKey, clock: any WallClock) {
        self.teamID = teamID
        self.keyID = keyID
        self.key = key
        self.clock = clock
    }

    struct Claims: Encodable {
        let iss: String
        let iat: Int
    }

    /// When the token in use was signed (nil until the first push signs one).
    public nonisolated var lastIssuedAt: Date? { issuedAt.withLock { $0 } }

    /// The token to send now, signed anew only when the current one is old.
    public func token() throws -> String {
        let now = clock.now()
        if let current, now.timeIntervalSince(current.issuedAt) < Self.renewAge { return current.token }
        return try issue(at: now)
    }

    /// APNs rejected the token (expired or invalid): renew unless that was already done within 20 minutes.
    /// Returns how long to wait when renewing now would break Apple's rate rule.
    public func rejected(_ token: String) throws -> Duration? {
        guard let current, current.token == token else { return nil }  // already renewed by another send
        let now = clock.now()
        if let last = lastForcedRenewal, now.timeIntervalSince(last) < Self.minimumRenewInterval {
            return .seconds(Int64(Self.minimumRenewInterval - now.timeIntervalSince(last)) + 1)
        }
        lastForcedRenewal = now
        _ = try issue(at: now)
        return nil
    }

    private func issue(at now: Date) throws -> String {
        let token = try JSONWebToken.sign(claims: Claims(iss: teamID, iat: Int(now.timeIntervalSince1970)), key: key, keyID: keyID)
        current = (token, now)
        issuedAt.withLock { $0 = now }
        issuedCount += 1
        return token
    }
}
