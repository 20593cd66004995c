/// Reads JSON exactly as `JSONValue.serialized()` writes it: no whitespace, strings escaping only `"`, `\` and control
/// characters (`\n`, `\r`, `\t`, `\u00XX`), numbers as it prints them. Each read answers nil (or false) at the first
/// byte it does not expect, and the caller then gives the text to the full decoder (`JSONCoding.decode`). Meant for
/// values this process stored and reads back on a hot path (an outbox's claim), where JSONDecoder was a measurable
/// share of the CPU. It recurses only into the members an `object` reader asks for, one level each.
public struct CanonicalJSONReader {
    private let bytes: [UInt8]
    private var at = 0

    public init(_ text: String) { bytes = Array(text.utf8) }

    /// Whether every byte was read (a reader that stopped early leaves some).
    public var isAtEnd: Bool { at == bytes.count }

    private mutating func take(_ byte: UInt8) -> Bool {
        guard at < bytes.count, bytes[at] == byte else { return false }
        at += 1
        return true
    }

    /// An object, `member` called with each key and the reader at its value (it must read the value); false when the
    /// object does not read or `member` returns false.
    public mutating func object(_ member: (inout CanonicalJSONReader, String) -> Bool) -> Bool {
        guard take(UInt8(ascii: "{")) else { return false }
        if take(UInt8(ascii: "}")) { return true }
        repeat {
            guard let key = string(), take(UInt8(ascii: ":")), member(&self, key) else { return false }
        } while take(UInt8(ascii: ","))
        return take(UInt8(ascii: "}"))
    }

    /// An array of strings.
    public mutating func stringArray() -> [String]? {
        guard take(UInt8(ascii: "[")) else { return nil }
        var items: [String] = []
        if take(UInt8(ascii: "]")) { return items }
        repeat {
            guard let item = string() else { return nil }
            items.append(item)
        } while take(UInt8(ascii: ","))
        return take(UInt8(ascii: "]")) ? items : nil
    }

    /// An object of strings; a key twice is refused.
    public mutating func stringObject() -> [String: String]? {
        var fields: [String: String] = [:]
        let read = object { reader, key in
            guard let value = reader.string() else { return false }
            return fields.updateValue(value, forKey: key) == nil
        }
        return read ? fields : nil
    }

    public mutating func bool() -> Bool? {
        if matches("true") { return true }
        if matches("false") { return false }
        return nil
    }

    private mutating func matches(_ word: StaticString) -> Bool {
        let count = word.utf8CodeUnitCount
        guard at + count <= bytes.count else { return false }
        let same = word.withUTF8Buffer { expected in (0..<count).allSatisfy { bytes[at + $0] == expected[$0] } }
        if same { at += count }
        return same
    }

    /// A number as JSON writes one (`-`, digits, a fraction, an exponent), read as the nearest Double.
    public mutating func number() -> Double? {
        let start = at
        _ = take(UInt8(ascii: "-"))
        guard digits() else { return nil }
        if take(UInt8(ascii: ".")) { guard digits() else { return nil } }
        if take(UInt8(ascii: "e")) || take(UInt8(ascii: "E")) {
            if !take(UInt8(ascii: "+")) { _ = take(UInt8(ascii: "-")) }
            guard digits() else { return nil }
        }
        return Double(String(decoding: bytes[start..<at], as: UTF8.self))
    }

    private mutating func digits() -> Bool {
        let start = at
        while at < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[at]) { at += 1 }
        return at > start
    }

    /// A string as `JSONValue.writeString` writes it. The text came from a Swift string and is split only at ASCII
    /// bytes, so each run is whole UTF-8.
    public mutating func string() -> String? {
        guard take(UInt8(ascii: "\"")) else { return nil }
        let start = at
        while at < bytes.count {
            let byte = bytes[at]
            if byte == UInt8(ascii: "\"") {
                defer { at += 1 }
                return String(decoding: bytes[start..<at], as: UTF8.self)
            }
            if byte == UInt8(ascii: "\\") || byte < 0x20 { break }
            at += 1
        }
        // Escapes: copied byte by byte from here on.
        var out = Array(bytes[start..<at])
        while at < bytes.count {
            let byte = bytes[at]
            at += 1
            switch byte {
            case UInt8(ascii: "\""):
                return String(decoding: out, as: UTF8.self)
            case UInt8(ascii: "\\"):
                guard at < bytes.count else { return nil }
                let escaped = bytes[at]
                at += 1
                switch escaped {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"): out.append(escaped)
                case UInt8(ascii: "n"): out.append(0x0A)
                case UInt8(ascii: "r"): out.append(0x0D)
                case UInt8(ascii: "t"): out.append(0x09)
                case UInt8(ascii: "u"):
                    // Only `\u00XX` for a control character, as the writer emits it.
                    guard at + 4 <= bytes.count, bytes[at] == UInt8(ascii: "0"), bytes[at + 1] == UInt8(ascii: "0"),
                          let high = Self.hexValue(bytes[at + 2]), high < 2, let low = Self.hexValue(bytes[at + 3]) else { return nil }
                    out.append(high << 4 | low)
                    at += 4
                default:
                    return nil
                }
            default:
                guard byte >= 0x20 else { return nil }
                out.append(byte)
            }
        }
        return nil
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
