import Foundation

/// One message as it goes over SMTP's DATA (RFC 5322 with MIME, RFC 2045–2047): CRLF line ends, every line at
/// most 998 octets, header values that cannot break out of their header, a quoted-printable UTF-8 body.
/// libcurl dot-stuffs lines that start with "." itself (RFC 5321 §4.5.2), so the text here is not stuffed.
struct OutgoingMail {
    var from: MailAddress
    var to: [MailAddress]
    var subject: String
    var body: String
    /// `<id@soulacy>`: the same for every attempt of one send, so a receiver can tell a retry from a new message.
    var messageID: String
    var date: Date

    /// `<send.id@soulacy>`, the id reduced to the characters a msg-id allows.
    static func messageID(for sendID: String) -> String {
        let allowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$%&'*+-/=?^_`{|}~.".unicodeScalars)
        var left = String(String.UnicodeScalarView(sendID.unicodeScalars.map { allowed.contains($0) ? $0 : "-" }))
        while left.hasPrefix(".") { left.removeFirst() }
        while left.hasSuffix(".") { left.removeLast() }
        left = left.replacingOccurrences(of: "..", with: ".-.")
        return "<\(left.isEmpty ? "send" : left)@soulacy>"
    }

    var bytes: [UInt8] {
        var lines: [String] = []
        lines.append("From: " + Self.mailbox(from))
        lines.append(Self.fold("To: ", to.map(Self.mailbox)))
        lines.append("Subject: " + Self.headerText(Self.singleLine(subject), used: 9))
        lines.append("Date: " + Self.rfc5322Date(date))
        lines.append("Message-ID: " + messageID)
        lines.append("MIME-Version: 1.0")
        lines.append("Content-Type: text/plain; charset=UTF-8")
        lines.append("Content-Transfer-Encoding: quoted-printable")
        // RFC 3834: vacation responders do not answer it, so two robots cannot mail each other for ever.
        lines.append("Auto-Submitted: auto-generated")
        return Array((lines.joined(separator: "\r\n") + "\r\n\r\n" + Self.quotedPrintable(body)).utf8)
    }

    /// CR, LF and other control characters become spaces: nothing in a value can start another header.
    static func singleLine(_ text: String) -> String {
        let scalars = text.unicodeScalars.map { $0.value < 0x20 || $0.value == 0x7F ? " " : $0 }
        return String(String.UnicodeScalarView(scalars)).trimmingCharacters(in: .whitespaces)
    }

    static func mailbox(_ address: MailAddress) -> String {
        guard let name = address.name.map(singleLine), !name.isEmpty else { return address.address }
        return "\(displayName(name)) <\(address.address)>"
    }

    /// A phrase: as it is when it is plain atoms, quoted when it has specials, encoded words when it is not ASCII.
    static func displayName(_ name: String) -> String {
        guard name.unicodeScalars.allSatisfy({ $0.isASCII }), !name.contains("=?") else { return encodedWords(name).joined(separator: " ") }
        let specials = Set("()<>[]:;@\\,.\"".unicodeScalars)
        guard name.unicodeScalars.contains(where: { specials.contains($0) }) else { return name }
        return "\"" + name.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"") + "\""
    }

    /// Unstructured text (a subject): as it is when it is short ASCII, else RFC 2047 encoded words, folded.
    static func headerText(_ text: String, used: Int) -> String {
        if text.unicodeScalars.allSatisfy({ $0.isASCII }), !text.contains("=?"), used + text.utf8.count <= 78 { return text }
        return encodedWords(text).joined(separator: "\r\n ")
    }

    /// `=?UTF-8?B?…?=` words of at most 75 characters each, never splitting a character.
    static func encodedWords(_ text: String) -> [String] {
        var words: [String] = []
        var chunk: [UInt8] = []
        func flush() {
            guard !chunk.isEmpty else { return }
            words.append("=?UTF-8?B?" + Data(chunk).base64EncodedString() + "?=")
            chunk = []
        }
        for character in text {
            let bytes = Array(String(character).utf8)
            if chunk.count + bytes.count > 45 { flush() }  // 45 bytes: 60 base64 characters, 72 with the markers
            chunk += bytes
        }
        flush()
        return words.isEmpty ? ["=?UTF-8?B??="] : words
    }

    /// `To: a, b,` folded after commas so no line passes 78 characters when it can be helped.
    static func fold(_ name: String, _ items: [String]) -> String {
        var out = name, lineLength = name.count
        for (index, item) in items.enumerated() {
            let piece = item + (index < items.count - 1 ? "," : "")
            if index > 0 {
                if lineLength + 1 + piece.utf8.count > 78 { out += "\r\n "; lineLength = 1 } else { out += " "; lineLength += 1 }
            }
            out += piece
            lineLength += piece.utf8.count
        }
        return out
    }

    /// `Thu, 03 Dec 2026 16:52:14 +0000` (RFC 5322 §3.3), in UTC.
    static func rfc5322Date(_ date: Date) -> String {
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        gmtime_r(&seconds, &parts)
        let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        func two(_ n: Int32) -> String { n < 10 ? "0\(n)" : "\(n)" }
        return "\(days[Int(parts.tm_wday)]), \(two(parts.tm_mday)) \(months[Int(parts.tm_mon)]) \(parts.tm_year + 1900) "
            + "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)) +0000"
    }

    /// RFC 2045 §6.7: lines of at most 76 characters (soft breaks "="), trailing blanks encoded, CRLF line ends.
    static func quotedPrintable(_ text: String) -> String {
        let normalized = text.replacingOccurrences(of: "\r\n", with: "\n").replacingOccurrences(of: "\r", with: "\n")
        let hex = Array("0123456789ABCDEF".utf8)
        var out: [String] = []
        for line in normalized.split(separator: "\n", omittingEmptySubsequences: false) {
            let bytes = Array(line.utf8)
            var encoded: [[UInt8]] = []  // one token per input byte
            for (index, byte) in bytes.enumerated() {
                let last = index == bytes.count - 1
                let literal = (byte >= 33 && byte <= 126 && byte != UInt8(ascii: "=")) || ((byte == 0x20 || byte == 0x09) && !last)
                encoded.append(literal ? [byte] : [UInt8(ascii: "="), hex[Int(byte >> 4)], hex[Int(byte & 15)]])
            }
            var current: [UInt8] = []
            for token in encoded {
                if current.count + token.count > 75 {
                    out.append(String(decoding: current + [UInt8(ascii: "=")], as: UTF8.self))
                    current = []
                }
                current += token
            }
            out.append(String(decoding: current, as: UTF8.self))
        }
        return out.joined(separator: "\r\n") + "\r\n"
    }
}
