import HTTPServer
import SQLite

extension HTTPResponse {
    /// The answer as the idempotency log keeps it.
    public var committedAnswer: CommitHook.Answer {
        CommitHook.Answer(status: status, contentType: header("content-type"), body: body)
    }
}

extension DatabasePool {
    /// Runs a mutating handler's effect and builds its answer in one transaction. Under an Idempotency-Key the
    /// answer commits with the effect, so a retry after a crash at any instant gets this very answer, and never a
    /// second effect. Stores called inside nest as savepoints of it; a throw undoes all of it.
    public func answer(_ body: (Connection) throws -> HTTPResponse) throws -> HTTPResponse {
        try transaction(answering: \.committedAnswer, body)
    }
}

extension DatabasePool {
    /// The same on the pool's own threads (`executor`): the handler's task waits for the lock and the fsync there,
    /// and no thread of Swift's small cooperative pool is held while it does. Task-locals (the idempotency log's
    /// hook) travel with the task.
    public func answer(_ body: (Connection) throws -> HTTPResponse) async throws -> HTTPResponse {
        try await withTaskExecutorPreference(executor) { try transaction(answering: \.committedAnswer, body) }
    }
}
