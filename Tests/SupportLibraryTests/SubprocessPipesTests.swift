import Glibc
import Subprocess
import Testing

/// The pipes to children, under the churn a busy gateway makes: many children at once, from many tasks, each pipe
/// waited on again and again and torn down while others are being set up. Dispatch sources crashed the test process
/// under such churn once (libdispatch's epoll bookkeeping); the pipes now wait through one epoll of their own.
@Suite("Subprocess pipes")
struct SubprocessPipesTests {
    @Test("48 children at a time, 4 rounds: 200 KB each through cat and back whole, pipes closed from other tasks")
    func churn() async throws {
        let payload = (0..<200_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        for round in 0..<4 {
            let results = await withTaskGroup(of: Bool.self) { group -> [Bool] in
                for child in 0..<48 {
                    group.addTask {
                        guard let process = try? Subprocess.spawn(SubprocessCommand(argv: ["/bin/cat"], environment: [:])) else { return false }
                        // Larger than a pipe's buffer both ways: the writer and the reader each wait on readiness
                        // many times while the other side works.
                        async let echoed = process.standardOutput.readAll(limit: 1 << 20, stopAtLimit: true)
                        do { try await process.standardInput.write(payload) } catch { return false }
                        process.standardInput.close()
                        let (bytes, overflowed) = await echoed
                        process.standardOutput.close()
                        // Every other child's stderr is closed by another task while nothing was written to it.
                        if child.isMultiple(of: 2) {
                            await Task.detached { process.standardError.close() }.value
                        } else {
                            _ = await process.standardError.readAll(limit: 1024, stopAtLimit: true)
                            process.standardError.close()
                        }
                        let status = await process.waitForExit()
                        return !overflowed && bytes == payload && status == .exited(0)
                    }
                }
                var all: [Bool] = []
                for await result in group { all.append(result) }
                return all
            }
            #expect(results.count == 48 && results.allSatisfy { $0 }, "round \(round): \(results.filter { !$0 }.count) children failed")
        }
        // A read waiting on an open pipe ends when another task closes the pipe.
        let quiet = try Subprocess.spawn(SubprocessCommand(argv: ["/bin/sleep", "30"], environment: [:]))
        let waiting = Task { await quiet.standardOutput.read() }
        try await Task.sleep(for: .milliseconds(100))
        quiet.standardOutput.close()
        #expect(await waiting.value == nil)
        quiet.signalGroup(SIGKILL)
        _ = await quiet.waitForExit()
        quiet.standardInput.close()
        quiet.standardError.close()
    }
}
