import ChannelAPI
import Foundation
import JSON
import Mobile
import Storage

/// What every engine's `DeviceNodeStore` must do, through `DeviceNodes` as the routes use it: a node reads back as
/// registered (text whole, NUL and emoji included) and a later registration replaces it; a device id another person
/// holds, as a node or as a registered phone, is refused and the holder's node is unchanged; a person's nodes are
/// theirs, newest first; a command is queued with its wake-up in one commit (or neither, on a rollback); the same id
/// again is the stored command; the queue limit counts only unexpired queued commands; pending is oldest first; of
/// concurrent claims exactly one wins, and only a queued, unexpired command can be claimed; an outcome settles a
/// running command once, its error text whole; expiry settles what is still open and nothing else; removing the
/// device removes its node and expires its open commands; and with a second gateway on the same database, a waiter on
/// one sees an outcome posted through the other. Returns the broken rules (empty: conformant).
///
/// Each run needs a fresh database (the devices are fixed ids).
public struct DeviceNodeStoreConformance: Sendable {
    public let fixture: any StorageEngineFixture
    public let store: any DeviceNodeStore
    public let inbox: any Inbox
    public let devices: any DeviceRegistry
    public let outbox: any PushOutbox
    /// The same database as another gateway process holds it (nil: the engine has no other writers).
    public let otherNode: (any DeviceNodeStore)?

    public init(fixture: any StorageEngineFixture, store: any DeviceNodeStore, inbox: any Inbox, devices: any DeviceRegistry, outbox: any PushOutbox,
                otherNode: (any DeviceNodeStore)? = nil) {
        self.fixture = fixture
        self.store = store
        self.inbox = inbox
        self.devices = devices
        self.outbox = outbox
        self.otherNode = otherNode
    }

    static func node(_ deviceID: String, subject: String, name: String = "Alice's phone", capabilities: [String] = DeviceNodes.commands,
                     at updatedAt: Date = Date()) -> DeviceNodes.Node {
        DeviceNodes.Node(deviceID: deviceID, subject: subject, name: name, platform: "ios", model: "iPhone16,1", osVersion: "18.1", appVersion: "2.3.0",
                         capabilities: capabilities, permissions: ["location": "granted", "contacts": "denied"], updatedAt: updatedAt)
    }

    public func run() async -> [ConformanceFailure] {
        var failures: [ConformanceFailure] = []
        let engine = fixture.engine
        func check(_ rule: String, _ holds: Bool, _ detail: @autoclosure () -> String) {
            if !holds { failures.append(ConformanceFailure(rule: rule, detail: "\(engine): \(detail())")) }
        }
        let clock = SystemWallClock()
        let nodes = DeviceNodes(store: store, inbox: inbox, dispatcher: nil, clock: clock)
        func register(_ node: DeviceNodes.Node) async throws {
            _ = try await nodes.transactions.withTransaction { session in try nodes.register(node, in: session) }
        }
        func refusal(_ body: () async throws -> Void) async -> NodeError? {
            do { try await body(); return nil } catch let error as NodeError { return error } catch { return .invalid("\(error)", field: nil) }
        }
        do {
            _ = try await devices.register(try InboxConformance.registration("alice-phone", token: InboxConformance.token, notifications: true),
                                           subject: "alice", keyID: nil)
            _ = try await devices.register(try InboxConformance.registration("bob-phone", token: InboxConformance.token, notifications: true),
                                           subject: "bob", keyID: nil)

            // Registration, read back whole, and replaced.
            let base = Date(timeIntervalSince1970: 1_780_000_000)
            let odd = "Alice\u{0}s 📱 phone"
            try await register(Self.node("alice-phone", subject: "alice", name: odd, at: base))
            let read = try await nodes.node(deviceID: "alice-phone", subject: "alice")
            check("a node reads back as registered", read == Self.node("alice-phone", subject: "alice", name: odd, at: base), "read back: \(String(describing: read))")
            try await register(Self.node("alice-phone", subject: "alice", name: "Renamed", capabilities: ["canvas.present", "device.info"], at: base + 10))
            let replaced = try await nodes.node(deviceID: "alice-phone", subject: "alice")
            check("a later registration replaces", replaced?.name == "Renamed" && replaced?.capabilities == ["canvas.present", "device.info"],
                  "after re-registering: \(String(describing: replaced))")
            try await register(Self.node("alice-tablet", subject: "alice", capabilities: ["canvas.present", "device.info"], at: base + 20))

            // A device id is one person's.
            let taken = await refusal { try await register(Self.node("alice-phone", subject: "mallory")) }
            check("a node id is one person's", taken == .notFound, "mallory registering alice's node: \(String(describing: taken))")
            let device = await refusal { try await register(Self.node("bob-phone", subject: "mallory")) }
            check("a node id is one person's", device == .notFound, "mallory registering bob's registered phone: \(String(describing: device))")
            let stillAlice = try await nodes.node(deviceID: "alice-phone", subject: "alice")
            let forMallory = try await nodes.node(deviceID: "alice-phone", subject: "mallory")
            check("a node id is one person's", stillAlice?.name == "Renamed" && forMallory == nil, "alice's: \(String(describing: stillAlice)), mallory's: \(String(describing: forMallory))")
            let alices = try await nodes.nodes(subject: "alice").map(\.deviceID)
            let bobs = try await nodes.nodes(subject: "bob")
            check("a person's nodes, newest first", alices == ["alice-tablet", "alice-phone"] && bobs.isEmpty, "alice: \(alices), bob: \(bobs.map(\.deviceID))")

            // A command and its wake-up commit together.
            let wakesBefore = try await outbox.entries().filter { $0.deviceID == "alice-phone" }.count
            let first = try await nodes.enqueue(deviceID: "alice-phone", subject: "alice", id: "cmd_1", command: "device.info", params: ["detail": "full"], expiresAt: nil)
            let wakesAfter = try await outbox.entries().filter { $0.deviceID == "alice-phone" }
            check("a command is queued with its wake-up", first.status == .queued && wakesAfter.count == wakesBefore + 1
                  && wakesAfter.last?.signal.extra["command_id"] == "cmd_1", "command \(first), wake-ups \(wakesBefore) → \(wakesAfter.count)")
            struct Abandon: Error {}
            do {
                _ = try await nodes.transactions.withTransaction { session in
                    _ = try nodes.enqueue(deviceID: "alice-phone", subject: "alice", id: "cmd_rolled_back", command: "device.info", params: [:], expiresAt: nil, in: session)
                    throw Abandon()
                }
            } catch is Abandon {}
            let rolledBack = try await store.command(id: "cmd_rolled_back", deviceID: "alice-phone", subject: "alice")
            let wakesAfterRollback = try await outbox.entries().filter { $0.deviceID == "alice-phone" }.count
            check("a rollback leaves nothing", rolledBack == nil && wakesAfterRollback == wakesAfter.count,
                  "rolled back: \(String(describing: rolledBack)), wake-ups \(wakesAfterRollback)")
            let again = try await nodes.enqueue(deviceID: "alice-phone", subject: "alice", id: "cmd_1", command: "device.info", params: ["detail": "full"], expiresAt: nil)
            check("the same id is the same command", abs(again.createdAt.timeIntervalSince(first.createdAt)) < 0.002 && again.params == first.params, "again: \(again)")
            let otherParams = await refusal {
                _ = try await nodes.enqueue(deviceID: "alice-phone", subject: "alice", id: "cmd_1", command: "device.info", params: ["detail": "less"], expiresAt: nil)
            }
            check("the same id is the same command", otherParams == .conflict, "the same id with other params: \(String(describing: otherParams))")

            // The queue limit counts unexpired queued commands only (the store's own rule, at a small limit).
            let now = Date()
            func fresh(_ id: String, expires: Date) -> DeviceNodes.Command {
                DeviceNodes.Command(id: id, deviceID: "alice-tablet", subject: "alice", command: "device.info", params: [:], status: .queued, result: nil,
                                    error: nil, createdAt: now, expiresAt: expires, completedAt: nil)
            }
            let limited: [Bool] = try await nodes.transactions.withTransaction { session in
                _ = try store.insert(fresh("old", expires: now - 60), queueLimit: 3, now: now, in: session)
                var made: [Bool] = []
                for n in 0..<3 { made.append(try store.insert(fresh("q\(n)", expires: now + 300), queueLimit: 3, now: now, in: session).created) }
                return made
            }
            let full = await refusal {
                _ = try await nodes.transactions.withTransaction { session in try store.insert(fresh("q3", expires: now + 300), queueLimit: 3, now: now, in: session) }
            }
            check("the queue limit", limited == [true, true, true] && full == .queueFull(3), "three inserts: \(limited), the fourth: \(String(describing: full))")
            let pending = try await store.pending(deviceID: "alice-tablet", now: now, limit: 2).map(\.id)
            check("pending: queued and unexpired, oldest first", pending == ["q0", "q1"], "pending: \(pending)")

            // Claims: one wins.
            let claimStore = otherNode ?? store
            let wins = try await withThrowingTaskGroup(of: Bool.self) { group in
                for n in 0..<8 {
                    let store = n.isMultiple(of: 2) ? self.store : claimStore
                    group.addTask { try await store.transactions.withTransaction { session in try store.claim(id: "cmd_1", deviceID: "alice-phone", now: Date(), in: session) } }
                }
                return try await group.reduce(0) { $0 + ($1 ? 1 : 0) }
            }
            let claimed = try await nodes.command(id: "cmd_1", deviceID: "alice-phone", subject: "alice")
            check("one claim wins", wins == 1 && claimed.status == .running, "\(wins) of 8 concurrent claims won; status \(claimed.status)")
            let expiredClaim = try await nodes.transactions.withTransaction { session in try store.claim(id: "old", deviceID: "alice-tablet", now: now, in: session) }
            check("an expired command cannot be claimed", !expiredClaim, "a command past its expiry was claimed")

            // The outcome, once, posted through the other gateway and seen by a waiter here.
            let otherNodes = DeviceNodes(store: claimStore, inbox: inbox, dispatcher: nil, clock: clock)
            let waiter = Task { try await nodes.waitForOutcome(id: "cmd_1", deviceID: "alice-phone", subject: "alice", wait: .seconds(10)) }
            try await Task.sleep(for: .milliseconds(300))
            let errorText = "no\u{0} battery 🔋"
            _ = try await otherNodes.transactions.withTransaction { session in
                try otherNodes.finish(id: "cmd_1", deviceID: "alice-phone", subject: "alice", status: .failed, result: ["battery": 0.02], error: errorText, in: session)
            }
            let seen = try await waiter.value
            check("a waiter sees an outcome posted elsewhere", seen.status == .failed && seen.error == errorText && seen.result == ["battery": 0.02]
                  && seen.completedAt != nil, "the waiter saw \(seen)")
            let second = try await nodes.transactions.withTransaction { session in
                try store.finish(id: "cmd_1", deviceID: "alice-phone", status: .completed, resultJSON: nil, error: nil, at: Date(), in: session)
            }
            check("an outcome settles once", !second, "a settled command took a second outcome")

            // Expiry settles what is open, nothing else.
            try await store.expire(id: "q0", deviceID: "alice-tablet", at: Date())
            try await store.expire(id: "cmd_1", deviceID: "alice-phone", at: Date())
            let q0 = try await nodes.command(id: "q0", deviceID: "alice-tablet", subject: "alice")
            let kept = try await nodes.command(id: "cmd_1", deviceID: "alice-phone", subject: "alice")
            check("expiry settles what is open", q0.status == .expired && q0.completedAt != nil && kept.status == .failed, "q0: \(q0.status), cmd_1: \(kept.status)")

            // Housekeeping removes what expired and settled before a time, nothing newer.
            let removed = try await store.removeSettled(before: now - 30)
            let oldAfter = try await store.command(id: "old", deviceID: "alice-tablet", subject: "alice")
            let q1After = try await store.command(id: "q1", deviceID: "alice-tablet", subject: "alice")
            let settledAfter = try await store.command(id: "cmd_1", deviceID: "alice-phone", subject: "alice")
            check("old commands removed", removed == 1 && oldAfter == nil && q1After != nil && settledAfter != nil,
                  "removed \(removed); old: \(String(describing: oldAfter?.status)), q1: \(String(describing: q1After?.status)), cmd_1: \(String(describing: settledAfter?.status))")

            // A removed device takes its node and its open commands with it.
            _ = try await devices.deleteDevice(id: "alice-phone", subject: "alice")
            try await register(Self.node("alice-phone", subject: "alice"))
            let open = try await nodes.enqueue(deviceID: "alice-phone", subject: "alice", id: "cmd_open", command: "device.info", params: [:], expiresAt: nil)
            _ = try await devices.deleteDevice(id: "alice-phone", subject: "alice")
            let gone = try await nodes.node(deviceID: "alice-phone", subject: "alice")
            let openAfter = try await nodes.command(id: open.id, deviceID: "alice-phone", subject: "alice")
            check("a removed device's node goes", gone == nil && openAfter.status == .expired, "node: \(String(describing: gone)), open command: \(openAfter.status)")
        } catch {
            failures.append(ConformanceFailure(rule: "no errors", detail: "\(engine): \(error)"))
        }
        return failures
    }
}
