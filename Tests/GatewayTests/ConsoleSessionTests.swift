import ChannelTesting
import Crypto
import Foundation
import Gateway
import GatewayTestSupport
import HTTPClient
import APIKit
import SQLite
import Testing

/// The web console's sign-in (docs/console-api.md §Sessions): a server-side session named by a cookie, CSRF-safe,
/// with the roles and subject of the key or code that signed in.
@Suite("Console sessions", .serialized)
struct ConsoleSessionTests {
    /// A signed-in browser: its cookie's value and the session's CSRF token.
    struct Browser {
        let cookie: String
        let csrf: String
        var headers: [String: String] { ["Cookie": "soulacy_session=\(cookie)"] }
        var acting: [String: String] { headers.merging(["X-CSRF-Token": csrf]) { $1 } }
    }

    static func cookieValue(_ setCookie: String?) -> String? {
        guard let setCookie, setCookie.hasPrefix("soulacy_session=") else { return nil }
        return String(setCookie.dropFirst("soulacy_session=".count).prefix { $0 != ";" })
    }

    func signIn(_ gw: TestGateway, _ body: JSONValue) async throws -> (TestResponse, Browser?) {
        let answer = try await gw.request("POST", "/api/v1/console/session", json: body, key: .none)
        guard answer.status == 200, let cookie = Self.cookieValue(answer.headers["set-cookie"]), let csrf = answer.json["csrf_token"]?.stringValue else {
            return (answer, nil)
        }
        return (answer, Browser(cookie: cookie, csrf: csrf))
    }

    @Test("sign in with an API key: the cookie names a session (HttpOnly, SameSite=Strict, Path=/, not Secure over plain HTTP) with the key's subject and role")
    func signInWithKey() async throws {
        let started = Date()
        try await withTestGateway(mode: .router) { (gw) async throws in
            let (answer, signedIn) = try await signIn(gw, ["api_key": .string(gw.adminKey)])
            let browser = try #require(signedIn, "\(answer.status) \(answer.text)")
            #expect(answer.json["subject"] == "owner" && answer.json["role"] == "admin")
            #expect(answer.headers["cache-control"] == "no-store")
            let setCookie = try #require(answer.headers["set-cookie"])
            #expect(setCookie == "soulacy_session=\(browser.cookie); Path=/; HttpOnly; SameSite=Strict", "\(setCookie)")
            // 32 random bytes, base64url; the CSRF token is another value.
            #expect(Base64URL.decode(browser.cookie)?.count == 32 && browser.csrf != browser.cookie && !browser.csrf.isEmpty)
            #expect(!answer.text.contains(browser.cookie) && !setCookie.contains(gw.adminKey))
            let expires = try #require(AuthTests.date(answer.json["expires_at"]))
            #expect(abs(expires.timeIntervalSince(started.addingTimeInterval(12 * 3600))) < 120, "\(expires)")

            // The page asks for its session on load; the cookie reads the API as the key would.
            let current = try await gw.request("GET", "/api/v1/console/session", key: .none, headers: browser.headers)
            #expect(current.status == 200 && current.json["csrf_token"]?.stringValue == browser.csrf && current.json["subject"] == "owner")
            #expect(try await gw.request("GET", "/api/v1/mobile/deliveries", key: .none, headers: browser.headers).status == 200)
            #expect(try await gw.request("GET", "/admin/api-keys", key: .none, headers: browser.headers).status == 200)
            // No cookie, a made-up one, or a key alone: no session.
            #expect(try await gw.request("GET", "/api/v1/console/session", key: .none).status == 401)
            let forged = "soulacy_session=" + Base64URL.encode(SecureBytes.random(count: 32))
            #expect(try await gw.request("GET", "/api/v1/console/session", key: .none, headers: ["Cookie": forged]).status == 401)
            #expect(try await gw.request("GET", "/api/v1/mobile/deliveries", key: .none, headers: ["Cookie": forged]).status == 401)
            #expect(try await gw.request("GET", "/api/v1/console/session").status == 401)
            // A bearer key keeps working everywhere.
            #expect(try await gw.request("GET", "/api/v1/mobile/deliveries").status == 200)

            // Wrong keys and malformed bodies.
            #expect(try await signIn(gw, ["api_key": .string("sk_" + String(repeating: "0", count: 64))]).0.status == 401)
            #expect(try await signIn(gw, ["api_key": "srun_whatever"]).0.status == 401)
            let neither = try await signIn(gw, [:]).0
            #expect(neither.status == 400 && neither.errorField == "api_key")
            #expect(try await signIn(gw, ["api_key": .string(gw.adminKey), "code": "123456"]).0.status == 400)
            #expect(try await signIn(gw, ["api_key": 42]).0.errorField == "api_key")
        }
    }

    @Test("sign in with a one-time code from soulacy console-code: once, within 10 minutes; a wrong, reused or expired code is 401")
    func signInWithCode() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            let (status, output) = try await runProgram(RepositoryPaths.soulacyBinary, ["console-code", "--data", gw.directory + "/data"])
            #expect(status == 0, "\(output)")
            #expect(output.contains("owner (admin)") && output.contains("10 minutes"), "\(output)")
            let code = try #require(output.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.first { $0.count == 6 && $0.allSatisfy(\.isNumber) })
            let (answer, signedIn) = try await signIn(gw, ["code": .string(code)])
            let browser = try #require(signedIn, "\(answer.status) \(answer.text)")
            #expect(answer.json["subject"] == "owner" && answer.json["role"] == "admin")
            #expect(try await gw.request("GET", "/admin/api-keys", key: .none, headers: browser.headers).status == 200)
            let reused = try await signIn(gw, ["code": .string(code)]).0
            #expect(reused.status == 401 && reused.errorCode == "console_code_used")

            // A code for someone else, with a role; typed with a space.
            let (_, priyaOutput) = try await runProgram(RepositoryPaths.soulacyBinary, ["console-code", "--data", gw.directory + "/data", "--subject", "priya", "--role", "operator"])
            let priyaCode = try #require(priyaOutput.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.first { $0.count == 6 && $0.allSatisfy(\.isNumber) }, "\(priyaOutput)")
            let priya = try await signIn(gw, ["code": .string(priyaCode.prefix(3) + " " + priyaCode.dropFirst(3))]).0
            #expect(priya.status == 200 && priya.json["subject"] == "priya" && priya.json["role"] == "operator", "\(priya.text)")
            // Only the owner is ever an admin; a bad subject is refused.
            #expect(try await runProgram(RepositoryPaths.soulacyBinary, ["console-code", "--data", gw.directory + "/data", "--subject", "priya", "--role", "admin"]).status == 64)
            #expect(try await runProgram(RepositoryPaths.soulacyBinary, ["console-code", "--data", gw.directory + "/data", "--subject", "Not Valid"]).status == 64)

            let unknown = try await signIn(gw, ["code": .string(code == "000000" ? "000001" : "000000")]).0
            #expect(unknown.status == 401 && unknown.errorCode == "console_code_unknown")
            #expect(try await signIn(gw, ["code": "12345"]).0.errorCode == "console_code_unknown")
            #expect(try await signIn(gw, ["code": "abcdef"]).0.errorCode == "console_code_unknown")
        }
        // Expiry, on the gateway's clock.
        let clock = ManualClock(Date())
        try await withTestGateway(clock: clock, mode: .router) { (gw) async throws in
            let late = try await gw.gateway.consoleSessions.createCode(subject: "owner", role: .admin)
            let onTime = try await gw.gateway.consoleSessions.createCode(subject: "owner", role: .viewer)
            clock.advance(by: .seconds(9 * 60 + 50))
            #expect(try await signIn(gw, ["code": .string(onTime.code)]).0.json["role"] == "viewer")
            clock.advance(by: .seconds(11))
            let expired = try await signIn(gw, ["code": .string(late.code)]).0
            #expect(expired.status == 401 && expired.errorCode == "console_code_expired")
        }
    }

    @Test("wrong keys and codes are limited per client, each on its own count; a sign-in from another site's page is refused")
    func rateLimitedAndSameOrigin() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            let right = try await gw.gateway.consoleSessions.createCode(subject: "owner", role: .viewer)
            for attempt in 0..<5 {
                #expect(try await signIn(gw, ["code": .string(String(format: "%06d", attempt))]).0.status == 401)
            }
            let limited = try await signIn(gw, ["code": .string(right.code)]).0
            #expect(limited.status == 429 && limited.errorCode == "too_many_attempts" && limited.headers["retry-after"] != nil)
            // Keys are counted apart: a 256-bit key is not found by guessing codes, nor the other way round.
            #expect(try await signIn(gw, ["api_key": .string(gw.adminKey)]).0.status == 200)
            for _ in 0..<5 { #expect(try await signIn(gw, ["api_key": "sk_wrong"]).0.status == 401) }
            let keyLimited = try await signIn(gw, ["api_key": .string(gw.adminKey)]).0
            #expect(keyLimited.status == 429 && keyLimited.errorCode == "too_many_attempts")
        }
        try await withTestGateway(mode: .router) { (gw) async throws in
            let foreign = try await gw.request("POST", "/api/v1/console/session", json: ["api_key": .string(gw.adminKey)], key: .none,
                                               headers: ["Origin": "https://evil.example"])
            #expect(foreign.status == 403 && foreign.errorCode == "csrf_failed" && foreign.headers["set-cookie"] == nil)
            let own = try await gw.request("POST", "/api/v1/console/session", json: ["api_key": .string(gw.adminKey)], key: .none, headers: ["Origin": gw.origin])
            #expect(own.status == 200)
        }
    }

    @Test("every cookie request that changes something needs the session's X-CSRF-Token and the gateway's own Origin: else 403 csrf_failed")
    func csrf() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            let browser = try #require(try await signIn(gw, ["api_key": .string(gw.adminKey)]).1)
            let run: JSONValue = ["input": "x"]
            let refusals: [(String, [String: String])] = [
                ("no token", browser.headers),
                ("a wrong token", browser.headers.merging(["X-CSRF-Token": "not-the-token"]) { $1 }),
                ("another session's token", browser.headers.merging(["X-CSRF-Token": String(browser.csrf.reversed())]) { $1 }),
                ("a foreign Origin", browser.acting.merging(["Origin": "https://evil.example"]) { $1 }),
                ("the right host on another scheme", browser.acting.merging(["Origin": gw.origin.replacingOccurrences(of: "http://", with: "https://")]) { $1 }),
                ("an opaque Origin", browser.acting.merging(["Origin": "null"]) { $1 }),
            ]
            for (what, headers) in refusals {
                let refused = try await gw.request("POST", "/api/v1/agents/echo/run", json: run, key: .none, headers: headers)
                #expect(refused.status == 403 && refused.errorCode == "csrf_failed", "\(what): \(refused.status) \(refused.text)")
                let signOut = try await gw.request("DELETE", "/api/v1/console/session", key: .none, headers: headers)
                #expect(signOut.status == 403 && signOut.errorCode == "csrf_failed", "sign-out with \(what)")
            }
            // None of those did anything; with the token (and the gateway's own Origin, or none) the call goes through.
            #expect(try gw.gateway.database.read { db in try db.query("SELECT COUNT(*) AS n FROM runs").first?.int("n") } == 0)
            #expect(try await gw.request("POST", "/api/v1/agents/echo/run", json: run, key: .none, headers: browser.acting).status == 202)
            let withOrigin = try await gw.request("POST", "/api/v1/pairing/tokens", key: .none, headers: browser.acting.merging(["Origin": gw.origin]) { $1 })
            #expect(withOrigin.status == 200 && withOrigin.json["subject"] == "owner", "\(withOrigin.text)")
            // Reads need no token.
            #expect(try await gw.request("GET", "/api/v1/console/session", key: .none, headers: browser.headers).status == 200)
        }
    }

    @Test("sign-out ends the session and clears the cookie; a viewer's session reads their own data and cannot do an operator's things")
    func signOutAndRoles() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            let browser = try #require(try await signIn(gw, ["api_key": .string(gw.adminKey)]).1)
            let out = try await gw.request("DELETE", "/api/v1/console/session", key: .none, headers: browser.acting)
            #expect(out.status == 204 && out.headers["set-cookie"] == "soulacy_session=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0", "\(out.headers)")
            #expect(try await gw.request("GET", "/api/v1/console/session", key: .none, headers: browser.headers).status == 401)
            #expect(try await gw.request("GET", "/api/v1/mobile/deliveries", key: .none, headers: browser.headers).status == 401)
            #expect(try await gw.request("DELETE", "/api/v1/console/session", key: .none, headers: browser.acting).status == 401)

            let priyaKey = try await gw.mintKey(subject: "priya", role: "viewer")
            let viewer = try #require(try await signIn(gw, ["api_key": .string(priyaKey)]).1)
            #expect(try await gw.request("GET", "/api/v1/console/session", key: .none, headers: viewer.headers).json["role"] == "viewer")
            #expect(try await gw.request("GET", "/api/v1/mobile/deliveries", key: .none, headers: viewer.headers).status == 200)
            let run = try await gw.request("POST", "/api/v1/agents/echo/run", json: ["input": "x"], key: .none, headers: viewer.acting)
            #expect(run.status == 403 && run.errorCode == "insufficient_role" && run.json["required"] == "operator")
            #expect(try await gw.request("GET", "/admin/api-keys", key: .none, headers: viewer.headers).status == 403)
            // Her own keys, and nobody else's.
            let keys = try await gw.request("GET", "/api/v1/api-keys", key: .none, headers: viewer.headers).json["keys"]?.arrayValue ?? []
            #expect(!keys.isEmpty && keys.allSatisfy { $0["subject"] == "priya" })
        }
    }

    @Test("revoking the key that signed in ends its sessions, by any path; sessions of other keys go on")
    func revokedKeyEndsSessions() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            let minted = try await gw.request("POST", "/admin/api-keys", json: ["name": "Laptop", "role": "operator"])
            let (token, id) = (try #require(minted.json["key"]?.stringValue), try #require(minted.json["id"]?.stringValue))
            let first = try #require(try await signIn(gw, ["api_key": .string(token)]).1)
            let second = try #require(try await signIn(gw, ["api_key": .string(token)]).1)
            let other = try #require(try await signIn(gw, ["api_key": .string(gw.adminKey)]).1)
            #expect(try await gw.request("GET", "/api/v1/console/session", key: .none, headers: first.headers).json["role"] == "operator")
            #expect(try await gw.request("DELETE", "/admin/api-keys/\(id)", key: .none, headers: other.acting).status == 204)
            for ended in [first, second] {
                #expect(try await gw.request("GET", "/api/v1/console/session", key: .none, headers: ended.headers).status == 401)
                #expect(try await gw.request("GET", "/api/v1/mobile/deliveries", key: .none, headers: ended.headers).status == 401)
            }
            #expect(try await gw.request("GET", "/api/v1/console/session", key: .none, headers: other.headers).status == 200)
            let revoked = try gw.gateway.database.read { db in
                try db.query("SELECT COUNT(*) AS n FROM console_sessions WHERE key_id = ? AND revoked_at IS NOT NULL", id).first?.int("n")
            }
            #expect(revoked == 2)
            // A key revoked below the API (another process, the store itself) ends its sessions too.
            let tablet = try await gw.request("POST", "/admin/api-keys", json: ["name": "Tablet", "role": "viewer"])
            let (tabletToken, tabletID) = (try #require(tablet.json["key"]?.stringValue), try #require(tablet.json["id"]?.stringValue))
            let tabletSession = try #require(try await signIn(gw, ["api_key": .string(tabletToken)]).1)
            #expect(try await gw.request("GET", "/api/v1/console/session", key: .none, headers: tabletSession.headers).status == 200)
            #expect(try await gw.gateway.keys.revoke(id: tabletID, storage: gw.gateway.mobileStore.transactions))
            #expect(try await gw.request("GET", "/api/v1/console/session", key: .none, headers: tabletSession.headers).status == 401)
        }
    }

    @Test("a session ends after 12 idle hours and 7 days after sign-in, however busy")
    func expiry() async throws {
        let clock = ManualClock(Date())
        try await withTestGateway(clock: clock, mode: .router) { (gw) async throws in
            let idle = try #require(try await signIn(gw, ["api_key": .string(gw.adminKey)]).1)
            let busy = try #require(try await signIn(gw, ["api_key": .string(gw.adminKey)]).1)
            func alive(_ browser: Browser) async throws -> Bool {
                try await gw.request("GET", "/api/v1/console/session", key: .none, headers: browser.headers).status == 200
            }
            clock.advance(by: .seconds(11 * 3600))
            #expect(try await alive(busy))
            clock.advance(by: .seconds(3600 + 60))
            #expect(try await !alive(idle), "12 h idle")
            #expect(try await alive(busy), "used an hour ago")
            // Used every 11 hours, it still ends 7 days after sign-in.
            var elapsed = 12 * 3600 + 60
            while elapsed + 11 * 3600 < 7 * 86_400 {
                clock.advance(by: .seconds(11 * 3600))
                elapsed += 11 * 3600
                #expect(try await alive(busy), "at \(elapsed / 3600) h")
            }
            // Stored to the millisecond: a second either side of the seventh day.
            clock.advance(by: .seconds(7 * 86_400 - elapsed - 1))
            #expect(try await alive(busy), "a second before 7 days")
            clock.advance(by: .seconds(2))
            #expect(try await !alive(busy), "7 days")
        }
    }

    @Test("the database holds no session id, CSRF token or code that could be used or rebuilt: a SHA-256 of each session's bytes, codes keyed")
    func nothingRecoverable() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            let browser = try #require(try await signIn(gw, ["api_key": .string(gw.adminKey)]).1)
            let code = try await gw.gateway.consoleSessions.createCode(subject: "owner", role: .admin)
            let unused = try await gw.gateway.consoleSessions.createCode(subject: "owner", role: .viewer)
            let withCode = try #require(try await signIn(gw, ["code": .string(code.code)]).1)
            let path = gw.gateway.database.path
            let files = [path, path + "-wal"].compactMap { try? Data(contentsOf: URL(fileURLWithPath: $0)) }
            #expect(files.first.map { $0.count > 0 } == true)
            let secretBytes = try [browser, withCode].map { try #require(Base64URL.decode($0.cookie)) }
            var needles: [(String, Data)] = []
            for (index, browser) in [browser, withCode].enumerated() {
                needles.append(("cookie \(index)", Data(browser.cookie.utf8)))
                needles.append(("session bytes \(index)", Data(secretBytes[index])))
                needles.append(("CSRF token \(index)", Data(browser.csrf.utf8)))
            }
            for code in [code.code, unused.code] {
                needles.append(("code \(code)", Data(code.utf8)))
                // A plain hash of six digits would be undone by trying a million: it is not what is stored.
                needles.append(("SHA-256 of code \(code)", Data(SHA256.hash(code))))
            }
            for (what, needle) in needles {
                #expect(files.allSatisfy { $0.range(of: needle) == nil }, "\(what) is in the database")
            }
            // What is stored is the SHA-256 of the session's bytes.
            let stored = try gw.gateway.database.read { db in try db.query("SELECT token_sha256 FROM console_sessions").compactMap { $0.blob("token_sha256") } }
            #expect(Set(stored) == Set(secretBytes.map { SHA256.hash($0) }))
        }
    }

    @Test("a console session never opens the same-Wi-Fi door (phones' keys only); the door's keyless routes are flagged routes")
    func notOnTheDoor() async throws {
        try await withTestGateway(lan: true) { (gw) async throws in
            let browser = try #require(try await signIn(gw, ["api_key": .string(gw.adminKey)]).1)
            let client = HTTP2Client(configuration: HTTP2ClientConfiguration(pinnedPublicKeySHA256: Hex.decode(try #require(gw.gateway.tlsPin))))
            let door = "https://127.0.0.1:\(try #require(gw.gateway.lanPort))"
            let cookie = ("Cookie", "soulacy_session=\(browser.cookie)")
            #expect(try await client.send(ClientRequest(method: "GET", url: door + "/api/v1/mobile/deliveries", headers: [cookie])).status == 401)
            #expect(try await client.send(ClientRequest(method: "GET", url: door + "/api/v1/mobile/deliveries", headers: [("Authorization", "Bearer \(gw.adminKey)")])).status == 200)
            // Flagged keyless: liveness, the pairing page, redemption (whose own answer for a wrong code is 401 paired: false).
            #expect(try await client.send(ClientRequest(method: "GET", url: door + "/health")).status == 200)
            #expect(try await client.send(ClientRequest(method: "GET", url: door + "/mobile")).status == 200)
            let redeem = try await client.send(ClientRequest(method: "POST", url: door + "/api/v1/pairing/redeem", headers: [("Content-Type", "application/json")],
                                                             body: Array(#"{"code":"AAAAAAAAAAAAAAAA"}"#.utf8)))
            #expect(redeem.status == 401 && String(decoding: redeem.body, as: UTF8.self).contains("\"paired\":false"))
            // Not flagged: the console's own sign-in is the main listener's.
            let signIn = try await client.send(ClientRequest(method: "POST", url: door + "/api/v1/console/session", headers: [("Content-Type", "application/json")],
                                                             body: Array(#"{"code":"123456"}"#.utf8)))
            #expect(signIn.status == 401 && (try? JSONValue.parse(signIn.body))?["code"] == "unauthorized", "\(String(decoding: signIn.body, as: UTF8.self))")
        }
    }

    @Test("over TLS the cookie is Secure; over plain HTTP on the same port it is not")
    func secureOverTLS() async throws {
        try await withTestGateway { (gw) async throws in
            let pin = try #require(gw.gateway.tlsPin)
            let client = HTTP2Client(configuration: HTTP2ClientConfiguration(pinnedPublicKeySHA256: Hex.decode(pin)))
            let body = Array(JSONValue.object(["api_key": .string(gw.adminKey)]).serialized().utf8)
            let secure = try await client.send(ClientRequest(method: "POST", url: "https://127.0.0.1:\(gw.gateway.port)/api/v1/console/session",
                                                             headers: [("Content-Type", "application/json")], body: body))
            #expect(secure.status == 200)
            let cookie = try #require(secure.headers["set-cookie"])
            #expect(cookie.hasSuffix("; Path=/; HttpOnly; SameSite=Strict; Secure"), "\(cookie)")
            let value = try #require(Self.cookieValue(cookie))
            let read = try await client.send(ClientRequest(method: "GET", url: "https://127.0.0.1:\(gw.gateway.port)/api/v1/console/session",
                                                           headers: [("Cookie", "soulacy_session=\(value)")]))
            #expect(read.status == 200)
            let plain = try await gw.request("POST", "/api/v1/console/session", json: ["api_key": .string(gw.adminKey)], key: .none)
            #expect(plain.status == 200 && plain.headers["set-cookie"]?.contains("Secure") == false)
        }
    }
}
