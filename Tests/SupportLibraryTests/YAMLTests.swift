import GatewayTestSupport
import Testing
import YAML

@Suite("YAML wrapper")
struct YAMLTests {
    @Test("nodes keep 1-based line and column marks")
    func marks() throws {
        let root = try #require(try YAMLParser.parse("a:\n  b: [1, two]\n  c: 'quoted'\n"))
        let entries = try #require(root.mappingEntries)
        #expect(entries[0].key == "a")
        #expect(entries[0].keyMark == Mark(line: 1, column: 1))
        let inner = try #require(entries[0].value.mappingEntries)
        #expect(inner[0].keyMark == Mark(line: 2, column: 3))
        guard case .sequence(let items, let mark) = inner[0].value else { Issue.record("expected a list"); return }
        #expect(mark == Mark(line: 2, column: 6))
        #expect(items.map(\.scalarValue) == ["1", "two"])
        #expect(items[1].mark == Mark(line: 2, column: 10))
        guard case .scalar(let quoted) = inner[1].value else { Issue.record("expected a scalar"); return }
        #expect(quoted.isQuoted && quoted.value == "quoted")
    }

    @Test("aliases expand, nulls are recognised, duplicate keys and second documents are errors")
    func semantics() throws {
        let root = try #require(try YAMLParser.parse("base: &b {x: 1}\ncopy: *b\nnothing: ~\n"))
        let entries = try #require(root.mappingEntries)
        #expect(entries[1].value.mappingEntries?.first?.value.scalarValue == "1")
        #expect(entries[2].value.isNull)
        #expect(throws: YAMLSyntaxError.self) { try YAMLParser.parse("a: 1\na: 2\n") }
        #expect(throws: YAMLSyntaxError.self) { try YAMLParser.parse("a: 1\n---\nb: 2\n") }
        #expect(try YAMLParser.parse("") == nil)
    }

    static func items(_ node: YAMLNode?) -> [YAMLNode]? {
        if case .sequence(let items, _)? = node { return items }
        return nil
    }

    /// `name: &name` wrapping `inner` (an alias, or a scalar) in `levels` flow sequences.
    static func nested(_ name: String, _ inner: String, levels: Int) -> String {
        "\(name): &\(name) " + String(repeating: "[", count: levels) + inner + String(repeating: "]", count: levels) + "\n"
    }

    @Test("an alias counts at its full depth where it is used: chains past 64 levels are refused, up to 64 are read")
    func aliasDepth() throws {
        // Each anchor wraps the one before in 10 more levels: the file is at most 11 deep as written.
        func chain(_ links: Int) -> String {
            var text = Self.nested("a0", "1", levels: 10)
            for n in 1..<links { text += Self.nested("a\(n)", "*a\(n - 1)", levels: 10) }
            return text
        }
        // 6 links: 60 levels under the root mapping, 61 in all.
        let read = try #require(try YAMLParser.parse(chain(6)))
        var node = try #require(read.mappingEntries?.last?.value)
        var depth = 1
        while let inner = Self.items(node)?.first { node = inner; depth += 1 }
        #expect(depth == 61 && node.scalarValue == "1")
        do {
            _ = try YAMLParser.parse(chain(7))
            Issue.record("71 levels through aliases were read")
        } catch {
            #expect(error.message.contains("64 levels") && error.mark.line == 7, "\(error)")
        }
        // 180 links of 60 levels (about 11,000 levels once expanded, far under the node limit): refused, not walked.
        var long = Self.nested("b0", "1", levels: 60)
        for n in 1..<180 { long += Self.nested("b\(n)", "*b\(n - 1)", levels: 60) }
        #expect(throws: YAMLSyntaxError.self) { try YAMLParser.parse(long) }
        // A whole anchored mapping used at the top level keeps its own depth.
        let mapping = try #require(try YAMLParser.parse("base: &b {x: {y: [1]}}\ncopy: *b\n"))
        #expect((mapping.mappingEntries?[1].value.mappingEntries?.first?.value.mappingEntries?.first?.value).flatMap { Self.items($0)?.first?.scalarValue } == "1")
    }

    @Test("a flat list or mapping of a hundred thousand nodes is read whole, and a duplicate key at its end is still found")
    func wideDocuments() async throws {
        // Parsed on a thread of its own: seconds of work under AddressSanitizer must not hold one of the few threads
        // every other test's async work runs on. (Built by copying, as it once was, these took hours.)
        let outcome = await onOwnThread { () -> String? in
            let count = 100_000
            guard let list = try? YAMLParser.parse("[" + (0..<count).map(String.init).joined(separator: ",") + "]"),
                  Self.items(list)?.count == count, Self.items(list)?.last?.scalarValue == String(count - 1) else { return "the list did not come back whole" }
            var keys = (0..<50_000).map { "k\($0): \($0)" }
            guard let mapping = try? YAMLParser.parse(keys.joined(separator: "\n")), mapping.mappingEntries?.count == 50_000,
                  mapping.mappingEntries?.last?.value.scalarValue == "49999" else { return "the mapping did not come back whole" }
            keys.append("k5: again")
            do {
                _ = try YAMLParser.parse(keys.joined(separator: "\n"))
                return "a duplicate key was read"
            } catch let error as YAMLSyntaxError {
                return error.message == "duplicate key 'k5'" && error.mark.line == 50_001 ? nil : "\(error)"
            } catch {
                return "\(error)"
            }
        }
        #expect(outcome == nil, "\(outcome ?? "")")
    }

    @Test("syntax errors carry libyaml's message and position")
    func syntaxError() {
        do {
            _ = try YAMLParser.parse("a: [1, 2\nb: 3\n")
            Issue.record("expected an error")
        } catch {
            #expect(error.mark.line >= 2)
            #expect(!error.message.isEmpty)
        }
    }
}
