import Foundation
import GatewayTestSupport
import Testing

/// The module boundaries, read from Package.swift: what each target may reach, directly or through others.
@Suite("Target graph")
struct TargetGraphTests {
    /// Every target's direct dependencies, from the `.target(name:dependencies:)` entries.
    static func graph() throws -> [String: [String]] {
        let manifest = try String(contentsOfFile: RepositoryPaths.root + "/Package.swift", encoding: .utf8)
        var graph: [String: [String]] = [:]
        let entry = /\.(?:target|executableTarget|testTarget|systemLibrary)\(name:\s*"([^"]+)"(?:,\s*dependencies:\s*\[([^\]]*)\])?/
        for match in manifest.matches(of: entry) {
            let dependencies = match.output.2.map { list in list.matches(of: /"([^"]+)"/).map { String($0.output.1) } } ?? []
            graph[String(match.output.1)] = dependencies
        }
        return graph
    }

    static func reach(_ target: String, in graph: [String: [String]]) -> Set<String> {
        var seen: Set<String> = []
        var queue = graph[target] ?? []
        while let next = queue.popLast() {
            if seen.insert(next).inserted { queue += graph[next] ?? [] }
        }
        return seen
    }

    @Test("transports, the plugin contracts, the model providers and the phone-side client stay off the server, the database and the host")
    func boundaries() throws {
        let graph = try Self.graph()
        #expect(graph.count > 20 && graph["Gateway"] != nil, "the manifest was read")
        let serverSide: Set = ["HTTPServer", "APIKit", "CHTTPServerShims", "CMicroHTTPD", "SQLite", "CSQLite", "Gateway", "Mobile", "MobileHTTP"]
        let rules: [(target: String, forbidden: Set<String>)] = [
            ("ChannelAPI", serverSide.union(["HTTPClient", "Crypto", "JSON"])),
            ("APNs", serverSide), ("FCM", serverSide), ("Relay", serverSide), ("WebPush", serverSide),
            ("LLM", serverSide),
            ("HTTPClient", serverSide),
            // The phone-side client builds without libmicrohttpd's headers.
            ("SoulacyClient", serverSide),
            ("RelayProtocol", serverSide.union(["HTTPClient"])),
            ("Lifecycle", serverSide.union(["HTTPClient", "ChannelAPI"])),
            // The logger is below everything that logs: the API kit carries one without knowing channels.
            ("Logging", serverSide.union(["HTTPClient", "ChannelAPI", "Crypto", "JSON", "Identity"])),
            // The server and the database know nothing of the product; the API kit only joins the two.
            ("HTTPServer", ["SQLite", "APIKit", "Gateway", "Mobile"]), ("SQLite", ["HTTPServer", "APIKit", "Gateway", "Mobile"]),
            // The API kit answers through the engine seam (Storage), never an engine: routes work on any engine.
            ("APIKit", ["Gateway", "Mobile", "MobileHTTP", "ChannelAPI", "SQLite", "CSQLite"]),
            // The mobile channel's core (inbox, outbox, devices, dispatcher) knows no HTTP; its routes are MobileHTTP.
            ("Mobile", ["HTTPServer", "APIKit", "CHTTPServerShims", "CMicroHTTPD", "MobileHTTP", "Gateway"]),
            ("MobileHTTP", ["Gateway"]),
            // The host by job: only the assembly (Gateway) and the route files know HTTP.
            // Agents and approvals reach phones only through ChannelAPI's seams (DeviceAlerts, RunProgressObserver).
            ("Agents", ["HTTPServer", "APIKit", "CMicroHTTPD", "Mobile", "MobileHTTP", "GatewayHTTP", "Gateway", "Approvals", "Household", "RelayCarriage", "Memory"]),
            ("PhoneTools", ["HTTPServer", "APIKit", "CMicroHTTPD", "MobileHTTP", "GatewayHTTP", "Gateway"]),
            // The memory facts are a protocol and values: each engine's store lives with that engine's other stores.
            ("Memory", ["HTTPServer", "APIKit", "CMicroHTTPD", "Mobile", "GatewayHTTP", "Gateway", "Agents", "SQLite", "CSQLite", "PostgreSQL", "CPostgres"]),
            ("GatewayHTTP", ["Gateway"]),
            // The console is static files behind the API kit: it knows no channel, no store of the product and none of its routes.
            ("Console", ["Mobile", "MobileHTTP", "GatewayHTTP", "Gateway", "Agents", "Approvals", "Household", "ChannelAPI"]),
            // Approvals are a broker over a store protocol: each engine's store lives with that engine's other stores.
            ("Approvals", ["HTTPServer", "APIKit", "CMicroHTTPD", "Mobile", "MobileHTTP", "GatewayHTTP", "Gateway", "Agents",
                           "SQLite", "CSQLite", "PostgreSQL", "CPostgres"]),
            ("Household", ["HTTPServer", "APIKit", "CMicroHTTPD", "Mobile", "Gateway", "Agents", "Approvals"]),
            ("RelayCarriage", ["APIKit", "MobileHTTP", "GatewayHTTP", "Gateway", "Agents", "Approvals"]),
            // The relay's routes work on any engine: its SQLite and PostgreSQL stores are RelayMailboxStores.
            ("RelayMailbox", ["SQLite", "CSQLite", "PostgreSQL", "CPostgres", "Gateway", "Mobile", "MobileHTTP"]),
            ("RelayMailboxStores", ["Gateway", "Mobile", "MobileHTTP", "GatewayHTTP"]),
            // Channels are plugins: the contract and the HTTP client, never the server, the database or the host.
            ("Telegram", serverSide), ("Slack", serverSide), ("Discord", serverSide), ("WhatsApp", serverSide),
            ("Webhooks", serverSide), ("Email", serverSide), ("Sidecar", serverSide.union(["HTTPClient"])),
            ("ChannelSupport", serverSide),
            // The outbox loop knows no engine; the channel hand-off knows SQLite but no HTTP and no mobile channel.
            ("Outbox", serverSide.union(["HTTPClient"])),
            ("ChannelDelivery", ["HTTPServer", "APIKit", "CMicroHTTPD", "Gateway", "Mobile", "MobileHTTP", "HTTPClient"]),
            ("Subprocess", serverSide.union(["HTTPClient", "ChannelAPI", "JSON"])),
        ]
        // The server is only the libmicrohttpd wrapper: routing, callers and the error shape live in the API kit.
        #expect(Self.reach("HTTPServer", in: graph) == ["CMicroHTTPD", "CHTTPServerShims", "CProcessShims"],
                "HTTPServer reaches \(Self.reach("HTTPServer", in: graph).sorted())")
        #expect(Self.reach("Logging", in: graph).isEmpty, "Logging reaches \(Self.reach("Logging", in: graph).sorted())")
        // The engine seam is below every engine: it names no library and no other target.
        #expect(Self.reach("Storage", in: graph).isEmpty, "Storage reaches \(Self.reach("Storage", in: graph).sorted())")
        for rule in rules {
            #expect(graph[rule.target] != nil, "\(rule.target) is a target")
            let reached = Self.reach(rule.target, in: graph).intersection(rule.forbidden)
            #expect(reached.isEmpty, "\(rule.target) reaches \(reached.sorted())")
        }
        // The libpq wrapper reaches libpq alone, and nothing else uses libpq directly: every PostgreSQL user goes through it.
        #expect(Self.reach("PostgreSQL", in: graph) == ["CPostgres", "Storage"], "PostgreSQL reaches \(Self.reach("PostgreSQL", in: graph).sorted())")
        let direct = graph.filter { $0.value.contains("CPostgres") }.keys.sorted()
        #expect(direct == ["PostgreSQL"], "libpq is used directly by \(direct)")
    }

    @Test("the API kit and the route targets use the engine seam only: no engine among their dependencies, no engine imported")
    func routesKnowNoEngine() throws {
        let graph = try Self.graph()
        for target in ["APIKit", "MobileHTTP", "GatewayHTTP"] {
            #expect(!(graph[target] ?? []).contains("SQLite") && !(graph[target] ?? []).contains("PostgreSQL"), "\(target) depends on an engine")
        }
        let root = RepositoryPaths.root + "/Sources"
        // SwiftPM lets a target import what its dependencies depend on: the imports are checked too.
        for folder in ["APIKit", "MobileHTTP", "Host/GatewayHTTP", "Storage"] {
            let files = try FileManager.default.contentsOfDirectory(atPath: root + "/" + folder).filter { $0.hasSuffix(".swift") }
            #expect(!files.isEmpty, "\(folder) was read")
            for file in files {
                let text = try String(contentsOfFile: root + "/" + folder + "/" + file, encoding: .utf8)
                #expect(!text.contains("import SQLite") && !text.contains("import CSQLite") && !text.contains("import PostgreSQL"),
                        "\(folder)/\(file) imports an engine")
            }
        }
    }

    @Test("route files answer with Encodable types through the one encoder, never with JSON literals built by hand")
    func typedAnswers() throws {
        let root = RepositoryPaths.root + "/Sources"
        let routeFiles = (FileManager.default.enumerator(atPath: root)?.compactMap { $0 as? String } ?? [])
            .filter { $0.hasSuffix("API.swift") && ["Host/GatewayHTTP/", "MobileHTTP/", "RelayMailbox/"].contains(where: $0.hasPrefix) }
        #expect(routeFiles.count >= 10, "the route files were read: \(routeFiles)")
        // `.json(.object([...]))`, or `.json([...])` with JSONValue members: an answer assembled by hand.
        let literal = /\.json\((\.object\(|\[[^\]]*:\s*\.(string|number|bool|array|object|timestamp)\()/
        var offenders: [String] = []
        for file in routeFiles {
            let text = try String(contentsOfFile: root + "/" + file, encoding: .utf8)
            for (index, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() where line.contains(literal) {
                offenders.append("\(file):\(index + 1)")
            }
        }
        #expect(offenders.isEmpty, "answers built as JSON literals: \(offenders)")
    }

    @Test("SQL appears only in *Store.swift and *Schema.swift files (and the SQLite and PostgreSQL wrappers themselves)")
    func sqlOnlyInStores() throws {
        let root = RepositoryPaths.root + "/Sources"
        let files = FileManager.default.enumerator(atPath: root)?.compactMap { $0 as? String }.filter { $0.hasSuffix(".swift") } ?? []
        #expect(files.count > 50, "the sources were read")
        let statement = /(query|run|execute)\("|INSERT INTO|UPDATE [a-z_]+ SET|DELETE FROM|SELECT [a-z*]/
        var offenders: [String] = []
        for file in files where !file.hasPrefix("SQLite/") && !file.hasPrefix("PostgreSQL/") && !file.hasSuffix("Store.swift") && !file.hasSuffix("Schema.swift") {
            let text = try String(contentsOfFile: root + "/" + file, encoding: .utf8)
            if text.contains(statement) { offenders.append(file) }
        }
        #expect(offenders.isEmpty, "SQL outside a store: \(offenders.sorted())")
    }
}
