import Household
import APIKit
import Foundation
import Identity
import Mobile
import SQLite

/// `/admin/api-keys`: minting, listing and revoking API keys (an admin's).
public struct APIKeysAPI: Sendable {
    let keys: any APIKeyStore
    let mobile: MobileStore
    /// Told of every revoked key (the relay carriage forgets the phone).
    var revoked: @Sendable (String) async -> Void = { _ in }

    public init(keys: any APIKeyStore, mobile: MobileStore, revoked: @escaping @Sendable (String) async -> Void = { _ in }) {
        self.keys = keys
        self.mobile = mobile
        self.revoked = revoked
    }

    public var routes: [Route] {
        [
            Route(.POST, "/admin/api-keys", role: .admin, summary: "Mint an API key", handler: createKey),
            Route(.GET, "/admin/api-keys", access: .role(.admin), summary: "List API keys (never their secrets)", handler: listKeys),
            Route(.DELETE, "/admin/api-keys/:id", access: .role(.admin), summary: "Revoke an API key", handler: revokeKey),
        ]
    }

    static func json(_ key: APIKey) -> JSONValue {
        .object([
            "id": .string(key.id), "name": .string(key.name), "subject": .string(key.subject), "role": .string(key.role.rawValue),
            "kind": .string(key.kind.rawValue), "created_at": JSONValue.timestamp(key.createdAt),
            "revoked_at": key.revokedAt.map(JSONValue.timestamp) ?? .null,
        ])
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
        return try await mobile.database.answer { _ in
            let minted = try keys.mint(name: name, subject: subject, role: role, kind: .manual)
            guard case .object(var fields) = Self.json(minted.key) else { throw APIError.internal("key encoding") }
            fields["key"] = .string(minted.token)
            return .json(.object(fields), status: 201)
        }
    }

    @Sendable func listKeys(_ request: HTTPRequest) async throws -> HTTPResponse {
        .json(.object(["keys": .array(try keys.list().map(Self.json))]))
    }

    @Sendable func revokeKey(_ request: HTTPRequest) async throws -> HTTPResponse {
        let id = request.parameter("id")
        let answer = try await mobile.database.answer { _ in
            guard try keys.revoke(id: id) else { throw APIError.notFound("no active key \(id)") }
            // Revoking a phone's key unpairs it: its next call is 401 and it gets no more wake-ups.
            try mobile.devices.removeDevices(registeredByKey: id)
            return .noContent
        }
        // And through the relay: no more sealed records for it, and the relay drops its place and bearer.
        await revoked(id)
        return answer
    }
}
