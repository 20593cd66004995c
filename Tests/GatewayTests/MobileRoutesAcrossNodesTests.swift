import APIKit
import ChannelAPI
import Foundation
import GatewayTestSupport
import HTTPServer
import Identity
import JSON
import Mobile
import MobileHTTP
import PostgreSQL
import PostgresStores
import Testing

/// The phone's routes (`MobileAPI`) on PostgreSQL, as two gateways on one database answer them: a phone registered
/// through one is listed by the other, a line written through one is read, marked read and removed through the
/// other, and each node's cached inbox page goes stale when the other writes.
@Suite("Mobile routes across nodes")
struct MobileRoutesAcrossNodesTests {
    /// One gateway's phone routes over its own pool on the shared database.
    struct Node: Sendable {
        let inbox: PostgresInbox
        let router: Router

        init(url: String) async throws {
            let pool = try PostgresPool(url: url, size: 3)
            inbox = PostgresInbox(pool: pool, listenURL: url)
            try await inbox.followOtherWriters()
            let storage = MobileStorage.postgres(pool: pool, inbox: inbox)
            var router = Router()
            router.add(MobileAPI(storage: storage, channel: MobileChannel(store: inbox, dispatcher: nil)).routes)
            self.router = router
        }

        func call(_ method: String, _ path: String, query: [String: String] = [:], body: JSONValue? = nil, as caller: Principal = MobileRoutesAcrossNodesTests.alice,
                  headers: [String: String] = [:]) async -> (status: Int, json: JSONValue, headers: [(String, String)]) {
            var all = headers
            if body != nil { all["content-type"] = "application/json" }
            let request = HTTPRequest(method: method, path: path, query: query, headers: all, body: body.map { Array($0.serialized().utf8) } ?? [])
            let response = await router.handle(request, authenticated: caller)
            return (response.status, (try? JSONValue.parse(response.body)) ?? .null, response.headers)
        }
    }

    static let alice = Principal(keyID: "key_alice", subject: "alice", role: .viewer)
    static let owner = Principal(keyID: "key_owner", subject: "owner", role: .admin)

    @Test("a phone registered on A is read on B; a line sent on A is read, marked read and its phone removed on B; pages follow the other node's writes")
    func routesAcrossNodes() async throws {
        let fixture = try await PostgresEngineFixture.make(migrations: PostgresMobileSchema.migrations)
        let a = try await Node(url: fixture.database.url), b = try await Node(url: fixture.database.url)
        defer { a.inbox.stopFollowing(); b.inbox.stopFollowing() }

        let registered = await a.call("POST", "/api/v1/mobile/devices", body: [
            "id": "alice-phone", "name": "Alice's phone", "platform": "ios", "notifications_enabled": true,
            "push_token": .string(String(repeating: "ab", count: 32)), "push_environment": "production"])
        #expect(registered.status == 201 && registered.json["created"] == true, "\(registered)")
        let listed = await b.call("GET", "/api/v1/mobile/devices")
        #expect(listed.json["devices"]?.arrayValue?.compactMap { $0["id"]?.stringValue } == ["alice-phone"], "\(listed)")

        // An empty inbox on B, cached there; then a line written on A.
        let empty = await b.call("GET", "/api/v1/mobile/deliveries", query: ["device_id": "alice-phone"])
        #expect(empty.status == 200 && empty.json["deliveries"]?.arrayValue?.isEmpty == true, "\(empty)")
        let sent = await a.call("POST", "/api/v1/channels/mobile/test", body: ["to": "user:alice", "title": "Hello", "body": "From node A"], as: Self.owner)
        #expect(sent.status == 201 && sent.json["recipients"] == 1, "\(sent)")
        let deliveryID = try #require(sent.json["delivery_id"]?.stringValue)

        // A's write reaches B's cached page by a NOTIFY: B shows the line within the wait.
        let shown = await eventually { await b.call("GET", "/api/v1/mobile/deliveries", query: ["device_id": "alice-phone"]).json["deliveries"]?.arrayValue?.isEmpty == false }
        let page = await b.call("GET", "/api/v1/mobile/deliveries", query: ["device_id": "alice-phone"]).json
        #expect(shown, "B never showed the line written on A")
        #expect(page["deliveries"]?[0]?["id"]?.stringValue == deliveryID && page["unread_count"] == 1, "\(page)")
        let one = await b.call("GET", "/api/v1/mobile/deliveries/\(deliveryID)", query: ["device_id": "alice-phone"])
        #expect(one.status == 200 && one.json["title"] == "Hello" && one.json["wake_ups"]?.arrayValue?.count == 1, "\(one)")

        let read = await b.call("POST", "/api/v1/mobile/deliveries/\(deliveryID)/read", body: ["device_id": "alice-phone"])
        #expect(read.status == 200 && read.json["read"] == true, "\(read)")
        let readOnA = await eventually { await a.call("GET", "/api/v1/mobile/deliveries", query: ["device_id": "alice-phone"]).json["unread_count"] == 0 }
        let unread = await a.call("GET", "/api/v1/mobile/deliveries", query: ["device_id": "alice-phone"]).json
        #expect(readOnA, "A never showed the line read on B: \(unread)")
        #expect(unread["deliveries"]?[0]?["read_at"]?.stringValue != nil, "\(unread)")

        // Someone else's device is refused by name on either node; the phone removed on B is gone on A.
        let foreign = await a.call("GET", "/api/v1/mobile/deliveries", query: ["device_id": "alice-phone"], as: Principal(keyID: "key_bob", subject: "bob", role: .viewer))
        #expect(foreign.status == 403 && foreign.json["field"] == "device_id", "\(foreign)")
        let removed = await b.call("DELETE", "/api/v1/mobile/devices/alice-phone")
        #expect(removed.status == 204)
        let after = await a.call("GET", "/api/v1/mobile/devices")
        #expect(after.json["devices"]?.arrayValue?.isEmpty == true, "\(after)")
    }

    @Test("a line committed by a node that died before announcing it: the other node's cached page stays as it was until that node's connections close, then shows it")
    func deadNodesUnannouncedWrite() async throws {
        let fixture = try await PostgresEngineFixture.make(migrations: PostgresMobileSchema.migrations)
        let a = try await Node(url: fixture.database.url), b = try await Node(url: fixture.database.url)
        defer { a.inbox.stopFollowing(); b.inbox.stopFollowing() }
        let unheard = b.inbox.inboxGenerations.generation(of: "alice")
        let registered = await a.call("POST", "/api/v1/mobile/devices", body: ["id": "alice-phone", "name": "Alice's phone", "platform": "ios"])
        #expect(registered.status == 201, "\(registered)")
        let cached = await eventually { await b.call("GET", "/api/v1/mobile/devices").json["devices"]?.arrayValue?.count == 1 }
        #expect(cached)
        // The registration's own announcement heard before B caches the page: waited for, not slept for (a loaded
        // machine once took longer than 300 ms to carry the NOTIFY, and B rightly re-read after it).
        let heard = await eventually { b.inbox.inboxGenerations.generation(of: "alice") != unheard }
        #expect(heard, "B never heard the registration on A")
        let settled = b.inbox.inboxGenerations.generation(of: "alice")
        let empty = await b.call("GET", "/api/v1/mobile/deliveries", query: ["device_id": "alice-phone"])
        #expect(empty.json["deliveries"]?.arrayValue?.isEmpty == true, "\(empty)")

        // Node C: the line committed, and no NOTIFY ever sent (it died in between).
        let c = try PostgresPool(url: fixture.database.url, size: 1)
        try await c.transaction { db in
            _ = try db.run("""
                INSERT INTO mobile_deliveries (id, destination, destination_kind, destination_value, destination_subject, agent_id, agent_name,
                                               session_id, title, body, parts, metadata, created_at)
                VALUES ('dlv_from_c', 'user:alice', 'user', 'alice', 'alice', 'brief', $1, $2, $3, $4, '[{"type":"text","text":"from C"}]', '{}', $5)
                """, Array("Brief".utf8), Array("s1".utf8), Array("From C".utf8), Array("from C".utf8), Date().postgresMillis)
        }
        // While C's connection is open, B has no reason to look again: its cached page (empty) is what it serves.
        try await Task.sleep(for: .seconds(2))
        #expect(b.inbox.inboxGenerations.generation(of: "alice") == settled, "B's pages went stale for another reason than C; this test proves nothing")
        let stale = await b.call("GET", "/api/v1/mobile/deliveries", query: ["device_id": "alice-phone"])
        #expect(stale.json["deliveries"]?.arrayValue?.isEmpty == true, "B re-read without a reason; this test proves nothing: \(stale)")
        // C's connections close (its process is gone): B's pages are stale within its poll interval.
        c.close()
        let shown = await eventually { await b.call("GET", "/api/v1/mobile/deliveries", query: ["device_id": "alice-phone"]).json["deliveries"]?[0]?["id"] == "dlv_from_c" }
        #expect(shown, "B kept serving the page cached before C's line after C's connections closed")
    }
}
