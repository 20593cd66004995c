import HTTPServer
import Storage

extension HTTPResponse {
    /// The answer as the idempotency log keeps it.
    public var committedAnswer: CommitHook.Answer {
        CommitHook.Answer(status: status, contentType: header("content-type"), body: body)
    }
}

extension TransactionalStorage {
    /// Runs a mutating handler's effect and builds its answer in one transaction, on the engine's own threads. Under
    /// an Idempotency-Key the answer commits with the effect, so a retry after a crash at any instant gets this very
    /// answer, and never a second effect. Stores called inside join it; a throw undoes all of it.
    public func answer(_ body: (any StorageSession) throws -> HTTPResponse) async throws -> HTTPResponse {
        try await withTransaction(answering: \.committedAnswer, body)
    }
}
