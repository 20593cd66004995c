import Crypto

/// One file of the console as the gateway serves it: its bytes (embedded in the binary), its type and its ETag.
public struct ConsoleAsset: Sendable {
    public let name: String
    public let contentType: String
    public let bytes: [UInt8]
    /// A strong validator of the bytes: the browser revalidates with If-None-Match and gets a 304.
    public let etag: String

    init(_ name: String, _ contentType: String, _ bytes: [UInt8]) {
        self.name = name
        self.contentType = contentType
        self.bytes = bytes
        etag = "\"" + Hex.encode(Array(SHA256.hash(bytes).prefix(16))) + "\""
    }
}

/// Assets another part brings into Assets/ (the Web Push service worker and its page module). SwiftPM generates a
/// member of `PackageResources` for every file there; until a file exists, this default stands in for it, so the
/// build passes either way and the route serves the file once it is there.
protocol OptionalConsoleResources {
    static var sw_js: [UInt8] { get }
    static var webpush_js: [UInt8] { get }
}

extension OptionalConsoleResources {
    static var sw_js: [UInt8] { [] }
    static var webpush_js: [UInt8] { [] }
}

extension PackageResources: OptionalConsoleResources {}

/// The console's files by the name they are served under (`/console/<name>`). SwiftPM flattens Assets/ into
/// `PackageResources.<name with dots as underscores>`, so every file name in the folder is unique.
public enum ConsoleAssets {
    static let javaScript = "text/javascript; charset=utf-8"

    /// The page itself, served at `/`.
    public static let index = ConsoleAsset("index.html", "text/html; charset=utf-8", PackageResources.index_html)

    /// The service worker, served at `/sw.js` so its scope is the whole origin; nil until sw.js is in Assets/.
    public static let serviceWorker: ConsoleAsset? = PackageResources.sw_js.isEmpty ? nil : ConsoleAsset("sw.js", javaScript, PackageResources.sw_js)

    public static let byName: [String: ConsoleAsset] = {
        var assets = [
            ConsoleAsset("console.css", "text/css; charset=utf-8", PackageResources.console_css),
            ConsoleAsset("icon.svg", "image/svg+xml", PackageResources.icon_svg),
            ConsoleAsset("app.js", javaScript, PackageResources.app_js),
            ConsoleAsset("api.js", javaScript, PackageResources.api_js),
            ConsoleAsset("dom.js", javaScript, PackageResources.dom_js),
            ConsoleAsset("signin.js", javaScript, PackageResources.signin_js),
            ConsoleAsset("inbox.js", javaScript, PackageResources.inbox_js),
            ConsoleAsset("devices.js", javaScript, PackageResources.devices_js),
            ConsoleAsset("approvals.js", javaScript, PackageResources.approvals_js),
            ConsoleAsset("pairing.js", javaScript, PackageResources.pairing_js),
            ConsoleAsset("agents.js", javaScript, PackageResources.agents_js),
            ConsoleAsset("health.js", javaScript, PackageResources.health_js),
        ]
        if !PackageResources.webpush_js.isEmpty { assets.append(ConsoleAsset("webpush.js", javaScript, PackageResources.webpush_js)) }
        return Dictionary(uniqueKeysWithValues: assets.map { ($0.name, $0) })
    }()
}
