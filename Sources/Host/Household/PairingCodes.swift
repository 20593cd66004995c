import Crypto
import Foundation
import Identity

/// A pairing code as handed out once: the plain code exists only here and on the screen it is shown on.
public struct PairingOffer: Sendable {
    public let code: String
    public let subject: String
    public let name: String
    public let role: Role
    public let expiresAt: Date

    public init(code: String, subject: String, name: String, role: Role, expiresAt: Date) {
        self.code = code
        self.subject = subject
        self.name = name
        self.role = role
        self.expiresAt = expiresAt
    }
}

/// Why a pairing code paired nothing.
public enum PairingError: Error, Sendable, Equatable, CustomStringConvertible {
    case unknownCode
    case expired
    case alreadyUsed
    /// The person holds `PairingCodes.maximumKeysPerPerson` keys active or made within `PairingCodes.keyWindow`;
    /// the code stays unused.
    case tooManyKeys

    public var description: String {
        switch self {
        case .tooManyKeys: return "this person holds \(PairingCodes.maximumKeysPerPerson) keys that are active or were made in the last day; revoke keys no longer used (DELETE /admin/api-keys/:id): a revoked key stops counting a day after it was made"
        case .unknownCode: return "this pairing code is not known; check it or create a new one"
        case .expired: return "this pairing code has expired (codes live 2 minutes); create a new one"
        case .alreadyUsed: return "this pairing code has already been used; each code pairs one device"
        }
    }
}

/// What every engine's household store shares about codes: their shape, their life and how they are stored, so no
/// engine copies the rules.
public enum PairingCodes {
    /// Two minutes, as the original.
    public static let lifetime: TimeInterval = 120
    /// Keys one person may hold, counting those revoked within `keyWindow`: each pairing mints one, and a person may
    /// pair themselves (and revoke their keys) again and again, so without a bound any viewer could grow the key table
    /// (and every key list) without end; with it, by at most this many a day.
    public static let maximumKeysPerPerson = 100
    /// How long a revoked key still counts against `maximumKeysPerPerson`.
    public static let keyWindow: TimeInterval = 86_400
    /// Old codes are kept this long after they expire, for the record, then dropped.
    public static let keptAfterExpiry: TimeInterval = 86_400

    /// The original's code: 10 random bytes in RFC 4648 base32, 16 characters from A–Z and 2–7.
    public static func newCode() -> String {
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
    public static func normalize(_ typed: String) -> String {
        String(typed.uppercased().filter { !$0.isWhitespace && $0 != "-" })
    }

    /// What is stored for a code (as typed or as issued): its SHA-256. 80 random bits need no slower hash.
    public static func stored(_ code: String) -> [UInt8] {
        SHA256.hash(normalize(code))
    }
}

/// What every engine's household store shares about people: how a name becomes a subject.
public enum HouseholdNames {
    /// What the owner is called.
    public static let ownerName = "Owner"

    /// The subject for `name` by the household's rule: its slug, or the slug with -2, -3, … when another person's name
    /// slugs the same (or the slug is the owner's). `nameOf` reads the name a subject was recorded with; `claim` records
    /// a new subject and says whether it did (false: another writer took it meanwhile, so it is looked at again).
    public static func subject(forName name: String, nameOf: (String) throws -> String?, claim: (_ subject: String, _ name: String) throws -> Bool) throws -> String {
        let trimmed = name.trimmingCharacters(in: .whitespaces)
        let base = slug(name)
        var n = 1
        var candidate = base
        while true {
            if candidate != Principal.ownerSubject {
                if let taken = try nameOf(candidate) {
                    if taken.lowercased() == trimmed.lowercased() { return candidate }
                } else if try claim(candidate, trimmed) {
                    return candidate
                } else {
                    continue
                }
            }
            n += 1
            candidate = "\(base)-\(n)"
        }
    }

    /// A lower-case ASCII slug ("Priya" → priya, "José" → jose, "Дмитрий" → dmitrij).
    public static func slug(_ name: String) -> String {
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
}
