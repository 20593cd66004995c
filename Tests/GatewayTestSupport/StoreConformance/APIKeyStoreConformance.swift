import Foundation
import Household
import Identity
import Storage

/// What every engine's `APIKeyStore` must do: of gateways starting together on an empty database exactly one mints
/// the owner's first key, and none once a key exists; a minted key has the original's shapes and authenticates as
/// its subject and role, and is known to the node that looked it up; unknown and malformed tokens authenticate as
/// nobody; no token is ever listed; a key minted in a rolled-back transaction does not exist; a revoked key is
/// refused at once on the node that revoked it, by token and by id, and a second revocation finds nothing; a
/// revocation limited to another subject revokes nothing; and a subject's list holds only its keys. Returns the
/// broken rules (empty: conformant). Runs on a store with no keys yet (its first rule needs an empty table).
public struct APIKeyStoreConformance: Sendable {
    public let fixture: any StorageEngineFixture
    public let store: any APIKeyStore

    public init(fixture: any StorageEngineFixture, store: any APIKeyStore) {
        self.fixture = fixture
        self.store = store
    }

    struct Refused: Error {}

    public func run() async -> [ConformanceFailure] {
        var failures: [ConformanceFailure] = []
        func check(_ rule: String, _ holds: Bool, _ detail: @autoclosure () -> String) {
            if !holds { failures.append(ConformanceFailure(rule: rule, detail: "\(fixture.engine): \(detail())")) }
        }
        let store = self.store
        let storage = fixture.storage
        do {
            // Ten gateways start at once on an empty database: one owner key.
            let minted = try await withThrowingTaskGroup(of: MintedKey?.self) { group in
                for _ in 0..<10 { group.addTask { try await store.mintFirstOwnerKey(name: "Owner (first start)") } }
                return try await group.reduce(into: [MintedKey]()) { if let key = $1 { $0.append(key) } }
            }
            check("one first owner key", minted.count == 1, "\(minted.count) of 10 concurrent first starts minted a key")
            let again = try await store.mintFirstOwnerKey(name: "Owner (first start)")
            check("one first owner key", again == nil, "a later start minted another first key")
            if let owner = minted.first {
                let principal = await store.authenticate(owner.token)
                check("one first owner key", principal == Principal(keyID: owner.key.id, subject: Principal.ownerSubject, role: .admin),
                      "the first key authenticates as \(String(describing: principal))")
            }

            let subject = "conf-\(UUID().uuidString.prefix(8).lowercased())"
            let key = try await store.mint(name: "Phone", subject: subject, role: .viewer, kind: .managed, mintedBy: Principal.ownerSubject)
            let hex = { (text: Substring) in text.allSatisfy { $0.isHexDigit && !$0.isUppercase } }
            check("the original's shapes", key.key.id.count == 16 && hex(Substring(key.key.id)), "key id \(key.key.id)")
            check("the original's shapes", key.token.hasPrefix("sk_") && key.token.count == 67 && hex(key.token.dropFirst(3)), "token of \(key.token.count) characters")
            let expected = Principal(keyID: key.key.id, subject: subject, role: .viewer)
            let principal = await store.authenticate(key.token)
            check("mint and authenticate", principal == expected, "authenticated as \(String(describing: principal))")
            check("known after a look-up", store.knownPrincipal(for: key.token) == expected, "the node forgot a key it just looked up")
            let byID = await store.principal(keyID: key.key.id)
            check("mint and authenticate", byID == expected, "by id: \(String(describing: byID))")

            for token in ["", "sk_", "sk_" + String(repeating: "0", count: 64), "Bearer " + key.token, key.token + "x", String(repeating: "s", count: 5000)] {
                let nobody = await store.authenticate(token)
                check("unknown tokens are nobody", nobody == nil, "a token of \(token.count) characters authenticated as \(String(describing: nobody))")
                check("unknown tokens are nobody", store.knownPrincipal(for: token) == nil, "a token of \(token.count) characters is known")
            }

            let listed = try await store.list()
            check("no token is listed", listed.contains { $0.id == key.key.id } && !"\(listed)".contains(key.token.dropFirst(3)), "the list shows a token or lacks the key")
            let own = try await store.list(subject: subject)
            check("a subject's list", own.map(\.id) == [key.key.id] && own.first?.mintedBy == Principal.ownerSubject && own.first?.kind == .managed,
                  "\(subject)'s list: \(own)")

            // Minted in a transaction that then fails: it never existed.
            var undone: MintedKey?
            _ = try? await storage.withTransaction { session -> Void in
                undone = try store.mint(name: "Undone", subject: subject, role: .viewer, kind: .manual, mintedBy: nil, in: session)
                throw Refused()
            }
            if let undone {
                let nobody = await store.authenticate(undone.token)
                check("mint commits with its transaction", nobody == nil, "a key minted in a rolled-back transaction authenticates")
            } else {
                check("mint commits with its transaction", false, "nothing was minted inside the transaction")
            }

            // Revoked for another subject: nothing happens; revoked in a failed transaction: still works.
            let foreign = try await storage.withTransaction { session in try store.revoke(id: key.key.id, subject: "someone-else", in: session) }
            check("revocation by subject", !foreign, "a revocation limited to another subject revoked the key")
            _ = try? await storage.withTransaction { session -> Void in
                _ = try store.revoke(id: key.key.id, subject: nil, in: session)
                throw Refused()
            }
            let afterRollback = await store.authenticate(key.token)
            check("revoke commits with its transaction", afterRollback == expected, "after a rolled-back revocation: \(String(describing: afterRollback))")

            let revoked = try await storage.withTransaction { session in try store.revoke(id: key.key.id, subject: subject, in: session) }
            check("revoke", revoked, "the revocation found no active key")
            let refused = await store.authenticate(key.token)
            check("revoke refuses at once", refused == nil && store.knownPrincipal(for: key.token) == nil,
                  "a revoked key still authenticates as \(String(describing: refused))")
            let refusedByID = await store.principal(keyID: key.key.id)
            check("revoke refuses at once", refusedByID == nil, "a revoked key's id still names \(String(describing: refusedByID))")
            let twice = try await storage.withTransaction { session in try store.revoke(id: key.key.id, subject: nil, in: session) }
            check("revoke", !twice, "a second revocation found an active key")
            let shown = try await store.list(subject: subject).first
            check("revoke", shown?.revokedAt != nil, "the list does not show the revocation: \(String(describing: shown))")
        } catch {
            failures.append(ConformanceFailure(rule: "no errors", detail: "\(fixture.engine): \(error)"))
        }
        return failures
    }
}
