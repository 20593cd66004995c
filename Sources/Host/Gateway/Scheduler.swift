import ChannelAPI
import Foundation

/// Fires each scheduled agent at its cron times in its time zone.
///
/// A fire while the agent's previous run is still going is skipped (runs never overlap). The last fire is
/// stored, so `run_missed_on_startup` can replay at most one fire missed while the gateway was down.
public struct Scheduler: Sendable {
    let agents: [AgentConfig]
    let runs: AgentRuns
    let store: RunStore
    let clock: any WallClock
    let log: Log

    public init(config: SoulConfig, runs: AgentRuns, store: RunStore, clock: any WallClock, log: Log) {
        agents = config.agents.filter { $0.trigger == .cron && $0.schedule != nil }
        self.runs = runs
        self.store = store
        self.clock = clock
        self.log = log
    }

    /// Runs until cancelled.
    public func run() async {
        await withTaskGroup(of: Void.self) { group in
            for agent in agents {
                group.addTask { await self.loop(agent) }
            }
        }
    }

    /// The next fire of each scheduled agent after `date`.
    public func nextFires(after date: Date) -> [String: Date] {
        var result: [String: Date] = [:]
        for agent in agents {
            if let s = agent.schedule, let next = s.cron.nextFire(after: date, in: s.timeZone) { result[agent.id] = next }
        }
        return result
    }

    private func loop(_ agent: AgentConfig) async {
        guard let schedule = agent.schedule else { return }
        let start = clock.now()
        let last = (try? store.lastFire(agentID: agent.id)) ?? nil
        if let last {
            if schedule.runMissedOnStartup,
               let missed = Self.latestMissedFire(of: schedule.cron, in: schedule.timeZone, window: schedule.missedStartupWindow, lastFire: last, start: start) {
                log.info("agent \(agent.id): replaying the fire of \(missed.formatted(.iso8601)) missed while the gateway was down")
                await fire(agent, schedule: schedule, at: start, trigger: "cron-missed")
            }
        } else {
            // First start: this is the baseline from which missed fires are counted.
            try? store.recordFire(agentID: agent.id, at: start)
        }
        var after = clock.now()
        while !Task.isCancelled {
            guard let next = schedule.cron.nextFire(after: after, in: schedule.timeZone) else {
                log.warning("agent \(agent.id): cron '\(schedule.cron)' never fires again")
                return
            }
            do { try await clock.sleep(until: next) } catch { return }
            await fire(agent, schedule: schedule, at: next, trigger: "cron")
            after = next
        }
    }

    /// The latest fire after `lastFire` and not after `start` that lies inside the missed-startup window, if any:
    /// after a weekend off a daily 07:00 agent replays this morning's fire, not Saturday's.
    public static func latestMissedFire(of cron: CronSchedule, in timeZone: TimeZone, window: Duration, lastFire: Date, start: Date) -> Date? {
        let seconds = Double(window.components.seconds)
        var after = max(lastFire, start.addingTimeInterval(-seconds - 0.001))
        var latest: Date?
        while let next = cron.nextFire(after: after, in: timeZone), next <= start {
            latest = next
            after = next
        }
        return latest
    }

    private func fire(_ agent: AgentConfig, schedule: ScheduleConfig, at date: Date, trigger: String) async {
        do { try store.recordFire(agentID: agent.id, at: date) } catch { log.error("agent \(agent.id): could not record the fire: \(error)") }
        let destination = RunDestination(channel: schedule.output.channel, to: schedule.output.to,
                                         template: schedule.output.template, botName: schedule.output.botName)
        do {
            try await runs.start(agentID: agent.id, input: "", trigger: trigger, destination: destination, timeout: schedule.timeout)
        } catch {
            log.warning("agent \(agent.id): scheduled fire skipped: \(error)")
        }
    }
}
