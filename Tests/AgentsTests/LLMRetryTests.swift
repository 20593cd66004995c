import Foundation
import Gateway
import GatewayTestSupport
import JSON
import LLM
import Synchronization
import Testing

/// Retries as the providers document them: 429 (rate limits) and 5xx (Anthropic's 529 overloaded_error among
/// them) are worth another try, after `Retry-After` (seconds or an HTTP date) or `retry-after-ms` when the
/// answer carries one, else after an exponential backoff with jitter; never past the run's deadline.
@Suite("LLM retries", .serialized)
struct LLMRetryTests {
    /// The `retry` events a run records.
    final class Events: Sendable {
        let list = Mutex<[ProviderRetry]>([])
        var all: [ProviderRetry] { list.withLock { $0 } }
    }

    func runner(_ llm: LLMStandIn, provider: String, retry: ProviderRetryPolicy = .standard, events: Events) throws -> LLMRunner {
        var loader = SoulConfigLoader(file: "r.yaml", destinations: Gateway.destinationValidators, environment: [:])
        let agent = try #require(loader.parse(text: LLMRunnerTests.agent("retrier", provider: provider))?.first)
        var environment = LLMRunEnvironment()
        environment.providerRetried = { run, retry in
            #expect(run.runID == "run_1")
            events.list.withLock { $0.append(retry) }
        }
        return LLMRunner(agent: agent, providers: LLMProviders(environment: llm.environment, retry: retry), environment: environment)
    }

    func request(timeout: Duration = .seconds(10)) -> RunRequest {
        RunRequest(agentID: "retrier", runID: "run_1", sessionID: "ses_1", input: "hi", trigger: .chat, timeout: timeout)
    }

    /// The gaps between the requests' arrivals at the stand-in, in milliseconds.
    func gaps(_ requests: [JSONValue]) -> [Double] {
        let times = requests.compactMap { $0["received_ms"]?.numberValue }
        return zip(times.dropFirst(), times).map { $0 - $1 }
    }

    @Test("OpenAI 429 with retry-after-ms: waited exactly that, twice, then the answer; each retry an event")
    func rateLimited() async throws {
        let llm = try await LLMStandIn.start()
        defer { llm.stop() }
        try await llm.script([["status": 429, "error": "Rate limit reached for requests", "retry_after_ms": 80, "repeat": 2], ["text": "done"]])
        let events = Events()
        let result = try await runner(llm, provider: "openai", events: events).run(request())
        #expect(result.reply == "done")
        let requests = try await llm.requests()
        #expect(requests.count == 3)
        #expect(gaps(requests).allSatisfy { $0 >= 75 }, "\(gaps(requests))")
        #expect(events.all == [ProviderRetry(provider: "openai", attempt: 1, status: 429, reason: "answered 429", wait: .milliseconds(80)),
                               ProviderRetry(provider: "openai", attempt: 2, status: 429, reason: "answered 429", wait: .milliseconds(80))])
    }

    @Test("Anthropic 529 overloaded with retry-after in seconds")
    func overloaded() async throws {
        let llm = try await LLMStandIn.start()
        defer { llm.stop() }
        try await llm.script([["status": 529, "error": "Overloaded", "retry_after": 1], ["text": "fine"]])
        let events = Events()
        let result = try await runner(llm, provider: "anthropic", events: events).run(request())
        #expect(result.reply == "fine")
        let requests = try await llm.requests()
        #expect(requests.count == 2 && gaps(requests).allSatisfy { $0 >= 950 }, "\(gaps(requests))")
        #expect(events.all.map(\.status) == [529] && events.all.map(\.wait) == [.seconds(1)])
    }

    @Test("5xx without Retry-After: exponential backoff with jitter (each wait between half and all of the doubled step)")
    func backoff() async throws {
        let llm = try await LLMStandIn.start()
        defer { llm.stop() }
        try await llm.script([["status": 503, "error": "model loading", "repeat": 3], ["text": "up"]])
        let events = Events()
        let policy = ProviderRetryPolicy(maximumAttempts: 4, initialBackoff: .milliseconds(40), maximumBackoff: .seconds(1))
        let result = try await runner(llm, provider: "ollama", retry: policy, events: events).run(request())
        #expect(result.reply == "up")
        #expect(try await llm.requests().count == 4)
        let waits = events.all.map(\.wait)
        #expect(events.all.map(\.attempt) == [1, 2, 3] && events.all.allSatisfy { $0.status == 503 && $0.provider == "ollama" })
        #expect(waits.count == 3)
        for (wait, step) in zip(waits, [40, 80, 160]) {
            #expect(wait >= .milliseconds(step / 2) && wait <= .milliseconds(step), "\(waits)")
        }
    }

    @Test("the last attempt's failure names the provider's status and message; a 400 is not retried")
    func givesUp() async throws {
        let llm = try await LLMStandIn.start()
        defer { llm.stop() }
        try await llm.script([["status": 500, "error": "the model is overloaded", "repeat": 5]])
        let events = Events()
        let policy = ProviderRetryPolicy(maximumAttempts: 3, initialBackoff: .milliseconds(10))
        let openAI = try runner(llm, provider: "openai", retry: policy, events: events)
        do {
            _ = try await openAI.run(request())
            Issue.record("the run succeeded")
        } catch {
            #expect(error == .model("openai answered 500: the model is overloaded (after 3 attempts)"), "\(error)")
        }
        #expect(try await llm.requests().count == 3 && events.all.count == 2)

        try await llm.control("POST", "/control/reset")
        try await llm.script([["status": 400, "error": "max_tokens is too large"]])
        let anthropic = try runner(llm, provider: "anthropic", retry: policy, events: events)
        do {
            _ = try await anthropic.run(request())
            Issue.record("the run succeeded")
        } catch {
            #expect(error == .model("anthropic answered 400: max_tokens is too large"), "\(error)")
        }
        #expect(try await llm.requests().count == 1 && events.all.count == 2)
    }

    @Test("a Retry-After past the run's deadline is not waited for: the run ends at once with the provider's answer")
    func deadline() async throws {
        let llm = try await LLMStandIn.start()
        defer { llm.stop() }
        // An hour's wait against a minute's deadline: the bounds stay far apart whatever the machine's load.
        try await llm.script([["status": 429, "error": "Rate limit reached", "retry_after": 3600]])
        let events = Events()
        let started = ContinuousClock.now
        do {
            _ = try await runner(llm, provider: "openai", events: events).run(request(timeout: .seconds(60)))
            Issue.record("the run succeeded")
        } catch {
            #expect("\(error)".contains("openai answered 429: Rate limit reached") && "\(error)".contains("deadline"), "\(error)")
        }
        #expect(ContinuousClock.now - started < .seconds(30))
        #expect(try await llm.requests().count == 1 && events.all.isEmpty)
    }

    @Test("a stream refused before any text is tried again, and its text arrives once", arguments: ["openai", "ollama", "anthropic"])
    func streamed(provider: String) async throws {
        let llm = try await LLMStandIn.start()
        defer { llm.stop() }
        let text = "Streaming after one retry."
        try await llm.script([["status": 503, "error": "busy", "retry_after_ms": 20], ["text": .string(text)]])
        let events = Events()
        let pieces = Mutex<[String]>([])
        var run = request()
        run.onText = { piece in pieces.withLock { $0.append(piece) } }
        let result = try await runner(llm, provider: provider, events: events).run(run)
        #expect(result.reply == text && pieces.withLock { $0.joined() } == text)
        let requests = try await llm.requests()
        #expect(requests.count == 2 && requests.allSatisfy { $0["body"]?["stream"] == true })
        #expect(events.all.map(\.status) == [503])
    }

    @Test("Retry-After read as the RFC says: seconds or an HTTP date; retry-after-ms first")
    func retryAfterHeaders() {
        let now = Date(timeIntervalSince1970: 1_445_412_475) // Wed, 21 Oct 2015 07:27:55 GMT
        #expect(ProviderRetryPolicy.requestedWait(["retry-after": "3"], now: now) == .seconds(3))
        #expect(ProviderRetryPolicy.requestedWait(["retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"], now: now) == .seconds(5))
        #expect(ProviderRetryPolicy.requestedWait(["retry-after": "Wed, 21 Oct 2015 07:27:00 GMT"], now: now) == .zero)
        #expect(ProviderRetryPolicy.requestedWait(["retry-after-ms": "250", "retry-after": "1"], now: now) == .milliseconds(250))
        #expect(ProviderRetryPolicy.requestedWait(["retry-after": "soon"], now: now) == nil)
        #expect(ProviderRetryPolicy.requestedWait([:], now: now) == nil)
        // A wait no Duration can hold (it trapped) is a day: past any run's deadline, so the run ends with the answer.
        #expect(ProviderRetryPolicy.requestedWait(["retry-after": "1e21"], now: now) == .seconds(86_400))
        #expect(ProviderRetryPolicy.requestedWait(["retry-after-ms": "1e24"], now: now) == .seconds(86_400))
        #expect(ProviderRetryPolicy.requestedWait(["retry-after": "Fri, 31 Dec 9999 23:59:59 GMT"], now: now) == .seconds(86_400))
    }

    @Test("through the gateway, each retry is one of the run's events on GET /api/v1/runs/:id, with the status and the wait, never the prompt")
    func retriesOnTheRun() async throws {
        let llm = try await LLMStandIn.start()
        defer { llm.stop() }
        try await llm.script([["status": 429, "error": "Rate limit reached", "retry_after_ms": 50], ["text": "all good"]])
        let file = "id: talker\nenabled: true\ntrigger: channel\nsystem_prompt: SECRET-PROMPT-7\nllm: {provider: openai, model: m}\n"
        try await withTestGateway(config: file, environment: llm.environment) { (gw) async throws in
            let chat = try await gw.request("POST", "/api/v1/chat", json: ["agent_id": "talker", "text": "hello"])
            #expect(chat.status == 200 && chat.json["reply"] == "all good", "\(chat.text)")
            let runID = try #require(chat.json["run_id"]?.stringValue)
            let run = try await gw.request("GET", "/api/v1/runs/\(runID)").json
            let events = run["events"]?.arrayValue ?? []
            #expect(events.count == 1 && events.first?["kind"] == "retry", "\(run)")
            let detail = events.first?["detail"]?.stringValue ?? ""
            #expect(detail.contains("answered 429") && detail.contains("attempt 1"), "\(detail)")
            #expect(detail.contains("SECRET-PROMPT-7") == false && detail.contains("hello") == false)
        }
    }
}
