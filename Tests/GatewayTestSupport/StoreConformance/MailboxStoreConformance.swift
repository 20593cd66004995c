import Crypto
import Foundation
import RelayMailbox

/// What every engine's `MailboxStore` (the relay's storage) must do: bearers kept as the hashes given, nothing in the
/// clear at rest; items numbered one past any number the phone was given, never reused (not after a cursor ack dropped
/// the newest, not across 2^31) and none stored for a phone that is not there or turned the relay off; the two acks'
/// rules (a cursor ack drops records, never an unread result); a command held once by its id and kept until applied;
/// the gateway online only after a poll; whole text (NUL, emoji, 100 KB) in ids and sealed text; a phone forgotten
/// whole. Where other processes share the database: items appended on every process at once get distinct,
/// consecutive numbers, and one command id held on every process at once is held once. Returns the broken rules.
public struct MailboxStoreConformance: Sendable {
    public let fixture: any StorageEngineFixture
    public let store: any MailboxStore
    /// Other relay processes' handles on the same database (empty: only one process uses this engine's store).
    public let otherNodes: [any MailboxStore]

    public init(fixture: any StorageEngineFixture, store: any MailboxStore, otherNodes: [any MailboxStore] = []) {
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
        do {
            // Bearers: only their hashes, read back as given.
            let gatewayBearer = "gateway-bearer-\(UUID().uuidString)", phoneBearer = "phone-bearer-\(UUID().uuidString)"
            let box = try await store.createMailbox(secretSHA256: SHA256.hash(Array(gatewayBearer.utf8)))
            check("mailboxes", box.hasPrefix("mbx_") && box.count == 28, "a mailbox id is \(box)")
            check("mailboxes", try await store.mailboxSecret(box) == SHA256.hash(Array(gatewayBearer.utf8)), "the mailbox's hash read back differs")
            check("mailboxes", try await store.mailboxSecret(box + "0") == nil, "an unknown mailbox has a secret")
            try await store.putDevice(mailbox: box, device: "phone", secretSHA256: SHA256.hash(Array(phoneBearer.utf8)), cursor: 0)
            check("phones", try await store.deviceSecret(mailbox: box, device: "phone") == SHA256.hash(Array(phoneBearer.utf8)), "the phone's hash read back differs")
            check("phones", try await store.deviceSecret(mailbox: box, device: "tablet") == nil, "an unknown phone has a secret")
            check("phones", try await store.carriageOn(mailbox: box, device: "phone"), "a new phone's carriage is off")
            check("phones", try await !store.carriageOn(mailbox: box, device: "tablet"), "an unknown phone's carriage is on")

            // Numbering and the two acks.
            func append(_ text: String, kind: MailboxItemKind = .record, seq: Int64? = nil) async throws -> Int64? {
                try await store.appendItem(mailbox: box, device: "phone", NewMailboxItem(ciphertext: text, kind: kind, seq: seq))
            }
            let first = try await append("r1", seq: 5), result = try await append("res", kind: .result), later = try await append("r2", seq: 9)
            check("numbering", (first, result, later) == (1, 2, 3), "the first three items are \(String(describing: (first, result, later)))")
            try await store.ack(mailbox: box, device: "phone", recordsThroughSeq: 5)
            let acked = try await store.items(mailbox: box, device: "phone", after: 0).map(\.n)
            check("cursor ack", acked == [2, 3], "after a cursor ack through seq 5: \(acked)")
            try await store.ack(mailbox: box, device: "phone", recordsThroughSeq: 100)
            check("cursor ack", try await store.items(mailbox: box, device: "phone", after: 0).map(\.n) == [2], "an unread result was dropped by a cursor ack, or a record kept")
            // The newest item (3) is gone: its number is still never given again.
            let fourth = try await append("r3", seq: 10)
            check("never reused", fourth == 4, "after the newest item was dropped by a cursor ack the next item is \(String(describing: fourth)), not 4")
            try await store.ack(mailbox: box, device: "phone", through: 2_147_483_647)
            check("item ack", try await store.items(mailbox: box, device: "phone", after: 0).isEmpty, "items up to the acked number are still held")
            let past = try await append("r4", seq: 11)
            check("never reused", past == 2_147_483_648, "after an ack through 2^31 - 1 the next item is \(String(describing: past))")
            try await store.ack(mailbox: box, device: "phone", through: 5)
            let after = try await append("r5", seq: 12)
            check("never reused", after == 2_147_483_649, "an older ack moved the numbering back: \(String(describing: after))")
            let page = try await store.items(mailbox: box, device: "phone", after: 2_147_483_647, limit: 1)
            check("pages", page == [MailboxItem(n: 2_147_483_648, ciphertext: "r4", tooLarge: false)], "a page of one after 2^31 - 1: \(page)")
            let marker = try await store.appendItem(mailbox: box, device: "phone", NewMailboxItem(ciphertext: nil, tooLarge: true, kind: .result))
            let markers = try await store.items(mailbox: box, device: "phone", after: 0).filter { $0.n == marker }
            check("too large", markers == [MailboxItem(n: marker ?? -1, ciphertext: nil, tooLarge: true)], "a too-large marker read back as \(markers)")

            // Nothing for a phone that is not there, or that turned the relay off; on again, numbering after the cursor.
            check("no phone, no item", try await store.appendItem(mailbox: box, device: "tablet", NewMailboxItem(ciphertext: "x")) == nil,
                  "an item was stored for a phone not in the mailbox")
            check("commands", try await store.holdCommand(mailbox: box, device: "phone", id: "cmd-1", ciphertext: "c1"), "a first command was not held")
            try await store.setCarriage(mailbox: box, device: "phone", on: false, cursor: nil)
            check("carriage off", try await !store.carriageOn(mailbox: box, device: "phone"), "the carriage is still on")
            check("carriage off", try await store.items(mailbox: box, device: "phone", after: 0).isEmpty, "items are held after the carriage went off")
            check("carriage off", try await store.heldCommands(mailbox: box).isEmpty, "commands are held after the carriage went off")
            check("carriage off", try await append("while off") == nil, "an item was stored with the carriage off")
            try await store.setCarriage(mailbox: box, device: "phone", on: true, cursor: 3_000_000_000)
            check("carriage on", try await append("on again") == 3_000_000_001, "the first item after turning on at cursor 3e9 is not 3e9 + 1")

            // Commands: held once by id, oldest first, kept until applied.
            check("commands", try await store.holdCommand(mailbox: box, device: "phone", id: "cmd-1", ciphertext: "c1"), "a command was not held")
            check("commands", try await !store.holdCommand(mailbox: box, device: "phone", id: "cmd-1", ciphertext: "c1 again"), "a command id was held twice")
            try await Task.sleep(for: .milliseconds(5))
            _ = try await store.holdCommand(mailbox: box, device: "phone", id: "cmd-0", ciphertext: "c0")
            let held = try await store.heldCommands(mailbox: box)
            check("commands", held == [HeldMailboxCommand(device: "phone", id: "cmd-1", ciphertext: "c1"), HeldMailboxCommand(device: "phone", id: "cmd-0", ciphertext: "c0")],
                  "held commands, oldest first: \(held.map(\.id))")
            let counts = [try await store.heldCommandCount(mailbox: box, device: "phone", upTo: 10), try await store.heldCommandCount(mailbox: box, device: "phone", upTo: 1),
                          try await store.heldCommandCount(mailbox: box, device: "other", upTo: 10)]
            check("commands", counts == [2, 1, 0], "held commands counted (up to 10, up to 1, another phone's): \(counts)")
            let phones = [try await store.deviceCount(mailbox: box, upTo: 100), try await store.deviceCount(mailbox: box, upTo: 1)]
            check("phones counted", phones[1] == 1 && phones[0] >= 1 && phones[0] < 100, "phones in the mailbox counted (up to 100, up to 1): \(phones)")
            try await store.applied(mailbox: box, device: "phone", id: "cmd-1")
            check("commands", try await store.heldCommands(mailbox: box).map(\.id) == ["cmd-0"], "an applied command is still held")

            // The gateway is online only after a poll.
            check("online", try await !store.isOnline(mailbox: box), "a mailbox never polled is online")
            try await store.touch(mailbox: box)
            check("online", try await store.isOnline(mailbox: box), "a mailbox just polled is offline")
            check("online", try await !store.isOnline(mailbox: "mbx_none"), "an unknown mailbox is online")

            // APNs tokens: set, replaced.
            try await store.setAPNs(mailbox: box, device: "phone", token: MailboxAPNsToken(token: String(repeating: "a", count: 64), environment: "development"))
            try await store.setAPNs(mailbox: box, device: "phone", token: MailboxAPNsToken(token: String(repeating: "b", count: 64), environment: "production"))
            let token = try await store.apns(mailbox: box, device: "phone")
            check("apns", token == MailboxAPNsToken(token: String(repeating: "b", count: 64), environment: "production"),
                  "the replaced APNs token read back as \(String(describing: token))")

            // Whole text: ids, sealed text and command text as a JSON string can hold them.
            let odd = "id \u{0} ✓ 🧪"
            let long = "sealed \u{0} ✓ " + String(repeating: "x", count: 100_000)
            try await store.putDevice(mailbox: box, device: odd, secretSHA256: SHA256.hash(Array("odd".utf8)), cursor: 0)
            let n = try await store.appendItem(mailbox: box, device: odd, NewMailboxItem(ciphertext: long))
            check("whole text", try await store.items(mailbox: box, device: odd, after: 0) == [MailboxItem(n: n ?? -1, ciphertext: long, tooLarge: false)],
                  "an item with NUL and 100 KB, for a phone id with NUL, did not come back whole")
            _ = try await store.holdCommand(mailbox: box, device: odd, id: odd, ciphertext: long)
            check("whole text", try await store.heldCommands(mailbox: box).contains(HeldMailboxCommand(device: odd, id: odd, ciphertext: long)),
                  "a command with NUL and 100 KB did not come back whole")

            // Nothing of a bearer in the clear at rest.
            let rest = try await fixture.storedValues()
            for bearer in [gatewayBearer, phoneBearer] {
                check("hashes at rest", !rest.contains { contains($0, Array(bearer.utf8)) }, "a bearer is in the database in the clear")
            }

            // A phone forgotten whole.
            try await store.deleteDevice(mailbox: box, device: odd)
            check("forgotten", try await store.deviceSecret(mailbox: box, device: odd) == nil, "a deleted phone still has a secret")
            check("forgotten", try await store.items(mailbox: box, device: odd, after: 0).isEmpty, "a deleted phone's items are held")
            check("forgotten", try await !store.heldCommands(mailbox: box).contains { $0.device == odd }, "a deleted phone's commands are held")

            // Several processes on one database.
            if !otherNodes.isEmpty {
                let all = [store] + otherNodes
                try await store.putDevice(mailbox: box, device: "busy", secretSHA256: SHA256.hash(Array("busy".utf8)), cursor: 0)
                let numbers = try await withThrowingTaskGroup(of: [Int64].self) { group in
                    for node in all {
                        group.addTask {
                            var got: [Int64] = []
                            for index in 0..<30 {
                                if let n = try await node.appendItem(mailbox: box, device: "busy", NewMailboxItem(ciphertext: "item \(index)")) { got.append(n) }
                            }
                            return got
                        }
                    }
                    return try await group.reduce(into: [Int64]()) { $0 += $1 }
                }
                let expected = Array(1...Int64(30 * all.count))
                check("numbered across processes", numbers.sorted() == expected,
                      "\(all.count) processes appending 30 each got \(numbers.count) numbers, \(Set(numbers).count) distinct, up to \(numbers.max() ?? 0)")
                let held = try await withThrowingTaskGroup(of: Bool.self) { group in
                    for node in all { group.addTask { try await node.holdCommand(mailbox: box, device: "busy", id: "same", ciphertext: "once") } }
                    return try await group.reduce(into: 0) { $0 += $1 ? 1 : 0 }
                }
                check("held once across processes", held == 1, "one command id held on \(all.count) processes at once was held \(held) times")
                try await otherNodes[0].touch(mailbox: box)
                check("online across processes", try await store.isOnline(mailbox: box), "a poll on another process did not count here")
            }
        } catch {
            check("no errors", false, "\(error)")
        }
        return failures
    }
}
