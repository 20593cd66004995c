import ChannelAPI
import JSON

/// A send's output as the outbox stores it: Output's Codable shape, written directly (JSONEncoder was a tenth of the
/// CPU of writing a send) and read back directly (JSONDecoder was 6% of a webhook send's CPU, in the claim).
public enum StoredOutput {
    public static func text(_ output: Output) -> String {
        JSONValue.object([
            "agentID": .string(output.agentID), "agentName": .string(output.agentName), "sessionID": .string(output.sessionID),
            "title": .string(output.title), "parts": .array(output.parts.map(JSONValue.string)),
            "metadata": .object(output.metadata.mapValues(JSONValue.string)),
        ]).serialized()
    }

    /// The output a stored text holds: the shape `text(_:)` writes is read directly; any other JSON (a row written
    /// by an earlier version, through JSONEncoder) goes through the decoder. Nil when it holds no output.
    public static func output(from text: String) -> Output? {
        if let output = canonicalOutput(from: text) { return output }
        return try? JSONCoding.decode(Output.self, from: text)
    }

    /// The output when `text` is exactly in the shape `text(_:)` writes (`JSONValue.serialized()`: no whitespace,
    /// strings escaping only `"`, `\` and control characters); nil for anything else, which `output(from:)` then
    /// gives to the decoder.
    public static func canonicalOutput(from text: String) -> Output? {
        var text = text
        return text.withUTF8 { bytes in
            var reader = CanonicalOutputReader(bytes: bytes)
            return reader.output()
        }
    }
}

/// Reads the one JSON shape `StoredOutput.text` writes, byte by byte; any byte it does not expect ends the read
/// with nil. Every index is checked, so no input can read outside the buffer.
private struct CanonicalOutputReader {
    let bytes: UnsafeBufferPointer<UInt8>
    var at = 0

    init(bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

    mutating func output() -> Output? {
        guard take(UInt8(ascii: "{")) else { return nil }
        var agentID: String?, agentName: String?, sessionID: String?, title: String?
        var parts: [String]?
        var metadata: [String: String]?
        var first = true
        while !take(UInt8(ascii: "}")) {
            guard first || take(UInt8(ascii: ",")), let key = string(), take(UInt8(ascii: ":")) else { return nil }
            first = false
            // Each key once; a value that does not read ends the read here.
            switch key {
            case "agentID" where agentID == nil: agentID = string(); guard agentID != nil else { return nil }
            case "agentName" where agentName == nil: agentName = string(); guard agentName != nil else { return nil }
            case "sessionID" where sessionID == nil: sessionID = string(); guard sessionID != nil else { return nil }
            case "title" where title == nil: title = string(); guard title != nil else { return nil }
            case "parts" where parts == nil: parts = stringArray(); guard parts != nil else { return nil }
            case "metadata" where metadata == nil: metadata = stringObject(); guard metadata != nil else { return nil }
            default: return nil
            }
        }
        guard at == bytes.count, let agentID, let agentName, let sessionID, let title, let parts, let metadata else { return nil }
        return Output(agentID: agentID, agentName: agentName, sessionID: sessionID, title: title, parts: parts, metadata: metadata)
    }

    mutating func take(_ byte: UInt8) -> Bool {
        guard at < bytes.count, bytes[at] == byte else { return false }
        at += 1
        return true
    }

    mutating func stringArray() -> [String]? {
        guard take(UInt8(ascii: "[")) else { return nil }
        var items: [String] = []
        if take(UInt8(ascii: "]")) { return items }
        repeat {
            guard let item = string() else { return nil }
            items.append(item)
        } while take(UInt8(ascii: ","))
        return take(UInt8(ascii: "]")) ? items : nil
    }

    mutating func stringObject() -> [String: String]? {
        guard take(UInt8(ascii: "{")) else { return nil }
        var fields: [String: String] = [:]
        if take(UInt8(ascii: "}")) { return fields }
        repeat {
            guard let key = string(), take(UInt8(ascii: ":")), let value = string(), fields.updateValue(value, forKey: key) == nil else { return nil }
        } while take(UInt8(ascii: ","))
        return take(UInt8(ascii: "}")) ? fields : nil
    }

    /// A string as `JSONValue.writeString` writes it. The text came from a Swift string and is split only at ASCII
    /// bytes, so each run is whole UTF-8.
    mutating func string() -> String? {
        guard take(UInt8(ascii: "\"")) else { return nil }
        let start = at
        while at < bytes.count {
            let byte = bytes[at]
            if byte == UInt8(ascii: "\"") {
                defer { at += 1 }
                return String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<at]), as: UTF8.self)
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

    static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
