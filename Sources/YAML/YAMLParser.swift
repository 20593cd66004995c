internal import CYAML

/// A syntax error libyaml reported, with its position.
public struct YAMLSyntaxError: Error, Sendable, CustomStringConvertible {
    public let message: String
    public let mark: Mark
    public var description: String { "\(mark): \(message)" }
}

/// Parses YAML text with libyaml's event API into `YAMLNode` trees.
public enum YAMLParser {
    /// The deepest nesting of mappings and sequences accepted. Every reader of the tree (equality, conversion to
    /// JSON, the loader's walks) recurses once per level, so depth is refused here, where the builder is a loop.
    public static let maximumDepth = 64
    /// How many nodes a document may stand for once its aliases are expanded: `&a [*b, *b, …]` nested a few
    /// times is billions of nodes to any walk that expands them (the "billion laughs").
    public static let maximumExpandedNodes = 1_000_000

    /// Parses the first document (an empty file yields nil). Aliases are expanded; duplicate keys are an error.
    public static func parse(_ text: String) throws(YAMLSyntaxError) -> YAMLNode? {
        var parser = yaml_parser_t()
        guard yaml_parser_initialize(&parser) == 1 else {
            throw YAMLSyntaxError(message: "libyaml could not start", mark: Mark(line: 1, column: 1))
        }
        defer { yaml_parser_delete(&parser) }
        let bytes = Array(text.utf8)
        return try bytes.withUnsafeBufferPointer { buffer throws(YAMLSyntaxError) -> YAMLNode? in
            yaml_parser_set_input_string(&parser, buffer.baseAddress, buffer.count)
            var builder = TreeBuilder()
            while true {
                var event = yaml_event_t()
                guard yaml_parser_parse(&parser, &event) == 1 else {
                    let problem = parser.problem.map { String(cString: $0) } ?? "invalid YAML"
                    let context = parser.context.map { String(cString: $0) + ": " } ?? ""
                    throw YAMLSyntaxError(message: context + problem, mark: Mark(line: Int(parser.problem_mark.line) + 1, column: Int(parser.problem_mark.column) + 1))
                }
                defer { yaml_event_delete(&event) }
                if try builder.consume(&event) { break }
            }
            return builder.document
        }
    }
}

private struct TreeBuilder {
    /// A mapping or sequence being read, mutated in place on the stack (appending is amortised O(1), and a
    /// mapping's keys are a set: a flat document of a million nodes is read in linear time).
    struct Open {
        let mark: Mark
        let anchor: String?
        let isMapping: Bool
        var items: [YAMLNode] = []
        var pairs: [(key: YAMLNode, value: YAMLNode)] = []
        var pendingKey: YAMLNode?
        var keys: Set<String> = []
        /// How many nodes it stands for with aliases expanded, itself included.
        var size = 1
        /// Its levels of mappings and sequences, itself included, aliases' trees counted at their full depth.
        var height = 1
    }
    var stack: [Open] = []
    var anchors: [String: (node: YAMLNode, size: Int, height: Int)] = [:]
    var expandedNodes = 0
    var document: YAMLNode?
    var documentsSeen = 0

    static func mark(_ m: yaml_mark_t) -> Mark { Mark(line: Int(m.line) + 1, column: Int(m.column) + 1) }
    static func string(_ p: UnsafeMutablePointer<yaml_char_t>?) -> String? {
        p.map { String(cString: UnsafeRawPointer($0).assumingMemoryBound(to: CChar.self)) }
    }

    /// Returns true when the stream (or the first document) has ended.
    mutating func consume(_ event: inout yaml_event_t) throws(YAMLSyntaxError) -> Bool {
        let mark = Self.mark(event.start_mark)
        switch event.type {
        case YAML_STREAM_END_EVENT:
            return true
        case YAML_DOCUMENT_START_EVENT:
            documentsSeen += 1
            if documentsSeen > 1 {
                throw YAMLSyntaxError(message: "only one YAML document is allowed in this file", mark: mark)
            }
        case YAML_SCALAR_EVENT:
            let s = event.data.scalar
            let style = s.style
            let quoted = style == YAML_SINGLE_QUOTED_SCALAR_STYLE || style == YAML_DOUBLE_QUOTED_SCALAR_STYLE
                || style == YAML_LITERAL_SCALAR_STYLE || style == YAML_FOLDED_SCALAR_STYLE
            let value = s.value.map { String(decoding: UnsafeBufferPointer(start: $0, count: s.length), as: UTF8.self) } ?? ""
            let node = YAMLNode.scalar(.init(value: value, isQuoted: quoted, tag: Self.string(s.tag), mark: mark))
            if let anchor = Self.string(s.anchor) { anchors[anchor] = (node, 1, 0) }
            try add(node, size: 1, height: 0, expanding: 1, at: mark)
        case YAML_ALIAS_EVENT:
            let name = Self.string(event.data.alias.anchor) ?? ""
            guard let anchored = anchors[name] else {
                throw YAMLSyntaxError(message: "unknown alias *\(name)", mark: mark)
            }
            try add(anchored.node, size: anchored.size, height: anchored.height, expanding: anchored.size, at: mark)
        case YAML_SEQUENCE_START_EVENT, YAML_MAPPING_START_EVENT:
            guard stack.count < YAMLParser.maximumDepth else { throw Self.tooDeep(at: mark) }
            if event.type == YAML_SEQUENCE_START_EVENT {
                stack.append(Open(mark: mark, anchor: Self.string(event.data.sequence_start.anchor), isMapping: false))
            } else {
                stack.append(Open(mark: mark, anchor: Self.string(event.data.mapping_start.anchor), isMapping: true))
            }
        case YAML_SEQUENCE_END_EVENT, YAML_MAPPING_END_EVENT:
            guard let open = stack.popLast() else { break }
            let node: YAMLNode = open.isMapping ? .mapping(open.pairs, open.mark) : .sequence(open.items, open.mark)
            if let anchor = open.anchor { anchors[anchor] = (node, open.size, open.height) }
            try add(node, size: open.size, height: open.height, expanding: 1, at: mark)
        default:
            break
        }
        return false
    }

    static func tooDeep(at mark: Mark) -> YAMLSyntaxError {
        YAMLSyntaxError(message: "nested more than \(YAMLParser.maximumDepth) levels deep (mappings and sequences, aliases counted where they are used); \(YAMLParser.maximumDepth) is the limit", mark: mark)
    }

    /// `size` is how many nodes `node` stands for with its aliases expanded (its parent grows by that much);
    /// `expanding` is how many of them are new to the document: 1 for a node read here, all of them for an alias.
    /// `height` is its levels of collections: an alias puts its whole tree where it is used, so the depth limit
    /// counts it there (every reader of the tree recurses once per level).
    mutating func add(_ node: YAMLNode, size: Int, height: Int, expanding: Int, at mark: Mark) throws(YAMLSyntaxError) {
        expandedNodes += expanding
        guard expandedNodes <= YAMLParser.maximumExpandedNodes else {
            throw YAMLSyntaxError(message: "the document's aliases expand to more than \(YAMLParser.maximumExpandedNodes) nodes", mark: mark)
        }
        guard stack.count + height <= YAMLParser.maximumDepth else { throw Self.tooDeep(at: mark) }
        guard !stack.isEmpty else {
            document = node
            return
        }
        let top = stack.count - 1
        stack[top].size += size
        stack[top].height = max(stack[top].height, height + 1)
        guard stack[top].isMapping else {
            stack[top].items.append(node)
            return
        }
        if let key = stack[top].pendingKey {
            stack[top].pairs.append((key: key, value: node))
            stack[top].pendingKey = nil
        } else {
            if let text = node.scalarValue, !stack[top].keys.insert(text).inserted {
                throw YAMLSyntaxError(message: "duplicate key '\(text)'", mark: node.mark)
            }
            stack[top].pendingKey = node
        }
    }
}
