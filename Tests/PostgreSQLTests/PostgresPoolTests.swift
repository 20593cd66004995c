import Foundation
import GatewayTestSupport
import PostgreSQL
import Synchronization
import Testing

@Suite("PostgreSQL pool")
struct PostgresPoolTests {
    @Test("50 concurrent tasks over 4 connections all finish, and the waiting never holds a cooperative thread")
    func manyWaiters() async throws {
        let (pool, _) = try await freshPool(size: 4)
        defer { pool.close() }
        try await pool.connectAll()
        // Every body holds its connection until the test opens the gate: while 4 are held and 46 wait, far more
        // tasks than cores must still run. A safety net opens the gate after 10 s, so a pool whose waiting held
        // the cooperative threads fails the check below instead of hanging the suite.
        let gate = DispatchSemaphore(value: 0)
        let openedBySafetyNet = Atomic<Bool>(false)
        let entered = Counter()
        let finished = Counter()
        let work = Task { try await withThrowingTaskGroup(of: Int32.self) { group in
            for _ in 0..<50 {
                group.addTask {
                    let pid = try await pool.withConnection { db in
                        entered.value.add(1, ordering: .relaxed)
                        gate.wait()
                        _ = try db.query("SELECT pg_sleep(0.02)")
                        #expect(pool.executor.isCurrent, "the statement runs on a thread of the pool's")
                        return db.backendPID
                    }
                    finished.value.add(1, ordering: .relaxed)
                    return pid
                }
            }
            return try await group.reduce(into: [Int32]()) { $0.append($1) }
        } }
        let deadline = ContinuousClock.now + .seconds(20)
        while entered.value.load(ordering: .relaxed) < 4 && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
        let safetyNet = Task {
            try await Task.sleep(for: .seconds(10))
            openedBySafetyNet.store(true, ordering: .releasing)
            for _ in 0..<50 { gate.signal() }
        }
        let probes = await withTaskGroup(of: Int.self) { group in
            for index in 0..<(ProcessInfo.processInfo.activeProcessorCount * 8) { group.addTask { await Task.yield(); return index + 1 } }
            return await group.reduce(0) { $0 + $1 }
        }
        let probedWhileHeld = !openedBySafetyNet.load(ordering: .acquiring)
        let enteredDuringProbe = entered.value.load(ordering: .relaxed)
        let doneDuringProbe = finished.value.load(ordering: .relaxed)
        safetyNet.cancel()
        if probedWhileHeld { for _ in 0..<50 { gate.signal() } }
        let used = try await work.value
        let cores = ProcessInfo.processInfo.activeProcessorCount * 8
        #expect(probes == cores * (cores + 1) / 2)
        #expect(probedWhileHeld, "the cooperative pool ran \(cores) probes while every connection was held and the rest waited")
        #expect(enteredDuringProbe == 4 && doneDuringProbe == 0, "4 connections held, none let go: \(enteredDuringProbe) entered, \(doneDuringProbe) done")
        #expect(used.count == 50)
        #expect(Set(used).count <= 4, "at most the pool's 4 connections served: \(Set(used))")
    }

    @TaskLocal static var request: String?

    @Test("the body runs in the calling task: task-locals bound around the call are seen inside it")
    func taskLocals() async throws {
        let (pool, _) = try await freshPool(size: 1)
        defer { pool.close() }
        let seen = try await Self.$request.withValue("req-7") {
            try await pool.transaction { _ in Self.request }
        }
        #expect(seen == "req-7")
    }

    @Test("a connection the server killed while idle is replaced on its next use, and that use works")
    func killedWhileIdle() async throws {
        let (pool, database) = try await freshPool(size: 1)
        defer { pool.close() }
        let killer = try PostgresPool(url: database.url, size: 1)
        defer { killer.close() }
        let before = try await pool.withConnection { db in db.backendPID }
        try await killer.withConnection { db in _ = try db.query("SELECT pg_terminate_backend($1::int)", Int64(before)) }
        // Terminating only signals the backend: wait until its process (on this machine) has ended, and its socket
        // with it. A call racing the kill itself would fail as connectionLost, as the next test shows.
        #expect(try await processEnds(before), "backend \(before) ended")
        let after = try await pool.withConnection { db in (db.backendPID, try db.query("SELECT 41 + 1 AS n").first?.int("n")) }
        #expect(after.1 == 42)
        #expect(after.0 != before && after.0 != 0)
    }

    @Test("a connection killed during a call fails that call as connectionLost, and the next call works")
    func killedDuringCall() async throws {
        let (pool, _) = try await freshPool(size: 1)
        defer { pool.close() }
        let prepared = try await pool.withConnection { db in
            _ = try db.query("SELECT $1::int8 AS n", 1)
            return db.backendPID
        }
        let lost = try await #require(throws: PostgresError.self) {
            try await pool.withConnection { db in _ = try db.query("SELECT pg_terminate_backend(pg_backend_pid())") }
        }
        #expect(lost.kind == .connectionLost, "\(lost)")
        // The prepared statement cache starts over on the new connection: the same statement works again.
        let next = try await pool.withConnection { db in (db.backendPID, try db.query("SELECT $1::int8 AS n", 7).first?.int("n")) }
        #expect(next.1 == 7 && next.0 != prepared)
    }

    @Test("a task cancelled while waiting for a connection leaves the queue; the connection is not lost")
    func cancelledWaiter() async throws {
        let (pool, _) = try await freshPool(size: 1)
        defer { pool.close() }
        // The holder keeps the pool's one connection until the test lets it go, so the waiter can only leave by its
        // cancellation; a safety net lets it go after 10 s, so a waiter that waits for the connection fails the check
        // below instead of hanging the suite.
        let release = DispatchSemaphore(value: 0)
        let holding = Atomic<Bool>(false)
        let releasedBySafetyNet = Atomic<Bool>(false)
        let holder = Task {
            try await pool.withConnection { db in
                holding.store(true, ordering: .releasing)
                release.wait()
                return db.backendPID
            }
        }
        while !holding.load(ordering: .acquiring) { try await Task.sleep(for: .milliseconds(10)) }
        let waiter = Task { try await pool.withConnection { db in db.backendPID } }
        try await Task.sleep(for: .milliseconds(50))
        let safetyNet = Task {
            try await Task.sleep(for: .seconds(10))
            releasedBySafetyNet.store(true, ordering: .releasing)
            release.signal()
        }
        waiter.cancel()
        await #expect(throws: CancellationError.self) { try await waiter.value }
        let leftWhileHeld = !releasedBySafetyNet.load(ordering: .acquiring)
        #expect(leftWhileHeld, "the waiter left while the connection was still held")
        safetyNet.cancel()
        if leftWhileHeld { release.signal() }
        _ = try await holder.value
        #expect(try await pool.withConnection { db in try db.query("SELECT 1 AS one").first?.int("one") } == 1)
    }

    @Test("a closed pool refuses work with a clear error")
    func closed() async throws {
        let (pool, _) = try await freshPool(size: 1)
        pool.close()
        let error = try await #require(throws: PostgresError.self) { try await pool.withConnection { _ in } }
        #expect(error.kind == .connectionLost && error.message.contains("closed"))
    }

    @Test("TLS is used when the URL asks for it, and not when it refuses it")
    func tls() async throws {
        let database = try await freshDatabase()
        let secure = try PostgresPool(url: database.tlsURL, size: 1)
        defer { secure.close() }
        let plain = try PostgresPool(url: database.url, size: 1)
        defer { plain.close() }
        let query = "SELECT ssl, version FROM pg_stat_ssl WHERE pid = pg_backend_pid()"
        let overTLS = try await secure.withConnection { db in (db.isTLS, try db.query(query).first) }
        #expect(overTLS.0 && overTLS.1?.bool("ssl") == true)
        #expect(overTLS.1?.string("version")?.hasPrefix("TLS") == true)
        let overTCP = try await plain.withConnection { db in (db.isTLS, try db.query(query).first?.bool("ssl")) }
        #expect(!overTCP.0 && overTCP.1 == false)
    }
}

final class Counter: Sendable {
    let value = Atomic<Int>(0)
}

/// Whether process `pid` ended (gone or a zombie) within `timeout`.
func processEnds(_ pid: Int32, timeout: Duration = .seconds(10)) async throws -> Bool {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8), let close = stat.lastIndex(of: ")") else { return true }
        if stat[stat.index(after: close)...].trimmingCharacters(in: .whitespaces).hasPrefix("Z") { return true }
        try await Task.sleep(for: .milliseconds(10))
    }
    return false
}
