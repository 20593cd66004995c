import Crypto
import Foundation
import RelayCarriage

/// What every engine's `RelayCarriageStore` must do: one mailbox per relay whichever node saves first, phones kept
/// with their secrets sealed (nothing of a secret or the bearer in the database at rest), registration, revocation
/// and forgetting, a phone's line that never moves back, and one carrier at a time with a lease that moves once it
/// runs out. Returns the broken rules (empty: conformant).
public struct RelayCarriageStoreConformance: Sendable {
    public let fixture: any StorageEngineFixture
    public let store: any RelayCarriageStore
    /// Other processes' handles on the same database (nil: only one process writes this engine's store).
    public let otherNodes: [any RelayCarriageStore]?

    public init(fixture: any StorageEngineFixture, store: any RelayCarriageStore, otherNodes: [any RelayCarriageStore]? = nil) {
        self.fixture = fixture
        self.store = store
        self.otherNodes = otherNodes
    }

    public func run() async -> [ConformanceFailure] {
        var failures: [ConformanceFailure] = []
        let engine = fixture.engine
        func check(_ rule: String, _ holds: Bool, _ detail: @autoclosure () -> String) {
            if !holds { failures.append(ConformanceFailure(rule: rule, detail: "\(engine): \(detail())")) }
        }
        let store = self.store
        let url = "https://relay.example.net"
        do {
            // One mailbox per relay: the first saved is kept, another relay's replaces it.
            check("no mailbox at first", try await store.mailbox(url: url) == nil, "a fresh store has a mailbox")
            let bearer = Base64URL.encode(SecureBytes.random(count: 32))
            let first = RelayMailboxAccess(id: "mbx_first", bearer: bearer)
            let kept = try await store.saveMailbox(url: url, first)
            check("mailbox kept", kept == first, "saving the first mailbox answered \(kept.id)")
            let raced = try await store.saveMailbox(url: url, RelayMailboxAccess(id: "mbx_second", bearer: "other"))
            check("one mailbox per relay", raced == first, "a second mailbox for the same relay answered \(raced.id), not the first")
            check("mailbox read back", try await store.mailbox(url: url) == first, "the mailbox read back differs")
            check("mailbox per relay url", try await store.mailbox(url: url + "/other") == nil, "another relay's URL read this mailbox")

            // Phones: enrolled with a sealed secret, registered, advanced, revoked, forgotten.
            let secret = SecureBytes.random(count: 32)
            try await store.enroll(deviceID: "key_phone", subject: "alice", secret: secret, after: 41)
            try await store.enroll(deviceID: "key_tablet", subject: "bob", secret: SecureBytes.random(count: 32), after: 0)
            let phones = try await store.phones()
            let phone = phones.first { $0.id == "key_phone" }
            check("enrolled", phones.count == 2 && phone == RelayPhone(id: "key_phone", subject: "alice", secret: secret, lastSeq: 41, registered: false, revoked: false),
                  "after two enrolments: \(phones.map(\.id)), the phone \(String(describing: phone.map { ($0.subject, $0.lastSeq, $0.registered, $0.revoked) }))")
            check("secret read back", try await store.secret(deviceID: "key_phone") == secret, "the phone's secret read back differs")
            check("unknown phone", try await store.secret(deviceID: "key_none") == nil, "an unknown phone has a secret")
            let rest = try await fixture.storedValues()
            for (name, form) in [("raw", secret), ("hex", Array(Hex.encode(secret).utf8)), ("base64url", Array(Base64URL.encode(secret).utf8)),
                                 ("bearer", Array(bearer.utf8))] {
                check("sealed at rest", !rest.contains { contains($0, form) }, "the \(name == "bearer" ? "mailbox bearer" : "pairing secret (\(name))") is in the database in the clear")
            }
            try await store.markRegistered("key_phone")
            try await store.advance("key_phone", to: 60)
            try await store.advance("key_phone", to: 50)
            let advanced = try await store.phones().first { $0.id == "key_phone" }
            check("registered", advanced?.registered == true, "markRegistered did not hold")
            check("a line never moves back", advanced?.lastSeq == 60, "after 60 then 50: \(String(describing: advanced?.lastSeq))")
            try await store.forgetRevoked("key_phone")
            check("only revoked phones are forgotten", try await store.phones().contains { $0.id == "key_phone" }, "a phone not revoked was forgotten")
            try await store.markRevoked("key_phone")
            check("revoked", try await store.phones().first { $0.id == "key_phone" }?.revoked == true, "markRevoked did not hold")
            try await store.forgetRevoked("key_phone")
            let left = try await store.phones().map(\.id)
            check("forgotten", left == ["key_tablet"], "after forgetting the revoked phone: \(left)")

            // The carriage: this node holds it; with other nodes, one at a time and taken over after the lease.
            check("a lone node carries", try await store.holdCarriage(node: "node-a", lease: .seconds(30)), "node-a could not take a free carriage")
            if let others = otherNodes, let other = others.first {
                check("one carrier", try await !other.holdCarriage(node: "node-b", lease: .seconds(30)), "node-b took a carriage node-a holds")
                check("the carrier renews", try await store.holdCarriage(node: "node-a", lease: .milliseconds(300)), "node-a could not renew its own carriage")
                try await Task.sleep(for: .milliseconds(700))
                // The lease ran out: of several nodes asking at once, exactly one takes it over.
                let takers = try await withThrowingTaskGroup(of: String?.self) { group in
                    for (index, node) in others.enumerated() {
                        group.addTask { try await node.holdCarriage(node: "node-\(index + 2)", lease: .seconds(30)) ? "node-\(index + 2)" : nil }
                    }
                    return try await group.reduce(into: [String]()) { if let taker = $1 { $0.append(taker) } }
                }
                check("taken over after the lease", takers.count == 1, "after the lease ran out, \(takers.count) of \(others.count) nodes took the carriage")
                check("the old carrier stands by", try await !store.holdCarriage(node: "node-a", lease: .seconds(30)), "node-a renewed a carriage taken over")
            }
        } catch {
            failures.append(ConformanceFailure(rule: "no errors", detail: "\(engine): \(error)"))
        }
        return failures
    }
}
