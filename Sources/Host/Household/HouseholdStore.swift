import Storage
import Crypto
import Foundation
import Identity
import SQLite
import Synchronization

/// A pairing code as handed out once: the plain code exists only here and on the screen it is shown on.
public struct PairingOffer: Sendable {
    public let code: String
    public let subject: String
    public let name: String
    public let role: Role
    public let expiresAt: Date
}

public enum PairingError: Error, Sendable, Equatable, CustomStringConvertible {
    case unknownCode
    case expired
    case alreadyUsed

    public var description: String {
        switch self {
        case .unknownCode: return "this pairing code is not known; check it or create a new one"
        case .expired: return "this pairing code has expired (codes live 2 minutes); create a new one"
        case .alreadyUsed: return "this pairing code has already been used; each code pairs one device"
        }
    }
}

/// The people of a household and their pairing codes. Codes are short-lived, single-use, 60 random bits,
/// and stored only as SHA-256; redeeming one mints a managed key carrying the person's subject and role.
public final class HouseholdStore: Sendable {
    public static let codeLifetime: TimeInterval = 120


    public let database: DatabasePool
    /// The engine seam's view of the same database: what routes build their answers in.
    public var transactions: any TransactionalStorage { database }
    /// The SQLite key store itself: a redeemed code and its new key commit in one transaction.
    let keys: any APIKeyStore

    public init(database: DatabasePool, keys: any APIKeyStore) throws {
        self.database = database
        self.keys = keys
    }

    static func ms(_ d: Date) -> Int64 { d.sqliteMillis }

    /// The subject for a person's name: a lower-case ASCII slug ("Priya" → priya, "José" → jose, "Дмитрий" → dmitrij).
    /// The same name always gives the same subject; a different person whose name slugs the same gets -2, -3, …
    public func subject(forName name: String) throws -> String {
        let base = Self.slug(name)
        return try database.transaction { db in
            var candidate = base
            var n = 1
            while true {
                let taken = try db.query("SELECT name FROM household_members WHERE subject = ?", candidate).first?.string("name")
                if candidate == Principal.ownerSubject || (taken != nil && taken!.lowercased() != name.trimmingCharacters(in: .whitespaces).lowercased()) {
                    n += 1
                    candidate = "\(base)-\(n)"
                    continue
                }
                if taken == nil {
                    try db.run("INSERT INTO household_members (subject, name, created_at) VALUES (?, ?, ?)", candidate,
                               name.trimmingCharacters(in: .whitespaces), Self.ms(Date()))
                }
                return candidate
            }
        }
    }

    static func slug(_ name: String) -> String {
        let latin = (name.applyingTransform(.toLatin, reverse: false) ?? name).applyingTransform(.stripDiacritics, reverse: false) ?? name
        let special: [Character: String] = ["ł": "l", "Ł": "l", "ø": "o", "Ø": "o", "ß": "ss", "æ": "ae", "Æ": "ae", "đ": "d", "Đ": "d", "þ": "th"]
        var out = ""
        var lastWasDash = false
        for ch in latin {
            let mapped = special[ch] ?? String(ch).lowercased()
            for c in mapped.unicodeScalars {
                if ("a"..."z").contains(c) || ("0"..."9").contains(c) {
                    out.unicodeScalars.append(c)
                    lastWasDash = false
                } else if !lastWasDash && !out.isEmpty {
                    out.append("-")
                    lastWasDash = true
                }
            }
        }
        while out.hasSuffix("-") { out.removeLast() }
        out = String(out.prefix(40))
        while out.hasSuffix("-") { out.removeLast() }
        // A name with nothing to transliterate (emoji, symbols) still gets a stable subject.
        return out.isEmpty ? "member-" + Hex.encode(Array(SHA256.hash(name.lowercased()).prefix(3))) : out
    }

    /// The original's code: 10 random bytes in RFC 4648 base32, 16 characters from A–Z and 2–7.
    static func newCode() -> String {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")
        var bits = 0
        var value = 0
        var out = ""
        for byte in SecureBytes.random(count: 10) {
            value = (value << 8) | Int(byte)
            bits += 8
            while bits >= 5 {
                out.append(alphabet[(value >> (bits - 5)) & 31])
                bits -= 5
            }
        }
        return out
    }

    /// What a person typed, as the original reads it (trimmed, upper-cased); spaces and dashes are forgiven too.
    static func normalize(_ typed: String) -> String {
        String(typed.uppercased().filter { !$0.isWhitespace && $0 != "-" })
    }

    /// `madeBy` is the subject of whoever asks for the code (the owner at the console); the key it pairs shows it as
    /// `minted_by`. `createdBy` is the asking key's id, nil at the console.
    public func createOffer(subject: String, name: String, role: Role, createdBy keyID: String?, madeBy maker: String?, now: Date = Date()) throws -> PairingOffer {
        let code = Self.newCode()
        let expires = now.addingTimeInterval(Self.codeLifetime)
        try database.transaction { db in
            try db.run("INSERT INTO pairing_codes (code_sha256, subject, role, created_by_key, created_by_subject, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                       SHA256.hash(code), subject, role.rawValue, keyID, maker, Self.ms(now), Self.ms(expires))
            // Old codes are kept a day for the record, then dropped.
            try db.run("DELETE FROM pairing_codes WHERE expires_at < ?", Self.ms(now) - 86_400_000)
        }
        return PairingOffer(code: code, subject: subject, name: name, role: role, expiresAt: expires)
    }

    /// Redeems a code once: marking it used and minting its key commit together, so a code never pairs twice.
    public func redeem(code typed: String, deviceName: String, now: Date = Date()) throws -> MintedKey {
        let hash = SHA256.hash(Self.normalize(typed))
        let outcome: Result<MintedKey, PairingError> = try database.transaction { db in
            guard let row = try db.query("SELECT subject, role, created_by_subject, expires_at, redeemed_at FROM pairing_codes WHERE code_sha256 = ?", hash).first else {
                return .failure(.unknownCode)
            }
            if row.int("redeemed_at") != nil { return .failure(.alreadyUsed) }
            if (row.int("expires_at") ?? 0) <= Self.ms(now) { return .failure(.expired) }
            let role = row.string("role").flatMap(Role.init(rawValue:)) ?? .viewer
            let minted = try keys.mint(name: deviceName, subject: row.string("subject") ?? Principal.ownerSubject, role: role, kind: .managed,
                                       mintedBy: row.string("created_by_subject"), in: db)
            try db.run("UPDATE pairing_codes SET redeemed_at = ?, redeemed_key = ? WHERE code_sha256 = ? AND redeemed_at IS NULL",
                       Self.ms(now), minted.key.id, hash)
            return .success(minted)
        }
        return try outcome.get()
    }

    public func displayName(subject: String) throws -> String? {
        if subject == Principal.ownerSubject { return "Owner" }
        return try database.read { db in try db.query("SELECT name FROM household_members WHERE subject = ?", subject).first?.string("name") }
    }
}

/// Slows down guessing of pairing codes: a few wrong codes per address, and a household-wide ceiling.
public final class PairingRateLimiter: Sendable {
    public let perAddress: Int
    public let total: Int
    public let window: TimeInterval
    private let failures = Mutex<[(address: String, at: Date)]>([])

    public init(perAddress: Int = 5, total: Int = 30, window: TimeInterval = 300) {
        self.perAddress = perAddress
        self.total = total
        self.window = window
    }

    /// Seconds to wait before `address` may try again, or nil when it may try now.
    public func retryAfter(address: String, now: Date = Date()) -> Int? {
        failures.withLock { list in
            list.removeAll { now.timeIntervalSince($0.at) > window }
            let mine = list.filter { $0.address == address }
            if mine.count >= perAddress, let oldest = mine.first { return max(1, Int(window - now.timeIntervalSince(oldest.at)) + 1) }
            if list.count >= total, let oldest = list.first { return max(1, Int(window - now.timeIntervalSince(oldest.at)) + 1) }
            return nil
        }
    }

    public func recordFailure(address: String, now: Date = Date()) {
        failures.withLock { $0.append((address, now)) }
    }
}
