import ChannelAPI
import ChannelDelivery
import Foundation
import Synchronization

/// Carries messages people send to an agent's bot (`trigger: channel`) into runs: polls each channel with no
/// public address, takes each new message durably with the run it starts (`ChannelInboundStore`), and sends the
/// reply back to that chat through the durable hand-off, in the original's session `<channel>-<chat>`.
public struct ChannelInbound: Sendable {
    let pollers: [any InboundPoller]
    let store: any ChannelInboundStore
    let runs: AgentRuns
    let clock: any WallClock
    let log: Log
    /// How long one poll waits for messages (Telegram's long poll), and how long to wait after trouble.
    let pollTimeout: Duration
    let retryDelay: Duration
    /// This gateway process among the nodes on one database, and how long its hold on a channel's polling lasts
    /// (longer than a poll: renewed before each).
    let node: String
    let pollLease: Duration

    public init(pollers: [any InboundPoller], store: any ChannelInboundStore, runs: AgentRuns, clock: any WallClock, log: Log,
                pollTimeout: Duration = .seconds(25), retryDelay: Duration = .seconds(5), node: String = "local", pollLease: Duration = .seconds(60)) {
        self.node = node
        self.pollLease = pollLease
        self.pollers = pollers
        self.store = store
        self.runs = runs
        self.clock = clock
        self.log = log
        self.pollTimeout = pollTimeout
        self.retryDelay = retryDelay
    }

    public var isEmpty: Bool { pollers.isEmpty }

    /// Polls every channel until cancelled.
    public func run() async {
        await withDiscardingTaskGroup { group in
            for poller in pollers { group.addTask { await self.poll(poller) } }
        }
    }

    func poll(_ poller: any InboundPoller) async {
        // Messages taken before a stop whose runs never started.
        do {
            for taken in try await store.unstarted(channel: poller.channel) { await start(taken, agentID: poller.agentID) }
        } catch {
            log.error("inbound: \(poller.channel): cannot read the messages taken before the last stop: \(error)")
        }
        while !Task.isCancelled {
            do {
                // Another node polls this channel: stand by, and take over once its lease runs out.
                guard try await store.holdPoll(channel: poller.channel, node: node, lease: pollLease) else {
                    try? await Task.sleep(for: min(pollLease / 4, .seconds(15)))
                    continue
                }
                let cursor = try await store.cursor(channel: poller.channel)
                // A long poll is left to finish on its own at shutdown: what it brings is asked for again next time,
                // since only the cursor stored below confirms it.
                guard let batch = try await Self.abandoningOnCancel({ try await poller.poll(after: cursor, timeout: pollTimeout) }) else { return }
                let messages = batch.messages.map {
                    TakenMessage(channel: poller.channel, messageID: $0.id, runID: AgentRuns.newRunID(), replyTo: $0.replyTo, text: $0.text)
                }
                let taken = try await store.take(messages, channel: poller.channel, cursor: batch.cursor, now: clock.now())
                for message in taken { await start(message, agentID: poller.agentID) }
            } catch {
                if Task.isCancelled { return }
                log.warning("inbound: \(poller.channel): \(error)")
                try? await Task.sleep(for: retryDelay)
            }
        }
    }

    /// `body`'s result, or nil as soon as the calling task is cancelled. The body is cancelled too, but is not
    /// waited for: a blocking exchange it is in (an IMAP check on its worker thread) finishes unheard, while its
    /// waits between checks end at once rather than polling on after the gateway stopped.
    static func abandoningOnCancel<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) async throws -> T? {
        let slot = ContinuationSlot<T?>()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T?, any Error>) in
                slot.fill(continuation)
                if Task.isCancelled { slot.resume(with: .success(nil)); return }
                slot.attach(Task {
                    do { slot.resume(with: .success(try await body())) } catch { slot.resume(with: .failure(error)) }
                })
                // A cancellation that came before the task was attached found nothing to cancel.
                if Task.isCancelled { slot.cancelWork() }
            }
        } onCancel: {
            slot.resume(with: .success(nil))
            slot.cancelWork()
        }
    }

    static let busyRetryDelay: Duration = .seconds(1)

    /// One message's run: a conversation in the chat's session, whose reply goes back to that chat.
    func start(_ message: TakenMessage, agentID: String) async {
        let session = "\(message.channel)-\(message.replyTo)"
        // While as many conversations run as the gateway allows, the message waits (and the poll with it: no more
        // is taken meanwhile), rather than being dropped or starting one more process.
        var waited = false
        while !Task.isCancelled {
            do {
                try await runs.start(agentID: agentID, input: message.text, trigger: .channel,
                                     output: .to(RunDestination(channel: message.channel, to: message.replyTo)),
                                     chat: ChatContext(sessionID: session), runID: message.runID)
                log.info("inbound: a message on \(message.channel) started run \(message.runID) of \(agentID)")
                return
            } catch {
                guard case .busy = error else {
                    log.warning("inbound: a message on \(message.channel) could not start \(agentID): \(error)")
                    return
                }
                if !waited { log.info("inbound: a message on \(message.channel) waits: \(error)") }
                waited = true
                try? await Task.sleep(for: Self.busyRetryDelay)
            }
        }
    }
}

/// A continuation resumed once, by whichever comes first, and the task working towards it.
final class ContinuationSlot<T: Sendable>: Sendable {
    private let state = Mutex<CheckedContinuation<T, any Error>?>(nil)
    private let work = Mutex<Task<Void, Never>?>(nil)

    func fill(_ continuation: CheckedContinuation<T, any Error>) { state.withLock { $0 = continuation } }

    func resume(with result: Result<T, any Error>) { state.withLock { $0.take() }?.resume(with: result) }

    func attach(_ task: Task<Void, Never>) { work.withLock { $0 = task } }

    func cancelWork() { work.withLock { $0 }?.cancel() }
}
