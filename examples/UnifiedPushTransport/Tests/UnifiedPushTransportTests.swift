import ChannelAPI
import ChannelTesting
import Foundation
import APIKit
import Synchronization
import Testing
import UnifiedPushTransport

/// The example transport, tested in isolation with the channel testing kit and a local endpoint.
@Suite("Example: UnifiedPush transport")
struct UnifiedPushTransportTests {
    /// A local UnifiedPush endpoint that records what it receives and answers with a chosen status.
    final class Endpoint: Sendable {
        let received = Mutex<[[UInt8]]>([])
        let status = Atomic<Int>(201)
        let server: HTTPServer

        init() throws {
            let box = Box()
            server = HTTPServer(configuration: HTTPServerConfiguration(host: "127.0.0.1", port: 0)) { request in
                await box.handle(request)
            }
            try server.start()
            box.endpoint.withLock { $0 = self }
        }

        final class Box: Sendable {
            let endpoint = Mutex<Endpoint?>(nil)
            func handle(_ request: HTTPRequest) async -> HTTPResponse {
                guard let e = endpoint.withLock({ $0 }) else { return HTTPResponse(status: 503) }
                e.received.withLock { $0.append(request.body) }
                return HTTPResponse(status: e.status.load(ordering: .relaxed))
            }
        }

        var url: String { "http://127.0.0.1:\(server.port)/up/abc" }
    }

    func target(_ endpoint: Endpoint) -> WakeTarget {
        WakeTarget(deviceID: "pixel", platform: .android, pushToken: endpoint.url, environment: .production, bundleID: "dev.soulacy.android")
    }

    @Test("passes the conformance suite every transport must pass")
    func conformance() async throws {
        let endpoint = try Endpoint()
        let failures = await WakeTransportConformance(
            transport: UnifiedPushTransport(allowLoopbackHTTP: true), acceptedTarget: target(endpoint),
            foreignTarget: WakeTarget(deviceID: "i", platform: .ios, pushToken: "https://x", environment: .production, bundleID: "dev.soulacy.ios")
        ).run()
        #expect(failures.isEmpty, "\(failures)")
        await endpoint.server.stop()
    }

    @Test("sends only the generic message, and maps a gone endpoint to a rejected token")
    func behaviour() async throws {
        let endpoint = try Endpoint()
        let transport = UnifiedPushTransport(allowLoopbackHTTP: true)
        #expect(await transport.send(.delivery(id: "dlv_1", agentID: "a"), to: target(endpoint)) == .delivered)
        let body = try JSONValue.parse(try #require(endpoint.received.withLock { $0.first }))
        #expect(body["deep_link"] == "soulacy://delivery/dlv_1" && body["body"] == "An agent result is ready to review.")
        endpoint.status.store(410, ordering: .relaxed)
        guard case .tokenRejected = await transport.send(.delivery(id: "dlv_2", agentID: "a"), to: target(endpoint)) else { Issue.record("expected rejection"); return }
        endpoint.status.store(503, ordering: .relaxed)
        guard case .retry = await transport.send(.delivery(id: "dlv_3", agentID: "a"), to: target(endpoint)) else { Issue.record("expected retry"); return }
        #expect(!UnifiedPushTransport().canWake(target(endpoint)))  // plain http only when allowed
        await endpoint.server.stop()
    }
}
