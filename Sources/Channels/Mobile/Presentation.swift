import Foundation

/// How a client shows one inbox line, in the original app's `presentation` shape: a headline, a short summary and
/// typed blocks read from the body's markdown. A table becomes a comparison (and a chart when a numeric column has
/// enough rows), a list of checkboxes, times or lone links becomes a checklist, timeline or link cards, and labelled
/// bold figures become metric tiles. It is decided here, deterministically and without a model, so every client shows
/// the same thing; whatever is not recognised stays markdown, so a client that knows only markdown loses nothing.
public struct Presentation: Sendable, Equatable, Encodable {
    public var headline: String?
    public var summary: String?
    public var blocks: [Block]

    /// Block kinds as an open set: a newer gateway may add one, and an older client shows it as markdown.
    public struct Kind: RawRepresentable, Sendable, Equatable, Encodable {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public static let markdown = Kind(rawValue: "markdown")
        public static let metrics = Kind(rawValue: "metrics")
        public static let comparison = Kind(rawValue: "comparison")
        public static let chart = Kind(rawValue: "chart")
        public static let timeline = Kind(rawValue: "timeline")
        public static let links = Kind(rawValue: "links")
        public static let checklist = Kind(rawValue: "checklist")
    }

    public struct Block: Sendable, Equatable, Encodable {
        public var kind: Kind
        public var title: String?
        public var text: String?
        public var items: [Item]?
        public var columns: [String]?
        public var rows: [[String]]?
        public var numeric: [String]?
        public var best: Best?
        public var chart: Chart?
    }

    public struct Item: Sendable, Equatable, Encodable {
        public var label: String?
        public var value: String?
        public var hint: String?
        public var at: String?
        public var title: String?
        public var detail: String?
        public var url: String?
        public var done: Bool?
    }

    /// The row a person would probably pick on the first numeric column: the lowest price or duration, else the highest.
    public struct Best: Sendable, Equatable, Encodable {
        public var column: String
        public var row: Int
    }

    public struct Chart: Sendable, Equatable, Encodable {
        public var type: String
        public var x: [String]
        public var series: [Series]
    }

    public struct Series: Sendable, Equatable, Encodable {
        public var name: String
        public var values: [Double]
    }

    /// Nil for a body with no text: there is nothing to present.
    public init?(markdown: String) {
        let lines = markdown.replacingOccurrences(of: "\r\n", with: "\n").split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        guard lines.contains(where: { !Self.trimmed($0).isEmpty }) else { return nil }
        var reader = BlockReader(lines: lines)
        let (headline, summary, headlineLine) = Self.headlineAndSummary(lines)
        self.headline = headline
        self.summary = summary
        reader.skippedLine = headlineLine
        var blocks = reader.blocks()
        // The summary is shown on its own; the prose does not open with it again.
        if let summary, let first = blocks.first, first.kind == .markdown, let text = first.text, text.hasPrefix(summary) {
            let rest = Self.trimmed(String(text.dropFirst(summary.count)))
            if rest.isEmpty { blocks.removeFirst() } else { blocks[0].text = rest }
        }
        if let metrics = Self.metrics(lines) { blocks.insert(metrics, at: 0) }
        if blocks.isEmpty { blocks = [Block(kind: .markdown, text: Self.trimmed(markdown))] }
        self.blocks = blocks
    }

    /// The first heading, else the first line's first sentence; the summary is the next one or two sentences of prose.
    /// Also returns the index of a heading line the headline came from, which the blocks then leave out.
    static func headlineAndSummary(_ lines: [String]) -> (String?, String?, Int?) {
        var headline: String?
        var headingLine: Int?
        var rest: ArraySlice<String> = []
        for (i, raw) in lines.enumerated() {
            let line = trimmed(raw)
            if line.isEmpty || line.hasPrefix("|") || line.hasPrefix("```") { continue }
            if let heading = heading(line) {
                headline = clip(heading, 110)
                headingLine = i
                rest = lines[(i + 1)...]
            } else {
                let plain = plainText(line)
                let (first, after) = firstSentence(plain)
                headline = clip(first, 110)
                rest = after.isEmpty ? lines[(i + 1)...] : [after] + lines[(i + 1)...]
                // A first line that is only the headline is left out of the blocks too.
                if after.isEmpty { headingLine = i }
            }
            break
        }
        var prose: [String] = []
        for raw in rest {
            let line = trimmed(raw)
            if line.isEmpty { if prose.isEmpty { continue } else { break } }
            if line.hasPrefix("|") || line.hasPrefix("#") || line.hasPrefix("```") || bulletItem(line) != nil { break }
            prose.append(plainText(line))
        }
        var summary = prose.joined(separator: " ")
        let (one, afterOne) = firstSentence(summary)
        if !afterOne.isEmpty {
            let (two, _) = firstSentence(afterOne)
            summary = one + " " + two
        }
        summary = clip(trimmed(summary), 220)
        return (headline, summary.isEmpty ? nil : summary, headingLine)
    }

    // MARK: Blocks

    /// Walks the lines once, turning tables and typed lists into blocks and gathering everything else as markdown.
    struct BlockReader {
        let lines: [String]
        var skippedLine: Int?
        private var out: [Block] = []
        private var prose: [String] = []
        /// The latest heading, the title of the next typed block.
        private var title: String?

        init(lines: [String]) { self.lines = lines }

        mutating func blocks() -> [Block] {
            var i = 0
            while i < lines.count {
                if i == skippedLine { i += 1; continue }
                let line = trimmed(lines[i])
                if let heading = heading(line) {
                    title = heading
                    prose.append(lines[i])
                    i += 1
                    continue
                }
                if isTableRow(line), i + 1 < lines.count, isTableSeparator(trimmed(lines[i + 1])) {
                    let columns = cells(line)
                    var rows: [[String]] = []
                    var j = i + 2
                    while j < lines.count, isTableRow(trimmed(lines[j])) {
                        var row = cells(trimmed(lines[j]))
                        row += Array(repeating: "", count: max(0, columns.count - row.count))
                        rows.append(Array(row.prefix(columns.count)))
                        j += 1
                    }
                    if rows.count >= 2 {
                        emitTyped(Presentation.comparison(title: title, columns: columns, rows: rows))
                        i = j
                        continue
                    }
                }
                if bulletItem(line) != nil {
                    var items: [String] = []
                    var j = i
                    while j < lines.count, let item = bulletItem(trimmed(lines[j])) { items.append(item); j += 1 }
                    if let block = Presentation.typedList(title: title, items: items) {
                        emitTyped([block])
                    } else {
                        prose.append(contentsOf: lines[i..<j])
                    }
                    i = j
                    continue
                }
                prose.append(lines[i])
                i += 1
            }
            flushProse()
            return out
        }

        /// A typed block takes the latest heading as its title, so that heading line leaves the prose before it.
        private mutating func emitTyped(_ blocks: [Block]) {
            if title != nil {
                while let last = prose.last, trimmed(last).isEmpty { prose.removeLast() }
                if let last = prose.last, heading(trimmed(last)) != nil { prose.removeLast() }
            }
            flushProse()
            out.append(contentsOf: blocks)
            title = nil
        }

        private mutating func flushProse() {
            let text = trimmed(prose.joined(separator: "\n"))
            prose.removeAll()
            if !text.isEmpty { out.append(Block(kind: .markdown, text: text)) }
        }
    }

    static func comparison(title: String?, columns: [String], rows: [[String]]) -> [Block] {
        var block = Block(kind: .comparison, title: title, columns: columns, rows: rows)
        let indexColumns = Set(columns.indices.filter { c in isIndexColumn(header: columns[c], values: rows.map { $0[c] }) })
        let numericColumns = columns.indices.filter { c in
            !indexColumns.contains(c) && rows.filter { number($0[c]) != nil }.count * 100 / rows.count >= 80
        }
        guard let first = numericColumns.first else { return [block] }
        block.numeric = numericColumns.map { columns[$0] }
        let lowerIsBetter = lowerIsBetterWords.contains { columns[first].lowercased().contains($0) }
        var best: (value: Double, row: Int)?
        for (r, row) in rows.enumerated() {
            guard let value = number(row[first]) else { continue }
            if best == nil || (lowerIsBetter ? value < best!.value : value > best!.value) { best = (value, r) }
        }
        if let best { block.best = Best(column: columns[first], row: best.row) }
        guard rows.count >= 3 else { return [block] }
        let xColumn = columns.indices.first { !numericColumns.contains($0) && !indexColumns.contains($0) }
        let x = rows.enumerated().map { r, row in xColumn.map { clip(plainText(row[$0]), 24) } ?? String(r + 1) }
        let series = numericColumns.prefix(2).map { c in Series(name: columns[c], values: rows.map { number($0[c]) ?? 0 }) }
        let type = xColumn.map { looksLikeDate(trimmed(rows[0][$0])) } == true ? "line" : "bar"
        return [block, Block(kind: .chart, title: title, chart: Chart(type: type, x: x, series: Array(series)))]
    }

    static func typedList(title: String?, items: [String]) -> Block? {
        guard items.count >= 2 else { return nil }
        let checks = items.compactMap(checkbox)
        if checks.count == items.count {
            return Block(kind: .checklist, title: title, items: checks.map { Item(label: plainText($0.label), done: $0.done) })
        }
        let links = items.compactMap(loneLink)
        if links.count == items.count {
            return Block(kind: .links, title: title, items: links.map { Item(title: $0.title, url: $0.url) })
        }
        let times = items.compactMap { timeLed(plainText($0)) }
        if times.count == items.count {
            return Block(kind: .timeline, title: title, items: times.map { Item(at: $0.at, title: $0.rest) })
        }
        return nil
    }

    /// Labelled bold figures ("Fare: **$839** nonstop", "**12%** — churn"), at most four, leading the blocks.
    static func metrics(_ lines: [String]) -> Block? {
        var items: [Item] = []
        // Nearly every reply has no bold text at all.
        guard lines.contains(where: { $0.contains("**") }) else { return nil }
        var seen: Set<String> = []
        for raw in lines {
            let line = trimmed(raw)
            if line.hasPrefix("|") || line.hasPrefix("#") { continue }
            var rest = Substring(line)
            while let open = rest.range(of: "**"), let close = rest[open.upperBound...].range(of: "**") {
                let value = trimmed(String(rest[open.upperBound..<close.lowerBound]))
                let before = clauseTail(plainText(String(line[line.startIndex..<open.lowerBound])))
                let after = clauseHead(plainText(String(rest[close.upperBound...])))
                rest = rest[close.upperBound...]
                guard value.count <= 20, !seen.contains(value), isFigure(value), let (label, hint) = metricLabel(before: before, after: after, value: value) else { continue }
                seen.insert(value)
                items.append(Item(label: clip(label, 32), value: value, hint: hint.isEmpty ? nil : clip(hint, 40)))
                if items.count == 4 { return Block(kind: .metrics, items: items) }
            }
        }
        return items.isEmpty ? nil : Block(kind: .metrics, items: items)
    }

    /// A figure needs a label: the words before a colon ("Fare: **$839**"), a dash on either side, or a unit next to words.
    static func metricLabel(before: String, after: String, value: String) -> (String, String)? {
        let dashes: Set<Character> = ["—", "–", "-"]
        let edge = joiners.union([";", "(", ")"])
        if let colon = before.lastIndex(of: ":") {
            let between = trimmed(String(before[before.index(after: colon)...]))
            if words(between).count <= 3 {
                let label = trimmed(lastWords(String(before[..<colon]), 4), also: edge)
                if !label.isEmpty { return (label, between) }
            }
        }
        if let last = before.last(where: { !$0.isWhitespace }), dashes.contains(last) {
            let label = trimmed(lastWords(before, 4), also: edge)
            if !label.isEmpty { return (label, "") }
        }
        if let first = after.first, dashes.contains(first) {
            let label = trimmed(firstWords(after, 4), also: edge)
            if !label.isEmpty { return (label, "") }
        }
        if hasUnit(value) {
            let label = trimmed(words(before).count > 1 ? lastWords(before, 3) : firstWords(after, 3), also: edge)
            if !label.isEmpty { return (label, "") }
        }
        return nil
    }

    // MARK: Reading markdown

    static let lowerIsBetterWords = ["price", "cost", "fare", "total", "duration", "time", "stops", "delay", "latency", "wait", "distance", "risk"]

    /// Whitespace, newlines and `extra` off both ends (without Foundation's character sets: this runs for every line).
    static func trimmed(_ text: String, also extra: Set<Character> = []) -> String {
        guard let first = text.firstIndex(where: { !$0.isWhitespace && !extra.contains($0) }) else { return "" }
        let last = text.lastIndex(where: { !$0.isWhitespace && !extra.contains($0) })!
        if first == text.startIndex, text.index(after: last) == text.endIndex { return text }
        return String(text[first...last])
    }

    /// What joins a time, a label or a figure to its text: "07:30 — Standup", "Fare: …".
    static let joiners: Set<Character> = [":", "—", "–", "-", ","]

    static func heading(_ line: String) -> String? {
        let hashes = line.prefix { $0 == "#" }.count
        guard (1...6).contains(hashes), line.dropFirst(hashes).first?.isWhitespace == true else { return nil }
        let text = trimmed(String(line.dropFirst(hashes)))
        return text.isEmpty ? nil : text
    }

    /// "- item", "* item", "+ item", "1. item" or "1) item": the item's text.
    static func bulletItem(_ line: String) -> String? {
        if let first = line.first, "-*+".contains(first), line.dropFirst().first == " " { return trimmed(String(line.dropFirst(2))) }
        let digits = line.prefix(while: \.isNumber)
        guard !digits.isEmpty, digits.count <= 3 else { return nil }
        let rest = line.dropFirst(digits.count)
        guard let mark = rest.first, mark == "." || mark == ")", rest.dropFirst().first == " " else { return nil }
        return trimmed(String(rest.dropFirst(2)))
    }

    static func checkbox(_ item: String) -> (label: String, done: Bool)? {
        guard item.count >= 3, item.first == "[", Array(item)[2] == "]" else { return nil }
        let mark = Array(item)[1]
        guard mark == " " || mark == "x" || mark == "X" else { return nil }
        return (trimmed(String(item.dropFirst(3))), mark != " ")
    }

    /// An item that is nothing but one `[title](https://…)` link.
    static func loneLink(_ item: String) -> (title: String, url: String)? {
        guard item.first == "[", let close = item.firstIndex(of: "]") else { return nil }
        let after = item[item.index(after: close)...]
        guard after.first == "(", after.last == ")" else { return nil }
        let url = String(after.dropFirst().dropLast())
        guard url.hasPrefix("http://") || url.hasPrefix("https://"), !url.contains(where: \.isWhitespace) else { return nil }
        return (String(item[item.index(after: item.startIndex)..<close]), url)
    }

    static let weekdays = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
    static let months = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]

    /// "07:30 Standup", "9am — gym", "2026-12-03: review", "Mon 7 …", "Dec 3 …": the time and what happens.
    static func timeLed(_ item: String) -> (at: String, rest: String)? {
        let tokens = item.split(separator: " ", omittingEmptySubsequences: true).map(String.init)
        guard let first = tokens.first else { return nil }
        var taken = 0
        let lead = trimmed(first, also: joiners)
        if isClockTime(lead) || isISODate(lead) {
            taken = 1
            if tokens.count > 1, ["am", "pm"].contains(trimmed(tokens[1].lowercased(), also: joiners)) { taken = 2 }
        } else if weekdays.contains(where: { lead.lowercased().hasPrefix($0) }) || months.contains(where: { lead.lowercased().hasPrefix($0) }) {
            guard tokens.count > 1, let day = Int(trimmed(tokens[1], also: joiners.union(["."]))), (1...31).contains(day) else { return nil }
            taken = 2
        } else {
            return nil
        }
        let at = trimmed(tokens.prefix(taken).joined(separator: " "), also: joiners)
        let rest = trimmed(tokens.dropFirst(taken).joined(separator: " "), also: [":", "—", "–", "-"])
        return (at, rest)
    }

    static func isClockTime(_ text: String) -> Bool {
        let lower = text.lowercased()
        let core = lower.hasSuffix("am") || lower.hasSuffix("pm") ? String(lower.dropLast(2)) : lower
        let parts = core.split(separator: ":", omittingEmptySubsequences: false)
        if parts.count == 2, let h = Int(parts[0]), let m = Int(parts[1]), parts[1].count == 2 { return (0...23).contains(h) && (0...59).contains(m) }
        if parts.count == 1, core.count != lower.count, let h = Int(core) { return (1...12).contains(h) }
        return false
    }

    static func isISODate(_ text: String) -> Bool {
        let parts = text.split(separator: "-", omittingEmptySubsequences: false)
        return parts.count == 3 && parts[0].count == 4 && parts[1].count == 2 && parts[2].count == 2 && parts.allSatisfy { Int($0) != nil }
    }

    static func looksLikeDate(_ text: String) -> Bool {
        let lower = text.lowercased()
        if isISODate(String(lower.prefix(10))) { return true }
        if weekdays.contains(where: { lower.hasPrefix($0) }) || months.contains(where: { lower.hasPrefix($0) }) { return true }
        if lower.count == 2, lower.first == "q", let n = Int(String(lower.last!)), (1...4).contains(n) { return true }
        let slashed = lower.split(whereSeparator: { $0 == "/" || $0 == "-" })
        return slashed.count >= 2 && slashed.prefix(2).allSatisfy { $0.count <= 2 && Int($0) != nil }
    }

    static func isTableRow(_ line: String) -> Bool { line.hasPrefix("|") && line.dropFirst().contains("|") }

    static func isTableSeparator(_ line: String) -> Bool {
        isTableRow(line) && line.contains("-") && line.allSatisfy { "|-: ".contains($0) }
    }

    static func cells(_ line: String) -> [String] {
        var inner = Substring(line)
        if inner.first == "|" { inner = inner.dropFirst() }
        if inner.last == "|" { inner = inner.dropLast() }
        return inner.split(separator: "|", omittingEmptySubsequences: false).map { trimmed(String($0)) }
    }

    /// "$1,299", "~12%", "71°F", "3.5k", "−4": the number, or nil for anything else.
    static func number(_ cell: String) -> Double? {
        var text = plainText(cell).replacingOccurrences(of: ",", with: "").replacingOccurrences(of: "−", with: "-")
        text = trimmed(text, also: ["~", "≈", "$", "€", "£"])
        var scale = 1.0
        if let last = text.last {
            switch last {
            case "%": text.removeLast()
            case "k", "K": text.removeLast(); scale = 1_000
            case "m", "M": text.removeLast(); scale = 1_000_000
            case "b", "B": text.removeLast(); scale = 1_000_000_000
            default: break
            }
        }
        for suffix in ["°C", "°F", "°"] where text.hasSuffix(suffix) { text.removeLast(suffix.count) }
        text = trimmed(text).replacingOccurrences(of: "$", with: "")
        guard !text.isEmpty, text.allSatisfy({ $0.isNumber || $0 == "." || $0 == "-" || $0 == "+" }), let value = Double(text) else { return nil }
        return value * scale
    }

    /// A column of 1, 2, 3, … or headed "#", "no", "rank": a row number, never data to chart.
    static func isIndexColumn(header: String, values: [String]) -> Bool {
        if ["#", "no", "no.", "rank", "idx", "index"].contains(header.lowercased()) { return true }
        return values.count >= 2 && values.enumerated().allSatisfy { Int(trimmed($0.element)) == $0.offset + 1 }
    }

    /// Number-led and short: "$839", "3 of 3", "12%", "71°/58°", "1.2 GB".
    static func isFigure(_ value: String) -> Bool {
        let body = value.drop { "~≈+-$€£".contains($0) }
        return body.first?.isNumber == true
    }

    static func hasUnit(_ value: String) -> Bool {
        value.contains { "%$€£°".contains($0) } || value.contains(" of ") || value.last.map { "kKmMbB".contains($0) } == true
    }

    /// Markdown emphasis, code marks and link targets removed.
    static func plainText(_ text: String) -> String {
        guard text.contains(where: { $0 == "[" || $0 == "*" || $0 == "_" || $0 == "`" }) else { return trimmed(text) }
        var out = ""
        var rest = Substring(text)
        while let open = rest.firstIndex(of: "[") {
            out += rest[..<open]
            let after = rest[open...]
            if let close = after.firstIndex(of: "]"), after[after.index(after: close)...].first == "(",
               let end = after[close...].firstIndex(of: ")") {
                out += after[after.index(after: after.startIndex)..<close]
                rest = after[after.index(after: end)...]
            } else {
                out += "["
                rest = after.dropFirst()
            }
        }
        out += rest
        // Only text that has marks pays for removing them.
        guard out.contains(where: { $0 == "*" || $0 == "_" || $0 == "`" }) else { return trimmed(out) }
        return trimmed(out.replacingOccurrences(of: "**", with: "").replacingOccurrences(of: "__", with: "").replacingOccurrences(of: "`", with: ""))
    }

    /// The first sentence (ending in . ! or ? after at least 25 characters) and the rest.
    static func firstSentence(_ text: String) -> (String, String) {
        var index = text.startIndex
        var count = 0
        while index < text.endIndex {
            let character = text[index]
            let next = text.index(after: index)
            if ".!?".contains(character), count >= 24, next == text.endIndex || text[next].isWhitespace {
                return (String(text[...index]), trimmed(String(text[next...])))
            }
            count += 1
            index = next
        }
        return (text, "")
    }

    static func clauseTail(_ text: String) -> String {
        var cut = text.startIndex
        for separator in [". ", "; ", "! ", "? ", " | "] {
            if let range = text.range(of: separator, options: .backwards), range.upperBound > cut { cut = range.upperBound }
        }
        return trimmed(String(text[cut...]))
    }

    static func clauseHead(_ text: String) -> String {
        var cut = text.endIndex
        for separator in [". ", "; ", "! ", "? ", " | "] {
            if let range = text.range(of: separator), range.lowerBound < cut { cut = range.lowerBound }
        }
        var head = trimmed(String(text[..<cut]))
        if head.hasSuffix(".") { head.removeLast() }
        return head
    }

    static func words(_ text: String) -> [Substring] { text.split(whereSeparator: \.isWhitespace) }
    static func lastWords(_ text: String, _ n: Int) -> String { words(text).suffix(n).joined(separator: " ") }
    static func firstWords(_ text: String, _ n: Int) -> String { words(text).prefix(n).joined(separator: " ") }

    static func clip(_ text: String, _ limit: Int) -> String {
        text.count <= limit ? text : trimmed(String(text.prefix(limit - 1))) + "…"
    }
}
