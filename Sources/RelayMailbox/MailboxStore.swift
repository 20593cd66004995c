import Crypto
import Foundation

/// The relay's storage: mailboxes, the phones in each, their down items and their held commands. It holds only
/// ciphertext, sequence numbers, cursors and SHA-256 hashes of bearers; it can read nothing.
///
/// Each engine implements it beside its other stores (`RelayMailboxStores`): SQLite for one relay process, PostgreSQL
/// for several behind one address. Every method is one transaction, and a rule that spans two calls (an item's
/// number, a command held once) is decided by the database, so two relay processes on one database act as one.
public protocol MailboxStore: Sendable {
    /// Makes a mailbox for a gateway whose bearer hashes to `secretSHA256`; returns its id.
    func createMailbox(secretSHA256: [UInt8]) async throws -> String
    func mailboxSecret(_ mailbox: String) async throws -> [UInt8]?
    func deviceSecret(mailbox: String, device: String) async throws -> [UInt8]?
    /// The gateway polled now: it counts as online for the store's online window.
    func touch(mailbox: String) async throws
    /// Whether the gateway polled within the online window (on the database's clock where several relays share it).
    func isOnline(mailbox: String) async throws -> Bool

    /// Puts a phone in the mailbox (or changes its bearer), its items numbered after `cursor`.
    func putDevice(mailbox: String, device: String, secretSHA256: [UInt8], cursor: Int64) async throws
    func deleteDevice(mailbox: String, device: String) async throws
    /// How many phones the mailbox holds, counting no further than `limit`.
    func deviceCount(mailbox: String, upTo limit: Int) async throws -> Int
    func setAPNs(mailbox: String, device: String, token: MailboxAPNsToken) async throws
    func apns(mailbox: String, device: String) async throws -> MailboxAPNsToken?
    /// False for a phone that turned the relay off, or one not in the mailbox.
    func carriageOn(mailbox: String, device: String) async throws -> Bool
    /// Off deletes everything held for the phone and holds nothing more; on resumes after `cursor`.
    func setCarriage(mailbox: String, device: String, on: Bool, cursor: Int64?) async throws

    /// Appends a down item and returns its number: one higher than any number this phone was given before, never
    /// reused, even after the newest items were dropped. Nil when the phone is not in the mailbox or its carriage
    /// is off (nothing is stored).
    func appendItem(mailbox: String, device: String, _ item: NewMailboxItem) async throws -> Int64?
    /// Up to `limit` items numbered after `after`, in order.
    func items(mailbox: String, device: String, after: Int64, limit: Int) async throws -> [MailboxItem]
    /// How many items wait for the phone, counted up to `limit` (the check before an append need not count more).
    func pendingItems(mailbox: String, device: String, upTo limit: Int) async throws -> Int
    /// Acknowledged items (by item number) are gone for good; the cursor only moves forward.
    func ack(mailbox: String, device: String, through: Int64) async throws
    /// A cursor ack: the phone has the gateway's records up to store sequence `seq` (read over another path, say).
    /// Those records go; results are never dropped this way, since only reading one acknowledges it.
    func ack(mailbox: String, device: String, recordsThroughSeq seq: Int64) async throws

    /// Holds a command for the gateway; false when a command with this id is already held for this phone.
    func holdCommand(mailbox: String, device: String, id: String, ciphertext: String) async throws -> Bool
    /// How many commands are held for one phone, counting no further than `limit`.
    func heldCommandCount(mailbox: String, device: String, upTo limit: Int) async throws -> Int
    /// Up to 100 held commands, oldest first.
    func heldCommands(mailbox: String) async throws -> [HeldMailboxCommand]
    /// A held command stays until the gateway reports it applied.
    func applied(mailbox: String, device: String, id: String) async throws

    /// Answers once the database can be read (the service watchdog's check).
    func checkReadable() async throws
    /// Releases the database once the relay stopped serving.
    func close()
}

/// What a down item is to the phone: a record of the gateway's inbox (dropped by a cursor ack) or a command's result
/// (dropped only once read).
public enum MailboxItemKind: String, Sendable, CaseIterable {
    case record, result
}

/// A down item as the gateway posts it: sealed text, or only a marker when it was too large to hold.
public struct NewMailboxItem: Sendable, Equatable {
    public var ciphertext: String?
    public var tooLarge: Bool
    public var kind: MailboxItemKind
    /// The gateway's store sequence of a record.
    public var seq: Int64?

    public init(ciphertext: String?, tooLarge: Bool = false, kind: MailboxItemKind = .record, seq: Int64? = nil) {
        self.ciphertext = ciphertext
        self.tooLarge = tooLarge
        self.kind = kind
        self.seq = seq
    }
}

/// A down item as the phone reads it.
public struct MailboxItem: Sendable, Equatable {
    public var n: Int64
    public var ciphertext: String?
    public var tooLarge: Bool

    public init(n: Int64, ciphertext: String?, tooLarge: Bool) {
        self.n = n
        self.ciphertext = ciphertext
        self.tooLarge = tooLarge
    }
}

/// A command a phone left for its gateway.
public struct HeldMailboxCommand: Sendable, Equatable {
    public var device: String
    public var id: String
    public var ciphertext: String

    public init(device: String, id: String, ciphertext: String) {
        self.device = device
        self.id = id
        self.ciphertext = ciphertext
    }
}

/// A phone's APNs token at the relay, for the wake-ups the relay sends itself.
public struct MailboxAPNsToken: Sendable, Equatable {
    public var token: String
    /// "production" or "development".
    public var environment: String

    public init(token: String, environment: String) {
        self.token = token
        self.environment = environment
    }
}

extension MailboxStore {
    /// Up to 200 items after `after`.
    public func items(mailbox: String, device: String, after: Int64) async throws -> [MailboxItem] {
        try await items(mailbox: mailbox, device: device, after: after, limit: 200)
    }
}

/// Mailbox ids: 96 random bits in hex, so an id names a mailbox and guesses none.
public enum MailboxID {
    public static func make() -> String { "mbx_" + Hex.encode(SecureBytes.random(count: 12)) }
}
