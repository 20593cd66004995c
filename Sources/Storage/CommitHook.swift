import Synchronization

/// Work that must commit in the same transaction as whatever a task writes: while a hook is bound to a task
/// (`CommitHook.$current.withValue`), every write transaction of that task that changes rows runs it just before
/// its COMMIT. The idempotency log uses it to record "this intent was applied" atomically with the effect, so a
/// crash can never leave the effect without its record (and a retry applying it a second time).
public final class CommitHook: Sendable {
    @TaskLocal public static var current: CommitHook?

    /// A call's answer, recorded by `TransactionalStorage.withTransaction(answering:_:)` in the transaction of its effect.
    public struct Answer: Sendable, Equatable {
        public var status: Int
        public var contentType: String?
        public var body: [UInt8]
        public init(status: Int, contentType: String?, body: [UInt8]) {
            self.status = status
            self.contentType = contentType
            self.body = body
        }
    }

    private let work: @Sendable (any StorageSession, _ resume: String?) throws -> Void
    private let answerWork: (@Sendable (Answer, any StorageSession) throws -> Void)?
    private let ran = Atomic<Int>(0)
    private let answers = Atomic<Int>(0)
    private let closed = Atomic<Bool>(false)
    private let preset = Mutex<Answer?>(nil)
    private let resumeReference = Mutex<String?>(nil)
    private let provisional = Atomic<Bool>(false)

    /// `work` runs before each effect's COMMIT, with the resume reference if one was given (`resume(from:)`);
    /// `recordAnswer`, when given, stores an answer inside the effect's transaction.
    public init(_ work: @escaping @Sendable (any StorageSession, _ resume: String?) throws -> Void,
                recordAnswer: (@Sendable (Answer, any StorageSession) throws -> Void)? = nil) {
        self.work = work
        self.answerWork = recordAnswer
    }

    /// Whether an answer was recorded with an effect (then nothing is left to record afterwards).
    public var answeredWithEffect: Bool { answers.load(ordering: .acquiring) > 0 }

    /// An answer known before its effect (a run's 202 names the run it starts): it is recorded in the transaction
    /// of the task's next committing write.
    public func answerWithNextEffect(_ answer: Answer) {
        preset.withLock { $0 = answer }
    }

    /// What the call will wait for after its effect (`<kind>:<id>`, see `AnswerResumer`): set before the effect, it is
    /// written with the effect, so a retry after a crash can rebuild the answer the call never got to record.
    public func resume(from reference: String) {
        resumeReference.withLock { $0 = reference }
    }

    /// The call's answer is not its last word (a long poll that ran out while a decision is still pending): it is
    /// not recorded, so a retry with the same key asks the resumer again instead of replaying it.
    public func answerIsProvisional() {
        provisional.store(true, ordering: .releasing)
    }

    public var isProvisional: Bool { provisional.load(ordering: .acquiring) }

    public func record(_ answer: Answer, in db: any StorageSession) throws {
        guard let answerWork, !closed.load(ordering: .acquiring) else { return }
        try answerWork(answer, db)
        answers.add(1, ordering: .releasing)
    }

    /// How many committing transactions ran the hook.
    public var runCount: Int { ran.load(ordering: .acquiring) }

    /// No more work from now on (tasks the request started may outlive it and inherit the binding).
    public func close() { closed.store(true, ordering: .releasing) }

    /// Runs `body` in the caller's open transaction and then, if it changed rows, the task's hook (if any),
    /// still before the COMMIT.
    public static func withCurrent<Session: StorageSession, T>(_ hook: CommitHook?, in db: Session, _ body: (Session) throws -> T) throws -> T {
        // Most transactions have no hook: they pay nothing here.
        guard let hook else { return try body(db) }
        let before = db.changeCount
        let value = try body(db)
        if db.changeCount != before, !hook.closed.load(ordering: .acquiring) {
            try hook.work(db, hook.resumeReference.withLock { $0 })
            hook.ran.add(1, ordering: .releasing)
            if let answer = hook.preset.withLock({ preset in defer { preset = nil }; return preset }) { try hook.record(answer, in: db) }
        }
        return value
    }
}
