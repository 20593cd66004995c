import Foundation
import Glibc

/// The process figures every official Prometheus client exports, under the same names (no `soulacy_` prefix, so
/// dashboards made for any process work): CPU seconds, resident and virtual memory, descriptors, start time.
public enum ProcessMetrics {
    public static func register(in registry: MetricsRegistry) {
        let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
        let page = Double(sysconf(Int32(_SC_PAGESIZE)))
        let start = startTime(ticksPerSecond: ticks)
        registry.counter("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.") {
            guard let fields = statFields(), fields.count > 14, let user = Double(fields[13]), let system = Double(fields[14]) else { return [] }
            return [([], (user + system) / ticks)]
        }
        registry.gauge("process_resident_memory_bytes", "Resident memory size in bytes.") {
            statm(1).map { [([], $0 * page)] } ?? []
        }
        registry.gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.") {
            statm(0).map { [([], $0 * page)] } ?? []
        }
        registry.gauge("process_open_fds", "Number of open file descriptors.") {
            ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")).map { [([], Double($0.count))] }) ?? []
        }
        registry.gauge("process_max_fds", "Maximum number of open file descriptors.") {
            var limit = rlimit()
            guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return [] }
            return [([], Double(limit.rlim_cur))]
        }
        if let start {
            registry.gauge("process_start_time_seconds", "Start time of the process since unix epoch in seconds.") { [([], start)] }
        }
    }

    /// /proc/self/stat after the command name (which may hold spaces), so index 0 is the state field (field 3).
    static func statFields() -> [Substring]? {
        guard let text = try? String(contentsOfFile: "/proc/self/stat", encoding: .utf8), let close = text.lastIndex(of: ")") else { return nil }
        return text[text.index(after: close)...].split(separator: " ")
    }

    static func statm(_ index: Int) -> Double? {
        guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return nil }
        let fields = text.split(separator: " ")
        return fields.count > index ? Double(fields[index]) : nil
    }

    static func startTime(ticksPerSecond: Double) -> Double? {
        guard let fields = statFields(), fields.count > 19, let started = Double(fields[19]),
              let stat = try? String(contentsOfFile: "/proc/stat", encoding: .utf8),
              let line = stat.split(separator: "\n").first(where: { $0.hasPrefix("btime ") }),
              let boot = Double(line.split(separator: " ").last ?? "") else { return nil }
        return boot + started / ticksPerSecond
    }
}
