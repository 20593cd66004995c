import Crypto
import Foundation

/// A phone enrolled in the gateway's relay mailbox: its pairing secret (opened), registration, revocation and the
/// last inbox line sent to it.
public struct RelayPhone: Sendable, Equatable {
    public let id: String
    public let subject: String
    public let secret: [UInt8]
    public let lastSeq: Int64
    public let registered: Bool
    public let revoked: Bool

    public init(id: String, subject: String, secret: [UInt8], lastSeq: Int64, registered: Bool, revoked: Bool) {
        self.id = id
        self.subject = subject
        self.secret = secret
        self.lastSeq = lastSeq
        self.registered = registered
        self.revoked = revoked
    }
}

/// The gateway's mailbox at the relay.
public struct RelayMailboxAccess: Sendable, Equatable {
    public let id: String
    public let bearer: String

    public init(id: String, bearer: String) {
        self.id = id
        self.bearer = bearer
    }
}

/// What the relay carriage keeps: the gateway's mailbox, each enrolled phone, and which node carries the relay
/// traffic now. The two secrets (each phone's pairing secret, the mailbox's bearer) are kept sealed (`RelaySecretSeal`)
/// under a key kept outside the database: the database alone gives neither back. Every engine's store holds
/// `RelayCarriageStoreConformance`.
public protocol RelayCarriageStore: Sendable {
    func mailbox(url: String) async throws -> RelayMailboxAccess?
    /// Keeps a newly made mailbox unless one for the same relay is kept already (a racing node's), and returns
    /// the one kept, so every node uses one mailbox. A mailbox at another relay URL is replaced.
    func saveMailbox(url: String, _ mailbox: RelayMailboxAccess) async throws -> RelayMailboxAccess
    /// A phone's place; its records start after inbox line `after`.
    func enroll(deviceID: String, subject: String, secret: [UInt8], after: Int64) async throws
    func markRegistered(_ deviceID: String) async throws
    func markRevoked(_ deviceID: String) async throws
    /// Forgets a revoked phone (once the relay has dropped it too); a phone not revoked stays.
    func forgetRevoked(_ deviceID: String) async throws
    func phones() async throws -> [RelayPhone]
    func secret(deviceID: String) async throws -> [UInt8]?
    /// The last inbox line sent to the phone; never moves back (a late round of a node that lost the carriage).
    func advance(_ deviceID: String, to seq: Int64) async throws
    /// Takes or renews the carriage for `node` for `lease`, on the database's clock: true while this node carries
    /// the relay traffic. Exactly one node carries at a time; a node that stops renewing loses it once the lease
    /// runs out, and the next node that asks takes it over. A store only one process writes always answers true.
    func holdCarriage(node: String, lease: Duration) async throws -> Bool
}

/// Seals and opens the carriage's two secrets under the sealing key; both engines' stores use it, so a database
/// moved from one engine to the other opens with the same key.
public struct RelaySecretSeal: Sendable {
    let key: [UInt8]

    public init(key: [UInt8]) {
        self.key = key
    }

    static let mailboxHeader = "soulacy relay mailbox bearer v1"
    static func secretHeader(_ deviceID: String) -> String { "soulacy relay pairing secret v1 " + deviceID }

    public func sealBearer(_ bearer: String) throws -> String {
        try SealedBox.seal(Array(bearer.utf8), key: key, header: Self.mailboxHeader)
    }

    public func openBearer(_ sealed: String) -> String? {
        (try? SealedBox.open(sealed, key: key, header: Self.mailboxHeader)).map { String(decoding: $0, as: UTF8.self) }
    }

    public func sealSecret(_ secret: [UInt8], deviceID: String) throws -> [UInt8] {
        Array(try SealedBox.seal(secret, key: key, header: Self.secretHeader(deviceID)).utf8)
    }

    public func openSecret(_ stored: [UInt8], deviceID: String) -> [UInt8]? {
        try? SealedBox.open(String(decoding: stored, as: UTF8.self), key: key, header: Self.secretHeader(deviceID))
    }

    /// Whether a stored bearer is one an earlier version kept in the clear (43 base64url characters, not sealed).
    public func isClearBearer(_ stored: String) -> Bool {
        openBearer(stored) == nil && stored.utf8.count == 43 && Base64URL.decode(stored) != nil
    }
}
