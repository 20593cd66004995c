import Dispatch
import Foundation
import PostgreSQL
import Gateway
import Glibc
import Crypto
import Identity
import Lifecycle
import QRCode
import Sidecar
import SQLite
import SQLiteStores

/// `soulacy serve | check | version`.
@main
struct SoulacyCommand {
    static let usage = """
        usage:
          soulacy serve --config FILE --data DIR [--listen ADDR:PORT] [--lan ADDR:PORT] [--gateway-config FILE] [--metrics ADDR:PORT]
                                                                        run the gateway (default listen 127.0.0.1:8080); --lan adds the
                                                                        same-Wi-Fi HTTPS listener whose certificate pairing links pin;
                                                                        --gateway-config: the Soulacy config with channels: and llm:
                                                                        (default $SOULACY_GATEWAY_CONFIG, else ~/.soulacy/config.yaml);
                                                                        --metrics: a keyless GET /metrics listener for a local scraper
          soulacy check PATH [--strict] [--gateway-config FILE]         validate a SOUL.yaml or an agents directory; problems as
                                                                        file:line:col: message, and each schedule's next fires
          soulacy pair [--data DIR] [--name NAME --role operator|viewer] [--url URL] [--lan ADDR:PORT]
                                                                        print a pairing code, link and QR code (default data .soulacy)
          soulacy console-code [--data DIR] [--subject S] [--role R]    print a one-time code that signs in to the web console
                                                                        (10 minutes, one use; default the owner, as admin)
          soulacy channel-check -- COMMAND [ARGS…]                      run a sidecar (External Channel Protocol v1) through the
                                                                        protocol's checklist: each rule PASS or FAIL, exit 1 on a FAIL
          soulacy backup [--data DIR] DEST                              an online, consistent copy of the data directory (database,
                                                                        TLS identity, keys) into the new directory DEST, owner-only;
                                                                        with $SOULACY_DATABASE_URL, the database as a pg_dump archive
          soulacy restore SRC --data DIR                                restore a backup into a new or empty data directory (and one
                                                                        made on PostgreSQL into the empty $SOULACY_DATABASE_URL)
          soulacy migrate --from DIR [--to URL]                         copy a stopped SQLite gateway (its data directory) into an empty
                                                                        PostgreSQL database (--to, else $SOULACY_DATABASE_URL), then check
                                                                        every table's rows and every person's inbox on both engines
          soulacy doctor [--data DIR] [--config PATH] [--gateway-config FILE]
                                                                        check permissions, the database, push services, channels
                                                                        and the clock: OK/WARN/FAIL with fixes, exit 1 on a FAIL
          soulacy version
        """

    static func main() async {
        // Everything the gateway writes (its database and WAL, keys, certificates, backups) is owner-only.
        umask(0o077)
        var arguments = Array(CommandLine.arguments.dropFirst())
        guard let command = arguments.first else { fail(usage, code: 64) }
        arguments.removeFirst()
        switch command {
        case "serve": await serve(arguments)
        case "check": check(arguments)
        case "pair": await pair(arguments)
        case "console-code": await consoleCode(arguments)
        case "channel-check": await channelCheck(arguments)
        case "backup": await backup(arguments)
        case "restore": await restore(arguments)
        case "doctor": await doctor(arguments)
        case "migrate": await migrate(arguments)
        case "version", "--version": print("soulacy \(GatewayVersion.current)")
        case "help", "--help", "-h": print(usage)
        default: fail("unknown command '\(command)'\n\(usage)", code: 64)
        }
    }

    /// `soulacy migrate --from DIR [--to URL]`: the SQLite gateway in DIR copied into an empty PostgreSQL database.
    /// The URL may come from the environment, so its password need not appear in the process list.
    static func migrate(_ arguments: [String]) async {
        let opts = options(arguments, allowed: ["from", "to"])
        guard let from = opts["from"] else { fail("migrate needs --from DIR (the gateway's data directory)\n\(usage)", code: 64) }
        guard let url = opts["to"] ?? ProcessInfo.processInfo.environment["SOULACY_DATABASE_URL"], PostgresURL.isPostgresURL(url) else {
            fail("migrate needs --to postgres://… (or SOULACY_DATABASE_URL)", code: 64)
        }
        do {
            let report = try await GatewayMigrationStore.copy(sqlitePath: from + "/soulacy.db", to: url)
            for (table, rows) in report.rows.sorted(by: { $0.key < $1.key }) where rows > 0 { print("  \(table): \(rows) rows") }
            print("""
                Copied \(report.rows.values.reduce(0, +)) rows into \(PostgresURL.redacted(url)); every table's count matches, and \(report.inboxesCompared) people's inboxes read the same on both engines.
                Start the gateway with SOULACY_DATABASE_URL and this data directory (\(from)): it holds the keys the copied secrets are sealed with.
                """)
        } catch {
            fail("soulacy migrate: \(error)")
        }
    }

    static func fail(_ message: String, code: Int32 = 1) -> Never {
        FileHandle.standardError.write(Data((message + "\n").utf8))
        exit(code)
    }

    static func options(_ arguments: [String], allowed: Set<String>) -> [String: String] {
        var result: [String: String] = [:]
        var i = 0
        while i < arguments.count {
            let name = arguments[i]
            guard name.hasPrefix("--"), allowed.contains(String(name.dropFirst(2))) else { fail("unknown option '\(name)'\n\(usage)", code: 64) }
            guard i + 1 < arguments.count else { fail("option \(name) needs a value", code: 64) }
            result[String(name.dropFirst(2))] = arguments[i + 1]
            i += 2
        }
        return result
    }

    /// `soulacy check PATH [--strict]`: every problem as file:line:col, what each agent is, what of it is not run
    /// here, and each schedule's next three fires in its time zone. Exits 1 when any file or agent has an error.
    static func check(_ arguments: [String]) {
        var rest = arguments
        let strict = rest.contains("--strict")
        rest.removeAll { $0 == "--strict" }
        var gatewayConfigPath: String?
        if let flag = rest.firstIndex(of: "--gateway-config") {
            guard flag + 1 < rest.count else { fail("option --gateway-config needs a value", code: 64) }
            gatewayConfigPath = rest[flag + 1]
            rest.removeSubrange(flag...(flag + 1))
        }
        let paths = rest
        guard paths.count == 1, !paths[0].hasPrefix("--") else {
            fail("usage: soulacy check PATH [--strict] [--gateway-config FILE]   (PATH: a SOUL.yaml or an agents directory)", code: 64)
        }
        // The channels the gateway config configures are the ones an output may name without a warning.
        let environment = ProcessInfo.processInfo.environment
        var destinations = Gateway.destinationValidators
        var configProblems: [String] = []
        var defaults: [String: DefaultOutput] = [:]
        var agentEnvironment = environment
        do {
            let gatewayConfig = try GatewayConfigFile.load(path: gatewayConfigPath ?? GatewayConfigFile.defaultPath(environment: environment), environment: environment)
            if let path = gatewayConfig.path { print("gateway config: \(path)") }
            if let allowed = gatewayConfig.llmEnvironment["SOULACY_LLM_ALLOWED_PROVIDERS"] { agentEnvironment["SOULACY_LLM_ALLOWED_PROVIDERS"] = allowed }
            configProblems = Gateway.channelProblems(config: gatewayConfig, factories: Gateway.builtInChannelFactories(environment: environment),
                                                     built: { channel in destinations[channel.name] = Gateway.validator(of: channel) },
                                                     defaults: { defaults = $0 })
        } catch {
            configProblems = [error.description]
        }
        for problem in configProblems { print("error: \(problem)") }
        let result = AgentFiles.load(path: paths[0], destinations: destinations, defaults: defaults, environment: agentEnvironment, strict: strict)
        for problem in result.problems { print(problem.description) }
        let now = Date()
        for agent in result.config.agents {
            var line = "\(agent.id): \(agent.trigger == .unset ? "no trigger" : agent.trigger.rawValue)"
            switch agent.runner {
            case .command(let command): line += ", runs \(command.argv.first ?? "?")"
            case .llm(let llm): line += ", model \(llm.provider.isEmpty ? "(default provider)" : llm.provider)\(llm.model.isEmpty ? "" : "/" + llm.model)"
            }
            if let reason = agent.disabledReason { line += ", PARKED: \(reason)" } else if !agent.enabled { line += ", disabled (enabled: false)" }
            print(line)
            if !agent.notRunHere.isEmpty { print("  accepted, not run here: \(agent.notRunHere.joined(separator: "; "))") }
            if let schedule = agent.schedule, let cron = schedule.cron {
                var fires: [Date] = []
                var after = now
                while fires.count < 3, let next = cron.nextFire(after: after, in: schedule.timeZone) {
                    fires.append(next)
                    after = next
                }
                let formatter = DateFormatter()
                formatter.timeZone = schedule.timeZone
                formatter.dateFormat = "EEE yyyy-MM-dd HH:mm:ss zzz"
                print("  '\(cron.expression)' in \(schedule.timeZone.identifier), next: \(fires.map(formatter.string(from:)).joined(separator: ", "))")
            } else if let at = agent.schedule?.at {
                print("  fires once at \(at.formatted(.iso8601))\(at < now ? " (already past: fires at start unless it fired before)" : "")")
            }
            if let output = agent.schedule?.output { print("  delivers to \(output.channel) \(output.to)") }
        }
        let errors = result.problems.filter { $0.severity == .error }.count + configProblems.count
        let warnings = result.problems.count - (errors - configProblems.count)
        let summary = "\(paths[0]): \(result.config.agents.count) agent(s), \(errors) error(s), \(warnings) warning(s)"
        if errors > 0 { fail(summary, code: 1) }
        print(errors == 0 && warnings == 0 ? "\(paths[0]): ok, \(result.config.agents.count) agent(s)" : summary)
    }

    /// `soulacy channel-check -- COMMAND ARGS…`: the conformance checklist against a sidecar, run in the current
    /// directory with the caller's environment (it is the developer's own program).
    static func channelCheck(_ arguments: [String]) async {
        let argv = arguments.first == "--" ? Array(arguments.dropFirst()) : arguments
        guard let program = argv.first, !program.isEmpty else { fail("usage: soulacy channel-check -- COMMAND [ARGS…]", code: 64) }
        let results = await SidecarConformance.run(argv: argv, environment: ProcessInfo.processInfo.environment)
        for result in results { print(result.description) }
        let failed = results.filter { !$0.passed }.count
        if failed > 0 { fail("\(program): \(failed) of \(results.count) rule(s) failed", code: 1) }
        print("\(program): all \(results.count) rules passed")
    }

    static func serve(_ arguments: [String]) async {
        let opts = options(arguments, allowed: ["config", "data", "listen", "lan", "gateway-config", "metrics"])
        guard let config = opts["config"], let data = opts["data"] else { fail("serve needs --config PATH (a SOUL.yaml or an agents directory) and --data DIR\n\(usage)", code: 64) }
        let listen = opts["listen"] ?? "127.0.0.1:8080"
        guard let colon = listen.lastIndex(of: ":"), let port = UInt16(listen[listen.index(after: colon)...]) else {
            fail("--listen must be ADDR:PORT, for example 127.0.0.1:8080", code: 64)
        }
        let host = String(listen[..<colon]).trimmingCharacters(in: CharacterSet(charactersIn: "[]"))

        let gateway: Gateway
        do {
            var gatewayOptions = GatewayOptions(configPath: config, dataDirectory: data, host: host, port: port)
            gatewayOptions.environment = SystemdCredentials.apply(to: gatewayOptions.environment)
            // The drain begins at the signal: systemd hears of it then, not when the process is nearly gone. (A second
            // signal source here would race the gateway's own, which sets the signal's disposition.)
            gatewayOptions.shutdownBegins = { SystemdNotifier().stopping() }
            // SOULACY_LOG_LEVEL and SOULACY_LOG_FORMAT (json: one object per line on stderr); the first start's admin
            // key banner below stays human text on stdout.
            do { gatewayOptions.log = try Log.configured(from: gatewayOptions.environment) } catch { fail("soulacy: \(error)", code: 64) }
            gatewayOptions.gatewayConfigPath = opts["gateway-config"]
            // SOULACY_LAN_LISTEN and the other settings are read by the gateway (GatewaySettings); the flag wins.
            if let lan = opts["lan"] {
                guard let address = GatewaySettings.listenAddress(lan) else { fail("--lan must be ADDR:PORT", code: 64) }
                gatewayOptions.lanHost = address.host
                gatewayOptions.lanPort = address.port
            }
            if let metrics = opts["metrics"] {
                guard let address = GatewaySettings.listenAddress(metrics) else { fail("--metrics must be ADDR:PORT, for example 127.0.0.1:9464", code: 64) }
                gatewayOptions.metricsHost = address.host
                gatewayOptions.metricsPort = address.port
            }
            // SQLite in the data directory, or PostgreSQL at SOULACY_DATABASE_URL (one of several nodes, perhaps).
            gateway = try await Gateway.open(options: gatewayOptions)
            let token = try await gateway.bootstrapAdminKey()
            if let token {
                print("""
                    First start: created the owner's admin API key. It is shown this once; store it now.
                      SOULACY_ADMIN_KEY=\(token)
                    """)
            } else if gateway.stores.engine == "postgresql" {
                // Another node (or an earlier start) made it: the key printed then is the owner's.
                print("The database already has an owner: use the admin key printed by the first node's first start.")
            }
            try gateway.start(signals: [SIGTERM, SIGINT])
            if token != nil {
                let offer = try await gateway.ownerPairingOffer()
                printOffer(offer, appLink: PairingLink.original(code: offer.code, gateway: gateway.pairingGatewayURL, pinnedAddress: gateway.pinnedAddress, pin: gateway.tlsPin),
                           url: PairingLink.url(offer: offer, gateway: gateway.pairingGatewayURL, pinnedAddress: gateway.pinnedAddress, pin: gateway.tlsPin), qr: false)
            }
        } catch {
            fail("soulacy: \(error)")
        }
        if let pin = gateway.tlsPin, gateway.options.autoTLS {
            print("soulacy is listening on http://\(listen) and https://\(listen) (certificate pin \(pin)) (Ctrl-C stops it)")
        } else {
            print("soulacy is listening on http://\(listen) (Ctrl-C stops it)")
        }
        fflush(nil)
        // Under systemd (Type=notify): ready once listening, keep-alives while the database answers.
        let systemd = SystemdNotifier()
        systemd.ready(status: "listening on \(listen)")
        let watchdog = Task { await systemd.runWatchdog { await gateway.isHealthy() } }

        // SIGTERM or SIGINT: the service group drains the API, lets runs finish and their wake-ups go, then returns.
        await gateway.waitUntilStopped()
        watchdog.cancel()
    }

    /// The code, the Soulacy app's link (the QR encodes it), and this gateway's three-path link.
    static func printOffer(_ offer: PairingOffer, appLink: String, url: String, qr: Bool) {
        let minutes = Int(PairingCodes.lifetime / 60)
        print("""
            Pairing code for \(offer.name) (\(offer.role.rawValue)), valid \(minutes) minutes, one device:
              \(offer.code)
              \(appLink)
              \(url)
            """)
        if qr, let code = QRCode(appLink) { print(code.terminalText()) }
        fflush(nil)
    }

    /// `soulacy console-code`: a six-digit code for the console's sign-in, kept hashed under the data directory's
    /// console code key (the gateway reads the same key), so the database alone gives it back to no one.
    static func consoleCode(_ arguments: [String]) async {
        let opts = options(arguments, allowed: ["data", "subject", "role"])
        let data = opts["data"] ?? ".soulacy"
        let subject = opts["subject"] ?? Principal.ownerSubject
        guard (1...64).contains(subject.unicodeScalars.count),
              subject.unicodeScalars.allSatisfy({ ("a"..."z").contains($0) || ("0"..."9").contains($0) || $0 == "-" || $0 == "_" }) else {
            fail("--subject must be 1-64 lower-case letters, digits, - or _", code: 64)
        }
        let roleText = opts["role"] ?? (subject == Principal.ownerSubject ? "admin" : "viewer")
        guard let role = Role(rawValue: roleText) else { fail("--role must be admin, operator or viewer", code: 64) }
        // As with keys and pairing codes: only the owner is ever an admin.
        guard role != .admin || subject == Principal.ownerSubject else { fail("--role admin is the owner's alone; use operator or viewer for \(subject)", code: 64) }
        do {
            // The gateway's own database: SQLite in the data directory, or PostgreSQL at SOULACY_DATABASE_URL.
            let storage = try await CommandStorage.open(dataDirectory: data, environment: ProcessInfo.processInfo.environment)
            defer { storage.close() }
            let code = try await storage.consoleSessions.createCode(subject: subject, role: role)
            print("""
                Console sign-in code for \(code.subject) (\(code.role.rawValue)), valid \(Int(ConsoleSessionPolicy.codeLifetime / 60)) minutes, one use:
                  \(code.code)
                """)
            fflush(nil)
        } catch {
            fail("soulacy console-code: \(error)")
        }
    }

    static func pair(_ arguments: [String]) async {
        let opts = options(arguments, allowed: ["data", "name", "role", "url", "lan"])
        let data = opts["data"] ?? ".soulacy"
        do {
            // The gateway's own database: SQLite in the data directory, or PostgreSQL at SOULACY_DATABASE_URL.
            let storage = try await CommandStorage.open(dataDirectory: data, environment: ProcessInfo.processInfo.environment)
            defer { storage.close() }
            let household = storage.household
            let offer: PairingOffer
            if let name = opts["name"] {
                let roleText = opts["role"] ?? "viewer"
                guard let role = Role(rawValue: roleText), role != .admin else { fail("--role must be operator or viewer", code: 64) }
                offer = try await storage.transactions.withTransaction { session in
                    try household.createOffer(subject: try household.subject(forName: name, in: session), name: name, role: role, createdBy: nil,
                                              madeBy: Principal.ownerSubject, now: Date(), in: session)
                }
            } else {
                guard opts["role"] == nil else { fail("--role goes with --name (your own phone gets your role)", code: 64) }
                offer = try await storage.transactions.withTransaction { session in
                    try household.createOffer(subject: Principal.ownerSubject, name: HouseholdNames.ownerName, role: .admin, createdBy: nil,
                                              madeBy: Principal.ownerSubject, now: Date(), in: session)
                }
            }
            let settings = try GatewaySettings.fromEnvironment(ProcessInfo.processInfo.environment)
            let publicURL = settings.publicURL
            let gateway = opts["url"] ?? publicURL ?? "http://127.0.0.1:8080"
            // The link pins the gateway's certificate (made at its first start) where TLS answers: the same-Wi-Fi
            // listener when there is one, else the gateway's own port; a public URL (a proxy's) is never pinned.
            let certificate = try? String(contentsOfFile: GatewayTLSIdentity.certificatePath(dataDirectory: data), encoding: .utf8)
            let pin = certificate.flatMap { try? SelfSignedCertificate.publicKeyPin(pem: $0) }
            let directAddress = !settings.autoTLS || (opts["url"] == nil && publicURL != nil) ? nil : PairingLink.directAddress(ofBase: gateway)
            let pinnedAddress = pin == nil ? nil : opts["lan"] ?? settings.lanListen.map { "\($0.host):\($0.port)" } ?? directAddress
            printOffer(offer, appLink: PairingLink.original(code: offer.code, gateway: gateway, pinnedAddress: pinnedAddress, pin: pin),
                       url: PairingLink.url(offer: offer, gateway: gateway, pinnedAddress: pinnedAddress, pin: pin), qr: true)
        } catch {
            fail("soulacy pair: \(error)")
        }
    }
}
