import APIKit

/// The web console's static files: the page at `/`, its modules and styles under `/console/`, the service worker
/// at `/sw.js`. Everything it shows comes from the JSON API (docs/console-api.md); nothing is rendered here.
public struct ConsoleRoutes: Sendable {
    /// No inline script or style anywhere, nothing from another origin, never framed (clickjacking an Approve).
    public static let contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        + "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

    public init() {}

    public var routes: [Route] {
        [
            Route.answeredAtOnce(.GET, "/", access: .open, summary: "The web console") { request in
                Self.serve(ConsoleAssets.index, request)
            },
            Route.answeredAtOnce(.GET, "/console/:asset", access: .open, summary: "The web console's scripts, styles and images") { request in
                let name = request.parameter("asset")
                guard let asset = ConsoleAssets.byName[name] else { throw APIError.notFound("no console file \(name)") }
                return Self.serve(asset, request)
            },
            // At the root, so the worker's scope is the whole console; 404 while this build has no worker.
            Route.answeredAtOnce(.GET, "/sw.js", access: .open, summary: "The console's service worker (browser notifications)") { request in
                guard let worker = ConsoleAssets.serviceWorker else { throw APIError.notFound("this gateway has no service worker") }
                return Self.serve(worker, request)
            },
        ]
    }

    /// The asset, or 304 when the browser already holds these bytes. Always revalidated (`no-cache`): the file
    /// names carry no version, and a new binary must not leave an old script beside a new page.
    static func serve(_ asset: ConsoleAsset, _ request: HTTPRequest) -> HTTPResponse {
        var headers = [
            ("Content-Type", asset.contentType),
            ("ETag", asset.etag),
            ("Cache-Control", "no-cache"),
            ("Content-Security-Policy", contentSecurityPolicy),
            ("X-Content-Type-Options", "nosniff"),
            ("Referrer-Policy", "no-referrer"),
            ("X-Frame-Options", "DENY"),
            ("Cross-Origin-Opener-Policy", "same-origin"),
        ]
        if asset.name == "sw.js" { headers.append(("Service-Worker-Allowed", "/")) }
        if request.alreadyHas(etag: asset.etag) { return HTTPResponse(status: 304, headers: headers) }
        return HTTPResponse(status: 200, headers: headers, body: asset.bytes)
    }
}
