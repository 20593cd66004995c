import ChannelAPI
import Foundation
import Gateway
import GatewayTestSupport
import Testing

/// The Soulacy user's `~/.soulacy/config.yaml` read as Soulacy reads it (SOULACY-AGENTS.md §6, §12 and the
/// originals' config loader): blocks on only with `enabled: true`, `SOULACY_CHANNELS_<KIND>_<KEY>` over the file,
/// the `llm:` block under the environment's own provider variables.
@Suite("Gateway config file")
struct GatewayConfigFileTests {
    func write(_ text: String) throws -> String {
        let path = TestGateway.makeTemporaryDirectory() + "/config.yaml"
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    @Test("channel blocks: enabled ones built, others listed as off; SOULACY_CHANNELS_<KIND>_<KEY> overrides the file; http is the API")
    func channels() throws {
        let path = try write("""
            channels:
              http: {enabled: true}
              telegram:
                enabled: true
                token: "from-the-file"
                chat_id: 424242
              slack: {enabled: false, bot_token: "xoxb-1"}
              google_chat: {enabled: true, webhook_url: "https://chat.example/v1/spaces/a"}
            """)
        let config = try GatewayConfigFile.load(path: path, environment: ["SOULACY_CHANNELS_TELEGRAM_TOKEN": "from-the-environment",
                                                                          "SOULACY_CHANNELS_GOOGLE_CHAT_PREFIX": "[soulacy]"])
        #expect(config.channels.map(\.kind) .sorted() == ["google_chat", "telegram"])
        #expect(config.disabledChannels == ["slack"])
        let telegram = try #require(config.channels.first { $0.kind == "telegram" })
        #expect(telegram.string("token") == "from-the-environment")
        #expect(telegram.string("chat_id") == "424242", "a YAML number reads as its text")
        #expect(config.channels.first { $0.kind == "google_chat" }?.string("prefix") == "[soulacy]")
    }

    @Test("the llm: block becomes the providers' variables, and the environment's own value wins")
    func llm() throws {
        let path = try write("""
            llm:
              default_provider: anthropic
              providers:
                openai: {base_url: "http://127.0.0.1:9/v1", api_key: "sk-file", model: gpt-file}
                anthropic: {api_key: "sk-ant-file"}
                my-vllm: {base_url: "http://10.0.0.2:8000/v1", model: qwen}
            """)
        let config = try GatewayConfigFile.load(path: path, environment: ["OPENAI_API_KEY": "sk-env"])
        #expect(config.llmEnvironment["SOULACY_LLM_DEFAULT_PROVIDER"] == "anthropic")
        #expect(config.llmEnvironment["OPENAI_API_KEY"] == nil, "the environment's key is used, not the file's")
        #expect(config.llmEnvironment["OPENAI_BASE_URL"] == "http://127.0.0.1:9/v1")
        #expect(config.llmEnvironment["SOULACY_OPENAI_MODEL"] == "gpt-file")
        #expect(config.llmEnvironment["ANTHROPIC_API_KEY"] == "sk-ant-file")
        #expect(config.llmEnvironment["SOULACY_LLM_MY_VLLM_BASE_URL"] == "http://10.0.0.2:8000/v1")
        #expect(config.llmEnvironment["SOULACY_LLM_MY_VLLM_MODEL"] == "qwen")
    }

    @Test("a sidecar's env: keeps its variable names as written; every other key is case-insensitive")
    func sidecarEnvironmentNames() throws {
        let path = try write("channels:\n  sidecars:\n    - Channel: matrix\n      command: /bin/true\n      ENV: {MATRIX_TOKEN: abc, Mixed_Case: x}\n")
        let block = try #require(try GatewayConfigFile.load(path: path, environment: [:]).channels.first { $0.kind == "sidecars" })
        guard case .list(let items)? = block.values["sidecars"], case .map(let item)? = items.first, case .map(let env)? = item["env"] else {
            Issue.record("no env map in \(block)")
            return
        }
        #expect(item["channel"] == .string("matrix"))
        #expect(Set(env.keys) == ["MATRIX_TOKEN", "Mixed_Case"])
    }

    @Test("llm.allowed_providers of the gateway config parks an agent on another provider, naming its file:line; an agent's own list is judged by itself; the environment wins")
    func allowedProviders() async throws {
        let path = try write("llm:\n  allowed_providers: [ollama, anthropic]\n")
        #expect(try GatewayConfigFile.load(path: path, environment: [:]).llmEnvironment["SOULACY_LLM_ALLOWED_PROVIDERS"] == "ollama,anthropic")
        #expect(try GatewayConfigFile.load(path: path, environment: ["SOULACY_LLM_ALLOWED_PROVIDERS": "openai"]).llmEnvironment["SOULACY_LLM_ALLOWED_PROVIDERS"] == nil)

        let dir = TestGateway.makeTemporaryDirectory() + "/agents"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        try "id: gpt\nenabled: true\nllm: {provider: openai, model: gpt-4o}\n".write(toFile: dir + "/gpt.yaml", atomically: true, encoding: .utf8)
        try "id: local\nenabled: true\nllm: {provider: ollama, model: llama3.2}\n".write(toFile: dir + "/local.yaml", atomically: true, encoding: .utf8)
        try "id: own\nenabled: true\nllm: {provider: openai, model: gpt-4o, allowed_providers: [openai]}\n".write(toFile: dir + "/own.yaml", atomically: true, encoding: .utf8)
        try await withTestGateway(agents: dir, gatewayConfig: "llm:\n  allowed_providers: [ollama, anthropic]\n") { (gw) async throws in
            let gpt = try #require(gw.gateway.catalog.agent(id: "gpt"))
            #expect(!gpt.isOn && gpt.disabledReason?.contains("not in the gateway config's llm.allowed_providers (ollama, anthropic)") == true, "\(String(describing: gpt.disabledReason))")
            #expect(gw.gateway.catalog.agent(id: "local")?.isOn == true)
            #expect(gw.gateway.catalog.agent(id: "own")?.isOn == true)
        }
    }

    @Test("a file that is not a mapping, or a channel block that is not one, is an error naming the file and the position")
    func errors() throws {
        let list = try write("- a\n- b\n")
        #expect { _ = try GatewayConfigFile.load(path: list, environment: [:]) } throws: { "\($0)".contains(list) && "\($0)".contains("must be a mapping") }
        let block = try write("channels:\n  telegram: yes\n")
        #expect { _ = try GatewayConfigFile.load(path: block, environment: [:]) } throws: { "\($0)".contains("2:") && "\($0)".contains("channels.telegram must be a mapping") }
        let missing = TestGateway.makeTemporaryDirectory() + "/none.yaml"
        #expect { _ = try GatewayConfigFile.load(path: missing, environment: [:]) } throws: { "\($0)".contains("cannot read the gateway config") }
    }
}
