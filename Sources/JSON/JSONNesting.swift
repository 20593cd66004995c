import Foundation

/// The deepest JSON any reader here accepts, checked by one linear scan before anything recursive touches the
/// document. Foundation's parser allows 512 levels, but decoding into `JSONValue` (and every walk over one: the
/// encoder, `==`, canvas validation, the request decoder) recurses once per level, and a thread's stack ran out
/// at about 340: one 2 KB body was enough to kill the process. 64 is far beyond any document the API, a provider,
/// a relay command or an agent file has a use for.
public enum JSONNesting {
    public static let maximumDepth = 64

    /// What a scan found wrong with a document's structure, with the byte offset of the culprit.
    public enum Problem: Sendable, Equatable {
        /// An array or object opened at `offset` would be the `maximumDepth + 1`-th level.
        case tooDeep(offset: Int)
        /// A comma that closes an array or object (`[1,]`), which RFC 8259 refuses and Foundation accepts.
        case trailingComma(offset: Int)
    }

    /// One pass over the bytes, outside strings: nesting beyond `maximumDepth` anywhere, else the first trailing
    /// comma. Depth is looked for to the end even after a trailing comma: readers that accept one (Foundation's
    /// typed decoding) must still never meet a document too deep. Garbage is not judged here; the parser that
    /// follows refuses it.
    public static func scan(_ bytes: some Collection<UInt8>, maximumDepth: Int = maximumDepth) -> Problem? {
        // Over contiguous bytes (an array, Data, a string's UTF-8) the loop runs on a buffer: called from another
        // module this function is not specialized, and a generic iterator's step for every byte cost more than the scan.
        if let found = bytes.withContiguousStorageIfAvailable({ scan(buffer: $0, maximumDepth: maximumDepth) }) { return found }
        return Array(bytes).withUnsafeBufferPointer { scan(buffer: $0, maximumDepth: maximumDepth) }
    }

    private static func scan(buffer bytes: UnsafeBufferPointer<UInt8>, maximumDepth: Int) -> Problem? {
        var inString = false, escaped = false
        var depth = 0
        var lastSignificant: UInt8 = 0
        var lastSignificantOffset = 0
        var trailingComma: Int?
        var offset = -1
        for byte in bytes {
            offset += 1
            if inString {
                if escaped { escaped = false } else if byte == UInt8(ascii: "\\") { escaped = true } else if byte == UInt8(ascii: "\"") { inString = false }
                continue
            }
            switch byte {
            case UInt8(ascii: " "), UInt8(ascii: "\n"), UInt8(ascii: "\r"), UInt8(ascii: "\t"): continue
            case UInt8(ascii: "\""): inString = true
            case UInt8(ascii: "["), UInt8(ascii: "{"):
                depth += 1
                if depth > maximumDepth { return .tooDeep(offset: offset) }
            case UInt8(ascii: "]"), UInt8(ascii: "}"):
                if lastSignificant == UInt8(ascii: ","), trailingComma == nil { trailingComma = lastSignificantOffset }
                depth -= 1
            default: break
            }
            lastSignificant = byte
            lastSignificantOffset = offset
        }
        return trailingComma.map { .trailingComma(offset: $0) }
    }

    /// The refusal every reader gives for a document nested too deeply.
    public static func tooDeepError(at offset: Int, in what: String) -> JSONFieldError {
        .invalidJSON("\(what) is nested more than \(maximumDepth) levels deep (arrays and objects) at byte \(offset); \(maximumDepth) is the limit")
    }
}

extension JSONCoding {
    /// Decodes `T` from JSON bytes with Foundation's decoder after the nesting check: every reader of JSON that
    /// came from outside the process (a service's answer, a relay envelope, a stored copy of either) goes
    /// through here, so no document reaches a recursive decode deeper than `JSONNesting.maximumDepth`.
    public static func decode<T: Decodable>(_ type: T.Type, from bytes: some Collection<UInt8>, what: String = "the document") throws -> T {
        if case .tooDeep(let offset) = JSONNesting.scan(bytes) { throw JSONNesting.tooDeepError(at: offset, in: what) }
        return try JSONDecoder().decode(T.self, from: Data(bytes))
    }

    /// The same for text (a column read back from the database, a provider's argument string).
    public static func decode<T: Decodable>(_ type: T.Type, from text: String, what: String = "the document") throws -> T {
        try decode(type, from: Array(text.utf8), what: what)
    }
}
