import Storage
import Household
import APIKit
import Foundation
import Identity
import Mobile

/// `/admin/api-keys`: an admin mints keys for their own subject, lists and revokes anyone's (unpairing). Another
/// person's credentials come only from a pairing code that person redeems. `/api/v1/api-keys`: anyone lists and
/// revokes the keys of their own subject (and sees who minted each, and when).
public struct APIKeysAPI: Sendable {
    let keys: any APIKeyStore
    let mobile: MobileStorage
    /// Told of every revoked key (the relay carriage forgets the phone).
    var revoked: @Sendable (String) async -> Void = { _ in }
    /// What else ends with a key, inside its revocation's transaction (the console sessions it signed in).
    var revoking: @Sendable (String, any StorageSession) throws -> Void = { _, _ in }

    /// `revoking`: writes that commit with a key's revocation; `revoked`: told after it committed.
    public init(keys: any APIKeyStore, mobile: MobileStorage, revoking: @escaping @Sendable (String, any StorageSession) throws -> Void = { _, _ in },
                revoked: @escaping @Sendable (String) async -> Void = { _ in }) {
        self.keys = keys
        self.mobile = mobile
        self.revoking = revoking
        self.revoked = revoked
    }

    public var routes: [Route] {
        [
            Route(.POST, "/admin/api-keys", role: .admin, summary: "Mint an API key", handler: createKey),
            Route(.GET, "/admin/api-keys", access: .role(.admin), summary: "List API keys (never their secrets)", handler: listKeys),
            Route(.DELETE, "/admin/api-keys/:id", access: .role(.admin), summary: "Revoke an API key", handler: revokeKey),
            Route(.GET, "/api/v1/api-keys", role: .viewer, summary: "Your own keys: who minted each and when (never their secrets)", handler: listOwnKeys),
            Route(.DELETE, "/api/v1/api-keys/:id", role: .viewer, summary: "Revoke one of your own keys", handler: revokeOwnKey),
        ]
    }

    /// `POST /admin/api-keys`.
    struct MintRequest: Decodable {
        var name: String
        var role: String?
        var subject: String?
    }

    @Sendable func createKey(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let body = try request.decode(MintRequest.self)
        let name = try body.name.limited(to: 200, field: "name")
        guard !name.trimmingCharacters(in: .whitespaces).isEmpty else { throw APIError.invalidField("name", "must not be empty") }
        let roleText = body.role ?? Role.viewer.rawValue
        guard let role = Role(rawValue: roleText) else {
            throw APIError.invalidField("role", "must be admin, operator or viewer, got \"\(roleText)\"")
        }
        let subject = try body.subject.limited(to: 64, field: "subject") ?? caller.subject
        guard !subject.isEmpty, subject.unicodeScalars.allSatisfy({ ("a"..."z").contains($0) || ("0"..."9").contains($0) || $0 == "-" || $0 == "_" }) else {
            throw APIError.invalidField("subject", "must be 1-64 lower-case letters, digits, - or _")
        }
        // A key for someone else would let an admin read and decide that person's approvals, inbox and memory.
        guard subject == caller.subject else { throw APIKeysError.foreignSubject(subject, caller: caller.subject) }
        return try await mobile.transactions.answer { session in
            let minted = try keys.mint(name: name, subject: subject, role: role, kind: .manual, mintedBy: caller.subject, in: session)
            var answer = KeyView(minted.key)
            // The secret, this once: it is never stored whole and never listed.
            answer.key = minted.token
            return .json(answer, status: 201)
        }
    }

    @Sendable func listKeys(_ request: HTTPRequest) async throws -> HTTPResponse {
        .json(["keys": try await keys.list().map { KeyView($0) }])
    }

    /// `GET /api/v1/api-keys`: the caller's subject's keys, revoked ones included.
    @Sendable func listOwnKeys(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        .json(["keys": try await keys.list(subject: caller.subject).map { KeyView($0) }])
    }

    @Sendable func revokeKey(_ request: HTTPRequest) async throws -> HTTPResponse {
        try await revoke(id: request.parameter("id"), subject: nil)
    }

    /// `DELETE /api/v1/api-keys/:id`: a key of another subject is as unknown as one that does not exist.
    @Sendable func revokeOwnKey(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        try await revoke(id: request.parameter("id"), subject: caller.subject)
    }

    private func revoke(id: String, subject: String?) async throws -> HTTPResponse {
        let answer = try await mobile.transactions.answer { session in
            let revoked = try keys.revoke(id: id, subject: subject, in: session)
            guard revoked else { throw APIError.notFound("no active key \(id)") }
            // Revoking a phone's key unpairs it: its next call is 401 and it gets no more wake-ups.
            _ = try mobile.devices.removeDevices(registeredByKey: id, in: session)
            try revoking(id, session)
            return .noContent
        }
        // And through the relay: no more sealed records for it, and the relay drops its place and bearer.
        await revoked(id)
        return answer
    }
}

/// Why a key is not minted.
public enum APIKeysError: Error, Sendable, Equatable, HTTPResponseError {
    /// An admin asked for a key of another subject.
    case foreignSubject(String, caller: String)

    public var apiError: APIError {
        switch self {
        case .foreignSubject(let subject, let caller):
            APIError(status: 403, code: "foreign_subject",
                     message: "subject: an admin mints keys only for their own subject (\(caller)), not \"\(subject)\"; another person's credentials come only through a pairing code that person redeems (POST /api/v1/pairing/tokens with name and role)",
                     field: "subject")
        }
    }
}

extension APIKeysAPI {
    /// A key as listed (never its secret); a mint's answer adds `key`, the token itself.
    struct KeyView: Encodable {
        var id, name, subject, role, kind: String
        var createdAt: Timestamp
        var revokedAt: Nullable<Timestamp>
        /// The subject whose credential minted it; null when that was not recorded (keys from before).
        var mintedBy: Nullable<String>
        var key: String?

        init(_ key: APIKey) {
            id = key.id
            name = key.name
            subject = key.subject
            role = key.role.rawValue
            kind = key.kind.rawValue
            createdAt = Timestamp(key.createdAt)
            revokedAt = Nullable(key.revokedAt.map(Timestamp.init))
            mintedBy = Nullable(key.mintedBy)
        }

        enum CodingKeys: String, CodingKey {
            case id, name, subject, role, kind, key
            case createdAt = "created_at", revokedAt = "revoked_at", mintedBy = "minted_by"
        }
    }
}
