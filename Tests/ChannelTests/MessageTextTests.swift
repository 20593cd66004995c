import ChannelAPI
import ChannelSupport
import Testing

/// Splitting a long reply for services with a message limit, as the original splits it.
@Suite("Message text")
struct MessageTextTests {
    @Test("a short text is one piece; a long one breaks at a blank line, then a line end, then a late space, else anywhere")
    func splitting() {
        #expect(MessageText.split("hello", limit: 10) == ["hello"])
        #expect(MessageText.split("aaaa\n\nbbbb\ncccc", limit: 12) == ["aaaa", "bbbb\ncccc"])
        #expect(MessageText.split("aaaa\nbbbb cccc", limit: 11) == ["aaaa", "bbbb cccc"])
        #expect(MessageText.split("aaaaaaa bb", limit: 8) == ["aaaaaaa", "bb"])
        // A space in the first half is not a good break: the piece is cut at the limit.
        #expect(MessageText.split("a bbbbbbbbbbbb", limit: 8) == ["a bbbbbb", "bbbbbb"])
        #expect(MessageText.split(String(repeating: "x", count: 25), limit: 10) == [String(repeating: "x", count: 10), String(repeating: "x", count: 10), "xxxxx"])
    }

    @Test("every piece fits, nothing but break whitespace is lost, at every size", arguments: [1, 2, 7, 100, 4096])
    func piecesFit(limit: Int) {
        let text = (0..<400).map { "line \($0) " + String(repeating: "é", count: $0 % 13) + ($0 % 5 == 0 ? "\n\n" : "\n") }.joined()
        let pieces = MessageText.split(text, limit: limit)
        #expect(pieces.allSatisfy { $0.count <= limit && !$0.isEmpty })
        let squeeze = { (s: String) in s.filter { !$0.isWhitespace } }
        #expect(squeeze(pieces.joined()) == squeeze(text))
    }

    @Test("Telegram's UTF-16 count: an emoji outside the basic plane is two units")
    func utf16() {
        let pieces = MessageText.split(String(repeating: "😀", count: 5), limit: 4, count: MessageText.utf16Count)
        #expect(pieces == ["😀😀", "😀😀", "😀"])
    }
}
