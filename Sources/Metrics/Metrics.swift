import Foundation
import Synchronization

/// The gateway's metrics, exposed in Prometheus' text format (version 0.0.4) by `MetricsRegistry.exposition()`.
///
/// Prometheus' own conventions, not the ones push servers often ship: a `soulacy_` prefix, base units (seconds,
/// bytes), counters ending `_total`, latencies as histograms, outcomes as label values rather than in names, and
/// only bounded labels: a family takes at most `maximumSeries` label combinations, so a label fed a device, person,
/// delivery or key id by mistake cannot grow memory or the scrape without bound (later combinations share one
/// `overflow` series, which says so).
public final class MetricsRegistry: Sendable {
    public enum Kind: String, Sendable {
        case counter, gauge, histogram
    }

    /// The default latency buckets, in seconds: from a millisecond (a local commit) to a minute (a slow provider).
    public static let latencyBuckets: [Double] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60]
    public static let maximumSeries = 500

    struct Family: Sendable {
        let name: String
        let help: String
        let kind: Kind
        let labelNames: [String]
        let buckets: [Double]
        let maximumSeries: Int
        var series: [[String]: Series] = [:]
        /// Computed at scrape time (outbox depth, process figures): label values → value.
        var collect: (@Sendable () -> [([String], Double)])?
    }

    /// One time series' state; counters and gauges use `value`, histograms the rest.
    final class Series: Sendable {
        let state: Mutex<(value: Double, counts: [UInt64], sum: Double, count: UInt64)>
        init(buckets: Int) { state = Mutex((0, [UInt64](repeating: 0, count: buckets), 0, 0)) }
    }

    private let families = Mutex<[String: Family]>([:])
    private let order = Mutex<[String]>([])
    private let refreshers = Mutex<[@Sendable () async -> Void]>([])

    public init() {}

    // MARK: Registration

    /// A counter family; `name` must end in `_total`.
    public func counter(_ name: String, _ help: String, labels: [String] = [], maximumSeries: Int = MetricsRegistry.maximumSeries) -> Counter {
        precondition(name.hasSuffix("_total"), "a counter's name ends in _total: \(name)")
        register(name, help, .counter, labels, [], maximumSeries: maximumSeries)
        return Counter(registry: self, name: name)
    }

    public func gauge(_ name: String, _ help: String, labels: [String] = []) -> Gauge {
        precondition(!name.hasSuffix("_total"), "a gauge is never named _total: \(name)")
        register(name, help, .gauge, labels, [])
        return Gauge(registry: self, name: name)
    }

    /// A gauge read when Prometheus scrapes (the outbox's depth, a credential's expiry): `collect` gives each
    /// series' label values and value. It runs on the scrape's thread; keep it to a short local read.
    public func gauge(_ name: String, _ help: String, labels: [String] = [], collect: @escaping @Sendable () -> [([String], Double)]) {
        register(name, help, .gauge, labels, [], collect: collect)
    }

    /// The same for a counter whose total is kept elsewhere (the CPU seconds the kernel counts).
    public func counter(_ name: String, _ help: String, labels: [String] = [], collect: @escaping @Sendable () -> [([String], Double)]) {
        precondition(name.hasSuffix("_total"), "a counter's name ends in _total: \(name)")
        register(name, help, .counter, labels, [], collect: collect)
    }

    public func histogram(_ name: String, _ help: String, labels: [String] = [], buckets: [Double] = MetricsRegistry.latencyBuckets,
                          maximumSeries: Int = MetricsRegistry.maximumSeries) -> Histogram {
        precondition(buckets == buckets.sorted() && !buckets.isEmpty, "buckets must be ascending")
        register(name, help, .histogram, labels, buckets, maximumSeries: maximumSeries)
        return Histogram(registry: self, name: name, buckets: buckets)
    }

    private func register(_ name: String, _ help: String, _ kind: Kind, _ labels: [String], _ buckets: [Double],
                          maximumSeries: Int = MetricsRegistry.maximumSeries, collect: (@Sendable () -> [([String], Double)])? = nil) {
        precondition(Self.isValidName(name), "not a Prometheus metric name: \(name)")
        let added = families.withLock { families -> Bool in
            if let existing = families[name] {
                precondition(existing.kind == kind && existing.labelNames == labels, "metric \(name) registered twice with different shapes")
                if let collect { families[name]?.collect = collect }
                return false
            }
            families[name] = Family(name: name, help: help, kind: kind, labelNames: labels, buckets: buckets, maximumSeries: maximumSeries, collect: collect)
            return true
        }
        if added { order.withLock { $0.append(name) } }
    }

    static func isValidName(_ name: String) -> Bool {
        guard let first = name.unicodeScalars.first, first.isASCIILetter || first == "_" || first == ":" else { return false }
        return name.unicodeScalars.allSatisfy { $0.isASCIILetter || $0 == "_" || $0 == ":" || ("0"..."9").contains($0) }
    }

    /// The series of `name` with these label values, made on first use (bounded: see `maximumSeries`).
    func series(_ name: String, _ values: [String]) -> Series? {
        families.withLock { families -> Series? in
            guard var family = families[name] else { return nil }
            precondition(values.count == family.labelNames.count, "\(name) takes labels \(family.labelNames), got \(values.count) values")
            if let series = family.series[values] { return series }
            var key = values
            if family.series.count >= family.maximumSeries {
                key = values.map { _ in "overflow" }
                if let series = family.series[key] { return series }
            }
            let series = Series(buckets: family.buckets.count)
            family.series[key] = series
            families[name] = family
            return series
        }
    }

    /// Work that reads what some gauges show before each scrape, off the lock (a database read, which a gauge's own
    /// synchronous `collect` must never do: on a second engine that read is a network round trip).
    public func beforeScrape(_ refresh: @escaping @Sendable () async -> Void) {
        refreshers.withLock { $0.append(refresh) }
    }

    /// Runs every `beforeScrape` refresher, then renders the exposition.
    public func scrape() async -> String {
        for refresh in refreshers.withLock({ $0 }) { await refresh() }
        return exposition()
    }

    // MARK: Exposition

    /// Every family in the text format Prometheus scrapes (`text/plain; version=0.0.4`).
    public func exposition() -> String {
        let names = order.withLock { $0 }
        var out = ""
        for name in names {
            guard let family = families.withLock({ $0[name] }) else { continue }
            out += "# HELP \(name) \(Self.escapeHelp(family.help))\n# TYPE \(name) \(family.kind.rawValue)\n"
            var rows: [([String], Double)] = []
            if let collect = family.collect { rows = collect() }
            switch family.kind {
            case .counter, .gauge:
                for (values, series) in family.series { rows.append((values, series.state.withLock { $0.value })) }
                for (values, value) in rows.sorted(by: { $0.0.lexicographicallyPrecedes($1.0) }) {
                    out += "\(name)\(Self.labels(family.labelNames, values)) \(Self.number(value))\n"
                }
            case .histogram:
                for (values, series) in family.series.sorted(by: { $0.key.lexicographicallyPrecedes($1.key) }) {
                    let state = series.state.withLock { $0 }
                    var cumulative: UInt64 = 0
                    for (index, bound) in family.buckets.enumerated() {
                        cumulative += state.counts[index]
                        out += "\(name)_bucket\(Self.labels(family.labelNames + ["le"], values + [Self.number(bound)])) \(cumulative)\n"
                    }
                    out += "\(name)_bucket\(Self.labels(family.labelNames + ["le"], values + ["+Inf"])) \(state.count)\n"
                    out += "\(name)_sum\(Self.labels(family.labelNames, values)) \(Self.number(state.sum))\n"
                    out += "\(name)_count\(Self.labels(family.labelNames, values)) \(state.count)\n"
                }
            }
        }
        return out
    }

    static func labels(_ names: [String], _ values: [String]) -> String {
        guard !names.isEmpty else { return "" }
        return "{" + zip(names, values).map { "\($0)=\"\(escapeLabel($1))\"" }.joined(separator: ",") + "}"
    }

    static func escapeLabel(_ value: String) -> String {
        var out = ""
        for character in value {
            switch character {
            case "\\": out += "\\\\"
            case "\"": out += "\\\""
            case "\n": out += "\\n"
            default: out.append(character)
            }
        }
        return out
    }

    static func escapeHelp(_ help: String) -> String {
        help.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\n", with: "\\n")
    }

    static func number(_ value: Double) -> String {
        if value.isNaN { return "NaN" }
        if value.isInfinite { return value > 0 ? "+Inf" : "-Inf" }
        if value == value.rounded(), abs(value) < 1e15 { return String(Int64(value)) }
        return "\(value)"
    }
}

extension Unicode.Scalar {
    fileprivate var isASCIILetter: Bool { ("a"..."z").contains(self) || ("A"..."Z").contains(self) }
}

/// A monotonically increasing count (`_total`).
public struct Counter: Sendable {
    let registry: MetricsRegistry
    let name: String

    public func increment(_ labels: String..., by amount: Double = 1) { add(labels, amount) }

    public func add(_ labels: [String], _ amount: Double = 1) {
        guard amount >= 0, let series = registry.series(name, labels) else { return }
        series.state.withLock { $0.value += amount }
    }

    /// One series, looked up once (hot paths).
    public func bound(_ labels: String...) -> BoundCounter? { registry.series(name, labels).map(BoundCounter.init) }
}

/// A counter series held by its user.
public struct BoundCounter: Sendable {
    let series: MetricsRegistry.Series
    public func increment(by amount: Double = 1) {
        guard amount >= 0 else { return }
        series.state.withLock { $0.value += amount }
    }
}

/// A histogram series held by its user.
public struct BoundHistogram: Sendable {
    let series: MetricsRegistry.Series
    let buckets: [Double]

    public func observe(_ value: Double) {
        guard value.isFinite else { return }
        let index = buckets.firstIndex { value <= $0 }
        series.state.withLock { state in
            if let index { state.counts[index] += 1 }
            state.sum += value
            state.count += 1
        }
    }
}

/// A value that goes up and down.
public struct Gauge: Sendable {
    let registry: MetricsRegistry
    let name: String

    public func set(_ value: Double, _ labels: String...) {
        guard let series = registry.series(name, labels) else { return }
        series.state.withLock { $0.value = value }
    }

    public func add(_ amount: Double, _ labels: String...) {
        guard let series = registry.series(name, labels) else { return }
        series.state.withLock { $0.value += amount }
    }
}

/// Observations counted into cumulative buckets, with their sum and count.
public struct Histogram: Sendable {
    let registry: MetricsRegistry
    let name: String
    let buckets: [Double]

    public func observe(_ value: Double, _ labels: String...) { observe(value, labels: labels) }

    public func observe(_ value: Double, labels: [String]) {
        guard let series = registry.series(name, labels) else { return }
        BoundHistogram(series: series, buckets: buckets).observe(value)
    }

    /// Makes the series exist (all buckets zero) before the first observation, so Prometheus sees it start at zero.
    public func touch(_ labels: [String]) { _ = registry.series(name, labels) }

    /// One series, looked up once: for hot paths, where finding the series on every observation would cost more.
    public func bound(_ labels: String...) -> BoundHistogram? {
        registry.series(name, labels).map { BoundHistogram(series: $0, buckets: buckets) }
    }

    /// Observes a duration in seconds.
    public func observe(_ duration: Duration, _ labels: String...) {
        let seconds = Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
        observe(seconds, labels: labels)
    }
}
