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
        var reader = CanonicalJSONReader(text)
        var agentID: String?, agentName: String?, sessionID: String?, title: String?
        var parts: [String]?
        var metadata: [String: String]?
        // Each key once; a value that does not read ends the read.
        let read = reader.object { reader, key in
            switch key {
            case "agentID" where agentID == nil: agentID = reader.string(); return agentID != nil
            case "agentName" where agentName == nil: agentName = reader.string(); return agentName != nil
            case "sessionID" where sessionID == nil: sessionID = reader.string(); return sessionID != nil
            case "title" where title == nil: title = reader.string(); return title != nil
            case "parts" where parts == nil: parts = reader.stringArray(); return parts != nil
            case "metadata" where metadata == nil: metadata = reader.stringObject(); return metadata != nil
            default: return false
            }
        }
        guard read, reader.isAtEnd, let agentID, let agentName, let sessionID, let title, let parts, let metadata else { return nil }
        return Output(agentID: agentID, agentName: agentName, sessionID: sessionID, title: title, parts: parts, metadata: metadata)
    }
}
