import Foundation
import GatewayTestSupport
import JSON
import Memory
import Testing

/// What one person's memory may hold, through the API: a bounded number of facts, and a clear refusal past it.
@Suite("Memory fact limits")
struct MemoryFactLimitsTests {
    @Test("past 5,000 facts a person's next fact is 409 too_many_facts naming content; forgetting one makes room; others are unaffected")
    func factsPerPerson() async throws {
        try await withTestGateway(mode: .router) { (gw) async throws in
            let memory = gw.gateway.memory
            try await memory.transactions.withTransaction { session in
                for n in 0..<MemoryFacts.maximumFactsPerPerson {
                    _ = try memory.add("Fact \(n)", subject: "owner", source: "manual", category: "preference", agentID: "", expiresAt: nil, in: session)
                }
            }
            let refused = try await gw.request("POST", "/api/v1/memory/facts", json: ["content": "One too many"])
            #expect(refused.status == 409 && refused.errorCode == "too_many_facts" && refused.errorField == "content", "\(refused.text)")
            let priya = try await gw.mintKey(subject: "priya", role: "operator")
            #expect(try await gw.request("POST", "/api/v1/memory/facts", json: ["content": "Likes tea"], key: .some(priya)).status == 201)
            let some = try #require(try await memory.facts(subject: "owner", status: "active", agentID: nil, limit: 1).first)
            #expect(try await gw.request("DELETE", "/api/v1/memory/facts/\(some.id)").status < 300)
            #expect(try await gw.request("POST", "/api/v1/memory/facts", json: ["content": "One more now"]).status == 201)
        }
    }
}
