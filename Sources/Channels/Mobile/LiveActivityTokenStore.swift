import ChannelAPI
import Foundation
import Storage

/// The per-activity update tokens iOS phones report for a run's Live Activity, and where a run's pushes go. A
/// protocol: each engine keeps these rows (`SQLiteLiveActivityTokenStore` beside the inbox in the data directory's
/// file, `PostgresLiveActivityTokenStore` on a database several gateways share), so an activity registered through one
/// node is updated by whichever node runs the agent.
///
/// A registration is written in the caller's session, so it commits with its answer (and its idempotency line). The
/// targets are read from what is committed, and only on iOS devices the person owns at that moment: a removed phone,
/// or one another person registered since, gets no update.
public protocol LiveActivityTokenStore: Sendable {
    /// The engine seam's view of the store's database.
    var transactions: any TransactionalStorage { get }

    /// Keeps `token` as the device's update token for the run's session, inside the caller's transaction; a later
    /// token for the same device and session replaces it; the device keeps its `liveActivityTokensPerDevice` newest.
    func register(deviceID: String, sessionID: String, agentID: String, token: String, environment: WakeTarget.Environment, now: Date,
                  in session: any StorageSession) throws
    /// Where updates for a session go: each reported activity token, on an iOS device `subject` owns.
    func targets(sessionID: String, subject: String) async throws -> [WakeTarget]
    /// Where a push-to-start goes: every iOS phone of `subject` that sent a start token (the feature is on).
    func startTargets(subject: String) async throws -> [WakeTarget]
}

/// Live Activity tokens one phone keeps, its newest (a phone shows a handful of activities at once, and a session id
/// is the caller's to choose, so every engine drops the oldest past it).
public let liveActivityTokensPerDevice = 64

extension LiveActivityTokenStore {
    /// Keeps a device's token in a transaction of its own.
    public func register(deviceID: String, sessionID: String, agentID: String, token: String, environment: WakeTarget.Environment,
                         now: Date) async throws {
        try await transactions.withTransaction { session in
            try register(deviceID: deviceID, sessionID: sessionID, agentID: agentID, token: token, environment: environment, now: now, in: session)
        }
    }
}

extension WakeTarget {
    /// A Live Activity token's target as a store reads it back: an iOS device, production unless stored as
    /// development, the app's own bundle unless the device registered another.
    public static func liveActivity(deviceID: String?, token: String?, environment: String?, bundleID: String?) -> WakeTarget {
        WakeTarget(deviceID: deviceID ?? "", platform: .ios, pushToken: token ?? "",
                   environment: environment.flatMap(Environment.init(rawValue:)) ?? .production, bundleID: bundleID ?? Device.iosBundleID)
    }
}
