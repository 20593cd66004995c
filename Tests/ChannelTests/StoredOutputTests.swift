import ChannelAPI
import ChannelDelivery
import Foundation
import JSON
import Testing

/// A channel send's output as the outbox keeps it: read back directly when it is in the shape the outbox writes,
/// through the decoder otherwise, and always the output that was written.
@Suite("Stored outputs")
struct StoredOutputTests {
    /// Characters every escape path of the writer meets: quotes, backslashes, each control character, a slash
    /// (which JSONEncoder escapes and our writer does not), multi-byte UTF-8 and characters outside the BMP.
    static let alphabet: [String] = ["a", "Z", " ", "\"", "\\", "/", "\n", "\r", "\t", "\u{0}", "\u{1}", "\u{1F}", "\u{7F}", "é", "\u{2028}", "€", "😀",
                                     "👩‍👩‍👧", "{", "}", "[", "]", ":", ",", "\\u0041", "null"]

    static func text(_ random: inout SystemRandomNumberGenerator, maximum: Int) -> String {
        (0..<Int.random(in: 0...maximum, using: &random)).map { _ in alphabet.randomElement(using: &random)! }.joined()
    }

    static func output(_ random: inout SystemRandomNumberGenerator) -> Output {
        var metadata: [String: String] = [:]
        for _ in 0..<Int.random(in: 0...3, using: &random) { metadata[text(&random, maximum: 6)] = text(&random, maximum: 12) }
        return Output(agentID: text(&random, maximum: 8), agentName: text(&random, maximum: 8), sessionID: text(&random, maximum: 8),
                      title: text(&random, maximum: 10), parts: (0..<Int.random(in: 0...3, using: &random)).map { _ in text(&random, maximum: 40) },
                      metadata: metadata)
    }

    @Test("what the outbox writes is read back directly as the same output, and as the decoder reads it")
    func roundTrip() throws {
        var random = SystemRandomNumberGenerator()
        for _ in 0..<2_000 {
            let output = Self.output(&random)
            let text = StoredOutput.text(output)
            #expect(StoredOutput.canonicalOutput(from: text) == output, "\(text)")
            #expect(StoredOutput.output(from: text) == output)
            #expect(try JSONCoding.decode(Output.self, from: text) == output)
        }
        let awkward = "quote \" backslash \\ slash / tab \t newline \n nul \u{0} bell \u{7} é 日本 🙂 \u{2028}"
        for output in [Output(agentID: "", agentName: "", sessionID: "", title: "", parts: [], metadata: [:]),
                       Output(agentID: awkward, agentName: awkward, sessionID: awkward, title: awkward, parts: [awkward, "", "two"],
                              metadata: ["trigger": awkward, awkward: "x", "": ""])] {
            let text = StoredOutput.text(output)
            #expect(StoredOutput.canonicalOutput(from: text) == output)
            #expect(try JSONDecoder().decode(Output.self, from: Data(text.utf8)) == output)
        }
    }

    @Test("a row written through JSONEncoder (slashes escaped, other key order, whitespace) is read by the decoder")
    func earlierRows() throws {
        let output = Output(agentID: "a/b", agentName: "N", sessionID: "s", title: "t", parts: ["x/y", "é 😀"], metadata: ["k/": "v"])
        for formatting in [JSONEncoder.OutputFormatting(), .prettyPrinted, .sortedKeys] {
            let encoder = JSONEncoder()
            encoder.outputFormatting = formatting
            let text = String(decoding: try encoder.encode(output), as: UTF8.self)
            #expect(StoredOutput.output(from: text) == output, "\(text)")
        }
        // Escapes the writer never emits are the decoder's: \/ and \u of a printable character.
        let escaped = #"{"agentID":"a\/b","agentName":"\u0041","metadata":{},"parts":[],"sessionID":"s","title":"t"}"#
        #expect(StoredOutput.canonicalOutput(from: escaped) == nil)
        #expect(StoredOutput.output(from: escaped) == Output(agentID: "a/b", agentName: "A", sessionID: "s", title: "t", parts: [], metadata: [:]))
    }

    @Test("cut short at every byte, with a key twice, a key unknown, or a value of another type: never an output read wrongly")
    func malformed() {
        let output = Output(agentID: "agent", agentName: "Agent \"A\"", sessionID: "s-1", title: "Tab\there", parts: ["one\nline", "two\u{1}"],
                            metadata: ["trigger": "cron"])
        let bytes = Array(StoredOutput.text(output).utf8)
        for length in 0..<bytes.count {
            let cut = String(decoding: bytes[..<length], as: UTF8.self)
            #expect(StoredOutput.canonicalOutput(from: cut) == nil, "\(cut)")
            #expect(StoredOutput.output(from: cut) == nil, "\(cut)")
        }
        let base = #""agentName":"N","metadata":{},"parts":["p"],"sessionID":"s","title":"t""#
        for text in [#"{"agentID":"a","agentID":"b","# + base + "}", #"{"agentID":"a","extra":"x","# + base + "}", #"{"agentID":1,"# + base + "}",
                     #"{"agentID":"a","# + base + "} ", #"{"agentID":"a\q","# + base + "}", #"{"agentID":"a\u00"# + "}",
                     #"{"agentID":"a","agentName":"N","metadata":{"k":"v","k":"w"},"parts":["p"],"sessionID":"s","title":"t"}"#,
                     #"{"agentID":"a","agentName":"N","metadata":{},"parts":["p",],"sessionID":"s","title":"t"}"#,
                     "{\"agentID\":\"a\u{1}\"," + base + "}", String(repeating: "[", count: 100_000), ""] {
            #expect(StoredOutput.canonicalOutput(from: text) == nil, "\(text.prefix(80))")
        }
        // The decoder still reads an unknown key and ignores it, as it always has.
        #expect(StoredOutput.output(from: #"{"agentID":"a","extra":"x","# + base + "}")?.agentID == "a")
        #expect(StoredOutput.output(from: String(repeating: "[", count: 100_000)) == nil)
    }
}
