import ChannelAPI
import Foundation
import JSON
import Mobile
import Storage

/// What every engine's inbox and devices aggregates must do: a line reaches the devices its destination names now,
/// with one wake-up per device that takes pushes and a `skipped` step for the others; each person sees `all`
/// lines, their own and their phones', never another's and never the System agent's; a device's view shows only its
/// own device lines and its own read state; pages run newest first without overlap; unread counts and receipts
/// agree (the first read time is kept; a removed device's receipts go with it); text comes back whole (NUL, emoji,
/// 100 KB); a device id belongs to one person; concurrent writers lose nothing and a feed that reads after its last
/// `seq` while they write misses nothing; a write bumps only the pages it changes; and with a second node on the
/// same database, its writes reach this node's pages. Returns the broken rules (empty: conformant).
///
/// Each run needs a fresh database (the rules count every line in it).
public struct InboxConformance: Sendable {
    public let fixture: any StorageEngineFixture
    public let inbox: any Inbox
    public let devices: any DeviceRegistry
    public let outbox: any PushOutbox
    /// The same database as another gateway process holds it (nil: the engine has no other writers).
    public let otherNode: (any Inbox)?

    public init(fixture: any StorageEngineFixture, inbox: any Inbox, devices: any DeviceRegistry, outbox: any PushOutbox, otherNode: (any Inbox)? = nil) {
        self.fixture = fixture
        self.inbox = inbox
        self.devices = devices
        self.outbox = outbox
        self.otherNode = otherNode
    }

    static let token = String(repeating: "ab", count: 32)

    /// A phone's registration as the app sends it (the store suites' devices): `environment` its push environment,
    /// `startToken` its Live Activity push-to-start token.
    static func registration(_ id: String, token: String?, notifications: Bool, platform: String = "ios", environment: String? = nil,
                             startToken: String? = nil) throws -> DeviceRegistration {
        var body: [String: JSONValue] = ["id": .string(id), "name": .string("\(id) ✓"), "platform": .string(platform), "notifications_enabled": .bool(notifications)]
        if let token { body["push_token"] = .string(token) }
        if let environment { body["push_environment"] = .string(environment) }
        if let startToken { body["live_start_token"] = .string(startToken) }
        return try DeviceRegistration(json: JSONObject(body))
    }

    static func output(_ text: String, agent: String = "brief", title: String? = nil, metadata: [String: String] = [:]) -> Output {
        Output(agentID: agent, agentName: "Morning brief", sessionID: "ses_conformance", title: title, parts: [text], metadata: metadata)
    }

    public func run() async -> [ConformanceFailure] {
        var failures: [ConformanceFailure] = []
        let engine = fixture.engine
        func check(_ rule: String, _ holds: Bool, _ detail: @autoclosure () -> String) {
            if !holds { failures.append(ConformanceFailure(rule: rule, detail: "\(engine): \(detail())")) }
        }
        do {
            try await devicesAndRecipients(check)
            try await visibilityAndPages(check)
            try await receipts(check)
            try await wholeText(check)
            try await generations(check)
            try await ownershipAndRemoval(check)
            try await concurrentWriters(check)
            try await otherNodeWrites(check)
            try await callersTransactions(check)
            try await consoleLines(check)
        } catch {
            failures.append(ConformanceFailure(rule: "no errors", detail: "\(engine): \(error)"))
        }
        return failures
    }

    typealias Check = (String, Bool, @autoclosure () -> String) -> Void

    /// alice: a phone that takes pushes, a tablet without a token, a watch with notifications off; bob: one phone.
    private func devicesAndRecipients(_ check: Check) async throws {
        for (id, token, on) in [("alice-phone", Self.token, true), ("alice-tablet", nil, true), ("alice-watch", Self.token, false)] {
            let new = try await devices.register(try Self.registration(id, token: token, notifications: on), subject: "alice", keyID: "key_alice")
            check("a new device", new, "registering \(id) the first time answered false")
        }
        _ = try await devices.register(try Self.registration("bob-phone", token: "fcm-token-bob", notifications: true, platform: "android"),
                                       subject: "bob", keyID: "key_bob")
        let again = try await devices.register(try Self.registration("alice-phone", token: Self.token, notifications: true), subject: "alice", keyID: "key_alice")
        check("a known device", !again, "registering alice-phone again answered that it is new")

        let line = try await inbox.insertDelivery(Self.output("for alice"), destination: .user("alice"))
        check("recipients", line.recipients == ["alice-phone", "alice-tablet", "alice-watch"], "a line for alice went to \(line.recipients)")
        check("wake-ups", line.wakeUps == 1, "\(line.wakeUps) wake-ups for one phone that takes pushes")
        let queued = try await outbox.entries(deliveryID: line.id)
        check("wake-ups", queued.map(\.deviceID) == ["alice-phone"],
              "the outbox holds \(queued.map(\.deviceID)) for the line")
        let everyone = try await inbox.insertDelivery(Self.output("for everyone"), destination: .all)
        check("recipients", everyone.recipients == ["alice-phone", "alice-tablet", "alice-watch", "bob-phone"], "a line for all went to \(everyone.recipients)")
        check("wake-ups", everyone.wakeUps == 2, "\(everyone.wakeUps) wake-ups for a line to all (two phones take pushes)")
        let system = try await inbox.insertDelivery(Self.output("housekeeping", agent: MobileStore.systemAgentID), destination: .user("alice"))
        let systemWakeUps = try await outbox.entries(deliveryID: system.id)
        check("the System agent", system.wakeUps == 0 && systemWakeUps.isEmpty, "the System agent's line queued wake-ups")
        let nobody = try await inbox.insertDelivery(Self.output("for no device"), destination: .device("no-such-device"))
        check("recipients", nobody.recipients.isEmpty && nobody.wakeUps == 0, "a line for an unknown device went to \(nobody.recipients)")

        check("queued wake-ups", try await inbox.queueWakeUps(WakeSignal.delivery(id: "dlv_none", agentID: "brief"), subject: "alice") == 1,
              "queueWakeUps for alice did not queue exactly one (her phone)")
        check("queued wake-ups", try await !inbox.queueWakeUp(WakeSignal.delivery(id: "dlv_none", agentID: "brief"), deviceID: "alice-tablet"),
              "a wake-up was queued for a tablet with no token")
        check("queued wake-ups", try await inbox.queueWakeUp(WakeSignal.delivery(id: "dlv_none", agentID: "brief"), deviceID: "alice-phone"),
              "no wake-up was queued for alice's phone")
    }

    private func visibilityAndPages(_ check: Check) async throws {
        let phoneOnly = try await inbox.insertDelivery(Self.output("to the phone"), destination: .device("alice-phone"))
        let forBob = try await inbox.insertDelivery(Self.output("for bob"), destination: .user("bob"))
        let alice = try await inbox.deliveries(subject: "alice", deviceID: nil, before: nil, limit: 100)
        let texts = alice.items.map(\.body)
        check("who sees a line", texts == ["to the phone", "for everyone", "for alice"], "alice sees \(texts)")
        let tablet = try await inbox.deliveries(subject: "alice", deviceID: "alice-tablet", before: nil, limit: 100).items.map(\.body)
        check("a device's view", tablet == ["for everyone", "for alice"], "alice's tablet sees \(tablet)")
        let bob = try await inbox.deliveries(subject: "bob", deviceID: "bob-phone", before: nil, limit: 100).items.map(\.body)
        check("who sees a line", bob == ["for bob", "for everyone"], "bob's phone sees \(bob)")
        check("who sees a line", try await inbox.delivery(id: phoneOnly.id, subject: "bob", deviceID: nil) == nil, "bob read alice's phone's line by id")
        check("who sees a line", try await inbox.delivery(id: forBob.id, subject: "alice", deviceID: "alice-phone") == nil, "alice read bob's line by id")
        check("who sees a line", try await inbox.delivery(id: phoneOnly.id, subject: "alice", deviceID: "alice-tablet") == nil,
              "alice's tablet read a line for her phone by id")
        check("who sees a line", try await inbox.delivery(id: phoneOnly.id, subject: "alice", deviceID: nil)?.body == "to the phone",
              "alice could not read her phone's line by id")

        // Pages: newest first, no overlap, `hasMore` until the end.
        for n in 0..<5 { _ = try await inbox.insertDelivery(Self.output("page line \(n)"), destination: .user("alice")) }
        var seen: [String] = [], cursor: Int64? = nil, pages = 0
        while pages < 10 {
            let page = try await inbox.deliveries(subject: "alice", deviceID: nil, before: cursor, limit: 3)
            seen += page.items.map(\.body)
            pages += 1
            check("pages", page.items.map(\.seq) == page.items.map(\.seq).sorted(by: >), "a page is not newest first: \(page.items.map(\.seq))")
            guard page.hasMore, let last = page.items.last else { break }
            cursor = last.seq
        }
        let expected = (0..<5).reversed().map { "page line \($0)" } + ["to the phone", "for everyone", "for alice"]
        check("pages", seen == expected && pages == 3, "pages of 3 gave \(seen) in \(pages) pages")
        let feed = try await inbox.lines(subject: "alice", after: 0, limit: 100).map(\.body)
        check("the feed", feed == expected.reversed(), "alice's feed after 0 is \(feed)")
        let all = try await inbox.lines(subject: "alice", after: 0, limit: 100)
        if all.count > 3 {
            let rest = try await inbox.lines(subject: "alice", after: all[2].seq, limit: 2).map(\.body)
            check("the feed", rest == Array(all[3...].prefix(2).map(\.body)), "alice's feed after the third line is \(rest)")
        }
    }

    private func receipts(_ check: Check) async throws {
        let line = try await inbox.insertDelivery(Self.output("to be read"), destination: .user("alice"))
        let visible = try await inbox.deliveries(subject: "alice", deviceID: "alice-phone", before: nil, limit: 100)
        let before = visible.unreadCount
        check("unread", before == visible.items.count && before > 1, "alice's phone has \(before) unread of \(visible.items.count) lines it can see, none read")
        check("receipts", try await inbox.markRead(deliveryID: line.id, deviceID: "alice-phone", subject: "alice"), "alice could not mark her line read")
        let first = try await inbox.delivery(id: line.id, subject: "alice", deviceID: "alice-phone")?.readAt
        try await Task.sleep(for: .milliseconds(20))
        check("receipts", try await inbox.markRead(deliveryID: line.id, deviceID: "alice-phone", subject: "alice"), "marking a read line read again refused")
        let second = try await inbox.delivery(id: line.id, subject: "alice", deviceID: "alice-phone")?.readAt
        check("receipts", first != nil && first == second, "the read time moved from \(String(describing: first)) to \(String(describing: second))")
        check("receipts", try await inbox.delivery(id: line.id, subject: "alice", deviceID: "alice-tablet")?.readAt == nil, "a read on the phone shows on the tablet")
        check("receipts", try await inbox.delivery(id: line.id, subject: "alice", deviceID: nil)?.readAt == first, "the person's view does not show the phone's read")
        let after = try await inbox.deliveries(subject: "alice", deviceID: "alice-phone", before: nil, limit: 1).unreadCount
        check("unread", after == before - 1, "unread went from \(before) to \(after) after one read")
        let person = try await inbox.deliveries(subject: "alice", deviceID: nil, before: nil, limit: 1).unreadCount
        check("unread", person == before - 1, "alice has \(person) unread after reading one of \(before)")
        check("receipt refusals", try await !inbox.markRead(deliveryID: line.id, deviceID: "bob-phone", subject: "bob"), "bob marked alice's line read")
        check("receipt refusals", try await !inbox.markRead(deliveryID: line.id, deviceID: "bob-phone", subject: "alice"), "alice marked a line read on bob's phone")
        check("receipt refusals", try await !inbox.markRead(deliveryID: "dlv_unknown", deviceID: "alice-phone", subject: "alice"), "an unknown line was marked read")
        let phoneLine = try await inbox.insertDelivery(Self.output("phone only"), destination: .device("alice-phone"))
        check("receipt refusals", try await !inbox.markRead(deliveryID: phoneLine.id, deviceID: "alice-tablet", subject: "alice"),
              "the tablet marked a line for the phone read")
    }

    private func wholeText(_ check: Check) async throws {
        let body = "nul \u{0} emoji 👩‍👩‍👧 " + String(repeating: "ü", count: 50_000)
        let title = "Title \u{0} ✓"
        let stored = try await inbox.insertDelivery(Output(agentID: "brief", agentName: "Brief \u{0} ✓", sessionID: "ses \u{0}", title: title,
                                                           parts: [body, "second"], metadata: ["k\u{0}": "v \u{0} ✓"]), destination: .user("alice"))
        let read = try await inbox.delivery(id: stored.id, subject: "alice", deviceID: nil)
        check("whole text", read?.title == title && read?.parts == [body, "second"] && read?.agentName == "Brief \u{0} ✓" && read?.sessionID == "ses \u{0}",
              "the line came back as title \(String(describing: read?.title.prefix(20))), parts \(read?.parts.map { $0.prefix(20) } ?? [])")
        check("whole text", read?.metadata == ["k\u{0}": "v \u{0} ✓"], "metadata came back as \(String(describing: read?.metadata))")
    }

    private func generations(_ check: Check) async throws {
        let generations = inbox.inboxGenerations
        let (alice, bob) = (generations.generation(of: "alice"), generations.generation(of: "bob"))
        _ = try await inbox.insertDelivery(Self.output("bump alice"), destination: .user("alice"))
        check("pages go stale", generations.generation(of: "alice") != alice, "a line for alice left her pages current")
        check("pages stay current", generations.generation(of: "bob") == bob, "a line for alice made bob's pages stale")
        let bobNow = generations.generation(of: "bob")
        _ = try await inbox.insertDelivery(Self.output("bump everyone"), destination: .all)
        check("pages go stale", generations.generation(of: "bob") != bobNow, "a line for all left bob's pages current")
        let line = try await inbox.insertDelivery(Self.output("read me"), destination: .user("bob"))
        let beforeRead = generations.generation(of: "bob")
        _ = try await inbox.markRead(deliveryID: line.id, deviceID: "bob-phone", subject: "bob")
        check("pages go stale", generations.generation(of: "bob") != beforeRead, "a receipt left bob's pages current")
    }

    private func ownershipAndRemoval(_ check: Check) async throws {
        do {
            _ = try await devices.register(try Self.registration("alice-phone", token: "other", notifications: true, platform: "android"), subject: "bob", keyID: "key_bob")
            check("one owner", false, "bob registered alice's phone")
        } catch let error as DeviceOwnershipError {
            check("one owner", error == .ownedByAnotherSubject, "threw \(error)")
        }
        let phone = try await devices.device(id: "alice-phone")
        check("one owner", phone?.subject == "alice" && phone?.pushToken == Self.token && phone?.platform == .ios,
              "after bob's attempt alice's phone is \(String(describing: phone))")
        let listed = try await devices.list(subject: "alice").map(\.id)
        check("devices", Set(listed) == ["alice-phone", "alice-tablet", "alice-watch"] && listed.count == 3, "alice's devices are \(listed)")
        check("devices", try await devices.allDevices().count == 4, "allDevices is not the four registered")
        let owned = try? await devices.ownedDevice("alice-phone", subject: "bob")
        check("one owner", owned == nil, "bob's ownedDevice gave alice's phone")

        // A removed device's receipts go with it: registered again, it starts unread.
        let line = try await inbox.insertDelivery(Self.output("watch this"), destination: .user("alice"))
        _ = try await inbox.markRead(deliveryID: line.id, deviceID: "alice-watch", subject: "alice")
        check("removal", try await !devices.deleteDevice(id: "alice-watch", subject: "bob"), "bob removed alice's watch")
        check("removal", try await devices.deleteDevice(id: "alice-watch", subject: "alice"), "alice could not remove her watch")
        check("removal", try await devices.device(id: "alice-watch") == nil, "the removed watch is still there")
        _ = try await devices.register(try Self.registration("alice-watch", token: nil, notifications: false), subject: "alice", keyID: "key_other")
        check("removal", try await inbox.delivery(id: line.id, subject: "alice", deviceID: "alice-watch")?.readAt == nil,
              "a device registered again under a removed id kept its receipt")
        let removed = try await devices.removeDevices(registeredByKey: "key_other")
        let (watch, phoneAfter) = (try await devices.device(id: "alice-watch"), try await devices.device(id: "alice-phone"))
        check("removal", removed == 1 && watch == nil && phoneAfter != nil,
              "removing the phones of one key removed \(removed)")
    }

    /// Writers on every node at once; a reader follows alice's feed by its last `seq` all the while.
    private func concurrentWriters(_ check: Check) async throws {
        let inbox = self.inbox
        let writers = [inbox] + (otherNode.map { [$0] } ?? [])
        let start = try await inbox.latestDeliverySeq()
        // Every fifth line to all, every third of the rest to bob (not in alice's feed), the others to alice.
        @Sendable func destination(_ n: Int) -> Destination { n % 5 == 4 ? .all : (n % 3 == 0 ? .user("bob") : .user("alice")) }
        @Sendable func forAlice(_ n: Int) -> Bool { n % 5 == 4 || n % 3 != 0 }
        let perWriter = (0..<15).filter(forAlice).count
        let outcome = try await withThrowingTaskGroup(of: [String].self) { group in
            for (index, writer) in writers.enumerated() {
                for task in 0..<4 {
                    group.addTask {
                        var ids: [String] = []
                        for n in 0..<15 {
                            let line = try await writer.insertDelivery(Self.output("writer \(index).\(task).\(n)"), destination: destination(n))
                            if forAlice(n) { ids.append(line.id) }
                        }
                        return ids
                    }
                }
            }
            // The reader: what it has seen, by id; it never goes back.
            group.addTask {
                var cursor = start, seen: [String] = []
                for _ in 0..<200 {
                    let page = try await inbox.lines(subject: "alice", after: cursor, limit: 7)
                    seen += page.map(\.id)
                    if let last = page.last { cursor = last.seq } else { try await Task.sleep(for: .milliseconds(2)) }
                }
                return ["reader"] + seen
            }
            var written: [String] = [], read: [String] = []
            for try await ids in group { if ids.first == "reader" { read = Array(ids.dropFirst()) } else { written += ids } }
            // What the reader has not reached yet it reads now, still after its last `seq`.
            var cursor = read.isEmpty ? start : (try await inbox.delivery(id: read.last!, subject: "alice", deviceID: nil)?.seq ?? start)
            while true {
                let page = try await inbox.lines(subject: "alice", after: cursor, limit: 50)
                guard let last = page.last else { break }
                read += page.map(\.id)
                cursor = last.seq
            }
            return (written, read)
        }
        let (ids, read) = outcome
        check("concurrent writers", Set(ids).count == ids.count && ids.count == writers.count * 4 * perWriter,
              "\(ids.count) distinct ids for alice, \(writers.count * 4 * perWriter) written")
        check("a feed misses nothing", Set(read) == Set(ids) && read.count == ids.count,
              "the feed read \(read.count) lines (\(Set(ids).subtracting(read).count) missed, \(read.count - Set(read).count) twice) of \(ids.count)")
        let latest = try await inbox.latestDeliverySeq()
        let feed = try await inbox.lines(subject: "alice", after: start, limit: 1000)
        check("latest sequence", latest >= (feed.last?.seq ?? 0), "latestDeliverySeq \(latest) is below a line's \(feed.last?.seq ?? 0)")
        check("the feed", feed.map(\.seq) == feed.map(\.seq).sorted() && Set(feed.map(\.seq)).count == feed.count, "the feed's sequences are not increasing")
    }

    struct Rollback: Error {}

    /// Writes made inside a caller's transaction commit with it, or not at all (an idempotent call's answer is
    /// recorded in that same transaction).
    private func callersTransactions(_ check: Check) async throws {
        let (inbox, devices, fixture) = (self.inbox, self.devices, self.fixture)
        do {
            _ = try await fixture.storage.withTransaction { session -> Int in
                _ = try devices.register(try Self.registration("carol-tablet", token: nil, notifications: true), subject: "carol", keyID: nil, in: session)
                _ = try inbox.insertDelivery(Self.output("rolled back"), destination: .user("carol"), in: session)
                try fixture.writeEffect("rolled back", in: session)
                throw Rollback()
            }
        } catch is Rollback {}
        let (tablet, carolLines, effects) = (try await devices.device(id: "carol-tablet"), try await inbox.lines(subject: "carol", after: 0, limit: 1000),
                                             try await fixture.effects())
        let rolledBack = carolLines.filter { $0.body == "rolled back" }.count
        check("the caller's transaction", tablet == nil && rolledBack == 0 && !effects.contains("rolled back"),
              "a rolled-back transaction left the device \(tablet != nil), \(rolledBack) lines")
        let stored = try await fixture.storage.withTransaction { session in
            _ = try devices.register(try Self.registration("carol-phone", token: Self.token, notifications: true), subject: "carol", keyID: "key_carol", in: session)
            let stored = try inbox.insertDelivery(Self.output("committed"), destination: .user("carol"), in: session)
            try fixture.writeEffect("committed", in: session)
            return stored
        }
        let (phone, committed, effectsNow) = (try await devices.device(id: "carol-phone"), try await inbox.delivery(id: stored.id, subject: "carol", deviceID: nil),
                                              try await fixture.effects())
        check("the caller's transaction", phone != nil && committed?.body == "committed" && effectsNow.contains("committed") && stored.wakeUps == 1,
              "a committed transaction kept the device \(phone != nil), the line \(committed != nil), \(stored.wakeUps) wake-ups")
        do {
            _ = try await fixture.storage.withTransaction { session -> Int in
                _ = try inbox.markRead(deliveryID: stored.id, deviceID: "carol-phone", subject: "carol", in: session)
                _ = try devices.deleteDevice(id: "carol-phone", subject: "carol", in: session)
                throw Rollback()
            }
        } catch is Rollback {}
        let (unread, stillThere) = (try await inbox.delivery(id: stored.id, subject: "carol", deviceID: "carol-phone")?.readAt, try await devices.device(id: "carol-phone"))
        check("the caller's transaction", unread == nil && stillThere != nil, "a rolled-back receipt and removal left read \(unread != nil), device \(stillThere != nil)")
        let removed = try await fixture.storage.withTransaction { session in try devices.removeDevices(registeredByKey: "key_carol", in: session) }
        let gone = try await devices.device(id: "carol-phone") == nil
        check("the caller's transaction", removed == 1 && gone, "removing carol's key's phones in a transaction removed \(removed)")
    }

    /// The console's reads: the inbox's own visibility (never bob's line, never the System agent's), newest first,
    /// one agent's lines, lines by id prefix (a prefix with LIKE's and regex's special characters matches nothing
    /// else), a cursor, a limit; and wake-ups queued for a person inside the caller's transaction go with it.
    private func consoleLines(_ check: Check) async throws {
        let inbox = self.inbox
        let other = try await inbox.insertDelivery(Self.output("console other agent", agent: "digest"), destination: .user("dave"))
        let lines = [try await inbox.insertDelivery(Self.output("console 1"), destination: .user("dave")),
                     try await inbox.insertDelivery(Self.output("console 2"), destination: .user("dave"))]
        _ = try await inbox.insertDelivery(Self.output("console hidden", agent: MobileStore.systemAgentID), destination: .user("dave"))
        _ = try await inbox.insertDelivery(Self.output("console erin"), destination: .user("erin"))
        let mineLines = try await inbox.consoleLines(subject: "dave", agentID: nil, idPrefix: nil, before: nil, limit: 100)
        let mine = mineLines.map(\.body)
        let everyone = try await inbox.deliveries(subject: "dave", deviceID: nil, before: nil, limit: 100).items.map(\.body)
        check("console lines", mine == everyone && mine.prefix(3) == ["console 2", "console 1", "console other agent"],
              "dave's console lines are \(mine), his inbox \(everyone)")
        let digest = try await inbox.consoleLines(subject: "dave", agentID: "digest", idPrefix: nil, before: nil, limit: 100).map(\.body)
        check("console filters", digest == ["console other agent"], "dave's lines of agent digest are \(digest)")
        let byID = try await inbox.consoleLines(subject: "dave", agentID: nil, idPrefix: String(lines[0].id.prefix(lines[0].id.count - 1)),
                                                before: nil, limit: 100).map(\.id)
        check("console filters", byID.contains(lines[0].id) && !byID.contains(other.id), "a prefix of \(lines[0].id) found \(byID)")
        let exact = try await inbox.consoleLines(subject: "dave", agentID: nil, idPrefix: lines[1].id, before: nil, limit: 100).map(\.id)
        check("console filters", exact == [lines[1].id], "the whole id \(lines[1].id) found \(exact)")
        for pattern in ["%", "_", "dlv_%", ".*", "dlv\\"] {
            let found = try await inbox.consoleLines(subject: "dave", agentID: nil, idPrefix: pattern, before: nil, limit: 100)
            check("console filters", found.isEmpty, "the prefix \(pattern) found \(found.map(\.id))")
        }
        let erinsByID = try await inbox.consoleLines(subject: "dave", agentID: nil, idPrefix: "dlv_", before: nil, limit: 100).map(\.body)
        check("console lines", !erinsByID.contains("console erin") && !erinsByID.contains("console hidden"), "dave's lines by prefix show \(erinsByID)")
        let page = try await inbox.consoleLines(subject: "dave", agentID: nil, idPrefix: nil, before: mineLines.first { $0.id == lines[1].id }?.seq ?? 0, limit: 1).map(\.body)
        check("console pages", page == ["console 1"], "one line before console 2 is \(page)")

        _ = try await devices.register(try Self.registration("dave-phone", token: Self.token, notifications: true), subject: "dave", keyID: nil)
        let signal = WakeSignal.delivery(id: "dlv_console", agentID: "brief")
        do {
            _ = try await fixture.storage.withTransaction { session -> Int in
                _ = try inbox.queueWakeUps(signal, subject: "dave", in: session)
                throw Rollback()
            }
        } catch is Rollback {}
        let queuedBefore = try await outbox.entries().filter { $0.deviceID == "dave-phone" }.count
        let queued = try await fixture.storage.withTransaction { session in try inbox.queueWakeUps(signal, subject: "dave", in: session) }
        let queuedAfter = try await outbox.entries().filter { $0.deviceID == "dave-phone" }.count
        check("queued wake-ups", queuedBefore == 0 && queued == 1 && queuedAfter == 1,
              "in the caller's transaction: \(queuedBefore) after a rollback, \(queued) queued and \(queuedAfter) stored after a commit")
    }

    /// A second node's writes reach this node's pages, and its generations once it follows the other writers.
    private func otherNodeWrites(_ check: Check) async throws {
        guard let otherNode else { return }
        try await inbox.followOtherWriters()
        defer { inbox.stopFollowing() }
        // The listener is up once a write of this node's own is heard back.
        try await Task.sleep(for: .milliseconds(200))
        let generations = inbox.inboxGenerations
        let before = generations.generation(of: "alice")
        let line = try await otherNode.insertDelivery(Self.output("from node b"), destination: .user("alice"))
        check("another node's line", try await inbox.delivery(id: line.id, subject: "alice", deviceID: nil)?.body == "from node b",
              "a line written on node b is not read on node a")
        let deadline = ContinuousClock.now + .seconds(5)
        while generations.generation(of: "alice") == before, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        check("another node's write", generations.generation(of: "alice") != before, "node b's line for alice left node a's pages current for 5 s")
    }
}
