import ChannelAPI
import Crypto
import Foundation

/// The `Authorization: vapid t=<JWT>, k=<public key>` header of RFC 8292, one per push service origin: an ES256
/// token whose `aud` is that origin, `exp` 12 hours ahead (the RFC allows at most 24) and `sub` the contact. A
/// token is reused for an hour, so a burst of wake-ups signs once per service.
public actor VAPIDAuthorization {
    public static let lifetime: TimeInterval = 12 * 3600
    public static let reuseFor: TimeInterval = 3600
    /// Endpoints name their own origins; more than this many kept tokens are forgotten at once (they are cheap).
    static let maximumAudiences = 64

    private let key: SigningKey
    private let publicKey: String
    private let contact: String
    private let clock: any WallClock
    private var current: [String: (header: String, issuedAt: Date)] = [:]
    public private(set) var signedCount = 0

    public init(key: SigningKey, publicKey: String, contact: String, clock: any WallClock) {
        self.key = key
        self.publicKey = publicKey
        self.contact = contact
        self.clock = clock
    }

    struct Claims: Encodable {
        let aud: String
        let exp: Int
        let sub: String
    }

    /// The header for a push resource of `audience` (`https://host[:port]`).
    public func header(audience: String) throws -> String {
        let now = clock.now()
        if let kept = current[audience], now.timeIntervalSince(kept.issuedAt) < Self.reuseFor, now >= kept.issuedAt { return kept.header }
        let claims = Claims(aud: audience, exp: Int(now.timeIntervalSince1970 + Self.lifetime), sub: contact)
        let header = "vapid t=\(try JSONWebToken.sign(claims: claims, key: key)), k=\(publicKey)"
        if current.count >= Self.maximumAudiences { current = [:] }
        current[audience] = (header, now)
        signedCount += 1
        return header
    }

    /// The service refused `header` (401/403): the next send signs a new token.
    public func rejected(audience: String, header: String) {
        if current[audience]?.header == header { current[audience] = nil }
    }
}
