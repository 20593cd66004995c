import Foundation
import GatewayTestSupport
import JSON
import SoulacyClient
import Testing

/// Two `soulacy-relay` processes on one PostgreSQL database behind one address, as the several-gateways issue asks of
/// the relay: one is killed with SIGKILL, the phone keeps reading through the same address, in order and with no gap;
/// a command the phone leaves while its gateway is down survives the death of the process that took it, and is
/// applied once.
@Suite("Relay servers across nodes", .serialized)
struct RelayServersAcrossNodesTests {
    @Test("two relays on one PostgreSQL behind one address: one killed, the phone reads on in order; a held command outlives the relay that took it and is applied once")
    func twoRelays() async throws {
        let cluster = try await PostgresCluster.shared()
        let database = try await cluster.makeDatabase()
        let relayA = RelayServerProcess(databaseURL: database.url), relayB = RelayServerProcess(databaseURL: database.url)
        // Started together on an empty database: the migrations run once.
        async let startA: Void = relayA.start(), startB: Void = relayB.start()
        _ = try await (startA, startB)
        defer { relayA.stop(); relayB.stop() }
        let front = try TCPFront(backends: [relayA.port, relayB.port])
        defer { front.stop() }
        try await front.waitUntilListening()

        let paths = RelayPathsTests()
        let directory = TestGateway.makeTemporaryDirectory()
        let environment = ["SOULACY_RELAY_MAILBOX_URL": front.url]
        let (token, endpoint) = try await withTestGateway(directory: directory, environment: environment, lan: true) { gw in
            let (token, endpoint) = try await paths.pairPhone(gw)
            for n in 0..<10 { _ = try await gw.request("POST", "/api/v1/channels/mobile/test", json: ["body": .string("before \(n)")]) }
            try await gw.gateway.carriage!.tick()
            let phone = paths.client(nil, token: token, relay: endpoint)
            await phone.readRelay()
            #expect(await phone.relayRecords().count == 10)

            // One relay dies; the gateway and the phone reach the other through the same address.
            relayA.stop()
            for n in 0..<10 { _ = try await gw.request("POST", "/api/v1/channels/mobile/test", json: ["body": .string("after \(n)")]) }
            try await gw.gateway.carriage!.tick()
            await phone.readRelay()
            let records = await phone.relayRecords()
            let bodies = records.compactMap { $0.fields["body"] }
            #expect(bodies == (0..<10).map { "before \($0)" } + (0..<10).map { "after \($0)" }, "\(bodies)")
            let seqs = records.compactMap(\.seq)
            #expect(seqs == seqs.sorted() && Set(seqs).count == 20)
            return (token, endpoint)
        }

        // The gateway is down: the phone's send is held by the relay left standing.
        let phone = paths.client(nil, token: token, relay: endpoint, readBack: .seconds(1))
        guard case .held(let factID) = await phone.send(method: "POST", path: "/api/v1/memory/facts", body: Data(#"{"text":"held across relays"}"#.utf8)) else {
            Issue.record("the send was not held")
            return
        }
        // The relay that took it dies; the other comes back. The command is in the database, not in either process.
        try await relayA.start()
        relayB.stop()
        try await withTestGateway(directory: directory, environment: environment, lan: true) { gw in
            var settled: [String: Settlement] = [:]
            for _ in 0..<60 where settled[factID] == nil {
                settled = await phone.settleHeld()
                try await Task.sleep(for: .milliseconds(200))
            }
            #expect(settled[factID] == .sent(status: 201))
            _ = await phone.settleHeld()
            try await gw.gateway.carriage!.tick()
            let facts = try await gw.request("GET", "/api/v1/memory/facts", key: .some(token)).json["facts"]?.arrayValue ?? []
            #expect(facts.map { $0["text"] } == ["held across relays"], "\(facts)")
        }
        // The database URL (with its password) is never printed.
        for relay in [relayA, relayB] {
            let log = (try? String(contentsOfFile: relay.directory + "/relay.log", encoding: .utf8)) ?? ""
            #expect(!log.contains(cluster.password) && log.contains("listening"))
        }
    }
}
