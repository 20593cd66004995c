// swift-tools-version:6.0
import PackageDescription

// Soulacy Mobile: a self-hosted gateway that runs agents and delivers their results to phones.
// C libraries come from Debian (see scripts/install-deps); nothing is fetched from outside the toolchain.
let package = Package(
    name: "soulacy",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "soulacy", targets: ["soulacy"]),
        .executable(name: "soulacy-relay", targets: ["soulacy-relay"]),
        .library(name: "ChannelAPI", targets: ["ChannelAPI"]),
        .library(name: "ChannelTesting", targets: ["ChannelTesting"]),
        .library(name: "HTTPClient", targets: ["HTTPClient"]),
        .library(name: "SoulacyClient", targets: ["SoulacyClient"]),
        // The gateway and the mobile channel as libraries, for embedding and for the fuzz harnesses in fuzz/.
        .library(name: "SoulacyGateway", targets: ["Gateway"]),
        .library(name: "SoulacyMobile", targets: ["Mobile"]),
        .library(name: "SoulacyMobileHTTP", targets: ["MobileHTTP"]),
        .library(name: "SoulacyHTTPServer", targets: ["HTTPServer"]),
        .library(name: "SoulacyAPIKit", targets: ["APIKit"]),
        .library(name: "SoulacyRelayProtocol", targets: ["RelayProtocol"]),
    ],
    targets: [
        // MARK: C libraries from the system
        .systemLibrary(name: "CSQLite", path: "Sources/CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(name: "CYAML", path: "Sources/CYAML", pkgConfig: "yaml-0.1", providers: [.apt(["libyaml-dev"])]),
        .systemLibrary(name: "COpenSSL", path: "Sources/COpenSSL", pkgConfig: "libcrypto", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CCurl", path: "Sources/CCurl", pkgConfig: "libcurl", providers: [.apt(["libcurl4-openssl-dev"])]),
        .systemLibrary(name: "CMicroHTTPD", path: "Sources/CMicroHTTPD", pkgConfig: "libmicrohttpd", providers: [.apt(["libmicrohttpd-dev"])]),
        .systemLibrary(name: "CQRencode", path: "Sources/CQRencode", pkgConfig: "libqrencode", providers: [.apt(["libqrencode-dev"])]),
        .systemLibrary(name: "CPostgres", path: "Sources/CPostgres", pkgConfig: "libpq", providers: [.apt(["libpq-dev"])]),
        // Entry points Swift cannot call directly (variadic C functions, GNU extensions), one shim per library, so the
        // phone-side client never needs libmicrohttpd's headers.
        .target(name: "CHTTPServerShims", dependencies: ["CMicroHTTPD"], path: "Sources/CHTTPServerShims"),
        .target(name: "CCurlShims", dependencies: ["CCurl", "COpenSSL"], path: "Sources/CCurlShims",
                linkerSettings: [.linkedLibrary("ssl"), .linkedLibrary("crypto")]),
        .target(name: "CProcessShims", path: "Sources/CProcessShims"),

        // MARK: Thin Swift wrappers over the C libraries
        // The engine seam (transactions, the answer hook, StorageError): no engine in it.
        .target(name: "Storage", path: "Sources/Storage"),
        .target(name: "SQLite", dependencies: ["CSQLite", "Storage"], path: "Sources/SQLite"),
        .target(name: "YAML", dependencies: ["CYAML"], path: "Sources/YAML"),
        .target(name: "Crypto", dependencies: ["COpenSSL"], path: "Sources/Crypto"),
        .target(name: "HTTPClient", dependencies: ["CCurl", "CCurlShims"], path: "Sources/HTTPClient"),
        .target(name: "JSON", path: "Sources/JSON"),
        // Child processes: spawned clean (given env, own process group, no inherited descriptors), pipes read and
        // written without blocking the cooperative pool, waited for and signalled. Agents' commands and sidecars.
        .target(name: "Subprocess", dependencies: ["CProcessShims"], path: "Sources/Subprocess"),
        // libpq: connections from a postgres:// URL, a pool on threads of its own, migrations under an advisory
        // lock, LISTEN/NOTIFY. The PostgreSQL engine's stores build on it; nothing else reaches libpq.
        .target(name: "PostgreSQL", dependencies: ["CPostgres", "Storage"], path: "Sources/PostgreSQL"),
        // Only the libmicrohttpd wrapper: requests in, responses out. Routing, callers and the error shape are the API kit's.
        .target(name: "HTTPServer", dependencies: ["CMicroHTTPD", "CHTTPServerShims", "CProcessShims"], path: "Sources/HTTPServer"),
        // The API kit over the server, in Hummingbird 2's shape: routes and groups, middleware, the authenticated
        // caller, the error shape, request decoding, and answers that commit with their effects.
        .target(name: "APIKit", dependencies: ["HTTPServer", "Identity", "JSON", "Logging", "Metrics", "Storage"], path: "Sources/APIKit"),

        // MARK: The product
        .target(name: "Identity", path: "Sources/Identity"),
        // Services and the group that runs them, handles SIGTERM/SIGINT and stops them in reverse order.
        .target(name: "Lifecycle", path: "Sources/Lifecycle"),
        // The logger value and its handler seam (swift-log's shape), below everything that logs.
        .target(name: "Logging", path: "Sources/Logging"),
        .target(name: "ChannelAPI", dependencies: ["Logging", "Storage"], path: "Sources/ChannelAPI"),
        // Test kit for channels and transports: controllable clock (and, with the dispatcher, recording transports).
        .target(name: "ChannelTesting", dependencies: ["ChannelAPI"], path: "Sources/ChannelTesting"),
        // The outbox loop every lane shares (wake-ups, channel sends): leases, the window, retry policy.
        .target(name: "Outbox", dependencies: ["ChannelAPI"], path: "Sources/Outbox"),
        // The durable hand-off for every channel but the phones' inbox: sends written with the run's end, attempted by
        // the shared outbox loop.
        .target(name: "ChannelDelivery", dependencies: ["Storage", "Metrics", "ChannelAPI", "Crypto", "JSON", "Outbox", "SQLite"], path: "Sources/ChannelDelivery"),
        .target(name: "Mobile", dependencies: ["Storage", "Metrics", "ChannelAPI", "Identity", "JSON", "SQLite", "Crypto", "Outbox"], path: "Sources/Channels/Mobile"),
        // The mobile channel's routes (devices, inbox, commands, nodes) over the API kit; the core above knows no HTTP.
        .target(name: "MobileHTTP", dependencies: ["Storage", "Mobile", "ChannelAPI", "Identity", "JSON", "HTTPServer", "APIKit", "Crypto"], path: "Sources/MobileHTTP"),
        .target(name: "APNs", dependencies: ["ChannelAPI", "HTTPClient", "Crypto", "JSON"], path: "Sources/Channels/APNs"),
        .target(name: "FCM", dependencies: ["ChannelAPI", "HTTPClient", "Crypto", "JSON"], path: "Sources/Channels/FCM"),
        .target(name: "Relay", dependencies: ["ChannelAPI", "HTTPClient", "JSON"], path: "Sources/Channels/Relay"),
        // Browsers as devices: RFC 8030 delivery, RFC 8291 message encryption, RFC 8292 VAPID, all through libcrypto.
        .target(name: "WebPush", dependencies: ["ChannelAPI", "HTTPClient", "Crypto", "JSON"], path: "Sources/Channels/WebPush"),
        // Soulacy's External Channel Protocol v1: chat channels as supervised child processes speaking NDJSON.
        .target(name: "Sidecar", dependencies: ["ChannelAPI", "Subprocess", "JSON"], path: "Sources/Channels/Sidecar"),
        // What the HTTP chat channels share: message splitting and the meaning of an HTTP answer.
        .target(name: "ChannelSupport", dependencies: ["ChannelAPI", "HTTPClient"], path: "Sources/Channels/ChannelSupport"),
        // Outbound webhooks (Standard Webhooks and Soulacy signatures, named endpoints), Teams and Google Chat incoming webhooks.
        .target(name: "Webhooks", dependencies: ["ChannelAPI", "ChannelSupport", "HTTPClient", "JSON", "Crypto"], path: "Sources/Channels/Webhooks"),
        // Telegram bots: sendMessage (split at 4096 UTF-16 units) and getUpdates long polling for an agent's inbound.
        .target(name: "Telegram", dependencies: ["ChannelAPI", "ChannelSupport", "HTTPClient", "JSON"], path: "Sources/Channels/Telegram"),
        // Outbound chat channels over their Web APIs: one attempt per call, the framework retries.
        .target(name: "Slack", dependencies: ["ChannelAPI", "ChannelSupport", "HTTPClient", "JSON"], path: "Sources/Channels/Slack"),
        .target(name: "Discord", dependencies: ["ChannelAPI", "ChannelSupport", "HTTPClient", "JSON"], path: "Sources/Channels/Discord"),
        .target(name: "WhatsApp", dependencies: ["ChannelAPI", "ChannelSupport", "HTTPClient", "JSON"], path: "Sources/Channels/WhatsApp"),
        // Email over libcurl: SMTP submission out (STARTTLS required or implicit TLS), an IMAP mailbox in.
        .target(name: "Email", dependencies: ["ChannelAPI", "ChannelSupport", "JSON", "Crypto", "CCurl", "CCurlShims"], path: "Sources/Channels/Email"),
        // Model providers (OpenAI-compatible, Ollama, Anthropic) behind one seam, for agents that are prompts.
        .target(name: "LLM", dependencies: ["HTTPClient", "JSON"], path: "Sources/LLM"),
        // The host by job: approvals (one broker for every surface), the household and its keys, the relay carriage.
        // Agents: their files (config, hot reload), cron and the scheduler, runs and their runners (command, LLM, phone tools).
        .target(name: "Agents", dependencies: ["Storage", "Metrics", "ChannelAPI", "ChannelDelivery", "Crypto", "Identity", "JSON", "LLM", "SQLite", "YAML", "Subprocess"],
                path: "Sources/Host/Agents"),
        // The phone builtins (mobile.list_nodes, mobile.invoke, mobile.command_status): the mobile channel's tools
        // for agents, so neither knows the other.
        .target(name: "PhoneTools", dependencies: ["Agents", "ChannelAPI", "JSON", "LLM", "Mobile"], path: "Sources/Host/PhoneTools"),
        // Approvals wake phones through ChannelAPI's DeviceAlerts; the broker never imports the mobile channel.
        .target(name: "Approvals", dependencies: ["Storage", "ChannelAPI", "Crypto"], path: "Sources/Host/Approvals"),
        .target(name: "Household", dependencies: ["Storage", "Crypto", "Identity", "SQLite"], path: "Sources/Host/Household"),
        .target(name: "RelayCarriage", dependencies: ["ChannelAPI", "Crypto", "HTTPClient", "HTTPServer", "Household", "Identity", "Mobile", "RelayProtocol", "JSON"],
                path: "Sources/Host/RelayCarriage"),
        // The memory facts' protocol and values; each engine's store is in SQLiteStores and PostgresStores.
        .target(name: "Memory", dependencies: ["Storage", "ChannelAPI", "Crypto"], path: "Sources/Host/Memory"),
        // The gateway's routes, middleware and idempotency log; the Gateway target below only assembles.
        // The web console: static HTML, CSS and JavaScript modules embedded in the binary, served at `/`.
        .target(name: "Console", dependencies: ["APIKit", "Crypto"], path: "Sources/Host/Console", resources: [.embedInCode("Assets")]),
        // Prometheus metrics: the registry, the text exposition and the process figures; no dependencies.
        .target(name: "Metrics", path: "Sources/Metrics"),
        // QR codes from libqrencode, drawn for a terminal and as SVG for the console.
        .target(name: "QRCode", dependencies: ["CQRencode"], path: "Sources/QRCode"),
        .target(name: "GatewayHTTP", dependencies: ["Storage", "QRCode", "ChannelDelivery", "APIKit", "Agents", "Approvals", "ChannelAPI", "Crypto", "Household", "HTTPServer", "Identity", "JSON", "RelayProtocol",
                                                    "LLM", "Memory", "Mobile", "MobileHTTP", "RelayCarriage", "WebPush"], path: "Sources/Host/GatewayHTTP"),
        // PostgreSQL's implementations of the host's store protocols (the second engine, for several gateways on one database).
        .target(name: "PostgresStores", dependencies: ["Agents", "Approvals", "Memory", "RelayCarriage", "Household", "Identity", "GatewayHTTP", "PostgreSQL", "Storage", "Mobile", "ChannelDelivery", "ChannelAPI", "Outbox", "Crypto", "JSON"], path: "Sources/PostgresStores"),
        // SQLite's implementations of the host's store protocols (the composition root picks them for a data directory).
        .target(name: "SQLiteStores", dependencies: ["Approvals", "RelayCarriage", "GatewayHTTP", "Household", "Identity", "SQLite", "Storage", "Memory", "ChannelAPI"], path: "Sources/SQLiteStores"),
        .target(name: "Gateway", dependencies: ["SQLiteStores", "PostgresStores", "PostgreSQL", "Console", "Metrics", "ChannelDelivery", "PhoneTools", "Discord", "Email", "Sidecar", "Slack", "Telegram", "Webhooks", "WhatsApp", "GatewayHTTP", "Memory", "Lifecycle", "LLM", "JSON", "ChannelAPI", "Identity", "APIKit", "Mobile", "MobileHTTP",
                                                "Agents", "Approvals", "Household", "RelayCarriage", "APNs", "FCM", "Relay", "WebPush", "RelayProtocol", "HTTPClient", "SQLite", "YAML", "HTTPServer", "Crypto", "CProcessShims", "Subprocess"], path: "Sources/Host/Gateway"),
        // Keys and sealed envelopes shared by the gateway's carriage and the phone-side client.
        .target(name: "RelayProtocol", dependencies: ["Crypto", "JSON"], path: "Sources/RelayProtocol"),
        // The phone side: path choice, pinned Wi-Fi, relay sends and held sends (used by apps and by our tests).
        .target(name: "SoulacyClient", dependencies: ["HTTPClient", "RelayProtocol", "Crypto", "JSON"], path: "Sources/SoulacyClient"),
        // The relay mailbox server, deployable on its own (`soulacy-relay`).
        .target(name: "RelayMailbox", dependencies: ["HTTPServer", "APIKit", "RelayProtocol", "Crypto", "Identity", "ChannelAPI"], path: "Sources/RelayMailbox"),
        // The relay's two engines: one SQLite file for one process, PostgreSQL for several behind one address.
        .target(name: "RelayMailboxStores", dependencies: ["RelayMailbox", "SQLite", "PostgreSQL"], path: "Sources/RelayMailboxStores"),
        .executableTarget(name: "soulacy-relay", dependencies: ["Lifecycle", "RelayMailbox", "RelayMailboxStores", "PostgreSQL", "HTTPServer", "APIKit", "APNs", "Crypto"], path: "Sources/RelayServerCLI"),
        .executableTarget(name: "soulacy", dependencies: ["Gateway", "Lifecycle", "SQLite", "SQLiteStores", "PostgreSQL", "Identity", "Crypto", "QRCode", "Sidecar"], path: "Sources/Host/CLI"),

        // MARK: Benchmarks (benchmarks/run builds this in release mode)
        .executableTarget(name: "soulacy-bench", dependencies: ["Mobile", "APNs", "Crypto", "ChannelAPI", "SQLite", "HTTPServer", "APIKit",
                                                      "Gateway", "ChannelDelivery", "HTTPClient", "Identity", "JSON", "SoulacyClient"], path: "benchmarks/Sources/SoulacyBench"),

        // MARK: Example: a transport added from outside the core, with its own tests
        .target(name: "UnifiedPushTransport", dependencies: ["ChannelAPI", "HTTPClient"], path: "examples/UnifiedPushTransport/Sources"),
        .testTarget(name: "UnifiedPushTransportTests", dependencies: ["UnifiedPushTransport", "ChannelTesting", "ChannelAPI", "HTTPServer", "APIKit"],
                    path: "examples/UnifiedPushTransport/Tests"),

        // MARK: Example: a compiled channel added from outside the core, registered with GatewayOptions.extraChannelFactories
        .target(name: "NtfyChannel", dependencies: ["ChannelAPI", "HTTPClient", "JSON"], path: "examples/channels/NtfyChannel/Sources"),
        .testTarget(name: "NtfyChannelTests", dependencies: ["NtfyChannel", "ChannelAPI", "ChannelTesting", "Gateway", "HTTPClient", "HTTPServer", "APIKit", "JSON"],
                    path: "examples/channels/NtfyChannel/Tests"),

        // MARK: Tests
        .target(name: "GatewayTestSupport", dependencies: ["CProcessShims", "Agents", "Approvals", "Memory", "RelayCarriage", "Household", "Gateway", "GatewayHTTP", "ChannelDelivery", "Storage", "SQLite", "APNs", "FCM", "Relay", "HTTPClient", "Crypto", "HTTPServer", "APIKit", "Mobile", "ChannelAPI", "ChannelTesting", "Identity", "PostgreSQL", "RelayMailbox"], path: "Tests/GatewayTestSupport"),
        .testTarget(name: "SupportLibraryTests", dependencies: ["Storage", "GatewayTestSupport", "Metrics", "Lifecycle", "SQLite", "YAML", "Crypto", "HTTPServer", "APIKit", "Identity", "Subprocess"], path: "Tests/SupportLibraryTests"),
        // Test targets follow the modules: agents, the mobile channel, the transports; GatewayTests holds what crosses them.
        .testTarget(name: "AgentsTests", dependencies: ["Storage", "Agents", "Gateway", "GatewayTestSupport", "ChannelAPI", "ChannelTesting", "HTTPServer", "APIKit", "LLM", "SQLite"], path: "Tests/AgentsTests"),
        .testTarget(name: "MobileTests", dependencies: ["Mobile", "MobileHTTP", "Gateway", "GatewayTestSupport", "ChannelAPI", "ChannelTesting", "HTTPServer", "APIKit", "SQLite"],
                    path: "Tests/MobileTests"),
        .testTarget(name: "ChannelTests", dependencies: ["ChannelAPI", "ChannelSupport", "ChannelTesting", "GatewayTestSupport", "HTTPClient", "JSON", "Webhooks", "Crypto", "Telegram", "Sidecar", "Subprocess", "Slack", "Discord", "WhatsApp", "Email"],
                    path: "Tests/ChannelTests"),
        .testTarget(name: "TransportTests", dependencies: ["APNs", "FCM", "WebPush", "ChannelAPI", "ChannelTesting", "GatewayTestSupport", "HTTPServer", "APIKit", "Crypto", "HTTPClient"],
                    path: "Tests/TransportTests"),
        .testTarget(name: "GatewayTests", dependencies: ["Agents", "Approvals", "Memory", "RelayCarriage", "Household", "PostgresStores", "PostgreSQL", "SQLiteStores", "Storage", "GatewayHTTP", "ChannelDelivery", "LLM", "SoulacyClient", "RelayProtocol", "RelayMailbox", "RelayMailboxStores", "YAML", "Gateway", "APNs", "FCM", "Relay", "WebPush", "HTTPClient", "Crypto", "Mobile", "MobileHTTP", "ChannelAPI", "ChannelTesting", "GatewayTestSupport", "SQLite", "HTTPServer", "APIKit", "Identity"], path: "Tests/GatewayTests"),
        // The libpq wrapper against a throwaway PostgreSQL cluster (GatewayTestSupport's PostgresCluster).
        .testTarget(name: "PostgreSQLTests", dependencies: ["PostgreSQL", "Storage", "GatewayTestSupport"], path: "Tests/PostgreSQLTests"),
    ]
)
