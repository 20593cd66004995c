import ChannelAPI
import Foundation

/// What `soulacy doctor` looks at: the data directory of a gateway, and the configuration it is started with.
public struct DoctorOptions: Sendable {
    /// The directory `soulacy serve --data` names.
    public var dataDirectory: String
    /// A SOUL.yaml or an agents directory (`--config`), whose outputs are checked against the channels configured;
    /// nil: the agents are not checked.
    public var agentsPath: String?
    /// `--gateway-config`; nil: `SOULACY_GATEWAY_CONFIG`, else `~/.soulacy/config.yaml`, as `soulacy serve` reads it.
    public var gatewayConfigPath: String?
    /// The environment the gateway runs with (the push services' `SOULACY_MOBILE_*`, channel overrides, …).
    public var environment: [String: String]
    /// The user the data directory must belong to (the running one).
    public var userID: uid_t

    public init(dataDirectory: String, agentsPath: String? = nil, gatewayConfigPath: String? = nil,
                environment: [String: String] = ProcessInfo.processInfo.environment, userID: uid_t = geteuid()) {
        self.dataDirectory = dataDirectory
        self.agentsPath = agentsPath
        self.gatewayConfigPath = gatewayConfigPath
        self.environment = environment
        self.userID = userID
    }
}

/// One line of the doctor's report: what was checked, how it stands, and what to change.
public struct DoctorFinding: Sendable, Equatable, CustomStringConvertible {
    public typealias Status = ProbeResult.Status

    public var status: Status
    /// The part checked: `permissions`, `database`, `apns`, `channel telegram`, `clock`.
    public var check: String
    public var message: String
    public var fix: String?

    public init(_ status: Status, _ check: String, _ message: String, fix: String? = nil) {
        self.status = status
        self.check = check
        self.message = message
        self.fix = fix
    }

    init(_ check: String, _ result: ProbeResult) {
        self.init(result.status, check, result.message, fix: result.fix)
    }

    public var description: String {
        let label = status.rawValue.uppercased().padding(toLength: 5, withPad: " ", startingAt: 0)
        return "\(label) \(check): \(message)" + (fix.map { "\n      fix: \($0)" } ?? "")
    }
}

/// The doctor's whole report, in the order the checks ran.
public struct DoctorReport: Sendable {
    public var findings: [DoctorFinding]

    /// No FAIL: warnings are worth reading but are not problems.
    public var healthy: Bool { !findings.contains { $0.status == .fail } }
    public var problems: Int { findings.filter { $0.status == .fail }.count }
    public var warnings: Int { findings.filter { $0.status == .warn }.count }
}

/// `soulacy doctor`: checks a gateway's data directory and configuration without changing either, and says what to
/// fix. The database is opened read-only; push services and channels get dry calls only (ServiceProbe), never a
/// message to a person; no secret is printed.
public enum Doctor {
    public static func run(_ options: DoctorOptions) async -> DoctorReport {
        // The same credentials `soulacy serve` would read under systemd (LoadCredential=).
        var options = options
        options.environment = SystemdCredentials.apply(to: options.environment)
        var findings = DoctorFiles.permissions(dataDirectory: options.dataDirectory, userID: options.userID)
        // The database the gateway would use: PostgreSQL when the URL is set (the data directory then holds only the
        // gateway's identity), else the SQLite file in the data directory.
        if let url = (try? GatewaySettings.fromEnvironment(options.environment))?.databaseURL ?? options.environment["SOULACY_DATABASE_URL"], !url.isEmpty {
            findings += await DoctorPostgres.database(url: url)
        } else {
            findings += DoctorFiles.database(dataDirectory: options.dataDirectory)
        }
        let services = await DoctorServices.check(options)
        findings += services.findings
        findings.append(clock(services.readings))
        // The last guard: whatever a probe or a config error quoted, no configured secret reaches the terminal.
        let secrets = services.secrets.filter { $0.count >= 6 }.sorted { $0.count > $1.count }
        findings = findings.map { finding in
            var clean = finding
            for secret in secrets {
                clean.message = clean.message.replacingOccurrences(of: secret, with: "<redacted>")
                clean.fix = clean.fix?.replacingOccurrences(of: secret, with: "<redacted>")
            }
            return clean
        }
        return DoctorReport(findings: findings)
    }

    /// The clock against the services just called (their `Date` headers): more than `tolerance` off a service whose
    /// credentials are time-bound (APNs, FCM) is a FAIL, off another a WARN; with nothing to compare, a WARN.
    public static func clock(_ readings: [ServiceClockReading], tolerance: TimeInterval = 30) -> DoctorFinding {
        DoctorServices.clock(readings, tolerance: tolerance)
    }
}
