/// A position in the source text, 1-based as editors show it.
public struct Mark: Sendable, Equatable, CustomStringConvertible {
    public let line: Int
    public let column: Int
    public init(line: Int, column: Int) {
        self.line = line
        self.column = column
    }
    public var description: String { "\(line):\(column)" }
}

/// A parsed YAML document as a value tree; every node keeps where it started.
public indirect enum YAMLNode: Sendable, Equatable {
    case scalar(Scalar)
    case mapping([(key: YAMLNode, value: YAMLNode)], Mark)
    case sequence([YAMLNode], Mark)

    public struct Scalar: Sendable, Equatable {
        public let value: String
        /// True for 'single' / "double" quoted, literal and folded scalars: they are always strings.
        public let isQuoted: Bool
        public let tag: String?
        public let mark: Mark
    }

    public static func == (lhs: YAMLNode, rhs: YAMLNode) -> Bool {
        switch (lhs, rhs) {
        case let (.scalar(a), .scalar(b)): return a == b
        case let (.sequence(a, ma), .sequence(b, mb)): return a == b && ma == mb
        case let (.mapping(a, ma), .mapping(b, mb)):
            return ma == mb && a.count == b.count && zip(a, b).allSatisfy { $0.key == $1.key && $0.value == $1.value }
        default: return false
        }
    }

    public var mark: Mark {
        switch self {
        case .scalar(let s): return s.mark
        case .mapping(_, let m), .sequence(_, let m): return m
        }
    }

    /// The scalar's text, or nil for a mapping or sequence.
    public var scalarValue: String? {
        if case .scalar(let s) = self { return s.value }
        return nil
    }

    /// A plain scalar that YAML 1.1/1.2 core schema reads as null (`~`, `null`, empty).
    public var isNull: Bool {
        guard case .scalar(let s) = self, !s.isQuoted else { return false }
        return s.tag == "tag:yaml.org,2002:null" || ["", "~", "null", "Null", "NULL"].contains(s.value)
    }

    /// Entries of a mapping keyed by their scalar text, in document order.
    public var mappingEntries: [(key: String, keyMark: Mark, value: YAMLNode)]? {
        guard case .mapping(let pairs, _) = self else { return nil }
        return pairs.map { (key: $0.key.scalarValue ?? "", keyMark: $0.key.mark, value: $0.value) }
    }

    public var kindName: String {
        switch self {
        case .scalar: return "a scalar"
        case .mapping: return "a mapping"
        case .sequence: return "a list"
        }
    }
}
