import ChannelAPI
import Crypto
import Foundation
import SQLite

/// Pushes a run's content state to its Live Activity: started by push-to-start, updated while it works,
/// "waiting on you" with Approve/Deny, then the final state and a dismissal a few minutes later.
/// Routine progress is coalesced and sent at low priority; waiting and finished go at once at high priority.
/// These pushes are transient (the next state replaces the last), so they go straight to the transport.
public actor LiveActivityPublisher: RunProgressObserver {
    /// The ActivityAttributes type the original app declares (its Live Activity widget decodes these).
    public static let attributesType = "SoulacyRunAttributes"

    /// `<agent_id>/<session_id>`, as the original keys a run and answers activity registrations.
    public static func runKey(agentID: String, sessionID: String) -> String { "\(agentID)/\(sessionID)" }

    struct State {
        var run: ActivityRun
        var started = false
        var steps = 0
        var tool: String?
        var waiting: (callID: String, tool: String)?
        /// What the activity says now ("Running web search", "Approved, continuing", …).
        var detail = "Starting"
        var lastPush: Date?
        var flushScheduled = false
        var finished = false
    }

    public nonisolated let tokens: any LiveActivityTokenStore
    nonisolated let transports: WakeTransportRegistry
    let clock: any WallClock
    let log: Log
    public let progressInterval: TimeInterval
    public let dismissAfter: TimeInterval
    private var sessions: [String: State] = [:]

    /// A publisher over the SQLite inbox's tokens.
    public init(store: MobileStore, transports: WakeTransportRegistry, clock: any WallClock, log: Log = Log(),
                progressInterval: TimeInterval = 2, dismissAfter: TimeInterval = 300) throws {
        self.init(tokens: SQLiteLiveActivityTokenStore(database: store.database), transports: transports, clock: clock, log: log,
                  progressInterval: progressInterval, dismissAfter: dismissAfter)
    }

    public init(tokens: any LiveActivityTokenStore, transports: WakeTransportRegistry, clock: any WallClock, log: Log = Log(),
                progressInterval: TimeInterval = 2, dismissAfter: TimeInterval = 300) {
        self.tokens = tokens
        self.transports = transports
        self.clock = clock
        self.log = log
        self.progressInterval = progressInterval
        self.dismissAfter = dismissAfter
    }

    public func runStarted(_ run: ActivityRun) {
        sessions[run.sessionID] = State(run: run)
    }

    /// A tool call: a background run appears now; later calls are coalesced into low-priority updates.
    public func toolCalled(sessionID: String, tool: String) async {
        guard var state = sessions[sessionID], !state.finished else { return }
        state.steps += 1
        state.tool = tool
        if state.waiting == nil { state.detail = "Running \(Self.spoken(tool))" }
        sessions[sessionID] = state
        if !state.started {
            if state.run.background { await push(sessionID, event: .start, priority: .high) }
            return
        }
        let now = clock.now()
        // None while the run waits on the person: the waiting state stays on screen.
        if state.waiting != nil { return }
        if let last = state.lastPush, now.timeIntervalSince(last) < progressInterval {
            scheduleFlush(sessionID, at: last.addingTimeInterval(progressInterval))
        } else {
            await push(sessionID, event: .update, priority: .low)
        }
    }

    /// Any run, interactive ones too, appears the moment it needs an approval.
    public func waitingForApproval(_ run: ActivityRun, callID: String, tool: String) async {
        var state = sessions[run.sessionID] ?? State(run: run)
        guard !state.finished else { return }
        state.waiting = (callID, tool)
        state.detail = "Needs your approval: \(Self.spoken(tool))"
        sessions[run.sessionID] = state
        await push(run.sessionID, event: state.started ? .update : .start, priority: .high)
    }

    /// The decision is in: the activity says so at routine priority, as the original sends it.
    public func approvalAnswered(sessionID: String, approved: Bool) async {
        guard var state = sessions[sessionID], state.waiting != nil else { return }
        state.waiting = nil
        state.detail = approved ? "Approved, continuing" : "Denied, agent is wrapping up"
        sessions[sessionID] = state
        if state.started { await push(sessionID, event: .update, priority: .low) }
    }

    public func finished(sessionID: String, succeeded: Bool) async {
        guard var state = sessions[sessionID] else { return }
        state.finished = true
        state.waiting = nil
        state.detail = succeeded ? "Finished" : "Stopped with an error"
        sessions[sessionID] = state
        if state.started { await push(sessionID, event: .end, priority: .high, succeeded: succeeded) }
        // The actor took other calls while the end was sent: a chat session's next run may have started meanwhile.
        if sessions[sessionID]?.finished == true { sessions[sessionID] = nil }
    }

    private func scheduleFlush(_ sessionID: String, at date: Date) {
        guard sessions[sessionID]?.flushScheduled == false else { return }
        sessions[sessionID]?.flushScheduled = true
        let clock = self.clock
        Task {
            try? await clock.sleep(until: date)
            await self.flush(sessionID)
        }
    }

    private func flush(_ sessionID: String) async {
        guard var state = sessions[sessionID] else { return }
        state.flushScheduled = false
        sessions[sessionID] = state
        guard !state.finished, state.started else { return }
        await push(sessionID, event: .update, priority: .low)
    }

    /// Tool names as the original shows them: `_` and `.` become spaces; no name is "a tool".
    static func spoken(_ tool: String) -> String {
        let words = tool.replacingOccurrences(of: "_", with: " ").replacingOccurrences(of: ".", with: " ").trimmingCharacters(in: .whitespaces)
        return words.isEmpty ? "a tool" : words
    }

    /// The exact APNs body for a Live Activity event, in the original app's shape: `SoulacyRunAttributes` and its
    /// attributes on start, the content state {stage, detail, steps, needs_you, call_id?, updated_at} on every push.
    static func payload(_ state: State, event: LiveActivityEvent, now: Date, dismissAfter: TimeInterval, succeeded: Bool?) -> LiveActivityPayload {
        let updated = Int(now.timeIntervalSince1970)
        let stage: String = switch (event, succeeded) {
        case (.end, false?): "failed"
        case (.end, _): "done"
        default: state.waiting != nil ? "waiting" : "running"
        }
        var aps = LiveActivityPayload.APS(timestamp: updated, event: event.rawValue, contentState: .init(
            stage: stage, detail: state.detail, steps: state.steps, needsYou: state.waiting != nil, callID: state.waiting?.callID, updatedAt: updated))
        if event == .start {
            aps.attributesType = attributesType
            aps.attributes = .init(runKey: runKey(agentID: state.run.agentID, sessionID: state.run.sessionID), agentID: state.run.agentID,
                                   agentName: state.run.agentName, sessionID: state.run.sessionID, startedAt: Int(state.run.startedAt.timeIntervalSince1970))
        }
        // The alert only while approval is pending; the dismissal only at the end.
        if state.waiting != nil, event != .end { aps.alert = .init(title: "\(state.run.agentName) needs you", body: state.detail) }
        if event == .end { aps.dismissalDate = Int(now.addingTimeInterval(dismissAfter).timeIntervalSince1970) }
        return LiveActivityPayload(aps: aps)
    }

    private func push(_ sessionID: String, event: LiveActivityEvent, priority: WakeSignal.Priority, succeeded: Bool? = nil) async {
        guard var state = sessions[sessionID] else { return }
        let now = clock.now()
        let targets: [WakeTarget]
        do {
            targets = event == .start ? try await tokens.startTargets(subject: state.run.subject)
                : try await tokens.targets(sessionID: sessionID, subject: state.run.subject)
        } catch {
            log.error("live activity: cannot read tokens: \(error)")
            return
        }
        if event == .start { state.started = true }
        state.lastPush = now
        sessions[sessionID] = state
        guard let body = try? WireJSON.encode(Self.payload(state, event: event, now: now, dismissAfter: dismissAfter, succeeded: succeeded)) else { return }
        let signal = WakeSignal.liveActivity(LiveActivityUpdate(event: event, apnsBody: body), title: state.run.agentName,
                                             deepLink: "soulacy://session/\(sessionID)", threadID: "activity-\(sessionID)", priority: priority)
        for target in targets {
            guard let transport = transports.transport(for: target) else { continue }
            let outcome = await transport.send(signal, to: target)
            if outcome != .delivered { log.warning("live activity \(event.rawValue) for device \(target.deviceID): \(outcome)") }
        }
    }
}


/// The APNs body of a Live Activity push, field for field what the original app's `SoulacyRunAttributes` widget decodes.
struct LiveActivityPayload: Encodable, Equatable {
    struct ContentState: Encodable, Equatable {
        var stage: String
        var detail: String
        var steps: Int
        var needsYou: Bool
        var callID: String?
        var updatedAt: Int
        enum CodingKeys: String, CodingKey { case stage, detail, steps, needsYou = "needs_you", callID = "call_id", updatedAt = "updated_at" }
    }
    struct Attributes: Encodable, Equatable {
        var runKey: String
        var agentID: String
        var agentName: String
        var sessionID: String
        var startedAt: Int
        enum CodingKeys: String, CodingKey { case runKey = "run_key", agentID = "agent_id", agentName = "agent_name", sessionID = "session_id", startedAt = "started_at" }
    }
    struct Alert: Encodable, Equatable {
        var title: String
        var body: String
    }
    struct APS: Encodable, Equatable {
        var timestamp: Int
        var event: String
        var contentState: ContentState
        var attributesType: String?
        var attributes: Attributes?
        var alert: Alert?
        var dismissalDate: Int?
        enum CodingKeys: String, CodingKey {
            case timestamp, event, alert, attributes
            case contentState = "content-state", attributesType = "attributes-type", dismissalDate = "dismissal-date"
        }
    }
    var aps: APS
}
