import ChannelTesting
import Crypto
import Foundation
import Household
import Identity
import Storage

/// What every engine's `ConsoleSessionStore` must do: a session opens with its own cookie value and no other, as
/// the caller that signed in; the database never holds a cookie, its bytes, a CSRF token or a code in the clear; a
/// session ends 12 hours after its last use and 7 days after sign-in however busy, when signed out, when its key's
/// sessions are revoked (in the caller's transaction) and when its key is revoked; a code signs in once, as its
/// person, until it expires, and of 20 concurrent redemptions exactly one signs in; unknown, malformed, used and
/// expired codes give their errors. Returns the broken rules (empty: conformant).
///
/// `store` must tell time by `clock` (the suite moves it); `keys` mints the keys that sign in, on the same database.
public struct ConsoleSessionStoreConformance: Sendable {
    public let fixture: any StorageEngineFixture
    public let keys: any APIKeyStore
    public let store: any ConsoleSessionStore
    public let clock: ManualClock

    public init(fixture: any StorageEngineFixture, keys: any APIKeyStore, store: any ConsoleSessionStore, clock: ManualClock) {
        self.fixture = fixture
        self.keys = keys
        self.store = store
        self.clock = clock
    }

    struct Refused: Error {}

    public func run() async -> [ConformanceFailure] {
        var failures: [ConformanceFailure] = []
        func check(_ rule: String, _ holds: Bool, _ detail: @autoclosure () -> String) {
            if !holds { failures.append(ConformanceFailure(rule: rule, detail: "\(fixture.engine): \(detail())")) }
        }
        let store = self.store
        /// The session a cookie opens, asked as the gateway asks (what the node knows at once must agree with the store).
        func open(_ token: String) async -> ConsoleSession? {
            let asked = await store.session(token: token)
            if let known = store.knownSession(token: token) {
                check("known agrees with the store", known == asked, "known at once: \(known), from the store: \(String(describing: asked))")
            }
            return asked
        }
        func codeError(_ code: String) async -> String {
            do {
                let issued = try await store.signIn(code: code)
                return "signed in as \(issued.session.principal.subject)"
            } catch let error as ConsoleCodeError {
                return error.code
            } catch {
                return "\(error)"
            }
        }
        let hour: TimeInterval = 3600
        // Times are stored to the millisecond: from a whole second on, every expected end is exact.
        clock.advance(to: Date(timeIntervalSince1970: clock.now().timeIntervalSince1970.rounded(.up)))
        do {
            let owner = try await principal(subject: Principal.ownerSubject, role: .admin)
            let start = clock.now()

            // A session opens with its cookie's value, as its caller, and with no other value.
            let first = try await store.signIn(key: owner)
            check("opens with its token only", first.session.principal == owner, "signed in as \(first.session.principal), not \(owner)")
            check("opens with its token only", first.session.expiresAt == start.addingTimeInterval(12 * hour),
                  "a new session ends at \(first.session.expiresAt), not 12 hours after sign-in")
            check("opens with its token only", !first.session.csrfToken.isEmpty && first.session.csrfToken != first.token, "the CSRF token is empty or the cookie")
            let opened = await open(first.token)
            check("opens with its token only", opened == first.session, "the cookie opens \(String(describing: opened)), not \(first.session)")
            let second = try await store.signIn(key: owner)
            check("opens with its token only", second.token != first.token && second.session.id != first.session.id && second.session.csrfToken != first.session.csrfToken,
                  "two sign-ins share a cookie, id or CSRF token")
            let tampered = (first.token.first == "A" ? "B" : "A") + first.token.dropFirst()
            for other in ["", Base64URL.encode(SecureBytes.random(count: 32)), tampered, first.token + "A", String(first.token.dropLast()),
                          first.session.id, first.session.csrfToken, Hex.encode(SHA256.hash(Base64URL.decode(first.token) ?? []))] {
                let stranger = await open(other)
                check("opens with its token only", stranger == nil, "a value of \(other.count) characters opens \(String(describing: stranger))")
            }

            // Codes: once, as their person, until they expire.
            let priyaCode = try await store.createCode(subject: "priya", role: .operator)
            check("a code signs in once", priyaCode.code.count == 6 && priyaCode.code.allSatisfy(\.isASCII) && priyaCode.code.allSatisfy(\.isNumber),
                  "a code of \(priyaCode.code.count) characters")
            check("a code signs in once", priyaCode.subject == "priya" && priyaCode.role == .operator && priyaCode.expiresAt == start.addingTimeInterval(600),
                  "the code is for \(priyaCode.subject) (\(priyaCode.role)) until \(priyaCode.expiresAt)")
            let unused = try await store.createCode(subject: Principal.ownerSubject, role: .viewer)
            let late = try await store.createCode(subject: Principal.ownerSubject, role: .admin)
            let onTime = try await store.createCode(subject: Principal.ownerSubject, role: .viewer)
            let priya = try await store.signIn(code: priyaCode.code.prefix(3) + " " + priyaCode.code.dropFirst(3))
            check("per person", priya.session.principal == Principal(keyID: "console:" + priya.session.id, subject: "priya", role: .operator),
                  "a code for priya signed in as \(priya.session.principal)")
            let priyaOpened = await open(priya.token)
            check("per person", priyaOpened == priya.session, "priya's cookie opens \(String(describing: priyaOpened))")
            let reused = await codeError(priyaCode.code)
            check("a code signs in once", reused == "console_code_used", "a used code: \(reused)")
            let issued = Set([priyaCode, unused, late, onTime].map(\.code))
            let notIssued = (0..<1_000_000).lazy.map { String(format: "%06d", $0) }.first { !issued.contains($0) } ?? "000000"
            for wrong in [notIssued, "12345", "1234567", "abcdef", "", "12 34 5"] {
                let answer = await codeError(wrong)
                check("code errors", answer == "console_code_unknown", "\"\(wrong)\": \(answer)")
            }

            // Nothing that opens a session or signs in is at rest.
            let stored = try await fixture.storedValues()
            check("nothing in the clear", !stored.isEmpty, "the database holds nothing at all")
            for (index, session) in [first, second, priya].enumerated() {
                for (what, needle) in [("cookie", Array(session.token.utf8)), ("session bytes", Base64URL.decode(session.token) ?? []),
                                       ("CSRF token", Array(session.session.csrfToken.utf8))] {
                    check("nothing in the clear", !stored.contains { Self.contains($0, needle) }, "session \(index)'s \(what) is stored")
                }
            }
            for code in [priyaCode.code, unused.code] {
                check("nothing in the clear", !stored.contains(Array(code.utf8)), "the code \(code) is stored")
                // Six digits hash back in a million tries: a plain hash is as good as the code.
                check("nothing in the clear", !stored.contains { Self.contains($0, SHA256.hash(code)) }, "the SHA-256 of the code \(code) is stored")
            }

            clock.advance(by: .seconds(599))
            let onTimeAnswer = await codeError(onTime.code)
            check("code errors", onTimeAnswer == "signed in as owner", "a code a second before its 10 minutes: \(onTimeAnswer)")
            clock.advance(by: .seconds(1))
            for attempt in 1...2 {
                let expired = await codeError(late.code)
                check("code errors", expired == "console_code_expired", "a code at its 10 minutes (attempt \(attempt)): \(expired)")
            }

            // Twenty gateways redeem one code at once: one signs in.
            let contested = try await store.createCode(subject: "priya", role: .viewer)
            let outcomes = await withTaskGroup(of: String.self) { group in
                for _ in 0..<20 {
                    group.addTask {
                        do { return try await store.signIn(code: contested.code).token } catch let error as ConsoleCodeError { return error.code } catch { return "\(error)" }
                    }
                }
                return await group.reduce(into: [String]()) { $0.append($1) }
            }
            let winners = outcomes.filter { $0 != "console_code_used" }
            check("one of concurrent redemptions", winners.count == 1, "\(winners.count) of 20 concurrent redemptions did not answer console_code_used: \(winners.map { $0.prefix(60) })")
            if winners.count == 1, let token = winners.first {
                let winner = await open(token)
                check("one of concurrent redemptions", winner?.principal.subject == "priya" && winner?.principal.role == .viewer,
                      "the winner's session: \(String(describing: winner))")
            }

            // Signing out ends that session only.
            let signedOut = try await store.revoke(token: first.token)
            check("revoke by session", signedOut, "signing out found no session")
            let afterSignOut = await open(first.token)
            check("revoke by session", afterSignOut == nil, "a signed-out session opens: \(String(describing: afterSignOut))")
            let sibling = await open(second.token)
            check("revoke by session", sibling?.principal == owner, "signing out one session ended another of the same key")
            let twice = try await store.revoke(token: first.token)
            let never = try await store.revoke(token: Base64URL.encode(SecureBytes.random(count: 32)))
            let malformed = try await store.revoke(token: "not-a-cookie")
            check("revoke by session", !twice && !never && !malformed, "signing out again (\(twice)), an unknown (\(never)) or a malformed cookie (\(malformed)) found a session")

            // A key's sessions end with it, in the caller's transaction; other keys' and codes' sessions go on.
            let laptop = try await principal(subject: Principal.ownerSubject, role: .operator)
            let laptopSessions = [try await store.signIn(key: laptop), try await store.signIn(key: laptop)]
            _ = try? await fixture.storage.withTransaction { session -> Void in
                _ = try store.revoke(signedInWithKey: laptop.keyID, in: session)
                throw Refused()
            }
            for session in laptopSessions {
                let alive = await open(session.token)
                check("revoke by key", alive?.principal == laptop, "a revocation that was rolled back ended a session")
            }
            let ended = try await fixture.storage.withTransaction { session in try store.revoke(signedInWithKey: laptop.keyID, in: session) }
            check("revoke by key", ended == 2, "revoking the key's sessions ended \(ended), not 2")
            for session in laptopSessions {
                let gone = await open(session.token)
                check("revoke by key", gone == nil, "a session of a revoked key opens: \(String(describing: gone))")
            }
            let again = try await fixture.storage.withTransaction { session in try store.revoke(signedInWithKey: laptop.keyID, in: session) }
            check("revoke by key", again == 0, "a second revocation ended \(again)")
            let ownerStill = await open(second.token)
            let priyaStill = await open(priya.token)
            check("per person", ownerStill?.principal == owner && priyaStill?.principal.subject == "priya",
                  "revoking one key ended another key's (\(ownerStill == nil)) or a code's (\(priyaStill == nil)) session")
            // The key revoked in the key store alone: its session is refused from the next request.
            let tablet = try await principal(subject: Principal.ownerSubject, role: .viewer)
            let tabletSession = try await store.signIn(key: tablet)
            let before = await open(tabletSession.token)
            check("revoke by key", before?.principal == tablet, "a fresh key's session does not open")
            _ = try await keys.revoke(id: tablet.keyID, storage: fixture.storage)
            let afterKey = await open(tabletSession.token)
            check("revoke by key", afterKey == nil, "a session opens after its key was revoked: \(String(describing: afterKey))")
            // A key that does not exist signs in no lasting session.
            let ghost = try await store.signIn(key: Principal(keyID: "0000000000000000", subject: Principal.ownerSubject, role: .admin))
            let ghostOpened = await open(ghost.token)
            check("revoke by key", ghostOpened == nil, "a session of a key that never existed opens")

            // Idle and absolute expiry, on the store's clock.
            let signedIn = clock.now()
            let idle = try await store.signIn(key: owner)
            let justInTime = try await store.signIn(key: owner)
            let busy = try await store.signIn(key: owner)
            clock.advance(by: .seconds(11 * 3600))
            let used = await open(busy.token)
            check("idle expiry", used?.expiresAt == clock.now().addingTimeInterval(12 * hour),
                  "used after 11 hours it ends at \(String(describing: used?.expiresAt)), not 12 hours on")
            clock.advance(by: .seconds(3600 - 1))
            let stillAlive = await open(justInTime.token)
            check("idle expiry", stillAlive != nil, "a session ended a second before its 12 idle hours")
            clock.advance(by: .seconds(1))
            let idleEnded = await open(idle.token)
            check("idle expiry", idleEnded == nil, "a session opens after 12 idle hours")
            let busyAlive = await open(busy.token)
            check("idle expiry", busyAlive != nil, "a session used an hour ago ended")
            var elapsed: TimeInterval = 12 * hour
            while elapsed + 11 * hour < 7 * 86_400 {
                clock.advance(by: .seconds(11 * 3600))
                elapsed += 11 * hour
                let alive = await open(busy.token)
                let expected = min(clock.now().addingTimeInterval(12 * hour), signedIn.addingTimeInterval(7 * 86_400))
                check("absolute expiry", alive?.expiresAt == expected, "at \(Int(elapsed / hour)) h: \(String(describing: alive?.expiresAt)), not \(expected)")
            }
            clock.advance(to: signedIn.addingTimeInterval(7 * 86_400 - 1))
            let lastSecond = await open(busy.token)
            check("absolute expiry", lastSecond?.expiresAt == signedIn.addingTimeInterval(7 * 86_400), "a second before 7 days: \(String(describing: lastSecond))")
            clock.advance(by: .seconds(1))
            let weekOld = await open(busy.token)
            check("absolute expiry", weekOld == nil, "a session opens 7 days after sign-in")
        } catch {
            failures.append(ConformanceFailure(rule: "no errors", detail: "\(fixture.engine): \(error)"))
        }
        return failures
    }

    /// A freshly minted key's caller.
    func principal(subject: String, role: Role) async throws -> Principal {
        let minted = try await keys.mint(name: "Console", subject: subject, role: role, kind: .manual, mintedBy: subject)
        return Principal(keyID: minted.key.id, subject: subject, role: role)
    }

    static func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
        guard !needle.isEmpty, haystack.count >= needle.count else { return false }
        return (0...(haystack.count - needle.count)).contains { start in haystack[start..<(start + needle.count)].elementsEqual(needle) }
    }
}
