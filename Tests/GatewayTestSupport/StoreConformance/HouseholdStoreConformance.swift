import Crypto
import Foundation
import Household
import Identity
import Storage

/// What every engine's `HouseholdStore` must do: a name gives the same subject every time, a different person whose
/// name slugs the same the next free one, and members are read back by subject; a code pairs once, as its person
/// and role, with a managed key minted by the code's maker, until it expires; of 20 concurrent redemptions exactly
/// one mints a key; unknown, used and expired codes give their errors; a code or a redemption whose transaction
/// rolls back leaves nothing (the code stays usable); a person holds at most `PairingCodes.maximumKeysPerPerson`
/// keys active or made within `PairingCodes.keyWindow` (past it a code is refused and stays unused); no code or minted
/// token is at rest in the clear. Returns the
/// broken rules (empty: conformant).
///
/// `keys` is the key store `store` mints through, on the same database.
public struct HouseholdStoreConformance: Sendable {
    public let fixture: any StorageEngineFixture
    public let keys: any APIKeyStore
    public let store: any HouseholdStore

    public init(fixture: any StorageEngineFixture, keys: any APIKeyStore, store: any HouseholdStore) {
        self.fixture = fixture
        self.keys = keys
        self.store = store
    }

    struct Refused: Error {}
    /// Rolls a transaction back, carrying out what was made in it.
    struct RolledBack: Error {
        var offer: PairingOffer?
        var minted: MintedKey?
    }

    public func run() async -> [ConformanceFailure] {
        var failures: [ConformanceFailure] = []
        func check(_ rule: String, _ holds: Bool, _ detail: @autoclosure () -> String) {
            if !holds { failures.append(ConformanceFailure(rule: rule, detail: "\(fixture.engine): \(detail())")) }
        }
        let store = self.store
        let storage = fixture.storage
        /// What redeeming `code` at `now` answers: the minted key's subject and role, or the error.
        func redemption(_ code: String, at now: Date = Date()) async -> String {
            do {
                let minted = try await store.redeem(code: code, deviceName: "Phone", now: now)
                return "paired \(minted.key.subject) as \(minted.key.role.rawValue)"
            } catch let error as PairingError {
                return "\(error)"
            } catch {
                return "failed: \(error)"
            }
        }
        // Times are stored to the millisecond: from a whole second on, every expected end is exact.
        let start = Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.up))
        do {
            // Members per household.
            let priya = try await store.subject(forName: "Priya")
            let again = try await store.subject(forName: " priya ")
            let other = try await store.subject(forName: "Príya")
            let third = try await store.subject(forName: "PRÍYA")
            let ownerNamed = try await store.subject(forName: "Owner")
            check("members per household", priya == "priya" && again == "priya", "Priya is \(priya), then \(again)")
            check("members per household", other == "priya-2" && third == "priya-2", "another Priya is \(other), then \(third)")
            check("members per household", ownerNamed == "owner-2", "a person named Owner is \(ownerNamed), not owner-2")
            let names = [try await store.displayName(subject: "priya"), try await store.displayName(subject: "priya-2"),
                         try await store.displayName(subject: Principal.ownerSubject), try await store.displayName(subject: "nobody")]
            check("members per household", names == ["Priya", "Príya", "Owner", nil], "names read back: \(names)")
            let inSession = try await storage.withTransaction { session in try store.displayName(subject: "priya-2", in: session) }
            check("members per household", inSession == "Príya", "read in a transaction: \(String(describing: inSession))")
            _ = try? await storage.withTransaction { session -> Void in
                _ = try store.subject(forName: "Rolled Back", in: session)
                throw Refused()
            }
            let rolledBack = try await store.displayName(subject: "rolled-back")
            check("members per household", rolledBack == nil, "a member recorded in a rolled-back transaction is known as \(rolledBack ?? "")")

            // A code pairs once, as its person and role, minted by its maker.
            let maker = try await keys.mint(name: "Laptop", subject: Principal.ownerSubject, role: .admin, kind: .manual, mintedBy: Principal.ownerSubject)
            let offer = try await store.createOffer(subject: priya, name: "Priya", role: .operator, createdBy: maker.key.id, madeBy: Principal.ownerSubject, now: start)
            check("codes once", offer.code.count == 16 && offer.code.allSatisfy({ "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567".contains($0) }), "a code \(offer.code)")
            check("codes once", offer.subject == "priya" && offer.role == .operator && offer.expiresAt == start.addingTimeInterval(PairingCodes.lifetime),
                  "the offer is for \(offer.subject) (\(offer.role)) until \(offer.expiresAt)")
            let typed = offer.code.lowercased().prefix(8) + "- " + offer.code.lowercased().dropFirst(8)
            let minted = try await store.redeem(code: String(typed), deviceName: "Priya's phone", now: start.addingTimeInterval(1))
            check("codes once", minted.key.subject == "priya" && minted.key.role == .operator && minted.key.kind == .managed
                  && minted.key.name == "Priya's phone" && minted.key.mintedBy == Principal.ownerSubject,
                  "the minted key: \(minted.key)")
            let caller = await keys.authenticate(minted.token)
            check("codes once", caller == Principal(keyID: minted.key.id, subject: "priya", role: .operator), "the minted token authenticates as \(String(describing: caller))")
            let reused = await redemption(offer.code, at: start.addingTimeInterval(2))
            check("codes once", reused == "\(PairingError.alreadyUsed)", "a used code: \(reused)")
            let priyasKeys = try await keys.list(subject: "priya").filter { $0.revokedAt == nil }
            check("codes once", priyasKeys.map(\.id) == [minted.key.id], "priya has keys \(priyasKeys.map(\.id)), not only \(minted.key.id)")

            // Unknown and expired codes.
            for wrong in [PairingCodes.newCode(), "", "AAAABBBBCCCCDDDD", offer.code + "A", String(offer.code.dropLast())] {
                let answer = await redemption(wrong, at: start)
                check("code errors", answer == "\(PairingError.unknownCode)", "\"\(wrong)\": \(answer)")
            }
            let onTime = try await store.createOffer(subject: Principal.ownerSubject, name: "Owner", role: .admin, createdBy: nil, madeBy: Principal.ownerSubject, now: start)
            let late = try await store.createOffer(subject: Principal.ownerSubject, name: "Owner", role: .admin, createdBy: nil, madeBy: Principal.ownerSubject, now: start)
            let justInTime = await redemption(onTime.code, at: start.addingTimeInterval(PairingCodes.lifetime - 1))
            check("code errors", justInTime == "paired owner as admin", "a code a second before its 2 minutes: \(justInTime)")
            for attempt in 1...2 {
                let expired = await redemption(late.code, at: start.addingTimeInterval(PairingCodes.lifetime))
                check("code errors", expired == "\(PairingError.expired)", "a code at its 2 minutes (attempt \(attempt)): \(expired)")
            }

            // Nothing that pairs is at rest in the clear.
            let stored = try await fixture.storedValues()
            check("nothing in the clear", !stored.isEmpty, "the database holds nothing at all")
            for code in [offer.code, onTime.code, late.code] {
                check("nothing in the clear", !stored.contains { Self.contains($0, Array(code.utf8)) }, "the code \(code) is stored")
            }
            check("nothing in the clear", !stored.contains { Self.contains($0, Array(minted.token.utf8)) }, "the minted token is stored")

            // An offer and a redemption whose transactions roll back leave nothing: the code stays usable.
            do {
                try await storage.withTransaction { session -> Void in
                    throw RolledBack(offer: try store.createOffer(subject: priya, name: "Priya", role: .viewer, createdBy: nil,
                                                                   madeBy: Principal.ownerSubject, now: Date(), in: session))
                }
                check("rollback", false, "the offer's transaction was not rolled back")
            } catch let rolledBack as RolledBack {
                let answer = await redemption(rolledBack.offer?.code ?? "")
                check("rollback", answer == "\(PairingError.unknownCode)", "a code whose offer rolled back: \(answer)")
            }
            let kept = try await store.createOffer(subject: priya, name: "Priya", role: .viewer, createdBy: nil, madeBy: Principal.ownerSubject)
            do {
                try await storage.withTransaction { session -> Void in
                    throw RolledBack(minted: try store.redeem(code: kept.code, deviceName: "Lost phone", now: Date(), in: session))
                }
                check("rollback", false, "the redemption's transaction was not rolled back")
            } catch let rolledBack as RolledBack {
                if let abandoned = rolledBack.minted {
                    let ghost = await keys.authenticate(abandoned.token)
                    check("rollback", ghost == nil, "the key of a rolled-back redemption authenticates")
                }
            }
            let afterRollback = await redemption(kept.code)
            check("rollback", afterRollback == "paired priya as viewer", "a code after its redemption rolled back: \(afterRollback)")

            // Twenty gateways redeem one code at once: one key.
            let contested = try await store.createOffer(subject: other, name: "Príya", role: .viewer, createdBy: nil, madeBy: Principal.ownerSubject)
            let before = try await keys.list(subject: other).count
            let outcomes = await withTaskGroup(of: String.self) { group in
                for _ in 0..<20 {
                    group.addTask {
                        do { return try await store.redeem(code: contested.code, deviceName: "Phone").token } catch let error as PairingError { return "\(error)" } catch { return "failed: \(error)" }
                    }
                }
                return await group.reduce(into: [String]()) { $0.append($1) }
            }
            let winners = outcomes.filter { $0 != "\(PairingError.alreadyUsed)" }
            check("one of concurrent redemptions", winners.count == 1, "\(winners.count) of 20 concurrent redemptions were not refused as used: \(winners.map { $0.prefix(60) })")
            let after = try await keys.list(subject: other).count
            check("one of concurrent redemptions", after == before + 1, "20 concurrent redemptions minted \(after - before) keys")
            if winners.count == 1, let token = winners.first {
                let winner = await keys.authenticate(token)
                check("one of concurrent redemptions", winner?.subject == other && winner?.role == .viewer, "the winner's key: \(String(describing: winner))")
            }

            // A bounded number of active keys per person: past it a code is refused and stays unused; a revoked key
            // frees its place.
            let busy = try await store.subject(forName: "Busy")
            for n in 0..<PairingCodes.maximumKeysPerPerson {
                let code = try await store.createOffer(subject: busy, name: "Busy", role: .viewer, createdBy: nil, madeBy: busy)
                let answer = await redemption(code.code)
                if answer != "paired busy as viewer" { check("keys per person", false, "pairing number \(n + 1): \(answer)"); break }
            }
            let overflow = try await store.createOffer(subject: busy, name: "Busy", role: .viewer, createdBy: nil, madeBy: busy)
            let refused = await redemption(overflow.code)
            check("keys per person", refused == "\(PairingError.tooManyKeys)", "pairing past \(PairingCodes.maximumKeysPerPerson) active keys: \(refused)")
            let held = try await keys.list(subject: busy).filter { $0.revokedAt == nil }
            check("keys per person", held.count == PairingCodes.maximumKeysPerPerson, "\(held.count) active keys after the refusal")
            if let first = held.first {
                // A key revoked today still counts (pairing and revoking in a loop would grow the table without end);
                // a day after it was made it no longer does.
                _ = try await keys.revoke(id: first.id, subject: nil, storage: storage)
                let sameDay = await redemption(overflow.code)
                check("keys per person", sameDay == "\(PairingError.tooManyKeys)", "the refused code right after a key was revoked: \(sameDay)")
                let nextDay = Date().addingTimeInterval(PairingCodes.keyWindow + 60)
                let later = try await store.createOffer(subject: busy, name: "Busy", role: .viewer, createdBy: nil, madeBy: busy, now: nextDay)
                let freed = await redemption(later.code, at: nextDay)
                check("keys per person", freed == "paired busy as viewer", "a code a day after a key was revoked: \(freed)")
            }
        } catch {
            failures.append(ConformanceFailure(rule: "no errors", detail: "\(fixture.engine): \(error)"))
        }
        return failures
    }

    static func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
        guard !needle.isEmpty, haystack.count >= needle.count else { return false }
        return (0...(haystack.count - needle.count)).contains { start in haystack[start..<(start + needle.count)].elementsEqual(needle) }
    }
}
