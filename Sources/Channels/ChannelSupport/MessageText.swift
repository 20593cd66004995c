import ChannelAPI
import Foundation

/// An output as chat services show it: the text parts joined with blank lines, cut into pieces a service takes.
public enum MessageText {
    /// The non-empty text parts, joined with blank lines (the original's body).
    public static func body(of output: Output) -> String { output.body }

    /// Splits `text` into pieces of at most `limit` units (`count` measures one piece: characters for Discord,
    /// UTF-16 units for Telegram), preferring to break at a blank line, then a line end, then a space past half
    /// the piece, else anywhere, as the original splits; each piece is trimmed of the line ends at its break.
    public static func split(_ text: String, limit: Int, count: (Substring) -> Int = { $0.count }) -> [String] {
        precondition(limit > 0)
        var pieces: [String] = []
        var rest = Substring(text)
        while !rest.isEmpty {
            if count(rest) <= limit {
                pieces.append(String(rest))
                break
            }
            // The longest prefix that fits, then the best break inside it.
            var end = rest.startIndex
            var used = 0
            while end < rest.endIndex {
                let next = rest.index(after: end)
                let width = count(rest[end..<next])
                if used + width > limit { break }
                used += width
                end = next
            }
            if end == rest.startIndex { end = rest.index(after: end) }  // one unit wider than the limit: cut it alone
            let window = rest[rest.startIndex..<end]
            let half = rest.index(rest.startIndex, offsetBy: max(1, window.count / 2))
            let cut: Substring.Index
            if let r = window.range(of: "\n\n", options: .backwards) { cut = r.lowerBound }
            else if let r = window.range(of: "\n", options: .backwards) { cut = r.lowerBound }
            else if let r = window.range(of: " ", options: .backwards), r.lowerBound >= half { cut = r.lowerBound }
            else { cut = end }
            let piece = rest[rest.startIndex..<(cut == rest.startIndex ? end : cut)]
            pieces.append(String(piece.trimmingCharacters(in: .newlines)))
            rest = rest[(cut == rest.startIndex ? end : cut)...]
            while let first = rest.first, first == "\n" || first == " " { rest = rest.dropFirst() }
        }
        return pieces.filter { !$0.isEmpty }
    }

    /// UTF-16 code units, as Telegram counts a message's length.
    public static func utf16Count(_ text: Substring) -> Int { text.utf16.count }
}
