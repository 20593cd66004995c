import Storage
import APIKit
import ChannelAPI
import Crypto
import Foundation
import Glibc
import Identity
import RelayProtocol
import Synchronization

/// Answers a replayed mutating call from its log: one key per intent, whichever path (Wi-Fi, tailnet, relay)
/// carried it, across restarts. 5xx answers are not kept, so a retry after a failure really runs again.
///
/// Exactly once: the line "this intent was applied" is written by a `CommitHook` inside the very transaction that
/// makes the effect, so a crash right after the effect still leaves the line, and a retry is answered, never
/// applied again. Routes whose effect is one transaction build their answer inside it (`TransactionalStorage.answer`), so
/// the answer commits with the effect and a retry after any crash gets it. A run's reply is recorded with the run's
/// end. Routes whose answer comes from someone else later (a person's decision, a phone's result) name what they
/// wait for before their effect (`AnswerResumer`); a retry that finds the line without an answer (the process died
/// while it waited) gets the answer rebuilt from that, waiting again if need be. Only when nothing can rebuild it
/// does a retry get `200 {"applied": true, "answer_lost": true}`.
///
/// Answers are stored sealed (AES-256-GCM) under a key derived from the caller's own bearer token, which the
/// gateway never stores: minted API keys or pairing codes in an answer are not readable from the database.
public final class IdempotencyLog: Sendable {
    public static let header = "idempotency-key"

    /// The status of a line whose effect committed but whose answer was not recorded (yet).
    public static let appliedWithoutAnswer = 0

    let store: any IdempotencyStore
    let clock: any WallClock
    /// Test-only fault: die between the effect's commit and the answer's (SOULACY_FAULT_KILL_AFTER_EFFECT=1).
    let killAfterEffect: Bool
    /// How long a duplicate waits for the call holding its key before it is told to retry.
    let holdWait: Duration
    /// How long a held key stays held if its process dies before letting go: longer than any call runs, long polls
    /// included, since a duplicate arriving after it lapses is applied.
    let holdLease: Duration
    /// Rebuilders of answers the process died before recording, by reference kind.
    let resumers: [String: AnswerResumer]

    /// `store` is the engine's log (the composition root picks it: `SQLiteIdempotencyStore` for the data directory).
    public init(store: any IdempotencyStore, clock: any WallClock = SystemWallClock(), killAfterEffect: Bool = false, resumers: [AnswerResumer] = [],
                holdWait: Duration = .seconds(60), holdLease: Duration = .seconds(300)) {
        self.store = store
        self.holdWait = holdWait
        self.holdLease = holdLease
        self.clock = clock
        self.killAfterEffect = killAfterEffect
        self.resumers = Dictionary(resumers.map { ($0.kind, $0) }, uniquingKeysWith: { first, _ in first })
    }

    /// Forgets answers recorded before `cutoff`: a retry after that is applied again.
    @discardableResult
    public func forget(before cutoff: Date) async throws -> Int {
        try await store.forget(before: cutoff)
    }

    static func isMutating(_ method: String) -> Bool { ["POST", "PUT", "PATCH", "DELETE"].contains(method) }

    /// Runs `handle` once per (caller, key); a replay gets the stored answer with `Idempotent-Replayed: true`.
    /// `principal` is asked only for a mutating call that carries a key (reads pay nothing here). The answer is
    /// sealed with the request's bearer token or, for a call that came without one (the relay carriage), with
    /// `sealingSecret`.
    public func answer(_ request: HTTPRequest, principal: @autoclosure () -> Principal?, sealingSecret: [UInt8]? = nil,
                       handle: @Sendable (HTTPRequest) async -> HTTPResponse) async -> HTTPResponse {
        guard Self.isMutating(request.method), let key = request.header(Self.header), let principal = principal() else { return await handle(request) }
        guard (1...200).contains(key.utf8.count), key.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F }) else {
            return APIError.invalidField("Idempotency-Key", "must be 1 to 200 visible ASCII characters").response
        }
        // The key is the phone's (its API key), not the person's: two phones never collide.
        let scope = principal.keyID
        // One secret for every path of this caller: derived from its bearer here, handed over by the carriage for
        // the relay (the phone derives the same from its key).
        let secret = request.bearerToken.map(IdempotencyCredential.secret(bearer:)) ?? sealingSecret
        let sealingKey = Self.sealingKey(secret: secret, scope: scope, key: key)
        // A call with this key running now (on this node or another) holds it: wait until it lets go, then replay
        // its line. Its line is read only then: while it runs, "applied" may be there without its answer yet.
        let holder = UUID().uuidString
        let deadline = ContinuousClock.now + holdWait
        while true {
            do {
                if try await store.hold(scope: scope, key: key, holder: holder, lease: holdLease) { break }
            } catch {
                return APIError.unavailable("Idempotency-Key: the log cannot be reached to hold the key; try again").response
            }
            if ContinuousClock.now > deadline {
                return APIError.conflict("Idempotency-Key: a call with this key is still being applied; retry with the same key to get its answer",
                                         code: "idempotency_key_in_flight").response
            }
            try? await Task.sleep(for: .milliseconds(10))
        }
        let response = await answerHolding(request, scope: scope, key: key, principal: principal, sealingKey: sealingKey, handle: handle)
        try? await store.release(scope: scope, key: key, holder: holder)
        return response
    }

    /// `answer` once this call holds the key: the stored line's answer, or the handler's, recorded.
    private func answerHolding(_ request: HTTPRequest, scope: String, key: String, principal: Principal, sealingKey: [UInt8]?,
                               handle: @Sendable (HTTPRequest) async -> HTTPResponse) async -> HTTPResponse {
        if let stored = try? await store.line(scope: scope, key: key) {
            // Lines written before the shared credential were sealed under the bearer itself.
            let legacyKey = request.bearerToken.flatMap { Self.sealingKey(secret: Array($0.utf8), scope: scope, key: key) }
            return await replay(stored, of: request, caller: principal, sealingKeys: [sealingKey, legacyKey].compactMap { $0 })
        }
        let now = clock.now()
        let (method, path) = (request.method, Self.loggedPath(request.path))
        let hook = store.appliedHook(scope: scope, key: key, method: method, path: path, at: now) { answer in
            Self.stored(answer, method: method, path: path, sealingKey: sealingKey)
        }
        let response = await CommitHook.$current.withValue(hook) { await handle(request) }
        hook.close()
        if killAfterEffect, hook.runCount > 0 { kill(getpid(), SIGKILL) }
        if hook.answeredWithEffect || hook.isProvisional { return response }
        guard response.status < 500 || hook.runCount > 0 else { return response }
        // A streamed answer is being written as it is sent: there is no whole answer to keep for a retry.
        guard response.stream == nil else { return response }
        // Not recorded (the disk is full, say): a retry is applied again, as a call without a key would be,
        // unless the effect's own line already says it was applied.
        try? await store.record(Self.stored(response.committedAnswer, method: method, path: path, sealingKey: sealingKey), scope: scope, key: key, at: now)
        return response
    }

    /// The path as a line keeps it: itself up to 512 bytes, else its SHA-256 (a caller's 30 KB path would otherwise
    /// be kept for a month per key). A retry's path is compared the same way.
    static func loggedPath(_ path: String) -> String {
        path.utf8.count <= 512 ? path : "sha256:" + Hex.encode(SHA256.hash(path))
    }

    /// An answer as the log keeps it: sealed under the caller's key when there is one (else only its status).
    static func stored(_ answer: CommitHook.Answer, method: String, path: String, sealingKey: [UInt8]?) -> IdempotencyLine {
        guard let sealingKey, let box = try? SealedBox.seal(answer.body, key: sealingKey, header: sealHeader) else {
            return IdempotencyLine(method: method, path: path, status: answer.status, contentType: answer.contentType, body: [], sealed: false)
        }
        return IdempotencyLine(method: method, path: path, status: answer.status, contentType: answer.contentType, body: Array(box.utf8), sealed: true)
    }

    private func replay(_ stored: IdempotencyLine, of request: HTTPRequest, caller: Principal, sealingKeys: [[UInt8]]) async -> HTTPResponse {
        guard stored.method == request.method, stored.path == Self.loggedPath(request.path) else {
            return APIError.conflict("Idempotency-Key: this key was used for \(stored.method) \(stored.path); use a new key for a new intent",
                                     code: "idempotency_key_reused").response
        }
        var headers = [("Idempotent-Replayed", "true")]
        let status = stored.status
        if status == Self.appliedWithoutAnswer, var resumed = await resumed(stored.resume, caller: caller) {
            resumed.headers.append(contentsOf: headers)
            return resumed
        }
        guard status != Self.appliedWithoutAnswer else {
            var answer = HTTPResponse.json(AnswerLost())
            answer.headers.append(contentsOf: headers)
            return answer
        }
        var body = stored.body
        if stored.sealed {
            let box = String(decoding: body, as: UTF8.self)
            guard let opened = sealingKeys.lazy.compactMap({ try? SealedBox.open(box, key: $0, header: Self.sealHeader) }).first else {
                return APIError.conflict("Idempotency-Key: this intent was applied already; its answer cannot be opened with this credential",
                                         code: "idempotency_answer_sealed").response
            }
            body = opened
        }
        if let type = stored.contentType { headers.append(("Content-Type", type)) }
        return HTTPResponse(status: status, headers: headers, body: body)
    }

    /// The answer a resumer rebuilds for an applied line's reference; nil when there is none to rebuild it. Not
    /// recorded: it is read again from what the effect left on every retry (a decision still pending may come later).
    private func resumed(_ reference: String?, caller: Principal) async -> HTTPResponse? {
        guard let reference, let (kind, id) = AnswerResumer.parse(reference), let resumer = resumers[kind] else { return nil }
        do {
            return try await resumer.resume(id, caller)
        } catch {
            return APIError(answering: error)?.response
        }
    }

    static let sealHeader = "soulacy idempotency answer v1"

    /// HKDF of the caller's secret, bound to the line: one line's key opens no other.
    static func sealingKey(secret: [UInt8]?, scope: String, key: String) -> [UInt8]? {
        guard let secret, !secret.isEmpty else { return nil }
        return try? HKDF.deriveKey(secret: secret, salt: Array("soulacy idempotency v1".utf8), info: Array((scope + "\u{0}" + key).utf8))
    }

}

extension IdempotencyLog {
    /// A retry of an intent applied once whose answer was lost with the process (a stream's, by nature).
    struct AnswerLost: Encodable {
        var applied = true
        var answerLost = true
        var message = "this intent was applied once already; its answer was lost when the gateway stopped, so it is not applied again"

        enum CodingKeys: String, CodingKey {
            case applied, message
            case answerLost = "answer_lost"
        }
    }
}
