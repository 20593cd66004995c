import ChannelAPI
import Foundation

/// Where a line is on one phone, as the console names it: the last step of that phone's timeline.
public struct DeliveryState: RawRepresentable, Sendable, Hashable {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let stored = DeliveryState(rawValue: "stored")
    public static let queued = DeliveryState(rawValue: "queued")
    public static let sent = DeliveryState(rawValue: "sent")
    public static let retrying = DeliveryState(rawValue: "retrying")
    public static let tokenRejected = DeliveryState(rawValue: "token_rejected")
    public static let failed = DeliveryState(rawValue: "failed")
    public static let skipped = DeliveryState(rawValue: "skipped")
    public static let fetched = DeliveryState(rawValue: "fetched")
    public static let read = DeliveryState(rawValue: "read")

    /// Every state, from the least advanced (stuck) to the most (read).
    public static let all: [DeliveryState] = [.failed, .tokenRejected, .skipped, .stored, .retrying, .queued, .sent, .fetched, .read]

    /// How far along: a line's state is the least advanced of its phones', so a stuck phone shows on the line.
    var rank: Int {
        switch self {
        case .failed, .tokenRejected: 0
        case .skipped: 1
        case .stored: 2
        case .retrying: 3
        case .queued: 4
        case .sent: 5
        case .fetched: 6
        case .read: 7
        default: 2
        }
    }

    /// The least advanced of several phones' states; `stored` when the line reached none.
    public static func leastAdvanced(_ states: [DeliveryState]) -> DeliveryState {
        states.min { $0.rank < $1.rank } ?? .stored
    }
}

/// One phone's path for one line: the line's own steps and the phone's, in order, with its receipt as `read`.
public struct DeviceTimeline: Sendable, Equatable {
    public var deviceID: String
    public var steps: [DeliveryEvent]

    /// Builds the timeline of `deviceID` from every stored step of the line (`events`, in written order) and the
    /// phone's read receipt. A line stored before timelines were recorded still starts with `stored`, from the line.
    /// Steps from before `registeredAt` belong to an earlier registration of the same id (someone else's, maybe),
    /// and are left out.
    public init(deviceID: String, line: Delivery, events: [DeliveryEvent], readAt: Date?, registeredAt: Date = .distantPast) {
        self.deviceID = deviceID
        var steps = events.filter { ($0.deviceID == deviceID && $0.at >= registeredAt) || ($0.deviceID == nil && $0.kind == .stored) }
        if !steps.contains(where: { $0.kind == .stored }) {
            steps.insert(DeliveryEvent(kind: .stored, at: line.createdAt, deliveryID: line.id, deviceID: nil), at: 0)
        }
        // A wake-up is queued before any transport is chosen; the first one that tried it names it.
        for index in steps.indices where steps[index].kind == .queued && steps[index].transport == nil {
            steps[index].transport = steps[index...].first { $0.wakeID == steps[index].wakeID && $0.transport != nil }?.transport
        }
        if let readAt { steps.append(DeliveryEvent(kind: .read, at: readAt, deliveryID: line.id, deviceID: deviceID)) }
        // In time order (a `queued` step is written with the first settle, after a fetch that may have come first);
        // steps of the same moment keep the order they were written in.
        self.steps = steps.enumerated().sorted { ($0.element.at, $0.offset) < ($1.element.at, $1.offset) }.map(\.element)
    }

    /// The phone's state: read or fetched once it got there (the phone may fetch before the service answers),
    /// else where its wake-up stands.
    public var state: DeliveryState {
        if steps.contains(where: { $0.kind == .read }) { return .read }
        if steps.contains(where: { $0.kind == .fetched }) { return .fetched }
        for step in steps.reversed() {
            switch step.kind {
            case .sent: return .sent
            case .retryScheduled: return .retrying
            case .tokenRejected: return .tokenRejected
            case .failed: return .failed
            case .skipped: return .skipped
            case .queued, .attempt: return .queued
            case .stored: return .stored
            case .fetched, .read: continue
            }
        }
        return .stored
    }
}

/// One line as the console lists it: the line, and each of the caller's phones it went to with its timeline.
public struct ConsoleLine: Sendable {
    public var delivery: Delivery
    public var devices: [DeviceTimeline]
    /// The least advanced of its phones' states.
    public var state: DeliveryState { DeliveryState.leastAdvanced(devices.map(\.state)) }
}
