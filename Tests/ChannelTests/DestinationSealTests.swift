import ChannelAPI
import ChannelDelivery
import ChannelTesting
import Foundation
import GatewayTestSupport
import JSON
import Outbox
import SQLite
import Testing

/// A channel send's destination at rest: an incoming-webhook URL holds its key, so the outbox keeps every
/// destination sealed under the key beside the database, and runs show a URL by its host alone.
@Suite("Sealed destinations")
struct DestinationSealTests {
    static let url = "https://chat.googleapis.com/v1/spaces/AAAA/messages?key=SECRETKEY123&token=SECRETTOKEN456"
    static let key = (0..<32).map { UInt8($0) }

    @Test("sealed with a fresh nonce, opened under its key; a clear value from before reads as it was; another key does not open it")
    func sealAndOpen() throws {
        let seal = DestinationSeal(key: Self.key)
        let stored = try seal.seal(Self.url)
        #expect(!stored.contains("SECRET") && !stored.contains("googleapis"))
        #expect(try seal.open(stored) == Self.url)
        #expect(try seal.seal(Self.url) != stored, "the same destination seals differently each time")
        #expect(try seal.seal("") == "", "an empty to (the channel's default) stays empty")
        #expect(try seal.open("-1001234567") == "-1001234567")
        #expect(throws: (any Error).self) { try DestinationSeal(key: [UInt8](repeating: 7, count: 32)).open(stored) }
        #expect(DestinationSeal.display(Self.url) == "https://chat.googleapis.com/…")
        #expect(DestinationSeal.display("alice@example.test") == "alice@example.test" && DestinationSeal.display("reports") == "reports")
        // A URL that does not parse is shown by its scheme alone, never whole.
        for broken in ["https://hooks example.test/x?token=SECRETTOKEN456", "https://hooks.example.test/{SECRETTOKEN456}", " https://\nSECRETTOKEN456"] {
            let shown = DestinationSeal.display(broken)
            #expect(!shown.contains("SECRET") && shown.hasPrefix("https://") && shown.hasSuffix("…"), "\(broken) → \(shown)")
        }
    }

    @Test("the outbox stores no destination in the clear and gives the lane the real one; under another key a row reads as unreadable, never as a default")
    func throughTheOutbox() async throws {
        let path = TestGateway.makeTemporaryDirectory() + "/soulacy.db"
        let database = try DatabasePool(path: path, readerCount: 1)
        defer { database.close() }
        try database.migrate(ChannelOutboxSchema.migrations)
        let outbox = SQLiteChannelOutbox(database: database, destinationSeal: DestinationSeal(key: Self.key))
        let output = Output(agentID: "brief", agentName: "Brief", sessionID: "s-1", title: "Brief", parts: ["hello"], metadata: [:])
        let send = PendingChannelSend(channel: "google_chat", destination: Self.url, output: output, subject: "owner")
        try await outbox.enqueue([send], runID: "run-1", now: Date())
        let raw = try database.read { try $0.query("SELECT destination FROM channel_outbox").first?.string("destination") }
        #expect(raw?.contains("SECRET") == false && raw?.hasPrefix("sealed:v1:") == true, "\(raw ?? "nil")")
        #expect(try await outbox.entry(id: send.id)?.destination == Self.url)
        // A row written before destinations were sealed.
        try database.transaction { db in
            try db.run("UPDATE channel_outbox SET destination = ? WHERE id = ?", "-1001234567", send.id)
        }
        #expect(try await outbox.entry(id: send.id)?.destination == "-1001234567")
        // The key beside the database replaced: the row is not sent to the channel's default (an empty to).
        try database.transaction { db in try db.run("UPDATE channel_outbox SET destination = ? WHERE id = ?", raw, send.id) }
        let otherKey = SQLiteChannelOutbox(database: database, destinationSeal: DestinationSeal(key: [UInt8](repeating: 9, count: 32)))
        let unreadable = try #require(try await otherKey.entry(id: send.id)?.destination)
        #expect(unreadable == DestinationSeal.unreadable && !unreadable.isEmpty && unreadable.contains("\n"))
    }

    @Test("the lane never hands a destination sealed under another key to a channel: the send ends rejected, naming why")
    func unreadableNeverSent() async throws {
        let path = TestGateway.makeTemporaryDirectory() + "/soulacy.db"
        let database = try DatabasePool(path: path, readerCount: 1)
        defer { database.close() }
        try database.migrate(ChannelOutboxSchema.migrations)
        let output = Output(agentID: "brief", agentName: "Brief", sessionID: "s-1", title: "Brief", parts: ["hello"], metadata: [:])
        let send = PendingChannelSend(channel: "notes", destination: "chat-7", output: output, subject: "owner")
        try await SQLiteChannelOutbox(database: database, destinationSeal: DestinationSeal(key: Self.key)).enqueue([send], runID: nil, now: Date())
        // A channel that takes any one-word chat id, as a sidecar does.
        let channel = ScriptedChannel(name: "notes")
        let outbox = SQLiteChannelOutbox(database: database, destinationSeal: DestinationSeal(key: [UInt8](repeating: 9, count: 32)))
        let lane = ChannelLane(outbox: outbox, channels: OutboundChannelRegistry([channel]), clock: SystemWallClock(), policy: RetryPolicy(),
                               log: Log(minimum: .error), endpoints: ProcessEndpointStates())
        for entry in try await outbox.claimDue(owner: "test", now: Date(), lease: 60, limit: 10) { await lane.attempt(entry, owner: "test") }
        #expect(channel.sends.isEmpty, "the channel was handed \(channel.sends.map(\.destination))")
        let settled = try #require(try await outbox.entry(id: send.id))
        #expect(settled.state == .rejected && settled.lastReason?.contains("sealed under another key") == true, "\(settled)")
    }
}
