import Foundation
import Gateway
import Glibc

/// `soulacy doctor`: the data directory, the database, the push services, the channels and the clock, each OK, WARN
/// or FAIL with what to fix (Doctor). Exit 0 when healthy (warnings allowed), 1 when it found a problem.
extension SoulacyCommand {
    static func doctor(_ arguments: [String]) async {
        let opts = options(arguments, allowed: ["data", "config", "gateway-config"])
        let data = opts["data"] ?? ".soulacy"
        let doctorOptions = DoctorOptions(dataDirectory: data, agentsPath: opts["config"], gatewayConfigPath: opts["gateway-config"],
                                          environment: ProcessInfo.processInfo.environment)
        print("soulacy doctor \(GatewayVersion.current): data directory \(data)")
        fflush(nil)
        let report = await Doctor.run(doctorOptions)
        for finding in report.findings { print(finding.description) }
        if report.healthy {
            print("healthy: no problem found" + (report.warnings > 0 ? ", \(report.warnings) warning(s) worth reading" : ""))
            fflush(nil)
            exit(0)
        }
        print("\(report.problems) problem(s)\(report.warnings > 0 ? " and \(report.warnings) warning(s)" : ""): see the FAIL lines and their fix")
        fflush(nil)
        exit(1)
    }
}
