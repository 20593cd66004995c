import Foundation

/// One mailbox as a header names it: `addr@example.com` or `Name <addr@example.com>`.
public struct MailAddress: Sendable, Equatable, CustomStringConvertible {
    /// The display name, unquoted and decoded; nil when there is none.
    public var name: String?
    /// The addr-spec (RFC 5322 §3.4.1), as given.
    public var address: String

    public init(name: String? = nil, address: String) {
        self.name = name
        self.address = address
    }

    public var description: String { name.map { "\($0) <\(address)>" } ?? address }

    /// The domain part, for the EHLO greeting.
    var domain: String { address.split(separator: "@").last.map(String.init) ?? "localhost" }

    /// Parses one mailbox strictly: a dot-atom addr-spec, optionally with a display name before it in angle brackets.
    /// Line breaks and other control characters are refused, so nothing given here can add a header.
    public static func parse(_ text: String) throws(MailAddressError) -> MailAddress {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        guard !trimmed.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) else {
            throw .controlCharacters(text.debugDescription)
        }
        guard !trimmed.isEmpty else { throw .empty }
        guard let open = trimmed.lastIndex(of: "<") else {
            try checkAddrSpec(trimmed, in: trimmed)
            return MailAddress(address: trimmed)
        }
        guard trimmed.hasSuffix(">") else { throw .malformed(trimmed, "text after the closing '>'") }
        let address = String(trimmed[trimmed.index(after: open)..<trimmed.index(before: trimmed.endIndex)]).trimmingCharacters(in: .whitespaces)
        try checkAddrSpec(address, in: trimmed)
        var name = String(trimmed[..<open]).trimmingCharacters(in: .whitespaces)
        if name.hasPrefix("\"") {
            guard let inner = quotedContent(name) else { throw .malformed(trimmed, "an unterminated quoted name") }
            name = inner
        } else if name.contains(where: { "<>\"".contains($0) }) {
            throw .malformed(trimmed, "'<', '>' or '\"' in the name (quote the name)")
        }
        return MailAddress(name: name.isEmpty ? nil : name, address: address)
    }

    /// A comma-separated list of mailboxes (commas inside a quoted name do not split).
    public static func parseList(_ text: String) throws(MailAddressError) -> [MailAddress] {
        var items: [String] = []
        var current = ""
        var quoted = false, escaped = false, angle = false
        for character in text {
            if escaped { escaped = false; current.append(character); continue }
            switch character {
            case "\\" where quoted: escaped = true
            case "\"": quoted.toggle()
            case "<" where !quoted: angle = true
            case ">" where !quoted: angle = false
            case "," where !quoted && !angle:
                items.append(current)
                current = ""
                continue
            default: break
            }
            current.append(character)
        }
        items.append(current)
        var addresses: [MailAddress] = []
        for item in items where !item.trimmingCharacters(in: .whitespaces).isEmpty {
            addresses.append(try parse(item))
        }
        guard !addresses.isEmpty else { throw .empty }
        guard addresses.count <= 100 else { throw .tooMany(addresses.count) }
        return addresses
    }

    private static let atext = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$%&'*+-/=?^_`{|}~".unicodeScalars)

    private static func checkAddrSpec(_ spec: String, in whole: String) throws(MailAddressError) {
        let parts = spec.split(separator: "@", omittingEmptySubsequences: false)
        guard parts.count == 2 else { throw .malformed(whole, "an address needs exactly one '@'") }
        let local = parts[0], domain = parts[1]
        guard !local.isEmpty, local.utf8.count <= 64, spec.utf8.count <= 254 else { throw .malformed(whole, "the part before '@' is empty or too long") }
        for atom in local.split(separator: ".", omittingEmptySubsequences: false) {
            guard !atom.isEmpty, atom.unicodeScalars.allSatisfy({ atext.contains($0) }) else {
                throw .malformed(whole, "'\(local)' is not a plain local part (letters, digits and !#$%&'*+-/=?^_`{|}~, dots between)")
            }
        }
        if domain.hasPrefix("[") && domain.hasSuffix("]") {
            let literal = domain.dropFirst().dropLast()
            guard literal.split(separator: ".").count == 4, literal.split(separator: ".").allSatisfy({ UInt8($0) != nil }) else {
                throw .malformed(whole, "'\(domain)' is not an IPv4 address literal")
            }
            return
        }
        let labels = domain.split(separator: ".", omittingEmptySubsequences: false)
        guard !domain.isEmpty, domain.utf8.count <= 253, labels.allSatisfy({ label in
            !label.isEmpty && label.utf8.count <= 63 && !label.hasPrefix("-") && !label.hasSuffix("-")
                && label.unicodeScalars.allSatisfy { ($0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0))) || $0 == "-" }
        }) else {
            throw .malformed(whole, "'\(domain)' is not a domain name")
        }
    }

    /// The content of a quoted-string that is the whole of `text`, unescaped; nil when it is not one.
    private static func quotedContent(_ text: String) -> String? {
        var out = "", escaped = false
        var rest = text.dropFirst()
        while let character = rest.first {
            rest = rest.dropFirst()
            if escaped { out.append(character); escaped = false }
            else if character == "\\" { escaped = true }
            else if character == "\"" { return rest.isEmpty ? out : nil }
            else { out.append(character) }
        }
        return nil
    }
}

public enum MailAddressError: Error, Sendable, Equatable, CustomStringConvertible {
    case empty
    case controlCharacters(String)
    case malformed(String, String)
    case tooMany(Int)

    public var description: String {
        switch self {
        case .empty: "no email address given"
        case .controlCharacters(let text): "\(text) contains a line break or control character (it could add a mail header)"
        case .malformed(let text, let why): "'\(text)' is not an email address: \(why)"
        case .tooMany(let count): "\(count) recipients; at most 100 per message"
        }
    }
}
