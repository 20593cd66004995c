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

    /// Parses a request body. Errors name what is wrong in a way a client can fix.
    public static func parse(_ bytes: [UInt8]) throws(APIError) -> JSONValue {
        guard !bytes.isEmpty else { throw APIError.badRequest("the request body is empty; send a JSON object", code: "invalid_json") }
        do {
            return try JSONDecoder().decode(JSONValue.self, from: Data(bytes))
        } catch {
            throw APIError.badRequest("the request body is not valid JSON", code: "invalid_json")
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

    static func writeString(_ s: String, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        // Most strings need no escaping: copy them whole.
        if !s.utf8.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) {
            out.append(contentsOf: s.utf8)
            out.append(UInt8(ascii: "\""))
            return
        }
        for byte in s.utf8 {
            switch byte {
            case UInt8(ascii: "\""): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\"")])
            case UInt8(ascii: "\\"): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\\")])
            case 0x0A: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
            case 0x0D: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
            case 0x09: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
            case 0..<0x20:
                out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"), hex[Int(byte >> 4)], hex[Int(byte & 0xF)]])
            default: out.append(byte)
            }
        }
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
}

/// A JSON object read field by field; each accessor throws an `APIError` naming the field.
public struct JSONObject: Sendable {
    public let fields: [String: JSONValue]
    /// Prefix for nested field names in errors ("card.components[2]").
    public let path: String

    public init(_ fields: [String: JSONValue], path: String = "") {
        self.fields = fields
        self.path = path
    }

    /// The body must be a JSON object; an empty body counts as `{}` when `allowEmpty`.
    public init(body: [UInt8], allowEmpty: Bool = false) throws(APIError) {
        if allowEmpty && body.allSatisfy({ $0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09 }) {
            self.init([:])
            return
        }
        let value = try JSONValue.parse(body)
        guard case .object(let fields) = value else {
            throw APIError.badRequest("the request body must be a JSON object, got \(value.typeName)", code: "invalid_json")
        }
        self.init(fields)
    }

    public func name(_ key: String) -> String { path.isEmpty ? key : "\(path).\(key)" }

    /// Present and not null.
    public func has(_ key: String) -> Bool {
        if let v = fields[key], v != .null { return true }
        return false
    }

    public func optionalString(_ key: String, maxLength: Int? = nil) throws(APIError) -> String? {
        guard let value = fields[key], value != .null else { return nil }
        guard case .string(let s) = value else { throw APIError.invalidField(name(key), "must be a string, got \(value.typeName)") }
        if let maxLength, s.count > maxLength {
            throw APIError.invalidField(name(key), "must be at most \(maxLength) characters, got \(s.count)")
        }
        return s
    }

    public func string(_ key: String, maxLength: Int? = nil) throws(APIError) -> String {
        guard let s = try optionalString(key, maxLength: maxLength) else { throw APIError.missingField(name(key)) }
        return s
    }

    public func optionalBool(_ key: String) throws(APIError) -> Bool? {
        guard let value = fields[key], value != .null else { return nil }
        guard case .bool(let b) = value else { throw APIError.invalidField(name(key), "must be true or false, got \(value.typeName)") }
        return b
    }

    public func optionalNumber(_ key: String) throws(APIError) -> Double? {
        guard let value = fields[key], value != .null else { return nil }
        guard case .number(let d) = value, d.isFinite else { throw APIError.invalidField(name(key), "must be a number, got \(value.typeName)") }
        return d
    }

    public func optionalInteger(_ key: String, in range: ClosedRange<Int>) throws(APIError) -> Int? {
        guard let d = try optionalNumber(key) else { return nil }
        guard d.rounded() == d, d >= Double(range.lowerBound), d <= Double(range.upperBound) else {
            throw APIError.invalidField(name(key), "must be a whole number from \(range.lowerBound) to \(range.upperBound)")
        }
        return Int(d)
    }

    public func optionalObject(_ key: String) throws(APIError) -> JSONObject? {
        guard let value = fields[key], value != .null else { return nil }
        guard case .object(let o) = value else { throw APIError.invalidField(name(key), "must be an object, got \(value.typeName)") }
        return JSONObject(o, path: name(key))
    }

    public func optionalArray(_ key: String) throws(APIError) -> [JSONValue]? {
        guard let value = fields[key], value != .null else { return nil }
        guard case .array(let a) = value else { throw APIError.invalidField(name(key), "must be an array, got \(value.typeName)") }
        return a
    }
}

extension JSONValue {
    /// A timestamp as every route writes it: ISO 8601 in UTC with milliseconds.
    public static func timestamp(_ date: Date) -> JSONValue {
        .string(iso8601(date))
    }

    /// "2026-12-02T13:04:05.123Z", formatted by hand: Foundation's formatters are slow on hot routes.
    public static func iso8601(_ date: Date) -> String {
        let millisTotal = Int64((date.timeIntervalSince1970 * 1000).rounded(.down))
        var seconds = time_t(millisTotal >= 0 ? millisTotal / 1000 : (millisTotal - 999) / 1000)
        let millis = Int((millisTotal % 1000 + 1000) % 1000)
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func two(_ n: Int32) -> String { n < 10 ? "0\(n)" : "\(n)" }
        let ms = millis < 10 ? "00\(millis)" : millis < 100 ? "0\(millis)" : "\(millis)"
        return "\(parts.tm_year + 1900)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))T\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)).\(ms)Z"
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

    /// A key inside an object; the value written next belongs to it.
    public mutating func key(_ name: String) {
        separate()
        JSONValue.writeString(name, into: &bytes)
        bytes.append(UInt8(ascii: ":"))
        needsComma[needsComma.count - 1] = false
    }

    public mutating func string(_ s: String) { separate(); JSONValue.writeString(s, into: &bytes) }
    public mutating func number(_ n: Int64) { separate(); bytes.append(contentsOf: String(n).utf8) }
    public mutating func bool(_ b: Bool) { separate(); bytes.append(contentsOf: (b ? "true" : "false").utf8) }
    public mutating func null() { separate(); bytes.append(contentsOf: "null".utf8) }
    public mutating func value(_ v: JSONValue) { separate(); bytes.append(contentsOf: v.serializedBytes()) }
}
