import ChannelAPI
import Foundation

/// Checks every `WakeTransport` must pass, whatever service it speaks to. Call it from the transport's own tests
/// with a target its test service accepts; it returns the broken rules (empty means conformant).
public struct WakeTransportConformance: Sendable {
    public struct Failure: Sendable, CustomStringConvertible {
        public let rule: String
        public let detail: String
        public var description: String { "\(rule): \(detail)" }
    }

    public let transport: any WakeTransport
    /// A device the service behind the transport will accept.
    public let acceptedTarget: WakeTarget
    /// A target of a platform the transport does not serve, if there is one.
    public let foreignTarget: WakeTarget?
    public let timeout: Duration

    public init(transport: any WakeTransport, acceptedTarget: WakeTarget, foreignTarget: WakeTarget? = nil, timeout: Duration = .seconds(20)) {
        self.transport = transport
        self.acceptedTarget = acceptedTarget
        self.foreignTarget = foreignTarget
        self.timeout = timeout
    }

    static let sample = WakeSignal.delivery(id: "dlv_conformance", agentID: "conformance")

    public func run() async -> [Failure] {
        var failures: [Failure] = []
        if transport.name.isEmpty || transport.name.contains(where: \.isWhitespace) {
            failures.append(Failure(rule: "name", detail: "must be a non-empty word, got '\(transport.name)'"))
        }
        if !transport.canWake(acceptedTarget) {
            failures.append(Failure(rule: "canWake", detail: "refuses the accepted target"))
        }
        var empty = acceptedTarget
        empty.pushToken = ""
        if transport.canWake(empty) {
            failures.append(Failure(rule: "canWake", detail: "claims it can wake a device without a push token"))
        }
        if let foreignTarget, transport.canWake(foreignTarget) {
            failures.append(Failure(rule: "canWake", detail: "claims a \(foreignTarget.platform.rawValue) device it does not serve"))
        }
        let single = await within(timeout) { await transport.send(Self.sample, to: acceptedTarget) }
        switch single {
        case nil: failures.append(Failure(rule: "send", detail: "did not answer within \(timeout)"))
        case .some(.delivered): break
        case .some(let other): failures.append(Failure(rule: "send", detail: "the accepted target got \(other), not delivered"))
        }
        // Many sends at once all come back with an outcome (no lost continuations, no crash).
        let outcomes = await within(timeout) {
            await withTaskGroup(of: WakeOutcome.self) { group in
                for i in 0..<50 {
                    var signal = Self.sample
                    signal.deliveryID = "dlv_conformance_\(i)"
                    signal.wakeID = UUID()
                    group.addTask { await transport.send(signal, to: acceptedTarget) }
                }
                var all: [WakeOutcome] = []
                for await outcome in group { all.append(outcome) }
                return all
            }
        }
        if let outcomes {
            let delivered = outcomes.filter { $0 == .delivered }.count
            if delivered != 50 { failures.append(Failure(rule: "concurrent sends", detail: "\(delivered) of 50 delivered")) }
        } else {
            failures.append(Failure(rule: "concurrent sends", detail: "50 sends did not all answer within \(timeout)"))
        }
        return failures
    }

    private func within<T: Sendable>(_ limit: Duration, _ body: @escaping @Sendable () async -> T) async -> T? {
        await withTaskGroup(of: T?.self) { group in
            group.addTask { await body() }
            group.addTask {
                try? await Task.sleep(for: limit)
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
    }
}
