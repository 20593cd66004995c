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
