import Foundation
import GatewayTestSupport
import Testing

/// The web console's static files as the gateway serves them (the pages themselves are tested in a real browser:
/// Tests/Browser, run by scripts/test-console).
@Suite("Console page")
struct ConsolePageTests {
    static func header(_ response: TestResponse, _ name: String) -> String? {
        response.headers.first { $0.key.lowercased() == name.lowercased() }?.value
    }

    @Test("/ is the console: no key needed, a strict CSP with nothing inline, nosniff, no referrer, revalidated by ETag")
    func page() async throws {
        try await withTestGateway { (gw) async throws in
            let page = try await gw.request("GET", "/", key: .none)
            #expect(page.status == 200 && Self.header(page, "Content-Type") == "text/html; charset=utf-8")
            let policy = try #require(Self.header(page, "Content-Security-Policy"))
            #expect(policy.contains("script-src 'self'") && policy.contains("style-src 'self'") && policy.contains("frame-ancestors 'none'")
                    && policy.contains("base-uri 'none'") && !policy.contains("unsafe"))
            #expect(Self.header(page, "X-Content-Type-Options") == "nosniff" && Self.header(page, "Referrer-Policy") == "no-referrer")
            #expect(Self.header(page, "Cache-Control") == "no-cache")
            // Nothing the policy would block: scripts and styles are files.
            #expect(!page.text.contains("style=") && !page.text.contains("<style") && page.text.contains(#"<script type="module" src="/console/app.js"></script>"#))
            let etag = try #require(Self.header(page, "ETag"))
            let again = try await gw.request("GET", "/", key: .none, headers: ["If-None-Match": etag])
            #expect(again.status == 304 && again.body.isEmpty && Self.header(again, "ETag") == etag)
            let head = try await gw.request("HEAD", "/", key: .none)
            #expect(head.status == 200 && head.body.isEmpty)
        }
    }

    @Test("every file the page and its modules name is served with its type; another name is a 404 in the API's shape")
    func assets() async throws {
        try await withTestGateway { (gw) async throws in
            let page = try await gw.request("GET", "/", key: .none).text
            var names = Set(page.matches(of: /\/console\/([a-z]+\.[a-z]+)/).map { String($0.output.1) })
            let app = try await gw.request("GET", "/console/app.js", key: .none)
            names.formUnion(app.text.matches(of: /from "\.\/([a-z]+\.js)"/).map { String($0.output.1) })
            #expect(names.isSuperset(of: ["app.js", "console.css", "icon.svg", "api.js", "dom.js", "inbox.js", "devices.js", "approvals.js"]), "\(names)")
            for name in names {
                let asset = try await gw.request("GET", "/console/\(name)", key: .none)
                #expect(asset.status == 200, "\(name)")
                let type = Self.header(asset, "Content-Type") ?? ""
                let expected = name.hasSuffix(".js") ? "text/javascript" : name.hasSuffix(".css") ? "text/css" : "image/svg+xml"
                #expect(type.hasPrefix(expected), "\(name): \(type)")
                #expect(Self.header(asset, "X-Content-Type-Options") == "nosniff")
                // Data goes into the page as text, never parsed as HTML.
                #expect(!asset.text.contains("innerHTML") && !asset.text.contains("insertAdjacentHTML"), "\(name)")
            }
            let missing = try await gw.request("GET", "/console/nothing.js", key: .none)
            #expect(missing.status == 404 && missing.errorCode == "not_found")
            #expect(try await gw.request("GET", "/console/..%2Fapp.js", key: .none).status == 404)
            #expect(try await gw.request("POST", "/", key: .none).status == 405)
        }
    }
}
