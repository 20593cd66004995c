import Foundation
import Gateway
import Testing

/// The built-in runner: argv and env from SOUL.yaml, input on stdin, reply on stdout, timeouts enforced.
@Suite("Command runner")
struct CommandRunnerTests {
    func runner(_ argv: [String], env: [String: String] = [:]) -> CommandRunner {
        CommandRunner(config: CommandRunnerConfig(argv: argv, environment: env, timeout: .seconds(10), workingDirectory: nil))
    }

    func request(input: String = "", timeout: Duration = .seconds(10)) -> RunRequest {
        RunRequest(agentID: "a", runID: "r", sessionID: "s", input: input, trigger: RunTrigger(rawValue: "test"), timeout: timeout)
    }

    @Test("the trigger's input arrives on stdin and stdout is the reply")
    func stdinStdout() async throws {
        let result = try await runner(["/bin/sh", "-c", "tr a-z A-Z"]).run(request(input: "hello"))
        #expect(result.reply == "HELLO")
    }

    @Test("the environment is clean: configured variables and run facts, none of the gateway's secrets")
    func cleanEnvironment() async throws {
        // The gateway's own environment holds a secret; the command sees HOME from it and nothing else.
        let host = ["SOULACY_MOBILE_PUSH_RELAY_TOKEN": "leak-me-not", "HOME": "/home/gateway", "OPENAI_API_KEY": "sk-leak-me-not"]
        let runner = CommandRunner(config: CommandRunnerConfig(argv: ["/usr/bin/env"], environment: ["STYLE": "short"], timeout: .seconds(10)), hostEnvironment: host)
        let result = try await runner.run(request())
        #expect(result.reply.contains("HOME=/home/gateway"))
        #expect(result.reply.contains("STYLE=short"))
        #expect(result.reply.contains("SOULACY_AGENT_ID=a"))
        #expect(result.reply.contains("SOULACY_RUN_ID=r"))
        #expect(!result.reply.contains("leak-me-not") && !result.reply.contains("OPENAI_API_KEY"))
    }

    @Test("the command inherits no descriptor of the gateway's but its three pipes")
    func noInheritedDescriptors() async throws {
        // A descriptor without close-on-exec, as a supervisor or a library might leave one.
        let leaked = open("/dev/null", O_RDONLY)
        #expect(leaked > 2)
        defer { close(leaked) }
        let result = try await runner(["/bin/sh", "-c", "ls /proc/$$/fd"]).run(request())
        #expect(result.reply.split(separator: "\n").sorted() == ["0", "1", "2"], "\(result.reply)")
    }

    @Test("a run past its timeout is stopped with its whole process group")
    func timeout() async throws {
        let started = ContinuousClock.now
        await #expect(throws: RunError.timedOut(after: .seconds(1))) {
            _ = try await runner(["/bin/sh", "-c", "sleep 300 & sleep 300"]).run(request(timeout: .seconds(1)))
        }
        // Far below the 300 s the sleeps would take: the group is stopped (SIGTERM, 2 s grace, SIGKILL), with room for a
        // loaded machine running the whole suite (a clean-clone run took 20 s).
        #expect(ContinuousClock.now - started < .seconds(90))
    }

    @Test("a non-zero exit and a missing program are failures with a reason")
    func failures() async throws {
        await #expect(throws: RunError.exited(status: 4, stderr: "bad thing")) {
            _ = try await runner(["/bin/sh", "-c", "echo bad thing >&2; exit 4"]).run(request())
        }
        do {
            _ = try await runner(["/no/such/program"]).run(request())
            Issue.record("expected a spawn failure")
        } catch {
            guard case .spawnFailed(let program, _) = error else { Issue.record("got \(error)"); return }
            #expect(program == "/no/such/program")
        }
    }
}
