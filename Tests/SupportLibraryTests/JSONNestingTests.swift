import APIKit
import Foundation
import Testing
import YAML

/// Every reader of JSON and YAML refuses nesting beyond a documented depth before anything recursive touches the
/// document, and every recursive walk over the deepest accepted document fits a stack smaller than any thread the
/// gateway runs it on (the storage threads' 1 MB; libmicrohttpd's and the cooperative pool's are larger).
@Suite("Deep nesting")
struct JSONNestingTests {
    static func objects(_ depth: Int) -> [UInt8] { Array((String(repeating: #"{"a":"#, count: depth) + "1" + String(repeating: "}", count: depth)).utf8) }
    static func arrays(_ depth: Int) -> [UInt8] { Array((String(repeating: "[", count: depth) + String(repeating: "]", count: depth)).utf8) }

    @Test("a request body nested 65 to 10,000 levels deep is refused as invalid_json naming the limit; 64 levels parse")
    func requestBodies() throws {
        for depth in [65, 338, 340, 1_000, 10_000] {
            for body in [Self.objects(depth), Self.arrays(depth), Array(repeating: UInt8(ascii: "["), count: depth)] {
                #expect(throws: JSONFieldError.self) { try JSONValue.parse(body) }
                do { _ = try JSONValue.parse(body) } catch {
                    #expect(error.kind == .invalidJSON)
                    #expect(error.message.contains("more than 64 levels"), "\(error.message)")
                }
            }
        }
        let deepest = try JSONValue.parse(Self.objects(64))
        #expect(deepest["a"]?["a"] != nil)
        _ = try JSONValue.parse(Self.arrays(64))
    }

    @Test("brackets inside strings do not count, and the trailing-comma refusal still holds")
    func scanReadsStringsAsStrings() throws {
        let text = #"{"a":"\#(String(repeating: "[{", count: 5_000))\"\\"}"#
        #expect(try JSONValue.parse(Array(text.utf8))["a"]?.stringValue?.hasPrefix("[{[{") == true)
        #expect(JSONNesting.scan(Array(#"[1,]"#.utf8)) == .trailingComma(offset: 2))
        #expect(JSONNesting.scan(Self.arrays(65)) == .tooDeep(offset: 64))
        #expect(throws: JSONFieldError.self) { try JSONValue.parse(Array(#"{"a":[1,2,],"b":1}"#.utf8)) }
    }

    @Test("the scan answers alike over an array, Data, a slice, a string's UTF-8 and bytes that are not contiguous")
    func scanOverEveryCollection() {
        let documents: [([UInt8], JSONNesting.Problem?)] = [
            (Self.arrays(65), .tooDeep(offset: 64)), (Self.objects(64), nil), (Array(#"{"a":[1,],"b":"]"}"#.utf8), .trailingComma(offset: 7)),
        ]
        for (bytes, expected) in documents {
            let text = String(decoding: bytes, as: UTF8.self)
            #expect(JSONNesting.scan(bytes) == expected)
            #expect(JSONNesting.scan(Data(bytes)) == expected)
            #expect(JSONNesting.scan((Array("  ".utf8) + bytes)[2...]) == expected)
            #expect(JSONNesting.scan(text.utf8) == expected)
            #expect(JSONNesting.scan(bytes.lazy.map { $0 }) == expected, "a collection without contiguous storage")
        }
    }

    @Test("typed decoding of a service's answer, a relay envelope or a stored column refuses the same depth")
    func typedDecoding() throws {
        struct Answer: Decodable { let error: JSONValue? }
        let deep = Array(#"{"error":"#.utf8) + Self.objects(10_000) + Array("}".utf8)
        #expect(throws: JSONFieldError.self) { _ = try JSONCoding.decode(Answer.self, from: deep) }
        #expect(throws: JSONFieldError.self) { _ = try JSONCoding.decode(JSONValue.self, from: String(decoding: Self.arrays(10_000), as: UTF8.self)) }
        #expect(try JSONCoding.decode(Answer.self, from: Array(#"{"error":{"message":"no"}}"#.utf8)).error?["message"] == "no")
        // Foundation accepts a trailing comma; one before the deep part must not hide the depth from the check.
        let commaFirst = Array(#"{"x":[1,],"error":"#.utf8) + Self.objects(400) + Array("}".utf8)
        #expect(throws: JSONFieldError.self) { _ = try JSONCoding.decode(Answer.self, from: commaFirst) }
        #expect(JSONNesting.scan(commaFirst) == .tooDeep(offset: 18 + 5 * 63), "the 65th level, past the comma")
    }

    @Test("SOUL.yaml nested 65 to 10,000 levels is refused at its position; aliases that expand past a million nodes are refused")
    func yaml() throws {
        for depth in [65, 10_000] {
            let flow = "agents: " + String(repeating: "[", count: depth) + "1" + String(repeating: "]", count: depth) + "\n"
            #expect(throws: YAMLSyntaxError.self) { _ = try YAMLParser.parse(flow) }
            do { _ = try YAMLParser.parse(flow) } catch {
                #expect(error.message.contains("more than 64 levels"), "\(error.message)")
                // The root mapping is the first level: the 64th bracket opens the 65th.
                #expect(error.mark.line == 1 && error.mark.column == 9 + 63, "\(error.mark)")
            }
        }
        let block = "a:\n" + (1...80).map { String(repeating: "  ", count: $0) + "k\($0):\n" }.joined() + String(repeating: "  ", count: 81) + "v\n"
        #expect(throws: YAMLSyntaxError.self) { _ = try YAMLParser.parse(block) }
        let ok = "a: " + String(repeating: "[", count: 63) + "1" + String(repeating: "]", count: 63)
        #expect(try YAMLParser.parse(ok) != nil)

        var laughs = "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
        for (name, previous) in zip(["b", "c", "d", "e", "f", "g"], ["a", "b", "c", "d", "e", "f"]) {
            laughs += "\(name): &\(name) [" + Array(repeating: "*\(previous)", count: 10).joined(separator: ", ") + "]\n"
        }
        #expect(throws: YAMLSyntaxError.self) { _ = try YAMLParser.parse(laughs) }
        do { _ = try YAMLParser.parse(laughs) } catch { #expect(error.message.contains("aliases expand")) }
        // A few ordinary aliases are no problem.
        #expect(try YAMLParser.parse("a: &a [1, 2]\nb: [*a, *a]\n") != nil)
    }

    @Test("every walk over the deepest accepted document fits half the stack of the threads that run it")
    func walksFitTheStack() async throws {
        let finished = await onThread(stackBytes: 512 << 10) {
            guard let value = try? JSONValue.parse(Self.objects(JSONNesting.maximumDepth)) else { return false }
            let text = value.serialized()                                            // the direct writer
            let again = try? JSONValue.parse(Array(text.utf8))
            let encoded = try? JSONCoding.encoder.encode(value)                      // the one encoder
            let decoded = try? JSONValueDecoder().decode(JSONValue.self, from: value) // the request decoder
            let yaml = try? YAMLParser.parse(String(decoding: Self.objects(63), as: UTF8.self))
            return again == value && encoded != nil && decoded == value && yaml != nil && yaml == yaml.map { $0 }
        }
        #expect(finished)
    }

    /// Runs `body` on a thread of its own with the given stack, as the storage threads are made.
    func onThread(stackBytes: Int, _ body: @escaping @Sendable () -> Bool) async -> Bool {
        await withCheckedContinuation { continuation in
            let thread = Thread { continuation.resume(returning: body()) }
            thread.stackSize = stackBytes
            thread.start()
        }
    }
}
