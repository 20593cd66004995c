import ChannelAPI
import Foundation
import Metrics

/// Fires each scheduled agent at its cron times in its time zone, and each one-shot once.
///
/// A fire while the agent's previous run is still going is skipped (runs never overlap). The last fire is
/// stored, so `run_missed_on_startup` can replay at most one fire missed while the gateway was down, and a
/// one-shot that fired never fires again, across restarts. When the agent files change, schedules that changed
/// are restarted and removed or disabled agents stop; output and prompt edits apply at the next fire.
public struct Scheduler: Sendable {
    let catalog: AgentCatalog
    let runs: AgentRuns
    let store: any RunStore
    let clock: any WallClock
    let log: Log
    var metrics: AgentMetrics? { runs.metrics }

    public init(catalog: AgentCatalog, runs: AgentRuns, store: any RunStore, clock: any WallClock, log: Log) {
        self.catalog = catalog
        self.runs = runs
        self.store = store
        self.clock = clock
        self.log = log
    }

    /// Whether the scheduler registers the agent: on, and cron with a cron, or one-shot with an instant.
    static func isScheduled(_ agent: AgentConfig) -> Bool {
        guard agent.isOn, let schedule = agent.schedule else { return false }
        switch agent.trigger {
        case .cron: return schedule.cron != nil
        case .oneshot: return schedule.at != nil
        default: return agent.surfaces.contains("schedule") && (schedule.cron != nil || schedule.at != nil)
        }
    }

    /// What restarts an agent's schedule when it changes (Soulacy: enabled, trigger, cron, at, timeout).
    static func signature(_ agent: AgentConfig) -> String {
        let s = agent.schedule
        return [agent.trigger.rawValue, s?.cron?.expression ?? "", s?.timeZone.identifier ?? "",
                s?.at.map { "\($0.timeIntervalSince1970)" } ?? "", s.map { "\($0.runMissedOnStartup)" } ?? ""].joined(separator: "|")
    }

    /// Runs until cancelled, following the agent files.
    public func run() async {
        var loops: [String: (signature: String, task: Task<Void, Never>)] = [:]
        var startup = true
        for await config in catalog.updates() {
            let wanted = Dictionary(config.agents.filter(Self.isScheduled).map { ($0.id, $0) }, uniquingKeysWith: { $1 })
            for (id, entry) in loops where wanted[id].map(Self.signature) != entry.signature {
                entry.task.cancel()
                loops[id] = nil
                if wanted[id] == nil { log.info("agent \(id): no longer scheduled") }
            }
            for (id, agent) in wanted where loops[id] == nil {
                let catchUp = startup
                loops[id] = (Self.signature(agent), Task { await self.loop(agent, startup: catchUp) })
            }
            startup = false
        }
        for entry in loops.values { entry.task.cancel() }
    }

    /// The next fire of each scheduled agent after `date`.
    public func nextFires(after date: Date) async -> [String: Date] {
        var result: [String: Date] = [:]
        for agent in catalog.current.agents where Self.isScheduled(agent) {
            guard let s = agent.schedule else { continue }
            if let cron = s.cron, let next = cron.nextFire(after: date, in: s.timeZone) {
                result[agent.id] = next
            } else if let at = s.at, (try? await store.lastFire(agentID: Self.oneShotKey(agent.id))).flatMap({ $0 }).map({ $0 < at }) ?? true {
                result[agent.id] = max(at, date)
            }
        }
        return result
    }

    /// An agent's next `count` fires after `date`, in its zone (a one-shot: its instant, until it has fired).
    public func nextFires(of agentID: String, count: Int, after date: Date) async -> [Date] {
        guard let agent = catalog.agent(id: agentID), Self.isScheduled(agent), let schedule = agent.schedule else { return [] }
        guard let cron = schedule.cron else { return await nextFires(after: date)[agentID].map { [$0] } ?? [] }
        var fires: [Date] = []
        var from = date
        while fires.count < count, let next = cron.nextFire(after: from, in: schedule.timeZone) {
            fires.append(next)
            from = next
        }
        return fires
    }

    static func oneShotKey(_ agentID: String) -> String { "oneshot:" + agentID }

    private func loop(_ agent: AgentConfig, startup: Bool) async {
        guard let schedule = agent.schedule else { return }
        if agent.trigger == .oneshot || schedule.cron == nil {
            await oneShot(agent, at: schedule.at)
            return
        }
        guard let cron = schedule.cron else { return }
        let start = clock.now()
        let last = (try? await store.lastFire(agentID: agent.id)) ?? nil
        if let last {
            var replayed = false
            if startup, schedule.runMissedOnStartup,
               let missed = Self.latestMissedFire(of: cron, in: schedule.timeZone, window: schedule.missedStartupWindow, lastFire: last, start: start) {
                log.info("agent \(agent.id): replaying the fire of \(missed.formatted(.iso8601)) missed while the gateway was down")
                await fire(agent.id, at: start, trigger: .cronMissed, scheduled: missed)
                replayed = true
            }
            if startup, let metrics {
                let missed = Self.firesBetween(cron, in: schedule.timeZone, after: last, upTo: start)
                metrics.fired(.missed, count: max(0, missed - (replayed ? 1 : 0)))
            }
        } else {
            // First start: this is the baseline from which missed fires are counted.
            try? await store.recordFire(agentID: agent.id, at: start)
        }
        var after = clock.now()
        while !Task.isCancelled {
            guard let next = cron.nextFire(after: after, in: schedule.timeZone) else {
                log.warning("agent \(agent.id): cron '\(cron)' never fires again")
                return
            }
            do { try await clock.sleep(until: next) } catch { return }
            if Task.isCancelled { return }
            await fire(agent.id, at: next, trigger: .cron, scheduled: next)
            after = next
        }
    }

    /// A one-shot fires at its instant, or at once if that has passed, and is recorded so no restart repeats it.
    private func oneShot(_ agent: AgentConfig, at: Date?) async {
        guard let at else { return }
        let key = Self.oneShotKey(agent.id)
        if let fired = (try? await store.lastFire(agentID: key)) ?? nil, fired >= at {
            return
        }
        if at > clock.now() {
            do { try await clock.sleep(until: at) } catch { return }
            if Task.isCancelled { return }
        }
        do { try await store.recordFire(agentID: key, at: at) } catch {
            log.error("agent \(agent.id): could not record the one-shot fire, so it is not run (it would repeat after a restart): \(error)")
            return
        }
        await fire(agent.id, at: at, trigger: .oneshot, scheduled: at)
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

    /// How many fires fell after `after` and not after `upTo` (counted up to 10,000: a minutely agent off for a
    /// month is "many", and a start must not spend its time counting).
    static func firesBetween(_ cron: CronSchedule, in timeZone: TimeZone, after: Date, upTo: Date) -> Int {
        var count = 0
        var from = after
        while count < 10_000, let next = cron.nextFire(after: from, in: timeZone), next <= upTo {
            count += 1
            from = next
        }
        return count
    }

    /// Reads the agent again at fire time: output, template and prompt edits apply to the next fire.
    /// `scheduled`: the instant the schedule named (a replay names the missed fire), which keys the fire across nodes.
    private func fire(_ agentID: String, at date: Date, trigger: RunTrigger, scheduled: Date) async {
        guard let agent = catalog.agent(id: agentID), agent.isOn else { return }
        if trigger != .oneshot {
            do { try await store.recordFire(agentID: agentID, at: date) } catch { log.error("agent \(agentID): could not record the fire: \(error)") }
        }
        do {
            try await runs.start(agentID: agentID, input: "", trigger: trigger, output: .scheduled, timeout: agent.schedule?.timeout,
                                 fire: ScheduledFire(agentID: agentID, at: scheduled))
            metrics?.fired(trigger == .cronMissed ? .replayed : .ran)
        } catch {
            switch error {
            case .alreadyFired:
                // Another gateway on the same database ran it: nothing was skipped.
                log.debug("agent \(agentID): \(error)")
            case .alreadyRunning:
                metrics?.fired(.skippedRunning)
                log.warning("agent \(agentID): scheduled fire skipped: \(error)")
            default:
                log.warning("agent \(agentID): scheduled fire skipped: \(error)")
            }
        }
    }
}
