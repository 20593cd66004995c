import Foundation
import Glibc

/// A JSON document as a value: lets handlers tell a missing field from null, and a bool from a number.
public enum JSONValue: Sendable, Equatable, Codable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    public init(from decoder: Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() { self = .null }
        else if let b = try? container.decode(Bool.self) { self = .bool(b) }
        else if let d = try? container.decode(Double.self) { self = .number(d) }
        else if let s = try? container.decode(String.self) { self = .string(s) }
        else if let a = try? container.decode([JSONValue].self) { self = .array(a) }
        else { self = .object(try container.decode([String: JSONValue].self)) }
    }

    public func encode(to encoder: Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let b): try container.encode(b)
        case .number(let d):
            if d.rounded() == d, abs(d) < 9.0e15 { try container.encode(Int64(d)) } else { try container.encode(d) }
        case .string(let s): try container.encode(s)
        case .array(let a): try container.encode(a)
        case .object(let o): try container.encode(o)
        }
    }

    /// Compact JSON with sorted keys, written directly (JSONEncoder is several times slower on hot routes).
    public func serialized() -> String {
        var out = [UInt8]()
        out.reserveCapacity(256)
        write(into: &out)
        return String(decoding: out, as: UTF8.self)
    }

    public func serializedBytes() -> [UInt8] {
        var out = [UInt8]()
        out.reserveCapacity(256)
        write(into: &out)
        return out
    }

    private func write(into out: inout [UInt8]) {
        switch self {
        case .null: out.append(contentsOf: "null".utf8)
        case .bool(let b): out.append(contentsOf: (b ? "true" : "false").utf8)
        case .number(let d):
            if d.rounded() == d, abs(d) < 9.0e15 {
                out.append(contentsOf: String(Int64(d)).utf8)
            } else if d.isFinite {
                out.append(contentsOf: "\(d)".utf8)
            } else {
                out.append(contentsOf: "null".utf8)
            }
        case .string(let s): Self.writeString(s, into: &out)
        case .array(let items):
            out.append(UInt8(ascii: "["))
            for (i, item) in items.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                item.write(into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let fields):
            out.append(UInt8(ascii: "{"))
            for (i, key) in fields.keys.sorted().enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                Self.writeString(key, into: &out)
                out.append(UInt8(ascii: ":"))
                fields[key]!.write(into: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    private static let hex = Array("0123456789abcdef".utf8)

    public static func writeString(_ s: String, into out: inout [UInt8]) {
        var s = s
        s.withUTF8 { writeString(utf8: $0, into: &out) }
    }

    /// Runs of bytes that need no escaping (nearly all) are copied whole; the rest are escaped one by one.
    static func writeString(utf8 bytes: UnsafeBufferPointer<UInt8>, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        var runStart = 0
        for i in 0..<bytes.count {
            let byte = bytes[i]
            guard byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") else { continue }
            if runStart < i { out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<i])) }
            runStart = i + 1
            out.append(UInt8(ascii: "\\"))
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"): out.append(byte)
            case 0x0A: out.append(UInt8(ascii: "n"))
            case 0x0D: out.append(UInt8(ascii: "r"))
            case 0x09: out.append(UInt8(ascii: "t"))
            default: out.append(contentsOf: [UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"), hex[Int(byte >> 4)], hex[Int(byte & 0xF)]])
            }
        }
        if runStart < bytes.count { out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart...])) }
        out.append(UInt8(ascii: "\""))
    }

    public var typeName: String {
        switch self {
        case .null: return "null"
        case .bool: return "a boolean"
        case .number: return "a number"
        case .string: return "a string"
        case .array: return "an array"
        case .object: return "an object"
        }
    }

    public var stringValue: String? { if case .string(let s) = self { return s } else { return nil } }
    public var objectValue: [String: JSONValue]? { if case .object(let o) = self { return o } else { return nil } }
    public var arrayValue: [JSONValue]? { if case .array(let a) = self { return a } else { return nil } }
    public var boolValue: Bool? { if case .bool(let b) = self { return b } else { return nil } }
    public var numberValue: Double? { if case .number(let d) = self { return d } else { return nil } }

    public subscript(key: String) -> JSONValue? { objectValue?[key] }
    /// An array's element, nil past its end or when this is not an array.
    public subscript(index: Int) -> JSONValue? { arrayValue.flatMap { $0.indices.contains(index) ? $0[index] : nil } }
}

extension JSONValue {
    /// A timestamp as every route writes it, ISO 8601 in UTC with milliseconds: "2026-12-02T13:04:05.123Z",
    /// formatted by hand (Foundation's formatters are slow on hot routes).
    public static func iso8601(_ date: Date) -> String {
        var out = [UInt8]()
        out.reserveCapacity(24)
        writeISO8601(date, into: &out)
        return String(decoding: out, as: UTF8.self)
    }

    /// The instants a timestamp can be written as: RFC 3339's four-digit years, 0000 to 9999. Parsers refuse the
    /// rest; the writer clamps anything else (a date computed past them) rather than trap.
    public static let writableDates = Date(timeIntervalSince1970: -62_167_219_200)...Date(timeIntervalSince1970: 253_402_300_799.999)
    /// The same instants in milliseconds, as the writer clamps them (computed once, not per timestamp written).
    static let writableMilliseconds = (writableDates.lowerBound.timeIntervalSince1970 * 1000)...(writableDates.upperBound.timeIntervalSince1970 * 1000)

    /// `date` as `iso8601(_:)` formats it, appended to `out` without quotes.
    public static func writeISO8601(_ date: Date, into out: inout [UInt8]) {
        let given = date.timeIntervalSince1970 * 1000
        let millisTotal = Int64((given.isNaN ? 0 : min(max(given, writableMilliseconds.lowerBound), writableMilliseconds.upperBound)).rounded(.down))
        var seconds = time_t(millisTotal >= 0 ? millisTotal / 1000 : (millisTotal - 999) / 1000)
        let millis = Int((millisTotal % 1000 + 1000) % 1000)
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func digits(_ value: Int, _ width: Int) {
            var divisor = 1
            for _ in 1..<width { divisor *= 10 }
            var rest = value
            while divisor > 0 {
                out.append(UInt8(ascii: "0") + UInt8(rest / divisor % 10))
                rest %= divisor
                divisor /= 10
            }
        }
        digits(Int(parts.tm_year) + 1900, 4); out.append(UInt8(ascii: "-"))
        digits(Int(parts.tm_mon) + 1, 2); out.append(UInt8(ascii: "-"))
        digits(Int(parts.tm_mday), 2); out.append(UInt8(ascii: "T"))
        digits(Int(parts.tm_hour), 2); out.append(UInt8(ascii: ":"))
        digits(Int(parts.tm_min), 2); out.append(UInt8(ascii: ":"))
        digits(Int(parts.tm_sec), 2); out.append(UInt8(ascii: "."))
        digits(millis, 3); out.append(UInt8(ascii: "Z"))
    }
}

extension JSONValue: ExpressibleByStringLiteral, ExpressibleByBooleanLiteral, ExpressibleByIntegerLiteral,
    ExpressibleByFloatLiteral, ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral, ExpressibleByNilLiteral {
    public init(stringLiteral value: String) { self = .string(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(integerLiteral value: Int) { self = .number(Double(value)) }
    public init(floatLiteral value: Double) { self = .number(value) }
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    public init(dictionaryLiteral elements: (String, JSONValue)...) { self = .object(Dictionary(elements, uniquingKeysWith: { $1 })) }
    public init(nilLiteral: ()) { self = .null }
}

/// Writes JSON straight into bytes, for hot routes whose shape is fixed (no intermediate dictionaries).
/// Keys are written in the order given; callers give them sorted to match `JSONValue.serialized()`.
public struct JSONWriter {
    public private(set) var bytes: [UInt8] = []
    private var needsComma: [Bool] = [false]

    public init(capacity: Int = 1024) { bytes.reserveCapacity(capacity) }

    private mutating func separate() {
        if needsComma[needsComma.count - 1] { bytes.append(UInt8(ascii: ",")) }
        needsComma[needsComma.count - 1] = true
    }

    public mutating func beginObject() { separate(); bytes.append(UInt8(ascii: "{")); needsComma.append(false) }
    public mutating func endObject() { needsComma.removeLast(); bytes.append(UInt8(ascii: "}")) }
    public mutating func beginArray() { separate(); bytes.append(UInt8(ascii: "[")); needsComma.append(false) }
    public mutating func endArray() { needsComma.removeLast(); bytes.append(UInt8(ascii: "]")) }

    /// A key inside an object; the value written next belongs to it. Keys are literals of plain ASCII
    /// (snake_case names), so they are copied without escaping.
    public mutating func key(_ name: StaticString) {
        separate()
        bytes.append(UInt8(ascii: "\""))
        name.withUTF8Buffer { bytes.append(contentsOf: $0) }
        bytes.append(UInt8(ascii: "\""))
        bytes.append(UInt8(ascii: ":"))
        needsComma[needsComma.count - 1] = false
    }

    /// An ISO 8601 timestamp, as `JSONValue.iso8601` formats it (and `Timestamp` in typed answers).
    public mutating func timestamp(_ date: Date) {
        separate()
        bytes.append(UInt8(ascii: "\""))
        JSONValue.writeISO8601(date, into: &bytes)
        bytes.append(UInt8(ascii: "\""))
    }

    public mutating func string(_ s: String) { separate(); JSONValue.writeString(s, into: &bytes) }
    public mutating func number(_ n: Int64) { separate(); bytes.append(contentsOf: String(n).utf8) }
    public mutating func bool(_ b: Bool) { separate(); bytes.append(contentsOf: (b ? "true" : "false").utf8) }
    public mutating func null() { separate(); bytes.append(contentsOf: "null".utf8) }
    public mutating func value(_ v: JSONValue) { separate(); bytes.append(contentsOf: v.serializedBytes()) }
    /// Text that is already JSON (written by `JSONValue.serialized()`), copied as it is.
    public mutating func raw(_ json: String) { separate(); bytes.append(contentsOf: json.utf8) }
}

/// The one encoder for typed answers: keys sorted (as the direct writer sorts them), slashes not escaped.
public enum JSONCoding {
    public static var encoder: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }

    /// A typed value as compact JSON text (a tool's result for a model).
    public static func text(_ value: some Encodable) throws -> String {
        String(decoding: try encoder.encode(value), as: UTF8.self)
    }
}

/// A moment in a typed answer, written as every route writes one (`JSONValue.iso8601`): ISO 8601 in UTC with
/// milliseconds. A bare `Date` would go out as seconds since 2001 under `JSONCoding.encoder`.
public struct Timestamp: Encodable, Sendable, Equatable {
    public var date: Date

    public init(_ date: Date) { self.date = date }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(JSONValue.iso8601(date))
    }
}

/// A field the answer always carries, `null` when there is no value (a synthesized `Encodable` leaves an absent
/// optional out): `"decided_at": null` says "not decided", which the original apps read.
public struct Nullable<Wrapped: Encodable>: Encodable {
    public var value: Wrapped?

    public init(_ value: Wrapped?) { self.value = value }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        if let value { try container.encode(value) } else { try container.encodeNil() }
    }
}

extension Nullable: Sendable where Wrapped: Sendable {}
extension Nullable: Equatable where Wrapped: Equatable {}
