import APNs
import ChannelAPI
import FCM
import Foundation
import Glibc
import Mobile
import Relay
import Sidecar
import WebPush

/// The doctor's look at what the gateway talks to: the push services from `SOULACY_MOBILE_*`, the relay mailbox,
/// and the channels of the gateway config's `channels:` block, read from the same places and by the same code as
/// `soulacy serve`. Each service with a dry call gets one (`ServiceProbe`); the others have their configuration
/// checked and say so.
enum DoctorServices {
    struct Outcome {
        var findings: [DoctorFinding] = []
        var readings: [ServiceClockReading] = []
        /// Every configured secret, so the report can be searched and cleaned of them.
        var secrets: [String] = []
    }

    /// A probe to run, under the name its finding gets.
    private struct PendingProbe: Sendable {
        let check: String
        let probe: any ServiceProbe
    }

    static func check(_ options: DoctorOptions) async -> Outcome {
        var outcome = Outcome()
        let environment = options.environment
        outcome.secrets = environmentSecrets(environment)
        var probes: [(index: Int, probe: PendingProbe)] = []
        // A finding's place is kept for each probe, so the report reads in a fixed order whatever answers first.
        func add(_ finding: DoctorFinding) { outcome.findings.append(finding) }
        func schedule(_ check: String, _ probe: any ServiceProbe) {
            probes.append((outcome.findings.count, PendingProbe(check: check, probe: probe)))
            outcome.findings.append(DoctorFinding(.ok, check, "(probing)"))
        }

        // MARK: Push services
        do {
            if let apns = try APNsConfiguration.fromEnvironment(environment) {
                schedule("apns", APNsProbe(transport: try APNsTransport(configuration: apns), topic: Device.iosBundleID))
            } else {
                add(DoctorFinding(.ok, "apns", "not configured (SOULACY_MOBILE_APNS_* unset): iOS devices are not woken directly"))
            }
        } catch {
            add(DoctorFinding(.fail, "apns", "\(error)", fix: "set SOULACY_MOBILE_APNS_TEAM_ID, _KEY_ID and _PRIVATE_KEY_FILE as Apple gave them, or none of them"))
        }
        do {
            if let relay = try RelayConfiguration.fromEnvironment(environment) {
                let direct = (try? APNsConfiguration.fromEnvironment(environment)) != nil
                add(DoctorFinding(.ok, "push relay", "configured (\(relay.baseURL))\(direct ? ", but not used: direct APNs wins" : ""); "
                                  + "the push relay's API has no dry call, so only its configuration was checked"))
            }
        } catch {
            add(DoctorFinding(.fail, "push relay", "\(error)"))
        }
        do {
            if let fcm = try FCMConfiguration.fromEnvironment(environment) {
                schedule("fcm", try FCMTransport(configuration: fcm))
            } else {
                add(DoctorFinding(.ok, "fcm", "not configured (SOULACY_MOBILE_FCM_CREDENTIALS_FILE unset): Android devices are not woken"))
            }
        } catch {
            add(DoctorFinding(.fail, "fcm", "\(error)", fix: "SOULACY_MOBILE_FCM_CREDENTIALS_FILE must name the service account's JSON key file"))
        }
        do {
            if let webPush = try WebPushConfiguration.fromEnvironment(environment) {
                let keyFile = options.dataDirectory + "/" + WebPushKeys.vapidKeyFileName
                let keys = FileManager.default.fileExists(atPath: keyFile) ? "its VAPID key is in the data directory" : "its VAPID key is made at the gateway's next start"
                add(DoctorFinding(.ok, "web push", "on (contact \(webPush.contact)), \(keys); no dry call: each browser's push service is "
                                  + "reached per subscription, so only the configuration was checked"))
            } else {
                add(DoctorFinding(.ok, "web push", "off (SOULACY_WEBPUSH=off)"))
            }
        } catch {
            add(DoctorFinding(.fail, "web push", "\(error)"))
        }
        do {
            let settings = try GatewaySettings.fromEnvironment(environment)
            if let url = settings.relayMailboxURL {
                schedule("relay mailbox", RelayMailboxProbe(url: url, caFile: settings.relayMailboxCAFile))
            }
        } catch {
            add(DoctorFinding(.fail, "settings", "\(error)"))
        }

        // MARK: Channels
        let path = options.gatewayConfigPath ?? GatewayConfigFile.defaultPath(environment: environment)
        var built: [any OutboundChannel] = []
        var defaults: [String: DefaultOutput] = [:]
        var llmEnvironment: [String: String] = [:]
        do {
            let config = try GatewayConfigFile.load(path: path, environment: environment)
            outcome.secrets += config.channels.flatMap { settingsSecrets($0.values) }
            llmEnvironment = config.llmEnvironment
            outcome.secrets += llmEnvironment.filter { $0.key.hasSuffix("_API_KEY") }.map(\.value)
            let problems = Gateway.channelProblems(config: config, factories: Gateway.builtInChannelFactories(environment: environment),
                                                   built: { built.append($0) }, defaults: { defaults = $0 })
            let described = path.map { "\($0): read, \(config.channels.count) channel block(s) enabled" }
                ?? "no file (SOULACY_GATEWAY_CONFIG unset and no ~/.soulacy/config.yaml): no channels but the phones' inbox"
            add(DoctorFinding(.ok, "gateway config", described))
            for problem in problems {
                add(DoctorFinding(.fail, "channels", problem, fix: "correct that key in \(path ?? "the gateway config"); soulacy check PATH --gateway-config FILE says the same"))
            }
            for kind in config.disabledChannels {
                add(DoctorFinding(.ok, "channel \(kind)", "in the gateway config but not enabled (enabled: true turns it on)"))
            }
        } catch {
            add(DoctorFinding(.fail, "gateway config", "\(error)", fix: "correct the file, or give the right one with --gateway-config FILE"))
        }
        for channel in built {
            let check = "channel \(channel.name)"
            if let probe = channel as? any ServiceProbe {
                schedule(check, probe)
            } else if let sidecar = channel as? SidecarChannel {
                add(sidecarFinding(sidecar.supervisor.config, check: check, environment: environment))
            } else {
                add(DoctorFinding(.ok, check, "configuration valid; this service has no dry call (any call would deliver a message), so it was not called"))
            }
        }

        // MARK: Agents
        if let agents = options.agentsPath {
            var destinations = Gateway.destinationValidators
            for channel in built { destinations[channel.name] = Gateway.validator(of: channel) }
            var agentEnvironment = environment
            if let allowed = llmEnvironment["SOULACY_LLM_ALLOWED_PROVIDERS"] { agentEnvironment["SOULACY_LLM_ALLOWED_PROVIDERS"] = allowed }
            let result = AgentFiles.load(path: agents, destinations: destinations, defaults: defaults, environment: agentEnvironment)
            let errors = result.problems.filter { $0.severity == .error }
            if let first = errors.first {
                add(DoctorFinding(.fail, "agents", "\(agents): \(errors.count) error(s), the first: \(first.description)",
                                  fix: "soulacy check \(DoctorFiles.shellQuoted(agents)) lists each one with its line"))
            } else {
                let warnings = result.problems.count
                add(DoctorFinding(warnings == 0 ? .ok : .warn, "agents", "\(agents): \(result.config.agents.count) agent(s) load, "
                                  + "their outputs name configured channels\(warnings == 0 ? "" : "; \(warnings) warning(s)")",
                                  fix: warnings == 0 ? nil : "soulacy check \(DoctorFiles.shellQuoted(agents)) lists them"))
            }
        }

        // Every dry call at once: each has its own timeout, so the slowest sets the doctor's pace.
        let results = await withTaskGroup(of: (Int, ProbeResult).self) { group in
            for (index, pending) in probes {
                group.addTask { (index, await pending.probe.probe()) }
            }
            var results: [(Int, ProbeResult)] = []
            for await result in group { results.append(result) }
            return results
        }
        for (index, result) in results {
            outcome.findings[index] = DoctorFinding(outcome.findings[index].check, result)
            if let clock = result.clock { outcome.readings.append(clock) }
        }
        outcome.readings.sort { $0.service < $1.service }
        return outcome
    }

    /// A sidecar speaks only once it runs, so its program and environment are checked as its start would use them.
    static func sidecarFinding(_ config: SidecarConfig, check: String, environment: [String: String]) -> DoctorFinding {
        do {
            _ = try config.environment(host: environment)
        } catch {
            return DoctorFinding(.fail, check, "its environment cannot be built: \(error.description)", fix: "set that variable for the gateway, or correct env: in channels.sidecars")
        }
        let command = config.command
        let found: String?
        if command.contains("/") {
            let path = command.hasPrefix("/") || config.workingDirectory == nil ? command : config.workingDirectory! + "/" + command
            found = access(path, X_OK) == 0 ? path : nil
        } else {
            let directories = (environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin").split(separator: ":")
            found = directories.map { "\($0)/\(command)" }.first { access($0, X_OK) == 0 }
        }
        guard let found else {
            return DoctorFinding(.fail, check, "its command '\(command)' is not an executable file\(command.contains("/") ? "" : " in PATH")",
                                 fix: "correct channels.sidecars' command for '\(config.name)', or install the program")
        }
        return DoctorFinding(.ok, check, "sidecar \(found) is executable and its environment resolves; a sidecar has no dry call "
                             + "(it speaks only once started), so only its configuration was checked")
    }

    /// The clock against the services just called: APNs and FCM refuse credentials stamped with a wrong time.
    static func clock(_ readings: [ServiceClockReading], tolerance: TimeInterval = 30) -> DoctorFinding {
        guard let worst = readings.max(by: { abs($0.skew) < abs($1.skew) }) else {
            return DoctorFinding(.warn, "clock", "not compared: no service that was called gave a Date header",
                                 fix: "make sure NTP keeps the clock (timedatectl status); APNs and FCM refuse tokens from a clock that is off")
        }
        func offset(_ reading: ServiceClockReading) -> String {
            let seconds = Int(abs(reading.skew).rounded())
            return "\(seconds) s \(reading.skew >= 0 ? "ahead of" : "behind") \(reading.service)'s"
        }
        let fix = "synchronise this machine's clock (timedatectl set-ntp true, or chronyc makestep)"
        if let bound = readings.filter({ $0.credentialsAreTimeBound && abs($0.skew) > tolerance }).max(by: { abs($0.skew) < abs($1.skew) }) {
            return DoctorFinding(.fail, "clock", "this machine's clock is \(offset(bound)) (over \(Int(tolerance)) s): APNs and FCM refuse "
                                 + "provider tokens and OAuth assertions whose time is off, so pushes will fail", fix: fix)
        }
        if abs(worst.skew) > tolerance {
            return DoctorFinding(.warn, "clock", "this machine's clock is \(offset(worst)) (over \(Int(tolerance)) s)", fix: fix)
        }
        let services = Array(Set(readings.map(\.service))).sorted().joined(separator: ", ")
        return DoctorFinding(.ok, "clock", "within \(Int(tolerance)) s of \(services) (at most \(Int(abs(worst.skew).rounded())) s off, by their Date headers)")
    }

    /// Values under keys that hold credentials, at any depth of a channel block (`token`, `bot_token`, `password`,
    /// `secret`, `access_token`, `webhook_url`: an incoming webhook's URL is its credential).
    static func settingsSecrets(_ values: [String: ChannelSetting]) -> [String] {
        var secrets: [String] = []
        for (key, value) in values {
            switch value {
            case .map(let fields): secrets += settingsSecrets(fields)
            case .list(let items):
                for item in items {
                    if case .map(let fields) = item { secrets += settingsSecrets(fields) }
                }
            default:
                let lower = key.lowercased()
                if ["token", "password", "secret", "api_key", "webhook_url"].contains(where: lower.contains), let text = value.text { secrets.append(text) }
            }
        }
        return secrets
    }

    /// Variables whose values are credentials (`…_TOKEN`, `…_PASSWORD`, `…_SECRET`, `…_API_KEY`), not their file names or ids.
    static func environmentSecrets(_ environment: [String: String]) -> [String] {
        environment.compactMap { name, value in
            let upper = name.uppercased()
            guard ["TOKEN", "PASSWORD", "SECRET", "API_KEY"].contains(where: upper.contains),
                  !upper.hasSuffix("_FILE"), !upper.hasSuffix("_ID"), !upper.hasSuffix("_URL") else { return nil }
            return value
        }
    }
}
