import Foundation

/// What is wrong with a JSON document a client sent, naming the field: the HTTP layer answers it as a 400
/// (`invalid_json`, `missing_field`, `invalid_field`), and other readers (an agent's tool call) show its text.
public struct JSONFieldError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable {
        /// Not JSON, or not the JSON shape the whole body must have.
        case invalidJSON
        case missing
        case invalid
    }
    public let kind: Kind
    /// The field at fault (`card.items[2]`); nil for the document as a whole.
    public let field: String?
    /// The whole sentence a client reads: `field: what is wrong` (or `field is required`).
    public let message: String

    public static func invalidJSON(_ message: String) -> JSONFieldError { JSONFieldError(kind: .invalidJSON, field: nil, message: message) }
    public static func missing(_ field: String) -> JSONFieldError { JSONFieldError(kind: .missing, field: field, message: "\(field) is required") }
    public static func invalid(_ field: String, _ problem: String) -> JSONFieldError {
        JSONFieldError(kind: .invalid, field: field, message: "\(field): \(problem)")
    }
    /// `field` holds another type than `expected` ("a string", "true or false").
    public static func wrongType(_ field: String, expected: String, got value: JSONValue) -> JSONFieldError {
        invalid(field, "must be \(expected), got \(value.typeName)")
    }
    /// The body as a whole is not the JSON object every route takes.
    public static func notAnObject(_ value: JSONValue) -> JSONFieldError {
        invalidJSON("the request body must be a JSON object, got \(value.typeName)")
    }

    public var description: String { message }
}

extension JSONValue {
    /// Parses a request body. Errors name what is wrong in a way a client can fix; nesting beyond
    /// `JSONNesting.maximumDepth` is refused before anything recursive reads the document.
    public static func parse(_ bytes: [UInt8]) throws(JSONFieldError) -> JSONValue {
        guard !bytes.isEmpty else { throw JSONFieldError.invalidJSON("the request body is empty; send a JSON object") }
        switch JSONNesting.scan(bytes) {
        case .tooDeep(let offset): throw JSONNesting.tooDeepError(at: offset, in: "the request body")
        case .trailingComma(let offset): throw JSONFieldError.invalidJSON("the request body is not valid JSON: a trailing comma at byte \(offset)")
        case nil: break
        }
        do {
            return try JSONDecoder().decode(JSONValue.self, from: Data(bytes))
        } catch {
            throw JSONFieldError.invalidJSON("the request body is not valid JSON")
        }
    }
}

/// A JSON object read field by field; each accessor throws a `JSONFieldError` naming the field.
public struct JSONObject: Sendable {
    public let fields: [String: JSONValue]
    /// Prefix for nested field names in errors ("card.components[2]").
    public let path: String

    public init(_ fields: [String: JSONValue], path: String = "") {
        self.fields = fields
        self.path = path
    }

    /// The body must be a JSON object; no body at all counts as `{}` when `allowEmpty` (blanks alone are not JSON).
    public init(body: [UInt8], allowEmpty: Bool = false) throws(JSONFieldError) {
        if allowEmpty && body.isEmpty {
            self.init([:])
            return
        }
        let value = try JSONValue.parse(body)
        guard case .object(let fields) = value else {
            throw JSONFieldError.notAnObject(value)
        }
        self.init(fields)
    }

    public func name(_ key: String) -> String { path.isEmpty ? key : "\(path).\(key)" }

    /// Present and not null.
    public func has(_ key: String) -> Bool {
        if let v = fields[key], v != .null { return true }
        return false
    }

    public func optionalString(_ key: String, maxLength: Int? = nil) throws(JSONFieldError) -> String? {
        guard let value = fields[key], value != .null else { return nil }
        guard case .string(let s) = value else { throw JSONFieldError.wrongType(name(key), expected: "a string", got: value) }
        guard let maxLength else { return s }
        return try s.limited(to: maxLength, field: name(key))
    }

    public func string(_ key: String, maxLength: Int? = nil) throws(JSONFieldError) -> String {
        guard let s = try optionalString(key, maxLength: maxLength) else { throw JSONFieldError.missing(name(key)) }
        return s
    }

    public func optionalBool(_ key: String) throws(JSONFieldError) -> Bool? {
        guard let value = fields[key], value != .null else { return nil }
        guard case .bool(let b) = value else { throw JSONFieldError.wrongType(name(key), expected: "true or false", got: value) }
        return b
    }

    public func optionalArray(_ key: String) throws(JSONFieldError) -> [JSONValue]? {
        guard let value = fields[key], value != .null else { return nil }
        guard case .array(let a) = value else { throw JSONFieldError.wrongType(name(key), expected: "an array", got: value) }
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
