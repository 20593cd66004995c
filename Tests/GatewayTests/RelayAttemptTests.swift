import ChannelAPI
import Foundation
import GatewayTestSupport
import APIKit
import Relay
import Testing

/// What the relay transport reports of one try: the relay's status, its `reason`, and latency (the stand-in, like
/// a relay that names no id, gives no service id; none is made up).
@Suite("Relay attempts", .serialized)
struct RelayAttemptTests {
    @Test("202 with no id of the relay's; 410 and 503 with the relay's reason; unreachable with none")
    func attempts() async throws {
        let standIn = try await RelayStandIn.start()
        defer { standIn.stop() }
        let relay = RelayTransport(configuration: RelayConfiguration(baseURL: standIn.baseURL, token: RelayStandIn.token, caFile: standIn.caFile))
        let target = WakeTarget(deviceID: "iphone", platform: .ios, pushToken: String(repeating: "7e", count: 32), environment: .production,
                                bundleID: "dev.soulacy.ios")
        let sent = await relay.attempt(.delivery(id: "dlv_1", agentID: "a"), to: target)
        #expect(sent.outcome == .delivered && sent.status == 202 && sent.reason == nil && sent.serviceID == nil && sent.latency > .zero)
        try await standIn.script([["status": 410, "reason": "Unregistered"], ["status": 503, "reason": "ServiceUnavailable"]])
        let gone = await relay.attempt(.delivery(id: "dlv_2", agentID: "a"), to: target)
        #expect(gone.outcome == .tokenRejected(reason: "relay 410 Unregistered") && gone.status == 410 && gone.reason == "Unregistered")
        let busy = await relay.attempt(.delivery(id: "dlv_3", agentID: "a"), to: target)
        #expect(busy.outcome == .retry(after: nil, reason: "relay 503 ServiceUnavailable") && busy.status == 503)
        standIn.stop()
        let down = await relay.attempt(.delivery(id: "dlv_4", agentID: "a"), to: target)
        #expect(down.status == nil && down.serviceID == nil && down.reason?.hasPrefix("relay unreachable") == true)
    }
}
