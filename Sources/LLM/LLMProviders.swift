import Foundation
import HTTPClient
import Synchronization

/// The model providers this gateway can call, configured from the environment with the names Soulacy users
/// already set (`OPENAI_API_KEY`, `ANTHROPIC_API_KEY`, `NVIDIA_API_KEY`, `OLLAMA_HOST`) plus
/// `SOULACY_LLM_<ID>_BASE_URL` / `_API_KEY` / `_MODEL` for any other OpenAI-compatible server.
///
/// As in Soulacy, Ollama is always registered (on this machine by default); other providers only with a key.
public struct LLMProviders: Sendable {
    public let defaultProvider: String
    let providers: [String: any ChatProvider]
    let environment: [String: String]
    let client: ProviderConnection

    let retry: ProviderRetryPolicy
    /// How long a call to a host whose pooled connections are all busy waits for one before it fails as not sent.
    public static let connectionWait: Duration = .seconds(60)

    /// `retry` is the same for every provider (tests shorten its backoff).
    public init(environment: [String: String], client: ProviderConnection? = nil, retry: ProviderRetryPolicy = .standard) {
        // A pool per host: several agents on one Ollama or vLLM (HTTP/1.1, one request per connection) reach it at once.
        let client = client ?? ProviderConnection(configuration: HTTP2ClientConfiguration(caFile: environment["SOULACY_LLM_CA_FILE"], connectTimeout: .seconds(10),
                                                                                          maximumConnectionsPerHost: HTTP2ClientConfiguration.pooledConnectionsPerHost,
                                                                                          maximumConnectionWait: Self.connectionWait))
        self.retry = retry
        self.client = client
        self.environment = environment
        defaultProvider = environment["SOULACY_LLM_DEFAULT_PROVIDER"].flatMap { $0.isEmpty ? nil : $0 } ?? "ollama"
        var providers: [String: any ChatProvider] = [:]
        providers["ollama"] = OllamaProvider(baseURL: Self.ollamaURL(environment), defaultModel: environment["SOULACY_OLLAMA_MODEL"] ?? "llama3",
                                             apiKey: environment["OLLAMA_API_KEY"], client: client, retry: retry)
        if let key = environment["OPENAI_API_KEY"], !key.isEmpty {
            providers["openai"] = OpenAICompatibleProvider(id: "openai", baseURL: environment["OPENAI_BASE_URL"] ?? "https://api.openai.com/v1", apiKey: key,
                                                           defaultModel: environment["SOULACY_OPENAI_MODEL"] ?? "gpt-4o-mini", client: client, retry: retry)
        }
        if let key = environment["ANTHROPIC_API_KEY"], !key.isEmpty {
            providers["anthropic"] = AnthropicProvider(baseURL: environment["ANTHROPIC_BASE_URL"] ?? "https://api.anthropic.com", apiKey: key,
                                                       defaultModel: environment["SOULACY_ANTHROPIC_MODEL"] ?? "claude-sonnet-4-5", client: client, retry: retry)
        }
        if let key = environment["NVIDIA_API_KEY"], !key.isEmpty {
            providers["nvidia"] = OpenAICompatibleProvider(id: "nvidia", baseURL: environment["NVIDIA_BASE_URL"] ?? "https://integrate.api.nvidia.com/v1", apiKey: key,
                                                           defaultModel: environment["SOULACY_NVIDIA_MODEL"] ?? "meta/llama-3.1-70b-instruct", client: client, retry: retry)
        }
        for (name, value) in environment where name.hasPrefix("SOULACY_LLM_") && name.hasSuffix("_BASE_URL") && !value.isEmpty {
            let id = name.dropFirst("SOULACY_LLM_".count).dropLast("_BASE_URL".count).lowercased().replacingOccurrences(of: "_", with: "-")
            guard !id.isEmpty, id != "ollama" else { continue }
            let upper = id.uppercased().replacingOccurrences(of: "-", with: "_")
            providers[id] = OpenAICompatibleProvider(id: id, baseURL: value, apiKey: environment["SOULACY_LLM_\(upper)_API_KEY"],
                                                     defaultModel: environment["SOULACY_LLM_\(upper)_MODEL"] ?? "", client: client, retry: retry)
        }
        self.providers = providers
    }

    /// `OLLAMA_HOST` as Ollama itself reads it (`host:port` or a URL), else this machine.
    static func ollamaURL(_ environment: [String: String]) -> String {
        guard let host = environment["OLLAMA_HOST"], !host.isEmpty else { return "http://127.0.0.1:11434" }
        let url = host.contains("://") ? host : "http://" + host
        return url.hasSuffix("/") ? String(url.dropLast()) : url
    }

    public var registered: [String] { providers.keys.sorted() }

    /// Ollama, when it is the provider agents will reach (to probe it at start).
    public var ollama: OllamaProvider? { providers["ollama"] as? OllamaProvider }

    /// The provider an agent's `llm` block names: its id ("" means the default), or an OpenAI-compatible server at `base_url`.
    public func provider(named id: String, baseURL: String?) throws(LLMError) -> any ChatProvider {
        let id = id.isEmpty ? defaultProvider : id
        if let baseURL {
            let upper = id.uppercased().replacingOccurrences(of: "-", with: "_")
            let key = environment["SOULACY_LLM_\(upper)_API_KEY"] ?? (id == "openai" ? environment["OPENAI_API_KEY"] : nil)
            return OpenAICompatibleProvider(id: id, baseURL: baseURL, apiKey: key, defaultModel: providers[id]?.defaultModel ?? "", client: client, retry: retry)
        }
        guard let provider = providers[id] else {
            let hint: String
            switch id {
            case "openai": hint = "set OPENAI_API_KEY"
            case "anthropic": hint = "set ANTHROPIC_API_KEY"
            case "nvidia": hint = "set NVIDIA_API_KEY"
            default: hint = "set SOULACY_LLM_\(id.uppercased().replacingOccurrences(of: "-", with: "_"))_BASE_URL (and _API_KEY) for an OpenAI-compatible server"
            }
            throw LLMError(.notConfigured, "no LLM provider '\(id)' is configured on this gateway; \(hint) (configured: \(registered.joined(separator: ", ")))")
        }
        return provider
    }
}

/// The HTTP client every provider shares, opened on the first model call: a gateway whose agents never call a
/// model holds no connection, thread or descriptor for it.
public final class ProviderConnection: Sendable {
    private let configuration: HTTP2ClientConfiguration
    private let opened = Mutex<HTTP2Client?>(nil)

    public init(configuration: HTTP2ClientConfiguration = HTTP2ClientConfiguration()) {
        self.configuration = configuration
    }

    var http: HTTP2Client {
        opened.withLock { client in
            if let client { return client }
            let made = HTTP2Client(configuration: configuration)
            client = made
            return made
        }
    }
}
