import Foundation

/// A run in flight, as a surface that shows progress sees it (a Live Activity on the lock screen).
public struct ActivityRun: Sendable, Equatable {
    public var runID: String
    public var sessionID: String
    public var agentID: String
    public var agentName: String
    public var subject: String
    /// Cron, webhook, location or another agent: shown from its first tool call. Interactive runs only when they wait.
    public var background: Bool
    public var startedAt: Date

    public init(runID: String, sessionID: String, agentID: String, agentName: String, subject: String, background: Bool, startedAt: Date) {
        self.runID = runID
        self.sessionID = sessionID
        self.agentID = agentID
        self.agentName = agentName
        self.subject = subject
        self.background = background
        self.startedAt = startedAt
    }
}

/// Told how the runs in flight progress, so a channel can show them while they work (the mobile channel's Live
/// Activities). Agents and the routes call it; they never import the channel that implements it.
public protocol RunProgressObserver: Sendable {
    func runStarted(_ run: ActivityRun) async
    func toolCalled(sessionID: String, tool: String) async
    func waitingForApproval(_ run: ActivityRun, callID: String, tool: String) async
    func approvalAnswered(sessionID: String, approved: Bool) async
    func finished(sessionID: String, succeeded: Bool) async
}
