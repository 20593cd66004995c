@_exported import JSON
import Foundation

extension JSONValue {
    /// Parses a request body. Errors name what is wrong in a way a client can fix.
    public static func parse(_ bytes: [UInt8]) throws(APIError) -> JSONValue {
        guard !bytes.isEmpty else { throw APIError.badRequest("the request body is empty; send a JSON object", code: "invalid_json") }
        if let offset = trailingCommaOffset(bytes) {
            throw APIError.badRequest("the request body is not valid JSON: a trailing comma at byte \(offset)", code: "invalid_json")
        }
        do {
            return try JSONDecoder().decode(JSONValue.self, from: Data(bytes))
        } catch {
            throw APIError.badRequest("the request body is not valid JSON", code: "invalid_json")
        }
    }

    /// Foundation's decoder accepts `[1,]` and `{"a":1,}`, which RFC 8259 does not: the offset of the first
    /// comma that closes an array or object, outside strings (nil when there is none).
    static func trailingCommaOffset(_ bytes: [UInt8]) -> Int? {
        var inString = false, escaped = false
        var lastSignificant: (byte: UInt8, offset: Int)?
        for (offset, byte) in bytes.enumerated() {
            if inString {
                if escaped { escaped = false } else if byte == UInt8(ascii: "\\") { escaped = true } else if byte == UInt8(ascii: "\"") { inString = false }
                continue
            }
            switch byte {
            case UInt8(ascii: " "), UInt8(ascii: "\n"), UInt8(ascii: "\r"), UInt8(ascii: "\t"): continue
            case UInt8(ascii: "\""): inString = true
            case UInt8(ascii: "]"), UInt8(ascii: "}"):
                if let last = lastSignificant, last.byte == UInt8(ascii: ",") { return last.offset }
            default: break
            }
            lastSignificant = (byte, offset)
        }
        return nil
    }
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

    /// The body must be a JSON object; no body at all counts as `{}` when `allowEmpty` (blanks alone are not JSON).
    public init(body: [UInt8], allowEmpty: Bool = false) throws(APIError) {
        if allowEmpty && body.isEmpty {
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


/// Whitespace as JSON Schema's `\s` means it (ECMA-262 WhiteSpace and LineTerminator), so what a route trims is
/// exactly what its documented pattern allows around a value.
public enum SchemaWhitespace {
    public static func contains(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x09...0x0D, 0x20, 0xA0, 0x1680, 0x2000...0x200A, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000, 0xFEFF: return true
        default: return false
        }
    }

    /// `text` without leading and trailing schema whitespace.
    public static func trim(_ text: String) -> String {
        let scalars = text.unicodeScalars
        guard let first = scalars.firstIndex(where: { !contains($0) }), let last = scalars.lastIndex(where: { !contains($0) }) else { return "" }
        return String(scalars[first...last])
    }

    /// Runs of schema whitespace collapsed to one space, and trimmed.
    public static func collapse(_ text: String) -> String {
        var out = String.UnicodeScalarView()
        var pendingSpace = false
        for scalar in text.unicodeScalars {
            if contains(scalar) {
                pendingSpace = !out.isEmpty
            } else {
                if pendingSpace { out.append(" ") }
                pendingSpace = false
                out.append(scalar)
            }
        }
        return String(out)
    }
}
