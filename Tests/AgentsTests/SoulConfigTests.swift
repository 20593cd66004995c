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

    func problems(_ text: String, strict: Bool = false) -> (agents: [AgentConfig]?, problems: [String]) {
        var loader = SoulConfigLoader(file: "SOUL.yaml", destinations: Gateway.destinationValidators, environment: [:], strict: strict)
        let agents = loader.parse(text: text)
        return (agents, loader.problems.map(\.description))
    }

    @Test("unknown keys warn at the key's position with a did-you-mean; --strict makes them errors")
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
        let lenient = problems(text)
        #expect(lenient.agents?.first?.isOn == true, "unknown keys never block loading")
        #expect(lenient.problems.contains { $0.hasPrefix("SOUL.yaml:5:7: warning: unknown key 'timout' in runner; did you mean 'timeout'?") })
        #expect(lenient.problems.contains { $0.hasPrefix("SOUL.yaml:8:42: warning: unknown key 'tempalte' in schedule.output; did you mean 'template'?") })
        let strict = problems(text, strict: true)
        #expect(strict.problems.contains { $0.hasPrefix("SOUL.yaml:5:7: unknown key 'timout' in runner") })
        #expect(strict.agents?.first?.isOn == false, "under --strict an unknown key is a validation error")
    }

    @Test("a type error rejects the file; a failed validation parks the agent; both say where")
    func tiers() {
        // Type errors (Soulacy's decoder fails): the file is rejected.
        for (text, expected) in [
            ("id: a\nmax_turns: ten\n", "SOUL.yaml:2:12: max_turns must be a whole number, got 'ten'"),
            ("id: a\nenabled: \"true\"\n", "SOUL.yaml:2:10: enabled must be true or false, got a quoted string"),
            ("id: a\nchannels: http\n", "SOUL.yaml:2:11: channels must be a list, got a scalar"),
            ("name: no id\n", "SOUL.yaml:1:1: id is missing"),
            ("id: a\ntrigger: oneshot\nschedule: {at: tomorrow}\n", "SOUL.yaml:3:16: schedule.at 'tomorrow' is not a timestamp"),
        ] {
            let result = problems(text)
            #expect(result.agents == nil, "\(text) should be rejected")
            #expect(result.problems.contains { $0.hasPrefix(expected) }, "missing \(expected) in \(result.problems)")
        }
        // Validation errors: the agent loads, parked, with the reason.
        let text = """
            agents:
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
              - id: ok3
                trigger: sometimes
                run_timeout: forever
                runner: {command: ["/bin/true"]}
            """
        let result = problems(text)
        let expected = [
            "SOUL.yaml:5:13: minute value 61",
            "SOUL.yaml:6:17: unknown time zone 'Mars/Olympus'",
            "SOUL.yaml:8:18: warning: no channel 'sms' registered on this gateway",
            "SOUL.yaml:14:37: destination 'team:x' is not one of all, user:<subject>, device:<installation-id>",
            "SOUL.yaml:16:14: trigger must be one of cron, oneshot, webhook, location, internal, channel; got 'sometimes'",
            "SOUL.yaml:17:18: run_timeout 'forever' is not a duration",
        ]
        for prefix in expected { #expect(result.problems.contains { $0.hasPrefix(prefix) }, "missing \(prefix) in \(result.problems)") }
        #expect(result.problems.count == expected.count, "\(result.problems)")
        #expect(result.agents?.map(\.id) == ["ok", "ok2", "ok3"])
        #expect(result.agents?.allSatisfy { !$0.isOn && $0.disabledReason != nil } == true)
    }

    @Test("Soulacy's forms load: any id, the System agent, one-shots, templates without {reply}, durations, inert schedules")
    func soulacyForms() throws {
        #expect(errors("agents: [\n  - id: x\n").first == "SOUL.yaml:2:3: while parsing a flow node: did not find expected node content")
        #expect(errors("").first == "SOUL.yaml:1:1: the file is empty; an agent file needs at least an id")
        #expect(errors("agents:\n  - {id: a, id: b, runner: {command: [x]}}\n").first?.contains("duplicate key 'id'") == true)

        let system = try #require(problems("id: system\nenabled: false\nsystem_tools: true\n").agents?.first)
        #expect(system.isOn && system.channels == ["http"] && system.confirmTools == ["*"], "the System agent is always on, on http only")

        let spaced = try #require(problems("id: Test Agent\nenabled: true\ntrigger: channel\nchannels: [http]\nschedule: {}\n").agents?.first)
        #expect(spaced.id == "Test Agent" && spaced.isOn && spaced.trigger == .channel)

        let oneShot = try #require(problems("id: o\nenabled: true\ntrigger: oneshot\nschedule:\n  at: 2026-06-01T09:00:00+02:00\n").agents?.first)
        #expect(oneShot.schedule?.at == Date(timeIntervalSince1970: 1_780_297_200))
        let template = try #require(problems("id: t\nenabled: yes\nschedule:\n  cron: 0 8 * * *\n  output: {channel: mobile, to: all, template: 'Morning from {agent_name}'}\n").agents?.first)
        #expect(template.trigger == .cron && template.schedule?.output?.template == "Morning from {agent_name}" && template.isOn)
        let timed = try #require(problems("id: d\nenabled: on\nrun_timeout: 1.5h\n").agents?.first)
        #expect(timed.effectiveRunTimeout == .seconds(5400))
        #expect(problems("id: d\nrun_timeout: 0\n").agents?.first?.effectiveRunTimeout == .seconds(900), "zero means Soulacy's 15 minutes")
        // A missing `enabled` is false in a Soulacy file (and says so); a bundle's agents stay on as before.
        let off = problems("id: quiet\n")
        #expect(off.agents?.first?.enabled == false && off.problems.contains { $0.contains("no 'enabled: true'") })
        // A channel this gateway lacks, and a numeric `to`, are not errors.
        let telegram = problems("id: tg\nenabled: true\nschedule:\n  cron: 0 7 * * *\n  output: {channel: telegram, to: 123456789}\n")
        #expect(telegram.agents?.first?.isOn == true && telegram.agents?.first?.schedule?.output?.to == "123456789")
    }

    @Test("Go durations and Soulacy's YAML timestamps read as the original reads them")
    func durationsAndTimestamps() {
        #expect(DurationText.parse("1h30m") == .seconds(5400))
        #expect(DurationText.parse("500ms") == .milliseconds(500))
        #expect(DurationText.parse("1.5h") == .seconds(5400))
        #expect(DurationText.parse("-2s") == .seconds(-2))
        #expect(DurationText.parse("2d") == .seconds(172_800), "this gateway's older form still reads")
        #expect(DurationText.parse("5 m") == nil && DurationText.parse("1H") == nil && DurationText.parse("") == nil && DurationText.parse(".s") == nil)
        let rfc = SoulConfigLoader.timestamp("2026-06-01T09:00:00+02:00", quoted: true)
        #expect(rfc == Date(timeIntervalSince1970: 1_780_297_200))
        #expect(SoulConfigLoader.timestamp("2026-6-1 7:00:00", quoted: false) == rfc, "no zone reads as UTC")
        #expect(SoulConfigLoader.timestamp("2026-06-01", quoted: false) == Date(timeIntervalSince1970: 1_780_272_000))
        #expect(SoulConfigLoader.timestamp("2026-06-01", quoted: true) == nil, "quoted, only RFC 3339 is a timestamp")
        #expect(SoulConfigLoader.timestamp("2026-02-30T00:00:00Z", quoted: true) == nil)
    }

    @Test("all 19 real Soulacy agent files load unchanged, each with its original meaning")
    func realFiles() throws {
        let samples = RepositoryPaths.root + "/Tests/Fixtures/soulacy-agents"
        let result = AgentFiles.load(path: samples, destinations: Gateway.destinationValidators, environment: [:])
        #expect(result.files.count == 19 && result.rejectedFiles.isEmpty)
        #expect(!result.hasErrors, "\(result.problems.filter { $0.severity == .error })")
        #expect(!result.problems.contains { $0.message.contains("unknown key") }, "every field of the real files is known")
        let agents = result.config
        #expect(agents.agents.count == 19)
        let briefing = try #require(agents.agent(id: "daily-briefing"))
        #expect(briefing.trigger == .cron && briefing.isOn && briefing.schedule?.cron?.expression == "0 7 * * *" && briefing.schedule?.output == nil)
        guard case .llm(let llm) = briefing.runner else { Issue.record("daily-briefing is an LLM agent"); return }
        #expect(llm.provider == "ollama" && llm.model == "gemma4:latest" && llm.temperature == 0.2 && llm.maxTokens == 8152)
        #expect(briefing.maxTurns == 6 && briefing.memoryEntries == 50)
        #expect(briefing.notRunHere.contains("Python tools (get_briefing_data, send_telegram)"))
        let podcast = try #require(agents.agent(id: "ai-article-podcast-agent"))
        #expect(podcast.effectiveRunTimeout == .seconds(45 * 60) && podcast.notifyOnFailure?.channel == "telegram")
        #expect(podcast.notifyOnFailure?.template == "🚨 Daily AI podcast failed: {error}" && podcast.notifyOnFailure?.includeError == true)
        if case .llm(let guarded) = podcast.runner { #expect(guarded.allowedProviders == ["ollama"]) }
        let screener = try #require(agents.agent(id: "stock-screener-template"))
        #expect(!screener.enabled && screener.schedule?.cron?.expression == "30 13 * * 1-5" && screener.effectiveRunTimeout == .seconds(480))
        #expect(screener.notRunHere.contains("builtins web_search, fetch_url"))
        #expect(agents.agent(id: "Test Agent")?.trigger == .channel)
        #expect(agents.agent(id: "system")?.isOn == true && !agents.visibleAgents.contains { $0.id == "system" })
        let phone = try #require(agents.agent(id: "phone-brief-template"))
        #expect(phone.builtins == ["mobile.list_nodes", "mobile.invoke", "mobile.command_status"] && phone.adaptiveMemory == true)
        #expect(phone.persona.role == "a calm morning briefer" && phone.persona.maxLength == 700 && phone.notRunHere.isEmpty)
        #expect(agents.agent(id: "notes-assistant")?.builtins == [], "builtins: [] offers no tools")
        #expect(agents.agent(id: "financial-agent")?.notRunHere.contains { $0.hasPrefix("channels telegram") } == true)
    }

    @Test("an agents directory: every *.yaml at any depth, hidden folders skipped, a later duplicate id wins")
    func directory() throws {
        let dir = TestGateway.makeTemporaryDirectory()
        func write(_ path: String, _ text: String) throws {
            let url = URL(fileURLWithPath: dir + "/" + path)
            try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
            try text.write(to: url, atomically: true, encoding: .utf8)
        }
        try write("a/SOUL.yaml", "id: a\nenabled: true\n")
        try write("b.yaml", "id: b\nenabled: true\n")
        try write("a/.agent-history/SOUL.yaml.1", "id: a\n")
        try write(".agent-history/old.yaml", "id: old\nenabled: true\n")
        try write("z/SOUL.yml", "id: b\nname: Later B\nenabled: true\n")
        try write("notes.txt", "not an agent")
        let result = AgentFiles.load(path: dir, destinations: Gateway.destinationValidators, environment: [:])
        #expect(result.config.agents.map(\.id).sorted() == ["a", "b"])
        #expect(result.config.agent(id: "b")?.name == "Later B")
        #expect(result.problems.contains { $0.message.contains("agent id 'b' is also defined in") })
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
        let found = problems(text).problems
        let expected = [
            "SOUL.yaml:6:17: latitude must be from -90 to 90, got 95",
            "SOUL.yaml:8:17: radius_m must be from 100 to 5,000, got 50",
            "SOUL.yaml:9:11: on must be enter or exit, got 'arrive'",
            "SOUL.yaml:10:17: cooldown 'soon' is not a duration",
            "SOUL.yaml:14:23: the webhook secret must be at least 16 characters",
            "SOUL.yaml:17:27: environment variable SOULACY_TEST_UNSET_VARIABLE is not set",
            "SOUL.yaml:22:15: warning: a 'location' block needs trigger: location",
        ]
        for prefix in expected { #expect(found.contains { $0.hasPrefix(prefix) }, "missing \(prefix) in \(found)") }
        #expect(found.count == expected.count, "\(found)")
    }

    @Test("soulacy check: problems as file:line:col, exit 1 on errors; --strict; the next three fires in the schedule's zone")
    func checkCommand() async throws {
        let binary = RepositoryPaths.soulacyBinary
        try #require(FileManager.default.isExecutableFile(atPath: binary), "build the soulacy binary first (swift build)")
        let dir = URL(fileURLWithPath: TestGateway.makeTemporaryDirectory())
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let bad = dir.appendingPathComponent("SOUL.yaml")
        try "agents:\n  - id: a\n    runner: {command: [x]}\n    shedule: {}\n    schedule: {cron: '61 * * * *'}\n".write(to: bad, atomically: true, encoding: .utf8)
        let (status, text) = try await runProgram(binary, ["check", bad.path])
        #expect(status == 1)
        #expect(text.contains("\(bad.path):4:5: warning: unknown key 'shedule' in the agent; did you mean 'schedule'?"))
        #expect(text.contains("\(bad.path):5:22: minute value 61"))

        let warned = dir.appendingPathComponent("warned.yaml")
        try "id: w\nenabled: true\ntrigger: cron\nshedule: {}\nschedule:\n  cron: CRON_TZ=Europe/Berlin 0 8 * * MON-FRI\n".write(to: warned, atomically: true, encoding: .utf8)
        let (warnStatus, warnText) = try await runProgram(binary, ["check", warned.path])
        #expect(warnStatus == 0, "warnings alone pass: \(warnText)")
        #expect(warnText.contains("in Europe/Berlin, next: "))
        let fires = warnText.components(separatedBy: "next: ").last?.components(separatedBy: "\n").first?.components(separatedBy: ", ") ?? []
        #expect(fires.count == 3 && fires.allSatisfy { $0.contains(" 08:00:00 ") && !$0.hasPrefix("Sat") && !$0.hasPrefix("Sun") }, "\(fires)")
        let (strictStatus, _) = try await runProgram(binary, ["check", "--strict", warned.path])
        #expect(strictStatus == 1, "--strict makes unknown keys errors")

        let (okStatus, okText) = try await runProgram(binary, ["check", RepositoryPaths.root + "/examples/SOUL.yaml"])
        #expect(okStatus == 0)
        #expect(okText.contains("ok"))
    }
}
