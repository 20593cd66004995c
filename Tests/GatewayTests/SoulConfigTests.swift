import Foundation
import Gateway
import GatewayTestSupport
import Testing

/// SOUL.yaml loading and `soulacy check`: every problem with its line and column.
@Suite("SOUL.yaml validation")
struct SoulConfigTests {
    func errors(_ text: String) -> [String] {
        var loader = SoulConfigLoader(file: "SOUL.yaml", destinations: Gateway.destinationValidators)
        do {
            _ = try loader.load(text: text)
            return []
        } catch {
            return error.errors.map(\.description)
        }
    }

    @Test("the example config is valid")
    func example() throws {
        let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../examples/SOUL.yaml").standardized.path
        let config = try SoulConfigLoader.load(path: path, destinations: Gateway.destinationValidators)
        #expect(config.agents.map(\.id).contains("morning-brief"))
        #expect(config.agent(id: "morning-brief")?.schedule?.timeZone.identifier == "Europe/Berlin")
    }

    @Test("unknown keys are errors at the key's position, not ignored")
    func unknownKeys() {
        let text = """
            agents:
              - id: a
                runner:
                  command: ["/bin/true"]
                  timout: 5s
                schedule:
                  cron: "0 8 * * *"
                  output: {channel: mobile, to: all, tempalte: "x"}
            """
        let found = errors(text)
        #expect(found.contains { $0.hasPrefix("SOUL.yaml:5:7: unknown key 'timout' in runner") })
        #expect(found.contains { $0.hasPrefix("SOUL.yaml:8:42: unknown key 'tempalte' in output") })
    }

    @Test("bad values are reported where they are")
    func badValues() {
        let text = """
            agents:
              - id: Bad Id
                runner:
                  command: "/bin/true"
                  timeout: forever
              - id: ok
                runner: {command: ["/bin/true"]}
                schedule:
                  cron: "61 * * * *"
                  timezone: Mars/Olympus
                  output:
                    channel: sms
                    to: all
              - id: ok2
                runner: {command: ["/bin/true"]}
                schedule:
                  cron: "@daily"
                  output: {channel: mobile, to: "team:x"}
              - id: ok
                runner: {command: ["/bin/true"]}
            """
        let found = errors(text)
        let expected = [
            "SOUL.yaml:2:9: agent id 'Bad Id' must be",
            "SOUL.yaml:4:16: command must be a list",
            "SOUL.yaml:5:16: timeout 'forever' is not a duration",
            "SOUL.yaml:9:13: minute value 61",
            "SOUL.yaml:10:17: unknown time zone 'Mars/Olympus'",
            "SOUL.yaml:12:18: unknown channel 'sms'",
            "SOUL.yaml:18:37: destination 'team:x' is not one of all, user:<subject>, device:<installation-id>",
            "SOUL.yaml:19:5: agent id 'ok' is already used at line 6",
        ]
        for prefix in expected {
            #expect(found.contains { $0.hasPrefix(prefix) }, "missing \(prefix) in \(found)")
        }
        #expect(found.count == expected.count, "\(found)")
    }

    @Test("syntax errors, an empty file, a reserved id and a missing schedule")
    func structural() {
        #expect(errors("agents: [\n  - id: x\n").first == "SOUL.yaml:2:3: while parsing a flow node: did not find expected node content")
        #expect(errors("").first == "SOUL.yaml:1:1: the file is empty; it needs an 'agents' list")
        #expect(errors("agents:\n  - id: system\n    runner: {command: [x]}\n").first?.contains("reserved") == true)
        #expect(errors("agents:\n  - id: a\n    trigger: cron\n    runner: {command: [x]}\n").first?.hasPrefix("SOUL.yaml:3:14: trigger cron needs a 'schedule'") == true)
        #expect(errors("agents:\n  - id: a\n    trigger: oneshot\n    runner: {command: [x]}\n").first?.contains("not supported by this gateway yet") == true)
        #expect(errors("agents:\n  - {id: a, id: b, runner: {command: [x]}}\n").first?.contains("duplicate key 'id'") == true)
        #expect(errors("agents:\n  - id: a\n    runner: {command: [x]}\n    schedule: {cron: '@daily', output: {channel: mobile, to: all, template: 'no slot'}}\n")
            .first?.contains("template must contain {reply}") == true)
    }

    @Test("location and webhook blocks are validated with positions")
    func triggerBlocks() {
        let text = """
            agents:
              - id: loc
                runner: {command: [x]}
                trigger: location
                location:
                  latitude: 95
                  longitude: 13.4
                  radius_m: 50
                  on: arrive
                  cooldown: soon
              - id: hook
                runner: {command: [x]}
                trigger: webhook
                webhook: {secret: short}
              - id: hook2
                runner: {command: [x]}
                webhook: {secret_env: SOULACY_TEST_UNSET_VARIABLE}
              - id: mixed
                runner: {command: [x]}
                trigger: webhook
                webhook: {secret: "a-long-enough-secret"}
                location: {latitude: 1, longitude: 1, radius_m: 100, on: enter}
            """
        let found = errors(text)
        let expected = [
            "SOUL.yaml:6:17: latitude must be from -90 to 90, got 95",
            "SOUL.yaml:8:17: radius_m must be from 100 to 5,000, got 50",
            "SOUL.yaml:9:11: on must be enter or exit, got 'arrive'",
            "SOUL.yaml:10:17: cooldown 'soon' is not a duration",
            "SOUL.yaml:14:23: the webhook secret must be at least 16 characters",
            "SOUL.yaml:17:27: environment variable SOULACY_TEST_UNSET_VARIABLE is not set",
            "SOUL.yaml:22:15: a 'location' block needs trigger: location",
        ]
        for prefix in expected { #expect(found.contains { $0.hasPrefix(prefix) }, "missing \(prefix) in \(found)") }
        #expect(found.count == expected.count, "\(found)")
    }

    @Test("soulacy check prints file:line:col: message and exits 1; a valid file exits 0")
    func checkCommand() throws {
        let binary = RepositoryPaths.soulacyBinary
        try #require(FileManager.default.isExecutableFile(atPath: binary), "build the soulacy binary first (swift build)")
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("check-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let bad = dir.appendingPathComponent("SOUL.yaml")
        try "agents:\n  - id: a\n    runner: {command: [x]}\n    shedule: {}\n".write(to: bad, atomically: true, encoding: .utf8)

        let (status, text) = try runProgram(binary, ["check", bad.path])
        #expect(status == 1)
        #expect(text.contains("\(bad.path):4:5: unknown key 'shedule' in an agent"))
        let (okStatus, okText) = try runProgram(binary, ["check", RepositoryPaths.root + "/examples/SOUL.yaml"])
        #expect(okStatus == 0)
        #expect(okText.contains("ok"))
    }
}
