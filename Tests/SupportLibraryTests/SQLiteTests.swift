import Storage
import APIKit
import Foundation
import SQLite
import Synchronization
import Testing

@Suite("SQLite wrapper")
struct SQLiteTests {
    func pool() throws -> DatabasePool {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("sqlite-\(UUID().uuidString).db").path
        return try DatabasePool(path: path)
    }

    @Test("WAL, full fsync and foreign keys are on")
    func pragmas() throws {
        let db = try pool()
        #expect(try db.read { try $0.query("PRAGMA journal_mode").first?.string("journal_mode") } == "wal")
        #expect(try db.write { try $0.query("PRAGMA synchronous").first?.int("synchronous") } == 2)
        #expect(try db.read { try $0.query("PRAGMA foreign_keys").first?.int("foreign_keys") } == 1)
    }

    @Test("a transaction inside another is a savepoint of it: it reads its own writes, commits with it, and a throw undoes only it")
    func nestedTransactions() throws {
        struct Refused: Error {}
        let db = try pool()
        try db.write { try $0.execute("CREATE TABLE t (v TEXT)") }
        let generation = db.changeGeneration
        let woken = Mutex<[String]>([])
        try db.transaction { outer in
            try outer.run("INSERT INTO t VALUES ('outer')")
            try db.transaction { try $0.run("INSERT INTO t VALUES ('inner')") }
            // Read inside: this transaction's own rows, not the last committed state.
            #expect(try db.read { try $0.query("SELECT count(*) AS n FROM t").first?.int("n") } == 2)
            #expect(throws: Refused.self) { try db.transaction { db in try db.run("INSERT INTO t VALUES ('undone')"); throw Refused() } }
            db.afterCommit { woken.withLock { $0.append("after commit") } }
            #expect(woken.withLock { $0 }.isEmpty, "nothing is woken before the commit")
            #expect(db.changeGeneration == generation, "not committed yet")
        }
        #expect(woken.withLock { $0 } == ["after commit"])
        #expect(try db.read { try $0.query("SELECT v FROM t ORDER BY v").compactMap { $0.string("v") } } == ["inner", "outer"])
        // A rolled-back transaction wakes nobody.
        #expect(throws: Refused.self) {
            try db.transaction { _ in db.afterCommit { woken.withLock { $0.append("rolled back") } }; throw Refused() }
        }
        #expect(woken.withLock { $0 } == ["after commit"])
    }

    @Test("the async accessors run on the pool's own threads; a closed pool's threads end")
    func storageThreads() async throws {
        let db = try pool()
        let executor = db.executor
        #expect(!executor.isCurrent)
        #expect(try await db.asyncWrite { _ in executor.isCurrent })
        #expect(try await db.asyncTransaction { db in try db.run("CREATE TABLE t (v INTEGER)"); return executor.isCurrent })
        #expect(try await db.asyncRead { db in try db.query("SELECT count(*) AS n FROM t").first?.int("n") } == 0)
        db.close()
    }

    // A task that resumes after the gateway stopped once reached sqlite3_total_changes64 with a NULL handle (a SEGV
    // in a full run): every accessor of a closed pool is an error that says so.
    @Test("a closed pool's accessors throw 'closed', sync and async, and crash nothing")
    func closedPool() async throws {
        let db = try pool()
        try db.write { try $0.execute("CREATE TABLE t (v INTEGER)") }
        let generation = db.changeGeneration
        db.close()
        let closed: (any Error) -> Bool = { ($0 as? SQLiteError)?.message.contains("closed") == true }
        #expect(performing: { try db.write { try $0.run("INSERT INTO t VALUES (1)") } }, throws: closed)
        #expect(performing: { try db.transaction { try $0.run("INSERT INTO t VALUES (1)") } }, throws: closed)
        #expect(performing: { try db.read { try $0.query("SELECT v FROM t") } }, throws: closed)
        await #expect(performing: { try await db.asyncTransaction { try $0.run("INSERT INTO t VALUES (1)") } }, throws: closed)
        await #expect(performing: { try await db.asyncRead { try $0.query("SELECT v FROM t").count } }, throws: closed)
        #expect(db.changeGeneration == generation, "nothing counted as a committed change")
    }

    @Test("an answer given with an effect is recorded in the effect's own transaction, and only under a hook")
    func answerWithEffect() async throws {
        let db = try pool()
        try db.write { try $0.execute("CREATE TABLE effects (v TEXT); CREATE TABLE answers (status INTEGER, body BLOB)") }
        let answer = { (value: Int) in CommitHook.Answer(status: value, contentType: "application/json", body: Array("{}".utf8)) }
        // No hook bound: the effect commits, nothing else is written.
        _ = try db.transaction(answering: answer) { db in try db.run("INSERT INTO effects VALUES ('a')"); return 201 }
        let hook = CommitHook({ _, _ in }, recordAnswer: { answer, session in try session.sqliteConnection().run("INSERT INTO answers VALUES (?, ?)", answer.status, answer.body) })
        try await CommitHook.$current.withValue(hook) {
            _ = try db.transaction(answering: answer) { db in try db.run("INSERT INTO effects VALUES ('b')"); return 202 }
        }
        #expect(hook.answeredWithEffect)
        #expect(try db.read { try $0.query("SELECT status FROM answers").compactMap { $0.int("status") } } == [202])
        // An effect undone after its answer was given takes the answer with it.
        struct Refused: Error {}
        await #expect(throws: Refused.self) {
            try await CommitHook.$current.withValue(hook) {
                try db.transaction { _ in
                    _ = try db.transaction(answering: answer) { db in try db.run("INSERT INTO effects VALUES ('c')"); return 203 }
                    throw Refused()
                }
            }
        }
        #expect(try db.read { try $0.query("SELECT status FROM answers").compactMap { $0.int("status") } } == [202])
        #expect(try db.read { try $0.query("SELECT v FROM effects ORDER BY v").compactMap { $0.string("v") } } == ["a", "b"])
    }

    @Test("a route's effect and answer run on the pool's own threads, with the task's hook: the cooperative pool never waits on SQLite")
    func answerOnStorageThreads() async throws {
        let db = try pool()
        try db.write { try $0.execute("CREATE TABLE effects (v TEXT); CREATE TABLE answers (status INTEGER)") }
        let hook = CommitHook({ _, _ in }, recordAnswer: { answer, session in try session.sqliteConnection().run("INSERT INTO answers VALUES (?)", answer.status) })
        let ranOnStorage = Mutex(false)
        let response = try await CommitHook.$current.withValue(hook) {
            try await db.answer { session in
                ranOnStorage.withLock { $0 = db.executor.isCurrent }
                try session.sqliteConnection().run("INSERT INTO effects VALUES ('a')")
                return HTTPResponse.json(["ok": true], status: 201)
            }
        }
        #expect(response.status == 201)
        #expect(ranOnStorage.withLock { $0 })
        #expect(!db.executor.isCurrent)
        #expect(try db.read { try $0.query("SELECT status FROM answers").compactMap { $0.int("status") } } == [201])
        db.close()
    }

    @Test("through the engine seam: SQLite's codes name the StorageError the HTTP layer answers; a full file is .full; another engine's session is refused")
    func storageSeam() async throws {
        // A real full file (max_page_count), as a gateway's disk would be.
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("seam-\(UUID().uuidString).sqlite").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        let db = try DatabasePool(path: path, maximumBytes: 64 * 1024)
        try db.write { try $0.execute("CREATE TABLE t (id TEXT PRIMARY KEY, v BLOB, n INTEGER CHECK (n > 0))") }
        let storage: any TransactionalStorage = db
        let full = await #expect(throws: (any Error).self) {
            try await storage.withTransaction { session in
                for i in 0..<1000 { try session.sqliteConnection().run("INSERT INTO t VALUES (?, ?, 1)", "row\(i)", [UInt8](repeating: 7, count: 4096)) }
            }
        }
        guard case .full? = full?.asStorageError else { Issue.record("a full file is \(String(describing: full))"); return }
        #expect(try db.read { try $0.query("SELECT COUNT(*) AS n FROM t").first?.int("n") } == 0, "nothing of the refused transaction is kept")
        // A unique key taken is a conflict; a CHECK failure is the statement's own bug, no StorageError.
        try await storage.withTransaction { try $0.sqliteConnection().run("INSERT INTO t VALUES ('a', NULL, 1)") }
        let taken = await #expect(throws: (any Error).self) {
            try await storage.withTransaction { try $0.sqliteConnection().run("INSERT INTO t VALUES ('a', NULL, 1)") }
        }
        guard case .conflict? = taken?.asStorageError else { Issue.record("a taken key is \(String(describing: taken))"); return }
        let check = await #expect(throws: (any Error).self) {
            try await storage.withTransaction { try $0.sqliteConnection().run("INSERT INTO t VALUES ('b', NULL, 0)") }
        }
        #expect(check?.asStorageError == nil, "\(String(describing: check))")
        // Work deferred to the commit runs after it, and not at all after a rollback.
        let ran = Mutex<[String]>([])
        struct Refused: Error {}
        try? await storage.withTransaction { session -> Void in
            storage.afterCommit { ran.withLock { $0.append("rolled back") } }
            try session.sqliteConnection().run("INSERT INTO t VALUES ('c', NULL, 1)")
            throw Refused()
        }
        try await storage.withTransaction { session -> Void in
            storage.afterCommit { ran.withLock { $0.append("committed") } }
            try session.sqliteConnection().run("INSERT INTO t VALUES ('d', NULL, 1)")
        }
        #expect(ran.withLock { $0 } == ["committed"])
        // A session that is not SQLite's is refused with the engine named, never used.
        final class OtherEngineSession: StorageSession { var changeCount: Int64 { 0 } }
        #expect(throws: StorageError.self) { try OtherEngineSession().sqliteConnection() }
    }

    @Test("a transaction that throws leaves nothing behind")
    func rollback() throws {
        let db = try pool()
        try db.write { try $0.execute("CREATE TABLE t (v TEXT NOT NULL UNIQUE)") }
        struct Boom: Error {}
        #expect(throws: Boom.self) {
            try db.transaction { c in
                try c.run("INSERT INTO t (v) VALUES (?)", "a")
                throw Boom()
            }
        }
        #expect(try db.read { try $0.query("SELECT COUNT(*) AS n FROM t").first?.int("n") } == 0)
        // A constraint failure mid-transaction rolls back the earlier insert as well.
        #expect(throws: SQLiteError.self) {
            try db.transaction { c in
                try c.run("INSERT INTO t (v) VALUES (?)", "b")
                try c.run("INSERT INTO t (v) VALUES (?)", "b")
            }
        }
        #expect(try db.read { try $0.query("SELECT COUNT(*) AS n FROM t").first?.int("n") } == 0)
    }

    @Test("values round-trip and errors carry code, message and SQL but no arguments")
    func valuesAndErrors() throws {
        let db = try pool()
        try db.write { try $0.execute("CREATE TABLE v (i INTEGER, r REAL, t TEXT, b BLOB, n TEXT)") }
        try db.write { try $0.run("INSERT INTO v VALUES (?, ?, ?, ?, ?)", Int64.max, 1.5, "héllo", [UInt8]([0, 1, 255]), Optional<String>.none) }
        let row = try #require(try db.read { try $0.query("SELECT * FROM v").first })
        #expect(row.int("i") == Int64.max)
        #expect(row["r"] == .real(1.5))
        #expect(row.string("t") == "héllo")
        #expect(row.blob("b") == [0, 1, 255])
        #expect(row["n"] == .null)
        // Text is bound by length: an empty string stays '' (not NULL), an embedded NUL is kept, a bridged string binds too.
        try db.write { try $0.run("INSERT INTO v (i, t) VALUES (?, ?), (?, ?), (?, ?)", 2, "", 3, "a\u{0}b", 4, NSString(string: "bridged") as String) }
        let texts = try db.read { try $0.query("SELECT i, t, t IS NULL AS null_t, length(CAST(t AS BLOB)) AS bytes FROM v WHERE i < 10 ORDER BY i") }
        #expect(texts.map { $0.int("null_t") } == [0, 0, 0])
        #expect(texts.map { $0.int("bytes") } == [0, 3, 7])
        #expect(texts.last?.string("t") == "bridged")
        do {
            try db.write { try $0.run("INSERT INTO missing VALUES (?)", "secret-argument") }
            Issue.record("expected an error")
        } catch let error as SQLiteError {
            #expect(error.message.contains("no such table"))
            #expect(error.sql?.contains("INSERT INTO missing") == true)
            #expect(!error.description.contains("secret-argument"))
        }
    }

    @Test("migrations apply once, in order, and are recorded")
    func migrations() throws {
        let db = try pool()
        let steps = [Migration("a.1", "CREATE TABLE a (x)"), Migration("a.2", "ALTER TABLE a ADD COLUMN y")]
        try db.migrate(steps)
        try db.migrate(steps)
        #expect(try db.read { try $0.query("SELECT id FROM schema_migrations ORDER BY id").compactMap { $0.string("id") } } == ["a.1", "a.2"])
        let broken = [Migration("b.1", "CREATE TABLE b (x)"), Migration("b.2", "THIS IS NOT SQL")]
        #expect(throws: SQLiteError.self) { try db.migrate(broken) }
        #expect(try db.read { try $0.query("SELECT id FROM schema_migrations WHERE id LIKE 'b.%'").count } == 1)
    }

    @Test("readers see committed writes while the writer is busy elsewhere")
    func concurrentReaders() async throws {
        let db = try pool()
        try db.write { try $0.execute("CREATE TABLE c (n INTEGER)") }
        await withTaskGroup(of: Void.self) { group in
            for i in 0..<50 {
                group.addTask { _ = try? db.transaction { try $0.run("INSERT INTO c VALUES (?)", i) } }
                group.addTask { _ = try? db.read { try $0.query("SELECT COUNT(*) FROM c") } }
            }
        }
        #expect(try db.read { try $0.query("SELECT COUNT(*) AS n FROM c").first?.int("n") } == 50)
    }

    @Test("the change generation grows after each committed write that changed rows, and only then")
    func changeGeneration() async throws {
        let db = try pool()
        try db.write { try $0.execute("CREATE TABLE g (n INTEGER)") }
        let start = db.changeGeneration
        _ = try db.read { try $0.query("SELECT COUNT(*) FROM g") }
        try db.transaction { try $0.run("UPDATE g SET n = 1") }  // no rows: nothing changed
        #expect(db.changeGeneration == start)
        try db.transaction { try $0.run("INSERT INTO g VALUES (1)") }
        #expect(db.changeGeneration == start + 1)
        // Seen by the writer's own body: the generation moves only once the transaction is over.
        let during = try db.transaction { c -> UInt64 in
            try c.run("INSERT INTO g VALUES (2)")
            return db.changeGeneration
        }
        #expect(during == start + 1)
        #expect(db.changeGeneration == start + 2)
        _ = try await db.groupTransaction { try $0.run("DELETE FROM g WHERE n = 1") }
        #expect(db.changeGeneration == start + 3)
        // A transaction that throws still counts: the generation may move without a change, never the reverse.
        #expect(throws: (any Error).self) { try db.transaction { c in try c.run("INSERT INTO g VALUES (3)"); try c.run("INSERT INTO nope VALUES (1)") } }
        #expect(db.changeGeneration == start + 4)
    }

    @Test("group commit: concurrent callers share transactions; one that fails rolls back only its own part")
    func groupCommit() async throws {
        let db = try pool()
        try db.write { try $0.execute("CREATE TABLE g (n INTEGER UNIQUE)") }
        let results = await withTaskGroup(of: Bool.self) { group in
            for i in 0..<300 {
                group.addTask {
                    // Every 10th caller inserts a duplicate and fails; the others must all land.
                    let value = i % 10 == 9 ? i - 1 : i
                    return (try? await db.groupTransaction { try $0.run("INSERT INTO g (n) VALUES (?)", value) }) != nil
                }
            }
            var all: [Bool] = []
            for await r in group { all.append(r) }
            return all
        }
        #expect(results.filter { $0 }.count == 270)
        #expect(try db.read { try $0.query("SELECT COUNT(*) AS n FROM g").first?.int("n") } == 270)
        #expect(try db.read { try $0.integrityCheck() } == "ok")
    }
}
