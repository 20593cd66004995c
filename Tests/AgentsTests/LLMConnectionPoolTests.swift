import Foundation
import Gateway
import GatewayTestSupport
import HTTPClient
import LLM
import Testing

/// Model servers on one host over plain HTTP/1.1 (Ollama, vLLM, llama.cpp): one request per connection, so
/// concurrent runs need a connection each.
@Suite("LLM connections", .serialized)
struct LLMConnectionPoolTests {
    func runner(_ id: String, providers: LLMProviders) throws -> LLMRunner {
        var loader = SoulConfigLoader(file: "\(id).yaml", destinations: Gateway.destinationValidators, environment: [:])
        let agent = try #require(loader.parse(text: LLMRunnerTests.agent(id, provider: "ollama"))?.first)
        return LLMRunner(agent: agent, providers: providers)
    }

    func request(_ id: String, timeout: Duration) -> RunRequest {
        RunRequest(agentID: id, runID: "run_\(id)", sessionID: "ses_\(id)", input: "hi", trigger: .chat, timeout: timeout)
    }

    /// Until the stand-in has received `count` calls (it records each as it arrives, before answering).
    func awaitRequests(_ llm: LLMStandIn, _ count: Int) async throws {
        let deadline = ContinuousClock.now + .seconds(10)
        while try await llm.requests().count < count {
            guard ContinuousClock.now < deadline else { throw TestFailure("the stand-in got fewer than \(count) calls") }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    @Test("a hung call holds back no other run on the same host")
    func concurrentRuns() async throws {
        let llm = try await LLMStandIn.start()
        defer { llm.stop() }
        var environment = llm.environment
        environment["OLLAMA_HOST"] = "127.0.0.1:\(llm.controlPort)"  // the plain HTTP/1.1 port, as Ollama serves
        let providers = LLMProviders(environment: environment)    // one shared client, as the gateway has
        try await llm.script([["text": "slow", "hold": true], ["text": "fast"]])
        let held = Task { try await runner("held", providers: providers).run(request("held", timeout: .seconds(120))) }
        try await awaitRequests(llm, 1)
        // The held call is answered only once this one is done: that this one ends at all is the point, so no bound
        // on its time a loaded machine could break.
        let second = try await runner("quick", providers: providers).run(request("quick", timeout: .seconds(60)))
        #expect(second.reply == "fast")
        let requests = try await llm.requests()
        #expect(requests.count == 2 && requests.allSatisfy { $0["scheme"] == "http" && $0["http_version"] == "1.1" }, "\(requests.map { $0["http_version"] ?? .null })")
        try await llm.control("POST", "/control/release")
        #expect(try await held.value.reply == "slow")
    }

    @Test("a call that waits too long for a free connection fails as never sent, before the run's own timeout")
    func queuedTooLong() async throws {
        let llm = try await LLMStandIn.start()
        defer { llm.stop() }
        var environment = llm.environment
        environment["OLLAMA_HOST"] = "127.0.0.1:\(llm.controlPort)"
        // A client that allows one connection per host: the second call can only queue, half a second at most.
        let client = ProviderConnection(configuration: HTTP2ClientConfiguration(maximumConnectionsPerHost: 1, maximumConnectionWait: .milliseconds(500)))
        let providers = LLMProviders(environment: environment, client: client)
        try await llm.script([["text": "slow", "hold": true]])
        let held = Task { try await runner("held", providers: providers).run(request("held", timeout: .seconds(15))) }
        try await awaitRequests(llm, 1)
        do {
            _ = try await runner("queued", providers: providers).run(request("queued", timeout: .seconds(5)))
            Issue.record("the queued run succeeded")
        } catch {
            #expect("\(error)".contains("ollama was not called: no connection to http://127.0.0.1:\(llm.controlPort) came free within 0.5 seconds (all 1 in use)")
                    && "\(error)".contains("never sent"), "\(error)")
        }
        #expect(try await llm.requests().count == 1)
        try await llm.control("POST", "/control/release")
        #expect(try await held.value.reply == "slow")
    }
}
