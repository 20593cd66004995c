import Foundation

/// The parts of a received message (RFC 5322, MIME) an agent needs: who sent it, where a reply goes, its text.
/// Read leniently, as mail in the wild is written; bounded in depth and size.
struct InboundMail {
    var headers: [(name: String, value: String)]
    /// The first text/plain part that is not an attachment, decoded; nil when there is none.
    var text: String?

    init(_ raw: [UInt8]) {
        let (headers, body) = Self.split(raw[...])
        self.headers = headers
        text = Self.plainText(headers: headers, body: body, depth: 0)
    }

    func header(_ name: String) -> String? {
        headers.first { $0.name == name.lowercased() }?.value
    }

    /// From's mailbox (its address, and its display name decoded).
    var from: MailAddress? { header("from").flatMap(Self.firstMailbox) }
    var replyTo: MailAddress? { header("reply-to").flatMap(Self.firstMailbox) }

    /// RFC 3834: anything but `no` is a robot's message (a vacation reply, a bounce), never answered.
    var isAutoSubmitted: Bool {
        guard let value = header("auto-submitted")?.trimmingCharacters(in: .whitespaces).lowercased() else { return false }
        return !value.isEmpty && !value.hasPrefix("no")
    }

    // MARK: Structure

    /// The header block (unfolded, names lower-cased) and the body after the first empty line.
    static func split(_ raw: ArraySlice<UInt8>) -> ([(name: String, value: String)], ArraySlice<UInt8>) {
        var lines: [ArraySlice<UInt8>] = []
        var index = raw.startIndex, lineStart = raw.startIndex
        var bodyStart = raw.endIndex
        while index < raw.endIndex {
            if raw[index] == 0x0A {
                var end = index
                if end > lineStart, raw[end - 1] == 0x0D { end -= 1 }
                if end == lineStart { bodyStart = index + 1; break }
                lines.append(raw[lineStart..<end])
                lineStart = index + 1
            }
            index += 1
        }
        if index >= raw.endIndex, lineStart < raw.endIndex { lines.append(raw[lineStart...]) }
        var headers: [(name: String, value: String)] = []
        for line in lines {
            let text = String(decoding: line, as: UTF8.self)
            if let first = text.first, first == " " || first == "\t", !headers.isEmpty {
                headers[headers.count - 1].value += " " + text.trimmingCharacters(in: .whitespaces)
            } else if let colon = text.firstIndex(of: ":") {
                headers.append((String(text[..<colon]).trimmingCharacters(in: .whitespaces).lowercased(),
                                String(text[text.index(after: colon)...]).trimmingCharacters(in: .whitespaces)))
            }
        }
        return (headers, bodyStart <= raw.endIndex ? raw[bodyStart...] : raw[raw.endIndex...])
    }

    /// `type/subtype` lower-cased and the parameters (names lower-cased, values unquoted).
    static func contentType(_ value: String?) -> (type: String, parameters: [String: String]) {
        guard let value else { return ("text/plain", [:]) }
        let pieces = splitParameters(value)
        var parameters: [String: String] = [:]
        for piece in pieces.dropFirst() {
            guard let equals = piece.firstIndex(of: "=") else { continue }
            var parameterValue = piece[piece.index(after: equals)...].trimmingCharacters(in: .whitespaces)
            if parameterValue.hasPrefix("\""), parameterValue.hasSuffix("\""), parameterValue.count >= 2 {
                parameterValue = String(parameterValue.dropFirst().dropLast()).replacingOccurrences(of: "\\\"", with: "\"")
            }
            parameters[piece[..<equals].trimmingCharacters(in: .whitespaces).lowercased()] = parameterValue
        }
        let type = pieces.first?.trimmingCharacters(in: .whitespaces).lowercased() ?? ""
        return (type.isEmpty ? "text/plain" : type, parameters)
    }

    /// Splits at semicolons outside quotes.
    private static func splitParameters(_ value: String) -> [String] {
        var pieces: [String] = [], current = "", quoted = false
        for character in value {
            if character == "\"" { quoted.toggle() }
            if character == ";" && !quoted { pieces.append(current); current = ""; continue }
            current.append(character)
        }
        pieces.append(current)
        return pieces
    }

    static func plainText(headers: [(name: String, value: String)], body: ArraySlice<UInt8>, depth: Int) -> String? {
        func header(_ name: String) -> String? { headers.first { $0.name == name }?.value }
        let (type, parameters) = contentType(header("content-type"))
        if let disposition = header("content-disposition"), disposition.lowercased().hasPrefix("attachment") { return nil }
        if type.hasPrefix("multipart/") {
            guard depth < 8, let boundary = parameters["boundary"], !boundary.isEmpty else { return nil }
            for part in parts(of: body, boundary: boundary) {
                let (partHeaders, partBody) = split(part)
                if let text = plainText(headers: partHeaders, body: partBody, depth: depth + 1) { return text }
            }
            return nil
        }
        guard type == "text/plain" else { return nil }
        let encoding = header("content-transfer-encoding")?.trimmingCharacters(in: .whitespaces).lowercased()
        let bytes: [UInt8] = switch encoding {
        case "base64": decodeBase64(body)
        case "quoted-printable": decodeQuotedPrintable(body)
        default: Array(body)
        }
        return decode(bytes, charset: parameters["charset"])
    }

    /// The parts between `--boundary` lines, up to `--boundary--`.
    static func parts(of body: ArraySlice<UInt8>, boundary: String) -> [ArraySlice<UInt8>] {
        let delimiter = Array("--\(boundary)".utf8)
        var parts: [ArraySlice<UInt8>] = []
        var partStart: Int?
        var lineStart = body.startIndex
        while lineStart < body.endIndex {
            let newline = body[lineStart...].firstIndex(of: 0x0A) ?? body.endIndex
            var lineEnd = newline
            if lineEnd > lineStart, body[lineEnd - 1] == 0x0D { lineEnd -= 1 }
            let line = body[lineStart..<lineEnd]
            if line.starts(with: delimiter) {
                let rest = line.dropFirst(delimiter.count)
                let closing = rest.starts(with: Array("--".utf8))
                if closing || rest.allSatisfy({ $0 == 0x20 || $0 == 0x09 }) {
                    if let start = partStart {
                        // The line break before the delimiter belongs to the delimiter (RFC 2046 §5.1.1).
                        var end = lineStart
                        if end > start, body[end - 1] == 0x0A { end -= 1 }
                        if end > start, body[end - 1] == 0x0D { end -= 1 }
                        parts.append(body[start..<max(start, end)])
                    }
                    if closing { return parts }
                    partStart = newline < body.endIndex ? newline + 1 : body.endIndex
                }
            }
            lineStart = newline < body.endIndex ? newline + 1 : body.endIndex
        }
        if let start = partStart, start < body.endIndex { parts.append(body[start...]) }  // no closing delimiter: the rest
        return parts
    }

    static func decodeBase64(_ body: ArraySlice<UInt8>) -> [UInt8] {
        let clean = body.filter { !($0 == 0x0D || $0 == 0x0A || $0 == 0x20 || $0 == 0x09) }
        var text = String(decoding: clean, as: UTF8.self)
        if text.count % 4 != 0 { text += String(repeating: "=", count: 4 - text.count % 4) }
        return Data(base64Encoded: text, options: .ignoreUnknownCharacters).map(Array.init) ?? []
    }

    /// RFC 2045 §6.7: `=XX`, soft line breaks `=` at a line's end, trailing blanks dropped.
    static func decodeQuotedPrintable<S: Collection>(_ body: S, underscoreIsSpace: Bool = false) -> [UInt8] where S.Element == UInt8 {
        let bytes = Array(body)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var index = 0
        func hexValue(_ b: UInt8) -> UInt8? {
            switch b {
            case 0x30...0x39: b - 0x30
            case 0x41...0x46: b - 0x41 + 10
            case 0x61...0x66: b - 0x61 + 10
            default: nil
            }
        }
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "=") {
                var next = index + 1
                while next < bytes.count, bytes[next] == 0x20 || bytes[next] == 0x09 { next += 1 }
                if next < bytes.count, bytes[next] == 0x0D || bytes[next] == 0x0A {  // soft line break
                    index = next + (bytes[next] == 0x0D && next + 1 < bytes.count && bytes[next + 1] == 0x0A ? 2 : 1)
                    continue
                }
                if next >= bytes.count { break }
                if index + 2 < bytes.count, let high = hexValue(bytes[index + 1]), let low = hexValue(bytes[index + 2]) {
                    out.append(high << 4 | low)
                    index += 3
                    continue
                }
            } else if byte == UInt8(ascii: "_") && underscoreIsSpace {
                out.append(0x20)
                index += 1
                continue
            }
            out.append(byte)
            index += 1
        }
        return out
    }

    static func decode(_ bytes: [UInt8], charset: String?) -> String {
        let name = charset?.trimmingCharacters(in: .whitespaces).lowercased() ?? "us-ascii"
        let encoding: String.Encoding? = switch name {
        case "iso-8859-1", "latin1", "iso_8859-1", "l1": .isoLatin1
        case "windows-1252", "cp1252": .windowsCP1252
        case "utf-16": .utf16
        default: nil
        }
        if let encoding, let text = String(data: Data(bytes), encoding: encoding) { return text }
        return String(decoding: bytes, as: UTF8.self)  // UTF-8, US-ASCII, and the rest as best it goes
    }

    // MARK: Header values

    /// RFC 2047: `=?charset?B|Q?text?=` words decoded; blanks between two encoded words dropped.
    static func decodeWords(_ value: String) -> String {
        var out = ""
        var rest = Substring(value)
        var lastWasEncoded = false
        var pendingSpace = ""
        while !rest.isEmpty {
            if rest.hasPrefix("=?"), let word = encodedWord(rest) {
                if !lastWasEncoded { out += pendingSpace }
                pendingSpace = ""
                out += word.text
                rest = rest[word.end...]
                lastWasEncoded = true
                continue
            }
            let character = rest.removeFirst()
            if character == " " || character == "\t" {
                pendingSpace.append(character)
            } else {
                out += pendingSpace
                pendingSpace = ""
                out.append(character)
                lastWasEncoded = false
            }
        }
        return out + pendingSpace
    }

    private static func encodedWord(_ text: Substring) -> (text: String, end: Substring.Index)? {
        let body = text.dropFirst(2)
        guard let q1 = body.firstIndex(of: "?") else { return nil }
        let afterCharset = body[body.index(after: q1)...]
        guard let q2 = afterCharset.firstIndex(of: "?") else { return nil }
        let encoding = afterCharset[..<q2].uppercased()
        let payloadStart = afterCharset.index(after: q2)
        guard let close = afterCharset[payloadStart...].range(of: "?=") else { return nil }
        let charset = body[..<q1].split(separator: "*").first.map(String.init)  // RFC 2231 language tag dropped
        let payload = afterCharset[payloadStart..<close.lowerBound]
        let bytes: [UInt8]
        switch encoding {
        case "B": bytes = decodeBase64(ArraySlice(payload.utf8))
        case "Q": bytes = decodeQuotedPrintable(Array(payload.utf8), underscoreIsSpace: true)
        default: return nil
        }
        return (decode(bytes, charset: charset), close.upperBound)
    }

    /// The first mailbox of an address header: its addr-spec, and its display name unquoted and decoded.
    static func firstMailbox(_ value: String) -> MailAddress? {
        var quoted = false, escaped = false, angle = false
        var end = value.endIndex
        for index in value.indices {
            let character = value[index]
            if escaped { escaped = false; continue }
            if character == "\\" && quoted { escaped = true } else if character == "\"" { quoted.toggle() }
            else if character == "<" && !quoted { angle = true } else if character == ">" && !quoted { angle = false }
            else if character == "," && !quoted && !angle { end = index; break }
        }
        let mailbox = value[..<end].trimmingCharacters(in: .whitespaces)
        if let open = mailbox.lastIndex(of: "<"), let close = mailbox.lastIndex(of: ">"), open < close {
            let address = mailbox[mailbox.index(after: open)..<close].trimmingCharacters(in: .whitespaces)
            var name = mailbox[..<open].trimmingCharacters(in: .whitespaces)
            if name.hasPrefix("\""), name.hasSuffix("\""), name.count >= 2 {
                name = String(name.dropFirst().dropLast()).replacingOccurrences(of: "\\\"", with: "\"").replacingOccurrences(of: "\\\\", with: "\\")
            }
            name = decodeWords(name).trimmingCharacters(in: .whitespaces)
            guard address.contains("@") else { return nil }
            return MailAddress(name: name.isEmpty ? nil : name, address: address)
        }
        // `addr (Name)`, the old form.
        var address = mailbox, name: String?
        if let open = mailbox.firstIndex(of: "("), let close = mailbox.lastIndex(of: ")"), open < close {
            name = decodeWords(String(mailbox[mailbox.index(after: open)..<close]))
            address = mailbox[..<open].trimmingCharacters(in: .whitespaces)
        }
        guard address.contains("@"), !address.contains(" ") else { return nil }
        return MailAddress(name: name, address: address)
    }
}
