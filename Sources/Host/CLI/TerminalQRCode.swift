internal import CQRencode

/// A QR code drawn with Unicode half blocks, two modules per character row, with the quiet zone QR readers need.
enum TerminalQRCode {
    static func render(_ text: String) -> String? {
        guard let code = QRcode_encodeString(text, 0, QR_ECLEVEL_M, QR_MODE_8, 1) else { return nil }
        defer { QRcode_free(code) }
        let width = Int(code.pointee.width)
        let data = code.pointee.data!
        let quiet = 2
        func dark(_ x: Int, _ y: Int) -> Bool {
            guard x >= 0, y >= 0, x < width, y < width else { return false }
            return data[y * width + x] & 1 == 1
        }
        var lines: [String] = []
        var y = -quiet
        while y < width + quiet {
            var line = ""
            for x in -quiet..<(width + quiet) {
                // Light background, dark modules: works on dark and light terminals alike.
                switch (dark(x, y), dark(x, y + 1)) {
                case (false, false): line += "█"
                case (true, false): line += "▄"
                case (false, true): line += "▀"
                case (true, true): line += " "
                }
            }
            lines.append(line)
            y += 2
        }
        return lines.joined(separator: "\n")
    }
}
