/// Where a delivery goes: every paired phone, one person's phones, or one installation.
public enum Destination: Sendable, Hashable, CustomStringConvertible {
    case all
    case user(String)
    case device(String)

    public init(parsing text: String) throws(DestinationError) {
        if text == "all" {
            self = .all
            return
        }
        guard let colon = text.firstIndex(of: ":") else {
            throw DestinationError.unknownForm(text)
        }
        let kind = text[..<colon]
        let value = String(text[text.index(after: colon)...])
        guard !value.isEmpty else { throw DestinationError.emptyValue(String(kind)) }
        guard value.allSatisfy({ !$0.isWhitespace && !$0.isNewline }) else { throw DestinationError.whitespace(text) }
        switch kind {
        case "user": self = .user(value)
        case "device": self = .device(value)
        default: throw DestinationError.unknownForm(text)
        }
    }

    public var description: String {
        switch self {
        case .all: return "all"
        case .user(let subject): return "user:\(subject)"
        case .device(let id): return "device:\(id)"
        }
    }
}

public enum DestinationError: Error, Sendable, Equatable, CustomStringConvertible {
    case unknownForm(String)
    case emptyValue(String)
    case whitespace(String)
    /// Another channel's own refusal, in its words (a webhook's URL, a sidecar's address).
    case invalid(String)

    public var description: String {
        switch self {
        case .unknownForm(let text): return "destination '\(text)' is not one of all, user:<subject>, device:<installation-id>"
        case .emptyValue(let kind): return "destination '\(kind):' needs a value after the colon"
        case .whitespace(let text): return "destination '\(text)' must not contain whitespace"
        case .invalid(let message): return message
        }
    }
}
