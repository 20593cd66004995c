import ChannelAPI
import Foundation
import Mobile
import Storage

/// What every engine's `DeliveryTimelineStore` must read back of what its inbox and outbox wrote: a line's recipients
/// (sorted), a `skipped` step for a phone that cannot be woken, a `queued` step for a wake-up not tried yet that is
/// gone once its settle records the path (queued, attempt, sent, in order), read receipts by device, a device's latest
/// attempt and rejection, a test push that clears a rejected token (and not a newer one), Live Activity token counts,
/// lines kept apart, and nothing for no ids. Returns the broken rules (empty: conformant).
///
/// Each run needs a fresh database (the devices are fixed ids).
public struct DeliveryTimelineStoreConformance: Sendable {
    public let fixture: any StorageEngineFixture
    public let timeline: any DeliveryTimelineStore
    public let inbox: any Inbox
    public let devices: any DeviceRegistry
    public let outbox: any PushOutbox
    public let tokens: any LiveActivityTokenStore

    public init(fixture: any StorageEngineFixture, timeline: any DeliveryTimelineStore, inbox: any Inbox, devices: any DeviceRegistry,
                outbox: any PushOutbox, tokens: any LiveActivityTokenStore) {
        self.fixture = fixture
        self.timeline = timeline
        self.inbox = inbox
        self.devices = devices
        self.outbox = outbox
        self.tokens = tokens
    }

    public func run() async -> [ConformanceFailure] {
        var failures: [ConformanceFailure] = []
        let engine = fixture.engine
        func check(_ rule: String, _ holds: Bool, _ detail: @autoclosure () -> String) {
            if !holds { failures.append(ConformanceFailure(rule: rule, detail: "\(engine): \(detail())")) }
        }
        do {
            _ = try await devices.register(try InboxConformance.registration("alice-phone", token: InboxConformance.token, notifications: true), subject: "alice", keyID: nil)
            _ = try await devices.register(try InboxConformance.registration("alice-tablet", token: nil, notifications: true), subject: "alice", keyID: nil)
            let output = Output(agentID: "brief", agentName: "Brief", sessionID: "ses_timeline", parts: ["the line"])
            let line = try await inbox.insertDelivery(output, destination: .user("alice")).id
            let other = try await inbox.insertDelivery(output, destination: .device("alice-tablet")).id

            let empty = try await timeline.events(deliveryIDs: [])
            let noRecipients = try await timeline.recipients(deliveryIDs: [])
            check("no ids, nothing", empty.isEmpty && noRecipients.isEmpty, "events \(empty), recipients \(noRecipients)")
            let recipients = try await timeline.recipients(deliveryIDs: [line, other])
            check("recipients", recipients[line] == ["alice-phone", "alice-tablet"] && recipients[other] == ["alice-tablet"], "\(recipients)")

            let stored = try await timeline.events(deliveryIDs: [line])
            let skipped = stored[line]?.filter { $0.kind == .skipped } ?? []
            check("a phone that cannot be woken is skipped", skipped.map(\.deviceID) == ["alice-tablet"] && !(skipped.first?.reason ?? "").isEmpty,
                  "steps of the line: \(stored)")
            let waiting = try await timeline.waitingWakeUps(deliveryIDs: [line, other])
            check("a wake-up not tried yet is queued", waiting[line]?.map(\.deviceID) == ["alice-phone"] && waiting[line]?.first?.kind == .queued
                  && waiting[other] == nil, "waiting: \(waiting)")

            // The dispatcher's path: claimed, tried, settled with its steps.
            let claimed = try await outbox.claimDue(owner: "conformance", now: Date(), lease: 60, limit: 10)
            let entry = try requireValue(claimed.first { $0.deliveryID == line }, "the line's wake-up was not claimable")
            let at = Date()
            let attempt = WakeAttempt(outcome: .delivered, status: 200, serviceID: "apns-1", latency: .milliseconds(12))
            _ = try await outbox.settle(entry.id, claim: entry.claim, owner: "conformance", state: .sent, transport: "apns", outcome: "delivered", at: at,
                                        events: [.step(.queued, of: entry, transport: "apns", at: entry.createdAt),
                                                 .attempt(attempt, of: entry, transport: "apns", at: at), .step(.sent, of: entry, transport: "apns", at: at)])
            let settled = try await timeline.events(deliveryIDs: [line, other])
            let path = settled[line]?.filter { $0.deviceID == "alice-phone" }.map(\.kind) ?? []
            check("a settle's path in order", path == [.queued, .attempt, .sent], "alice-phone's steps: \(path)")
            let tried = settled[line]?.first { $0.kind == .attempt }
            check("an attempt's detail", tried?.status == 200 && tried?.serviceID == "apns-1" && tried?.latencyMilliseconds == 12 && tried?.transport == "apns"
                  && tried?.outcome == "delivered", "\(String(describing: tried))")
            let ownSteps = settled[line]?.allSatisfy { $0.deliveryID == line } == true && settled[other]?.allSatisfy { $0.deliveryID == other } == true
            check("lines kept apart", ownSteps && settled[other]?.map(\.kind) == [.skipped] && settled[other]?.first?.deviceID == "alice-tablet",
                  "the line's steps: \(String(describing: settled[line])); the other line's: \(String(describing: settled[other]))")
            let stillWaiting = try await timeline.waitingWakeUps(deliveryIDs: [line])
            check("a settled wake-up waits no more", stillWaiting[line] == nil, "\(stillWaiting)")

            _ = try await inbox.markRead(deliveryID: line, deviceID: "alice-phone", subject: "alice")
            let receipts = try await timeline.receipts(deliveryIDs: [line, other])
            check("receipts", receipts[line]?.keys.sorted() == ["alice-phone"] && receipts[other] == nil, "\(receipts)")

            let summary = try await timeline.wakeSummary(deviceID: "alice-phone")
            check("a device's latest attempt", summary.lastAttempt?.status == 200 && summary.lastRejection == nil, "\(summary)")
            try await timeline.recordTestPush(WakeAttempt(outcome: .tokenRejected(reason: "BadDeviceToken"), status: 400, reason: "BadDeviceToken"),
                                              deviceID: "alice-phone", token: InboxConformance.token, transport: "apns", at: Date())
            let rejected = try await timeline.wakeSummary(deviceID: "alice-phone")
            check("a test push rejected", rejected.lastAttempt?.status == 400 && rejected.lastRejection?.reason == "BadDeviceToken", "\(rejected)")
            let cleared = try await devices.device(id: "alice-phone")
            check("a rejected token is cleared", cleared?.pushToken == nil, "the token is \(String(describing: cleared?.pushToken))")
            // A rejection of an old token leaves the one the app registered since.
            let fresh = String(repeating: "cd", count: 32)
            _ = try await devices.register(try InboxConformance.registration("alice-phone", token: fresh, notifications: true), subject: "alice", keyID: nil)
            try await timeline.recordTestPush(WakeAttempt(outcome: .tokenRejected(reason: "Unregistered"), status: 410, reason: "Unregistered"),
                                              deviceID: "alice-phone", token: InboxConformance.token, transport: "apns", at: Date())
            let kept = try await devices.device(id: "alice-phone")
            check("a newer token stays", kept?.pushToken == fresh, "the token is \(String(describing: kept?.pushToken))")

            let none = try await timeline.liveActivityTokenCount(deviceID: "alice-phone")
            try await tokens.register(deviceID: "alice-phone", sessionID: "ses_a", agentID: "brief", token: InboxConformance.token, environment: .production, now: Date())
            try await tokens.register(deviceID: "alice-phone", sessionID: "ses_b", agentID: "brief", token: InboxConformance.token, environment: .production, now: Date())
            let two = try await timeline.liveActivityTokenCount(deviceID: "alice-phone")
            check("Live Activity tokens counted", none == 0 && two == 2, "before \(none), after two sessions \(two)")
        } catch {
            failures.append(ConformanceFailure(rule: "no errors", detail: "\(engine): \(error)"))
        }
        return failures
    }
}

private struct MissingValue: Error, CustomStringConvertible {
    let description: String
}

private func requireValue<T>(_ value: T?, _ what: String) throws -> T {
    guard let value else { throw MissingValue(description: what) }
    return value
}
