import Foundation

/// The one decoder of request bodies: a `Decodable` request type read from a parsed `JSONValue`, each refusal a
/// `JSONFieldError` that names the field with its path (`card.items[2].title`) in the same words `JSONObject`
/// uses. `null` counts as absent, as everywhere in the API: an optional field may be null, a required one may not.
/// Range and length rules stay with the request type (`init(from:)` or a check after decoding).
public struct JSONValueDecoder: Sendable {
    public init() {}

    public func decode<T: Decodable>(_ type: T.Type, from value: JSONValue) throws(JSONFieldError) -> T {
        do {
            return try T(from: ValueDecoder(value: value, path: []))
        } catch let error as JSONFieldError {
            throw error
        } catch {
            // A request type's own DecodingError (a failed enum raw value, say): still a 400 naming what it can.
            throw JSONFieldError.invalid(Self.name(of: error), Self.problem(of: error))
        }
    }

    /// `a.b[2].c`: the path as clients read it.
    static func name(_ path: [any CodingKey]) -> String {
        var name = ""
        for key in path {
            if let index = key.intValue { name += "[\(index)]" } else { name += name.isEmpty ? key.stringValue : "." + key.stringValue }
        }
        return name
    }

    static func name(of error: any Error) -> String {
        guard let error = error as? DecodingError else { return "body" }
        switch error {
        case .dataCorrupted(let context), .keyNotFound(_, let context), .typeMismatch(_, let context), .valueNotFound(_, let context):
            let path = name(context.codingPath)
            return path.isEmpty ? "body" : path
        @unknown default: return "body"
        }
    }

    static func problem(of error: any Error) -> String {
        guard let error = error as? DecodingError else { return "\(error)" }
        switch error {
        case .dataCorrupted(let context), .keyNotFound(_, let context), .typeMismatch(_, let context), .valueNotFound(_, let context):
            return context.debugDescription
        @unknown default: return "\(error)"
        }
    }
}

/// An integer-or-string coding key for array positions.
private struct IndexKey: CodingKey {
    let intValue: Int?
    var stringValue: String { intValue.map(String.init) ?? "" }
    init(_ index: Int) { intValue = index }
    init?(intValue: Int) { self.intValue = intValue }
    init?(stringValue: String) { return nil }
}

private struct ValueDecoder: Decoder {
    let value: JSONValue
    let path: [any CodingKey]
    var codingPath: [any CodingKey] { path }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    var name: String { JSONValueDecoder.name(path) }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard case .object(let fields) = value else {
            throw path.isEmpty ? JSONFieldError.notAnObject(value) : JSONFieldError.wrongType(name, expected: "an object", got: value)
        }
        return KeyedDecodingContainer(Keyed<Key>(fields: fields, path: path))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard case .array(let items) = value else { throw JSONFieldError.wrongType(name, expected: "an array", got: value) }
        return Unkeyed(items: items, path: path)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer { Single(value: value, path: path) }
}

private struct Keyed<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let fields: [String: JSONValue]
    let path: [any CodingKey]
    var codingPath: [any CodingKey] { path }
    var allKeys: [Key] { fields.keys.compactMap { Key(stringValue: $0) } }

    /// Present and not null.
    func contains(_ key: Key) -> Bool {
        if let value = fields[key.stringValue], value != .null { return true }
        return false
    }

    func decodeNil(forKey key: Key) throws -> Bool { !contains(key) }

    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        // A JSON value is taken as it is, null included (an answer left empty in a free-form map); an optional field
        // still reads null as absent, since it asks `contains` first.
        if T.self == JSONValue.self, let value = fields[key.stringValue] { return value as! T }
        guard let value = fields[key.stringValue], value != .null else { throw JSONFieldError.missing(JSONValueDecoder.name(path + [key])) }
        return try Single(value: value, path: path + [key]).decode(T.self)
    }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        try ValueDecoder(value: fields[key.stringValue] ?? .null, path: path + [key]).container(keyedBy: type)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        try ValueDecoder(value: fields[key.stringValue] ?? .null, path: path + [key]).unkeyedContainer()
    }

    func superDecoder() throws -> any Decoder { ValueDecoder(value: .object(fields), path: path) }
    func superDecoder(forKey key: Key) throws -> any Decoder { ValueDecoder(value: fields[key.stringValue] ?? .null, path: path + [key]) }
}

private struct Unkeyed: UnkeyedDecodingContainer {
    let items: [JSONValue]
    let path: [any CodingKey]
    var currentIndex = 0
    var codingPath: [any CodingKey] { path }
    var count: Int? { items.count }
    var isAtEnd: Bool { currentIndex >= items.count }

    init(items: [JSONValue], path: [any CodingKey]) {
        self.items = items
        self.path = path
    }

    mutating func next() throws -> ValueDecoder {
        guard !isAtEnd else { throw JSONFieldError.invalid(JSONValueDecoder.name(path), "has too few items") }
        defer { currentIndex += 1 }
        return ValueDecoder(value: items[currentIndex], path: path + [IndexKey(currentIndex)])
    }

    mutating func decodeNil() throws -> Bool {
        guard !isAtEnd, items[currentIndex] == .null else { return false }
        currentIndex += 1
        return true
    }

    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
        let item = try next()
        return try Single(value: item.value, path: item.path).decode(T.self)
    }
    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
        try next().container(keyedBy: type)
    }
    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer { try next().unkeyedContainer() }
    mutating func superDecoder() throws -> any Decoder { try next() }
}

private struct Single: SingleValueDecodingContainer {
    let value: JSONValue
    let path: [any CodingKey]
    var codingPath: [any CodingKey] { path }
    var name: String { JSONValueDecoder.name(path) }

    func decodeNil() -> Bool { value == .null }

    func mismatch(_ expected: String) -> JSONFieldError { JSONFieldError.wrongType(name, expected: expected, got: value) }

    func decode(_ type: Bool.Type) throws -> Bool {
        guard case .bool(let b) = value else { throw mismatch("true or false") }
        return b
    }

    func decode(_ type: String.Type) throws -> String {
        guard case .string(let s) = value else { throw mismatch("a string") }
        return s
    }

    func decode(_ type: Double.Type) throws -> Double {
        guard case .number(let d) = value, d.isFinite else { throw mismatch("a number") }
        return d
    }

    func decode(_ type: Float.Type) throws -> Float { Float(try decode(Double.self)) }

    /// Whole numbers within the type's range; 3.5 or 1e30 for an Int is refused, not rounded or trapped.
    func integer<T: BinaryInteger & FixedWidthInteger>(_ type: T.Type) throws -> T {
        let d = try decode(Double.self)
        guard d.rounded() == d, let whole = T(exactly: d) else { throw JSONFieldError.invalid(name, "must be a whole number") }
        return whole
    }

    func decode(_ type: Int.Type) throws -> Int { try integer(Int.self) }
    func decode(_ type: Int8.Type) throws -> Int8 { try integer(Int8.self) }
    func decode(_ type: Int16.Type) throws -> Int16 { try integer(Int16.self) }
    func decode(_ type: Int32.Type) throws -> Int32 { try integer(Int32.self) }
    func decode(_ type: Int64.Type) throws -> Int64 { try integer(Int64.self) }
    func decode(_ type: UInt.Type) throws -> UInt { try integer(UInt.self) }
    func decode(_ type: UInt8.Type) throws -> UInt8 { try integer(UInt8.self) }
    func decode(_ type: UInt16.Type) throws -> UInt16 { try integer(UInt16.self) }
    func decode(_ type: UInt32.Type) throws -> UInt32 { try integer(UInt32.self) }
    func decode(_ type: UInt64.Type) throws -> UInt64 { try integer(UInt64.self) }

    func decode<T: Decodable>(_ type: T.Type) throws -> T {
        // A JSONValue field takes the value as it is (free-form params, a tool call's arguments).
        if T.self == JSONValue.self { return value as! T }
        return try T(from: ValueDecoder(value: value, path: path))
    }
}

extension String {
    /// The value when it is at most `maximum` characters; the refusal names `field` in `JSONObject`'s words.
    public func limited(to maximum: Int, field: String) throws(JSONFieldError) -> String {
        // Characters as JSON Schema's maxLength counts them (code points), not Swift's grapheme clusters.
        let length = unicodeScalars.count
        guard length > maximum else { return self }
        throw JSONFieldError.invalid(field, "must be at most \(maximum) characters, got \(length)")
    }
}

extension Optional where Wrapped == String {
    public func limited(to maximum: Int, field: String) throws(JSONFieldError) -> String? {
        guard let value = self else { return nil }
        return try value.limited(to: maximum, field: field)
    }
}

extension Optional where Wrapped == Double {
    /// A number field that must be a whole number in `range`, refused in the API's words (request types
    /// decode such fields as `Double?` so a fraction gets this message, not a bare type error).
    public func wholeNumber(in range: ClosedRange<Int>, field: String) throws(JSONFieldError) -> Int? {
        guard let d = self else { return nil }
        guard d.rounded() == d, d >= Double(range.lowerBound), d <= Double(range.upperBound) else {
            throw JSONFieldError.invalid(field, "must be a whole number from \(range.lowerBound) to \(range.upperBound)")
        }
        return Int(d)
    }
}
