internal import CQRencode
import Foundation

/// A QR code's modules, encoded by libqrencode (error correction M, 8-bit mode), with the drawings the gateway
/// shows: half blocks for a terminal, SVG for the console. One encoder, so the CLI and the console show the same code.
public struct QRCode: Sendable, Equatable {
    /// Modules per side (without the quiet zone).
    public let width: Int
    /// Row-major, true where the module is dark.
    public let modules: [Bool]

    /// Nil when the text does not fit a QR code (over about 2.3 KB at level M).
    public init?(_ text: String) {
        guard let code = QRcode_encodeString(text, 0, QR_ECLEVEL_M, QR_MODE_8, 1) else { return nil }
        defer { QRcode_free(code) }
        let width = Int(code.pointee.width)
        guard let data = code.pointee.data else { return nil }
        self.width = width
        modules = (0..<(width * width)).map { data[$0] & 1 == 1 }
    }

    /// Dark at (x, y); outside the code (the quiet zone) is light.
    public func isDark(_ x: Int, _ y: Int) -> Bool {
        guard x >= 0, y >= 0, x < width, y < width else { return false }
        return modules[y * width + x]
    }

    /// Unicode half blocks, two module rows per line, light background: works on dark and light terminals alike.
    public func terminalText(quietZone: Int = 2) -> String {
        var lines: [String] = []
        var y = -quietZone
        while y < width + quietZone {
            var line = ""
            for x in -quietZone..<(width + quietZone) {
                switch (isDark(x, y), isDark(x, y + 1)) {
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

    /// A standalone SVG: one path of unit squares on a white square with the 4-module quiet zone the standard asks
    /// for, black on white whatever the page's theme (readers need the contrast), scaled by the page.
    public func svg(quietZone: Int = 4, title: String = "Pairing QR code") -> String {
        let side = width + 2 * quietZone
        let title = title.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: "\"", with: "&quot;")
        var path = ""
        for y in 0..<width {
            var x = 0
            while x < width {
                guard isDark(x, y) else { x += 1; continue }
                // One horizontal run per path segment keeps the SVG small.
                var run = 1
                while isDark(x + run, y) { run += 1 }
                path += "M\(x + quietZone) \(y + quietZone)h\(run)v1h-\(run)z"
                x += run
            }
        }
        return """
            <svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 \(side) \(side)" shape-rendering="crispEdges" role="img" \
            aria-label="\(title)"><title>\(title)</title><rect width="\(side)" height="\(side)" fill="#fff"/><path fill="#000" d="\(path)"/></svg>
            """
    }
}
