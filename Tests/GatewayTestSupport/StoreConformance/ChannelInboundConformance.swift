import Agents
import ChannelDelivery
import Foundation

/// What every engine's `ChannelInboundStore` must do: no cursor until one is stored, and the cursor moves only with a
/// batch that names one; a message is taken once per channel (again with another run id: nothing; on another
/// channel: its own), in the batch's order; what the service sent comes back whole (NUL, emoji, 100 KB) in ids, chats,
/// text and cursor; a taken message is unstarted until a run with its id is recorded, oldest first; and of one
/// message taken at once on every node, exactly one take wins. Returns the broken rules (empty: conformant).
public struct ChannelInboundConformance: Sendable {
    public let engine: String
    public let store: any ChannelInboundStore
    /// The run store of the same database: a message is started once its run is recorded there.
    public let runs: any RunStore
    /// The same database as other gateway processes hold it (nil: the engine has no other writers).
    public let otherNodes: [any ChannelInboundStore]

    public init(engine: String, store: any ChannelInboundStore, runs: any RunStore, otherNodes: [any ChannelInboundStore] = []) {
        self.engine = engine
        self.store = store
        self.runs = runs
        self.otherNodes = otherNodes
    }

    static func message(_ id: String, channel: String, text: String = "hello", replyTo: String = "chat-1") -> TakenMessage {
        TakenMessage(channel: channel, messageID: id, runID: "run_\(UUID().uuidString.prefix(12).lowercased())", replyTo: replyTo, text: text)
    }

    public func run() async -> [ConformanceFailure] {
        var failures: [ConformanceFailure] = []
        func check(_ rule: String, _ holds: Bool, _ detail: @autoclosure () -> String) {
            if !holds { failures.append(ConformanceFailure(rule: rule, detail: "\(engine): \(detail())")) }
        }
        do {
            let channel = "telegram-\(UUID().uuidString.prefix(8))"
            let now = Date(timeIntervalSince1970: 1_780_000_000)
            check("cursors", try await store.cursor(channel: channel) == nil, "a new channel has a cursor")
            let batch = [Self.message("1", channel: channel), Self.message("2", channel: channel), Self.message("3", channel: channel)]
            let taken = try await store.take(batch, channel: channel, cursor: "c-3", now: now)
            check("taken once", taken == batch, "a first batch of 3 took \(taken.map(\.messageID))")
            check("cursors", try await store.cursor(channel: channel) == "c-3", "the cursor after a batch is not c-3")
            var again = batch.map { var message = $0; message.runID += "-again"; return message }
            again.append(Self.message("4", channel: channel))
            let second = try await store.take(again, channel: channel, cursor: nil, now: now.addingTimeInterval(1))
            check("taken once", second.map(\.messageID) == ["4"], "the same messages again (with message 4) took \(second.map(\.messageID))")
            check("cursors", try await store.cursor(channel: channel) == "c-3", "a batch without a cursor moved it")
            let elsewhere = try await store.take([Self.message("1", channel: channel + "-other")], channel: channel + "-other", cursor: nil, now: now)
            check("per channel", elsewhere.count == 1, "message 1 on another channel was not taken")

            let unstarted = try await store.unstarted(channel: channel)
            check("unstarted", unstarted.map(\.messageID) == ["1", "2", "3", "4"] && unstarted.map(\.runID) == (batch + [second[0]]).map(\.runID),
                  "unstarted before any run: \(unstarted.map(\.messageID))")
            _ = try await runs.begin(RunRecord(id: batch[1].runID, agentID: "inbound", sessionID: "\(channel)-chat-1", trigger: .channel, startedAt: now), fire: nil)
            let left = try await store.unstarted(channel: channel)
            check("unstarted", left.map(\.messageID) == ["1", "3", "4"], "after message 2's run began: \(left.map(\.messageID))")

            // Whole: what a JSON string from a service can hold.
            let odd = "NUL \u{0} ✓ 🧪 " + String(repeating: "x", count: 100_000)
            let whole = Self.message("id \u{0} ✓", channel: channel, text: odd, replyTo: "chat \u{0} 🧪")
            _ = try await store.take([whole], channel: channel, cursor: "cursor \u{0} ✓", now: now.addingTimeInterval(2))
            let read = try await store.unstarted(channel: channel).last
            check("whole text", read == whole, "a message with NUL, emoji and 100 KB came back as \(String(describing: read?.messageID)), \(read?.text.count ?? -1) characters")
            check("whole text", try await store.cursor(channel: channel) == "cursor \u{0} ✓", "a cursor with NUL and emoji did not come back whole")

            // One message polled by every node at once (and twice on this one): one take wins.
            let raced = Self.message("raced", channel: channel)
            let contenders = [store, store] + otherNodes
            let wins = try await withThrowingTaskGroup(of: Int.self) { group in
                for (index, contender) in contenders.enumerated() {
                    var message = raced
                    message.runID += "-\(index)"
                    group.addTask { try await contender.take([message], channel: channel, cursor: "raced-\(index)", now: now).count }
                }
                return try await group.reduce(0, +)
            }
            check("one of concurrent takes", wins == 1, "\(wins) of \(contenders.count) concurrent takes of one message won")

            // With other nodes on the database, one polls a channel at a time; a lease that ran out passes on.
            if let other = otherNodes.first {
                let polled = "poll-\(UUID().uuidString.prefix(8))"
                // Leases long enough that no stall of a loaded machine lets one run out while the checks need it held.
                let first = try await store.holdPoll(channel: polled, node: "node-a", lease: .seconds(30))
                let refused = try await other.holdPoll(channel: polled, node: "node-b", lease: .seconds(30))
                let renewed = try await store.holdPoll(channel: polled, node: "node-a", lease: .seconds(30))
                let elsewhere = try await other.holdPoll(channel: polled + "-other", node: "node-b", lease: .seconds(30))
                check("one poller", first && !refused && renewed && elsewhere,
                      "a: \(first), b while a holds: \(refused), a again: \(renewed), b on another channel: \(elsewhere)")
                // The holder's renewal sets the lease anew, shorter too; then it runs out.
                let shortened = try await store.holdPoll(channel: polled, node: "node-a", lease: .seconds(1))
                check("one poller", shortened, "a could not renew its own lease")
                try await Task.sleep(for: .milliseconds(1300))
                let takenOver = try await other.holdPoll(channel: polled, node: "node-b", lease: .seconds(30))
                let lost = try await store.holdPoll(channel: polled, node: "node-a", lease: .seconds(1))
                check("one poller", takenOver && !lost, "after a's lease ran out: b took it \(takenOver), a still held it \(lost)")
            }
        } catch {
            failures.append(ConformanceFailure(rule: "no errors", detail: "\(engine): \(error)"))
        }
        return failures
    }
}
