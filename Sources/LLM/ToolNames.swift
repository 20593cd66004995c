/// The tool names a provider accepts, as its documentation states them: ASCII letters, digits and the listed
/// punctuation, at most `maximumLength` characters.
public struct ToolNamePattern: Sendable, Equatable {
    public var punctuation: Set<Character>
    public var maximumLength: Int

    public init(punctuation: Set<Character>, maximumLength: Int) {
        self.punctuation = punctuation
        self.maximumLength = maximumLength
    }

    /// OpenAI chat completions: `function.name` "must be a-z, A-Z, 0-9, or contain underscores and dashes, with a
    /// maximum length of 64" (`^[a-zA-Z0-9_-]{1,64}$`). Servers that copy its API (vLLM, llama.cpp, …) get the same.
    public static let openAI = ToolNamePattern(punctuation: ["_", "-"], maximumLength: 64)
    /// Anthropic Messages: a tool's `name` "must match the regex `^[a-zA-Z0-9_-]{1,64}$`".
    public static let anthropic = ToolNamePattern(punctuation: ["_", "-"], maximumLength: 64)

    public func accepts(_ name: String) -> Bool {
        !name.isEmpty && name.count <= maximumLength && name.allSatisfy(allows)
    }

    func allows(_ character: Character) -> Bool {
        guard character.isASCII else { return false }
        return character.isLetter || character.isNumber || punctuation.contains(character)
    }
}

/// Tool names as one provider gets them, and back. A name the provider accepts goes unchanged; any other becomes
/// its allowed characters (the rest as `_`, cut to fit) plus `_` and 8 hex digits of a hash of the whole name.
///
/// The wire name depends on the name alone, so it is the same in every request of a conversation (tools, earlier
/// tool calls, tool results, `tool_choice`), whichever tools a request happens to carry; two names that clean up
/// to the same text keep distinct hashes.
public struct ToolNameMap: Sendable {
    public let pattern: ToolNamePattern?
    private var wireNames: [String: String] = [:]
    private var originals: [String: String] = [:]

    /// `pattern` nil: the provider documents no rule, and every name goes as it is (Ollama).
    public init(pattern: ToolNamePattern?, names: some Sequence<String>) {
        self.pattern = pattern
        for name in Set(names).sorted() {
            var wire = Self.wireName(name, pattern: pattern)
            // A name the provider accepts as it is may already be another's wire name: salt until free (never seen
            // in practice; the loop keeps the mapping one-to-one whatever the names).
            var salt = 1
            while let taken = originals[wire], taken != name {
                wire = Self.wireName(name, pattern: pattern, salt: salt)
                salt += 1
            }
            wireNames[name] = wire
            originals[wire] = name
        }
    }

    /// The names a request carries: its tools, its assistant turns' tool calls, its tool results, a named `tool_choice`.
    public init(pattern: ToolNamePattern?, request: ChatRequest) {
        var names = request.tools.map(\.name)
        for message in request.messages {
            names += message.toolCalls.map(\.name)
            if let name = message.toolName { names.append(name) }
        }
        if let choice = request.toolChoice, !["auto", "none", "required", ""].contains(choice) { names.append(choice) }
        self.init(pattern: pattern, names: names)
    }

    /// The name to send; a name the map was not built with is mapped by the same rule.
    public func wire(_ name: String) -> String { wireNames[name] ?? Self.wireName(name, pattern: pattern) }

    /// The gateway's name for what the model called; a name no tool of the request has comes back as it is.
    public func original(_ wireName: String) -> String { originals[wireName] ?? wireName }

    static func wireName(_ name: String, pattern: ToolNamePattern?, salt: Int = 0) -> String {
        guard let pattern else { return name }
        if salt == 0, pattern.accepts(name) { return name }
        let suffix = "_" + hash(salt == 0 ? name : "\(name)#\(salt)")
        let cleaned = String(name.map { pattern.allows($0) ? $0 : "_" }.prefix(pattern.maximumLength - suffix.count))
        return cleaned + suffix
    }

    /// FNV-1a over the UTF-8 bytes, as 8 hex digits: the same in every process (Swift's `Hasher` is seeded per run).
    static func hash(_ text: String) -> String {
        var value: UInt32 = 2_166_136_261
        for byte in text.utf8 {
            value ^= UInt32(byte)
            value = value &* 16_777_619
        }
        let hex = String(value, radix: 16)
        return String(repeating: "0", count: 8 - hex.count) + hex
    }
}
