import ChannelAPI
import ChannelDelivery
import ChannelTesting
import Crypto
import Foundation
import GatewayTestSupport
import JSON
import Outbox
import SQLite
import Testing
import Webhooks

/// The `webhook` channel against a receiver that verifies every delivery with the independent `standardwebhooks`
/// package (Standard Webhooks) and checks the original's `X-Soulacy-Signature: sha256=<hex>`.
@Suite("Webhook channel", .serialized)
struct WebhookChannelTests {
    static let output = Output(agentID: "brief", agentName: "Morning brief", sessionID: "sess-42", title: "Result from brief",
                               parts: ["Rain at 3 pm.", "", "Take an umbrella."], metadata: ["trigger": "schedule"])

    func channel(_ values: [String: ChannelSetting], clock: any WallClock = SystemWallClock()) throws -> any OutboundChannel {
        let made = try WebhookChannelFactory(clock: clock).make(ChannelSettings(kind: "webhook", values: values))
        #expect(made.count == 1)
        return try #require(made.first)
    }

    func send(_ id: String = "dlv_" + UUID().uuidString.replacingOccurrences(of: "-", with: ""), to: String = "", attempt: Int = 1) -> ChannelSend {
        ChannelSend(id: id, channel: "webhook", destination: to, output: Self.output, attempt: attempt, createdAt: Date(timeIntervalSince1970: 1_767_268_800))
    }

    func configError(_ values: [String: ChannelSetting]) -> ChannelConfigError? {
        do {
            _ = try WebhookChannelFactory().make(ChannelSettings(kind: "webhook", values: values))
            return nil
        } catch {
            return error
        }
    }

    func refusal(_ channel: any OutboundChannel, _ to: String) -> String? {
        do {
            try channel.validate(destination: to)
            return nil
        } catch {
            return error.description
        }
    }

    @Test("a delivery carries the event body, a Standard Webhooks signature the independent package verifies, and the original's sha256 signature")
    func verifiedDelivery() async throws {
        let secret = WebhookReceiverStandIn.makeSecret()
        let receiver = try await WebhookReceiverStandIn.start(secrets: [secret])
        defer { receiver.stop() }
        let webhook = try channel(["url": .string(receiver.url("/hooks/a")), "secret": .string(secret), "ca_file": .string(receiver.caFile),
                                   "headers": .map(["X-Team": .string("ops")])])
        let delivery = send()
        #expect(await webhook.attempt(delivery) == .delivered(remoteID: nil))
        let record = try #require(try await receiver.deliveries().first)
        #expect(record["verified"] == true)
        #expect(record["standard"]?["verified"] == true)
        #expect(record["standard"]?["signatures"] == 1)
        #expect(record["soulacy"]?["verified"] == true)
        #expect(record["status"] == 200)
        #expect(record["path"] == "/hooks/a")
        let headers = try #require(record["headers"])
        #expect(headers["webhook-id"]?.stringValue == delivery.id)
        #expect(headers["x-soulacy-timestamp"] == headers["webhook-timestamp"])
        #expect(headers["x-soulacy-signature"]?.stringValue?.hasPrefix("sha256=") == true)
        #expect(headers["x-soulacy-signature"]?.stringValue?.count == 7 + 64)
        #expect(headers["content-type"] == "application/json")
        #expect(headers["x-team"] == "ops")
        let now = Date().timeIntervalSince1970
        #expect(abs((Double(headers["webhook-timestamp"]?.stringValue ?? "") ?? 0) - now) < 30)
        let body = try JSONValue.parse(Array((record["body"]?.stringValue ?? "").utf8))
        #expect(body["id"]?.stringValue == delivery.id)
        #expect(body["type"] == "agent.output")
        #expect(body["agent_id"] == "brief")
        #expect(body["agent_name"] == "Morning brief")
        #expect(body["session_id"] == "sess-42")
        #expect(body["title"] == "Result from brief")
        #expect(body["parts"] == [["type": "text", "text": "Rain at 3 pm."], ["type": "text", "text": "Take an umbrella."]])
        #expect(body["text"] == "Rain at 3 pm.\n\nTake an umbrella.")
        #expect(body["metadata"] == ["trigger": "schedule"])
        let created = try #require(body["created_at"]?.stringValue)
        #expect(ISO8601DateFormatter.withFractionalSeconds.date(from: created) == Date(timeIntervalSince1970: 1_767_268_800))
    }

    /// The receiver snippet from WebhookChannel's documentation, as a reader would paste it.
    func verified(id: String, timestamp: String, signatures: String, body: [UInt8], secret: String) -> Bool {
        guard let t = Int64(timestamp), abs(Int64(Date().timeIntervalSince1970) - t) <= 300,
              let key = Data(base64Encoded: String(secret.dropFirst("whsec_".count))) else { return false }
        let mac = HMACSHA256.authenticate(Array("\(id).\(timestamp).".utf8) + body, key: Array(key))
        let expected = Array(("v1," + Data(mac).base64EncodedString()).utf8)
        return signatures.split(separator: " ").contains { SecureBytes.constantTimeEqual(Array($0.utf8), expected) }
    }

    @Test("the documented Swift receiver snippet verifies a real delivery, and refuses it under another key")
    func receiverSnippet() async throws {
        let secret = WebhookReceiverStandIn.makeSecret()
        let receiver = try await WebhookReceiverStandIn.start(secrets: [secret])
        defer { receiver.stop() }
        let webhook = try channel(["url": .string(receiver.url()), "secret": .string(secret), "ca_file": .string(receiver.caFile)])
        #expect(await webhook.attempt(send()) == .delivered(remoteID: nil))
        let record = try #require(try await receiver.deliveries().first)
        let h = try #require(record["headers"])
        let body = Array((record["body"]?.stringValue ?? "").utf8)
        let args = (h["webhook-id"]?.stringValue ?? "", h["webhook-timestamp"]?.stringValue ?? "", h["webhook-signature"]?.stringValue ?? "")
        #expect(verified(id: args.0, timestamp: args.1, signatures: args.2, body: body, secret: secret))
        #expect(!verified(id: args.0, timestamp: args.1, signatures: args.2, body: body, secret: WebhookReceiverStandIn.makeSecret()))
        #expect(!verified(id: args.0, timestamp: args.1, signatures: args.2, body: body + [0x20], secret: secret))
    }

    @Test("during a key rotation every delivery carries one signature per secret and verifies with either key alone")
    func rotation() async throws {
        let new = WebhookReceiverStandIn.makeSecret(), old = WebhookReceiverStandIn.makeSecret()
        // The receiver still knows only the old key for Standard Webhooks; its Soulacy check uses the first secret.
        let receiver = try await WebhookReceiverStandIn.start(secrets: [old], soulacySecret: new)
        defer { receiver.stop() }
        let webhook = try channel(["url": .string(receiver.url()), "secret": .string(new), "secrets": .list([.string(old)]),
                                   "ca_file": .string(receiver.caFile)])
        #expect(await webhook.attempt(send()) == .delivered(remoteID: nil))
        try await receiver.control("POST", "/control/secrets", json: ["secrets": .array([.string(new)])])
        #expect(await webhook.attempt(send()) == .delivered(remoteID: nil))
        let deliveries = try await receiver.deliveries()
        #expect(deliveries.count == 2)
        for record in deliveries {
            #expect(record["verified"] == true)
            #expect(record["standard"]?["verified"] == true)
            #expect(record["standard"]?["signatures"] == 2)
            #expect(record["soulacy"]?["verified"] == true)
        }
    }

    @Test("a secret without whsec_ is used as its raw bytes, for both signatures")
    func rawSecret() async throws {
        let secret = "plain-shared-secret-from-the-original"
        let receiver = try await WebhookReceiverStandIn.start(secrets: [secret])
        defer { receiver.stop() }
        let webhook = try channel(["url": .string(receiver.url()), "secret": .string(secret), "ca_file": .string(receiver.caFile)])
        #expect(await webhook.attempt(send()) == .delivered(remoteID: nil))
        let record = try #require(try await receiver.deliveries().first)
        #expect(record["standard"]?["verified"] == true)
        #expect(record["soulacy"]?["verified"] == true)
    }

    @Test("a 500 is retried with the same webhook-id and a fresh timestamp, and both attempts verify")
    func stableIDAcrossRetry() async throws {
        let secret = WebhookReceiverStandIn.makeSecret()
        let receiver = try await WebhookReceiverStandIn.start(secrets: [secret])
        defer { receiver.stop() }
        let clock = ManualClock(Date())
        let webhook = try channel(["url": .string(receiver.url()), "secret": .string(secret), "ca_file": .string(receiver.caFile)], clock: clock)
        try await receiver.script([["status": 500], ["status": 200]])
        let first = send()
        guard case .retry(_, let reason) = await webhook.attempt(first) else { Issue.record("a 500 is worth a retry"); return }
        #expect(reason.contains("answered 500"))
        clock.advance(by: .seconds(90))
        var second = first
        second.attempt = 2
        #expect(await webhook.attempt(second) == .delivered(remoteID: nil))
        let deliveries = try await receiver.deliveries()
        #expect(deliveries.count == 2)
        #expect(deliveries.map { $0["headers"]?["webhook-id"]?.stringValue } == [first.id, first.id])
        #expect(deliveries.map { $0["verified"] } == [true, true])
        #expect(deliveries[1]["duplicate"] == true)
        let stamps = deliveries.compactMap { Int($0["headers"]?["webhook-timestamp"]?.stringValue ?? "") }
        #expect(stamps.count == 2 && stamps[1] - stamps[0] == 90)
        #expect(deliveries[0]["body"] == deliveries[1]["body"])
    }

    /// `alerts` (and `audit` unless its secret is nil) on the receiver, each endpoint with its own url and secret.
    func endpoints(_ receiver: WebhookReceiverStandIn, alerts: String = "/alerts", alertsSecret: String, auditSecret: String?) -> [String: ChannelSetting] {
        var entries: [String: ChannelSetting] = ["alerts": .map(["url": .string(receiver.url(alerts)), "secret": .string(alertsSecret)])]
        if let auditSecret { entries["audit"] = .map(["url": .string(receiver.url("/audit")), "secret": .string(auditSecret)]) }
        return ["endpoints": .map(entries), "ca_file": .string(receiver.caFile)]
    }

    @Test("410 Gone rejects and disables the endpoint: the next send is rejected without a request, saying since when and how to re-enable it")
    func goneDisables() async throws {
        let secret = WebhookReceiverStandIn.makeSecret()
        let receiver = try await WebhookReceiverStandIn.start(secrets: [secret])
        defer { receiver.stop() }
        let config = endpoints(receiver, alertsSecret: secret, auditSecret: secret)
        let clock = ManualClock(Self.wholeSecondNow())
        let webhook = try channel(config, clock: clock)
        let gone = clock.now()
        try await receiver.script([["status": 410]])
        guard case .rejected(let reason) = await webhook.attempt(send(to: "alerts")) else { Issue.record("410 is final"); return }
        #expect(reason.contains("410 Gone"))
        #expect(reason.contains("the endpoint is now disabled"))
        clock.advance(by: .seconds(60))
        #expect(await webhook.attempt(send(to: "alerts")) == .rejected(reason: Self.disabledReason(since: gone)))
        #expect(try await receiver.deliveries().count == 1)
        // Other endpoints are untouched.
        #expect(await webhook.attempt(send(to: "audit")) == .delivered(remoteID: nil))
        #expect(try await receiver.deliveries().count == 2)
        // Attempted without the framework's store, the record lives with the channel: a new one knows nothing of it.
        #expect(await (try channel(config)).attempt(send(to: "alerts")) == .delivered(remoteID: nil))
    }

    /// The receiver refuses a timestamp over five minutes off, so manual clocks start at the real time.
    static func wholeSecondNow() -> Date { Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down)) }

    static func disabledReason(since: Date) -> String {
        "endpoint alerts is disabled since \(JSONValue.iso8601(since)) after it answered 410 Gone; to re-enable it, change its url, "
            + "secret, secrets or headers under channels.webhook.endpoints.alerts in the gateway config (a restart alone does not)"
    }

    /// The gateway's database as the channel lane has it, fresh, in a directory of its own.
    func endpointDatabase() throws -> (database: DatabasePool, path: String) {
        let path = TestGateway.makeTemporaryDirectory() + "/soulacy.db"
        let database = try DatabasePool(path: path, readerCount: 1)
        try database.migrate(ChannelOutboxSchema.migrations)
        return (database, path)
    }

    @Test("an endpoint disabled by 410 stays disabled for a new channel built from the same config over the same database, and is listed")
    func goneSurvivesRestart() async throws {
        let secret = WebhookReceiverStandIn.makeSecret()
        let receiver = try await WebhookReceiverStandIn.start(secrets: [secret])
        defer { receiver.stop() }
        let config = endpoints(receiver, alertsSecret: secret, auditSecret: secret)
        let clock = ManualClock(Self.wholeSecondNow())
        let (database, path) = try endpointDatabase()
        let gone = clock.now()
        try await receiver.script([["status": 410]])
        guard case .rejected = await (try channel(config, clock: clock)).attempt(send(to: "alerts"), endpoints: SQLiteEndpointStateStore(database: database)) else {
            Issue.record("410 is final"); return
        }
        database.close()

        // A restart: the database opened again, the channel built again from the same config.
        clock.advance(by: .seconds(60))
        let reopened = try DatabasePool(path: path, readerCount: 1)
        defer { reopened.close() }
        let store = SQLiteEndpointStateStore(database: reopened)
        let restarted = try #require(try channel(config, clock: clock) as? WebhookChannel)
        #expect(await restarted.attempt(send(to: "alerts"), endpoints: store) == .rejected(reason: Self.disabledReason(since: gone)))
        #expect(await restarted.attempt(send(to: "audit"), endpoints: store) == .delivered(remoteID: nil))
        #expect(try await receiver.deliveries().map { $0["path"]?.stringValue } == ["/alerts", "/audit"])

        // What an admin view reads: the endpoint, since when and what it answered; no secret in the row.
        let listed = try await restarted.disabledEndpoints(in: store)
        #expect(listed.map(\.display) == ["alerts"])
        #expect(listed.first?.since == gone)
        #expect(listed.first?.reason.contains("answered 410 Gone") == true)
        let record = try #require(try await store.disabled(channel: "webhook", endpoint: "endpoint:alerts"))
        #expect(record.fingerprint.count == 32)
        for text in [record.endpoint, record.fingerprint, record.display, record.reason] {
            #expect(!text.contains(secret) && !text.contains(String(secret.dropFirst(6))) && !text.contains(receiver.url("/alerts")))
        }
    }

    @Test("a changed url or secret in the endpoint's entry re-enables it; the other endpoint's record is untouched")
    func changedConfigReenables() async throws {
        let secret = WebhookReceiverStandIn.makeSecret(), rotated = WebhookReceiverStandIn.makeSecret()
        let receiver = try await WebhookReceiverStandIn.start(secrets: [secret])
        defer { receiver.stop() }
        func config(alerts: String, alertsSecret: String) -> [String: ChannelSetting] {
            endpoints(receiver, alerts: alerts, alertsSecret: alertsSecret, auditSecret: secret)
        }
        let (database, _) = try endpointDatabase()
        defer { database.close() }
        let store = SQLiteEndpointStateStore(database: database)
        let original = try channel(config(alerts: "/alerts", alertsSecret: secret))
        try await receiver.script([["status": 410], ["status": 410]])
        guard case .rejected = await original.attempt(send(to: "alerts"), endpoints: store),
              case .rejected = await original.attempt(send(to: "audit"), endpoints: store) else { Issue.record("410 is final"); return }
        guard case .rejected(let still) = await original.attempt(send(to: "alerts"), endpoints: store) else { Issue.record("still disabled"); return }
        #expect(still.contains("is disabled since"))

        // A new URL for alerts: sent again, and its record is gone.
        let moved = try channel(config(alerts: "/alerts-v2", alertsSecret: secret))
        #expect(await moved.attempt(send(to: "alerts"), endpoints: store) == .delivered(remoteID: nil))
        #expect(try await store.disabled(channel: "webhook", endpoint: "endpoint:alerts") == nil)
        // audit's entry did not change: it stays disabled.
        guard case .rejected(let audit) = await moved.attempt(send(to: "audit"), endpoints: store) else { Issue.record("audit stays disabled"); return }
        #expect(audit.contains("endpoint audit is disabled since"))

        // Disabled again under the new URL, then re-enabled by a new secret alone.
        try await receiver.script([["status": 410]])
        guard case .rejected = await moved.attempt(send(to: "alerts"), endpoints: store) else { Issue.record("410 is final"); return }
        guard case .rejected = await moved.attempt(send(to: "alerts"), endpoints: store) else { Issue.record("disabled again"); return }
        try await receiver.control("POST", "/control/secrets", json: ["secrets": .array([.string(rotated)]), "soulacy_secret": .string(rotated)])
        let rekeyed = try channel(config(alerts: "/alerts-v2", alertsSecret: rotated))
        #expect(await rekeyed.attempt(send(to: "alerts"), endpoints: store) == .delivered(remoteID: nil))
        let paths = try await receiver.deliveries().map { $0["path"]?.stringValue ?? "" }
        #expect(paths == ["/alerts", "/audit", "/alerts-v2", "/alerts-v2", "/alerts-v2"])
        #expect(try await receiver.deliveries().last?["verified"] == true)
    }

    @Test("through the channel lane, as the gateway sends: a 410 recorded in the database keeps the endpoint disabled after a restart")
    func goneThroughTheLane() async throws {
        let secret = WebhookReceiverStandIn.makeSecret()
        let receiver = try await WebhookReceiverStandIn.start(secrets: [secret])
        defer { receiver.stop() }
        let config = endpoints(receiver, alertsSecret: secret, auditSecret: nil)
        let clock = ManualClock(Self.wholeSecondNow())
        let (database, path) = try endpointDatabase()
        func sendThroughLane(_ database: DatabasePool) async throws -> ChannelOutboxEntry? {
            let outbox = SQLiteChannelOutbox(database: database)
            let webhook = try channel(config, clock: clock)
            let lane = ChannelLane(outbox: outbox, channels: OutboundChannelRegistry([webhook]), clock: clock,
                                   policy: RetryPolicy(), log: Log(minimum: .error), endpoints: SQLiteEndpointStateStore(database: database))
            let pending = PendingChannelSend(channel: "webhook", destination: "alerts", output: Self.output, subject: "owner")
            try await outbox.enqueue([pending], runID: nil, now: clock.now())
            for entry in try await outbox.claimDue(owner: "test", now: clock.now(), lease: 60, limit: 10) { await lane.attempt(entry, owner: "test") }
            return try await outbox.entry(id: pending.id)
        }
        let gone = clock.now()
        try await receiver.script([["status": 410]])
        let first = try #require(try await sendThroughLane(database))
        #expect(first.state == .rejected)
        #expect(first.lastReason?.contains("410 Gone") == true)
        database.close()
        clock.advance(by: .seconds(60))
        let reopened = try DatabasePool(path: path, readerCount: 1)
        defer { reopened.close() }
        let second = try #require(try await sendThroughLane(reopened))
        #expect(second.state == .rejected)
        #expect(second.lastReason == Self.disabledReason(since: gone))
        #expect(try await receiver.deliveries().count == 1)
    }

    @Test("429 with Retry-After and 503 are retried, Retry-After honoured; other 4xx are rejected with the answer's words")
    func statusMapping() async throws {
        let secret = WebhookReceiverStandIn.makeSecret()
        let receiver = try await WebhookReceiverStandIn.start(secrets: [secret])
        defer { receiver.stop() }
        let webhook = try channel(["url": .string(receiver.url()), "secret": .string(secret), "ca_file": .string(receiver.caFile)])
        try await receiver.script([["status": 429, "retry_after": 7], ["status": 503], ["status": 422], ["status": 301]])
        guard case .retry(let after, let reason) = await webhook.attempt(send()) else { Issue.record("429 is worth a retry"); return }
        #expect(after == .seconds(7))
        #expect(reason.contains("429"))
        guard case .retry(nil, _) = await webhook.attempt(send()) else { Issue.record("503 is worth a retry"); return }
        guard case .rejected(let refused) = await webhook.attempt(send()) else { Issue.record("422 is final"); return }
        #expect(refused.contains("answered 422"))
        #expect(refused.contains(#""status":422"#) || refused.contains(#""status": 422"#))
        guard case .rejected(let redirect) = await webhook.attempt(send()) else { Issue.record("a redirect is not followed"); return }
        #expect(redirect.contains("301"))
    }

    @Test("an endpoint that never answers is retried after the configured timeout")
    func hang() async throws {
        let secret = WebhookReceiverStandIn.makeSecret()
        let receiver = try await WebhookReceiverStandIn.start(secrets: [secret])
        defer { receiver.stop() }
        let webhook = try channel(["url": .string(receiver.url()), "secret": .string(secret), "ca_file": .string(receiver.caFile), "timeout_seconds": .number(1)])
        try await receiver.script([["hang": true]])
        let started = ContinuousClock.now
        guard case .retry(nil, let reason) = await webhook.attempt(send()) else { Issue.record("a timeout is worth a retry"); return }
        #expect(ContinuousClock.now - started < .seconds(30))
        #expect(reason.contains("could not reach webhook endpoint channels.webhook.url"))
    }

    @Test("`to` names an endpoint, or a URL only with allow_any_url (https, http for loopback), or is empty for the single url")
    func destinations() throws {
        let named: [String: ChannelSetting] = ["url": .string("https://hooks.example.com/in"), "endpoints": .map(["alerts": .map(["url": .string("https://a.example.com/x")]),
                                                                                                        "audit": .string("https://b.example.com/y")])]
        let strict = try channel(named)
        #expect(refusal(strict, "") == nil)
        #expect(refusal(strict, "alerts") == nil)
        #expect(refusal(strict, "audit") == nil)
        #expect(refusal(strict, "nope")?.contains("not a named endpoint (configured: alerts, audit)") == true)
        #expect(refusal(strict, "https://other.example.com/h")?.contains("allowed only when channels.webhook.allow_any_url is true") == true)
        var open = named
        open["allow_any_url"] = .bool(true)
        let any = try channel(open)
        #expect(refusal(any, "https://other.example.com/h") == nil)
        #expect(refusal(any, "http://127.0.0.1:8080/h") == nil)
        #expect(refusal(any, "http://localhost/h") == nil)
        #expect(refusal(any, "http://example.com/h")?.contains("plain http:// is allowed only for loopback hosts") == true)
        #expect(refusal(any, "https://169.254.169.254/latest")?.contains("link-local") == true)
        #expect(refusal(any, "https:///nohost") != nil)
        let onlyNamed = try channel(["endpoints": .map(["alerts": .string("https://a.example.com/x")])])
        #expect(refusal(onlyNamed, "")?.contains("name one of its endpoints: alerts") == true)
        // Whitespace around `to` (a YAML block scalar's newline, a non-breaking space) is not part of the name.
        for padded in [" alerts", "alerts\n", "\talerts ", "\u{A0}alerts\u{2028}"] { #expect(refusal(onlyNamed, padded) == nil, "\(padded)") }
        #expect(refusal(onlyNamed, " \n ")?.contains("name one of its endpoints: alerts") == true)
        #expect(refusal(onlyNamed, "alerts.")?.contains("not a named endpoint") == true)
    }

    @Test("a delivery id that cannot be a webhook-id (a dot, a space, a control or non-ASCII character, empty) fails without a request")
    func unusableIDs() async throws {
        let secret = WebhookReceiverStandIn.makeSecret()
        let receiver = try await WebhookReceiverStandIn.start(secrets: [secret])
        defer { receiver.stop() }
        let webhook = try channel(["url": .string(receiver.url("/hooks/a")), "secret": .string(secret), "ca_file": .string(receiver.caFile)])
        for id in ["dlv.1", "dlv 1", "dlv\t1", "dlvé", "", "dlv\u{7F}"] {
            guard case .failed(let reason) = await webhook.attempt(send(id)) else {
                Issue.record("\(id.debugDescription) was not refused")
                continue
            }
            #expect(reason.contains("cannot be a webhook-id"), "\(reason)")
        }
        #expect(try await receiver.deliveries().isEmpty)
        #expect(await webhook.attempt(send("dlv_~!#$%&'*+-/=?^_`{|}")) == .delivered(remoteID: nil))
    }

    @Test("an ad-hoc URL's token never reaches a reason, even when the receiver quotes the URL back")
    func adHocURLScrubbed() async throws {
        let secret = WebhookReceiverStandIn.makeSecret()
        let receiver = try await WebhookReceiverStandIn.start(secrets: [secret])
        defer { receiver.stop() }
        let webhook = try channel(["url": .string(receiver.url("/main")), "secret": .string(secret), "allow_any_url": .string("yes"), "ca_file": .string(receiver.caFile)])
        let token = "adhoc-token-\(UUID().uuidString.prefix(12))"
        let url = receiver.url("/hooks/adhoc-\(token)") + "?token=\(token)"
        for status in [400, 410] {
            try await receiver.script([["status": .number(Double(status)), "echo_url": true]])
            let outcome = await webhook.attempt(send(to: url))
            guard case .rejected(let reason) = outcome else { Issue.record("\(status): \(outcome)"); continue }
            #expect(reason.contains(String(status)) && reason.contains("no hook at"), "\(reason)")
            #expect(!reason.contains(token), "the reason holds the URL's token: \(reason)")
        }
    }

    @Test("a named endpoint gets its own path, secret and headers; an ad-hoc URL the block's secret and no headers")
    func namedAndAdHoc() async throws {
        let top = WebhookReceiverStandIn.makeSecret(), audit = WebhookReceiverStandIn.makeSecret()
        let receiver = try await WebhookReceiverStandIn.start(secrets: [top, audit], soulacySecret: audit)
        defer { receiver.stop() }
        let webhook = try channel(["url": .string(receiver.url("/main")), "secret": .string(top), "headers": .string("Authorization: Bearer main-endpoint-credential"),
                                   "allow_any_url": .string("yes"), "ca_file": .string(receiver.caFile),
                                   "endpoints": .map(["audit": .map(["url": .string(receiver.url("/audit")), "secret": .string(audit),
                                                                     "headers": .map(["X-Audit": .string("1")])])])])
        #expect(await webhook.attempt(send(to: "audit")) == .delivered(remoteID: nil))
        let record = try #require(try await receiver.deliveries().last)
        #expect(record["path"] == "/audit")
        #expect(record["verified"] == true)
        #expect(record["headers"]?["x-audit"] == "1")
        #expect(record["headers"]?["authorization"] == nil)
        try await receiver.control("POST", "/control/secrets", json: ["soulacy_secret": .string(top)])
        #expect(await webhook.attempt(send(to: receiver.url("/adhoc"))) == .delivered(remoteID: nil))
        let adHoc = try #require(try await receiver.deliveries().last)
        #expect(adHoc["path"] == "/adhoc")
        #expect(adHoc["verified"] == true)
        #expect(adHoc["headers"]?["authorization"] == nil)
        #expect(await webhook.attempt(send()) == .delivered(remoteID: nil))
        #expect(try await receiver.deliveries().last?["headers"]?["authorization"] == "Bearer main-endpoint-credential")
    }

    @Test("the original's template sends a signed plain-text body")
    func template() async throws {
        let secret = WebhookReceiverStandIn.makeSecret()
        let receiver = try await WebhookReceiverStandIn.start(secrets: [secret])
        defer { receiver.stop() }
        let webhook = try channel(["default_output_to": .string(receiver.url()), "secret": .string(secret), "ca_file": .string(receiver.caFile),
                                   "template": .string("{agent_id} says: {text} ({unknown})")])
        #expect(await webhook.attempt(send()) == .delivered(remoteID: nil))
        let record = try #require(try await receiver.deliveries().first)
        #expect(record["verified"] == true)
        #expect(record["body"] == "brief says: Rain at 3 pm.\n\nTake an umbrella. ({unknown})")
        #expect(record["headers"]?["content-type"] == "text/plain; charset=utf-8")
    }

    @Test("config errors name the key")
    func configErrors() {
        let secret = WebhookReceiverStandIn.makeSecret()
        #expect(configError([:])?.description.hasPrefix("channels.webhook.url: is required") == true)
        #expect(configError(["url": .string("ftp://x/y")])?.field == "channels.webhook.url")
        #expect(configError(["default_output_to": .string("not a url")])?.field == "channels.webhook.default_output_to")
        #expect(configError(["url": .string("https://x.example/h"), "method": .string("DELETE")])?.field == "channels.webhook.method")
        #expect(configError(["url": .string("https://x.example/h"), "timeout_seconds": .number(0)])?.field == "channels.webhook.timeout_seconds")
        #expect(configError(["url": .string("https://x.example/h"), "secret": .string("whsec_!!!not base64")])?.field == "channels.webhook.secret")
        #expect(configError(["url": .string("https://x.example/h"), "secret": .string("whsec_c2hvcnQ=")])?.problem.contains("at least 24") == true)
        #expect(configError(["url": .string("https://x.example/h"), "secrets": .list([.string(secret), .string("whsec_%%")])])?.field == "channels.webhook.secrets[1]")
        #expect(configError(["url": .string("https://x.example/h"), "allow_any_url": .string("maybe")])?.field == "channels.webhook.allow_any_url")
        #expect(configError(["url": .string("https://x.example/h"), "headers": .map(["webhook-signature": .string("v1,x")])])?.field == "channels.webhook.headers.webhook-signature")
        #expect(configError(["url": .string("https://x.example/h"), "headers": .string("no colon here")])?.field == "channels.webhook.headers")
        #expect(configError(["endpoints": .map(["a": .map(["secret": .string(secret)])])])?.description == "channels.webhook.endpoints.a.url: is required")
        #expect(configError(["endpoints": .map(["a b": .string("https://x.example/h")])])?.field == "channels.webhook.endpoints.a b")
        #expect(configError(["endpoints": .list([])])?.field == "channels.webhook.endpoints")
        #expect(configError(["endpoints": .map(["a": .map(["url": .string("https://x.example/h"), "secret": .string("whsec_")])])])?.field == "channels.webhook.endpoints.a.secret")
        #expect(configError(["url": .string("https://169.254.169.254/latest")])?.field == "channels.webhook.url")
    }

    @Test("no secret, key, credential header or URL token appears in any reason")
    func noSecretsInReasons() async throws {
        let secret = WebhookReceiverStandIn.makeSecret(), other = WebhookReceiverStandIn.makeSecret()
        let receiver = try await WebhookReceiverStandIn.start(secrets: [other])  // our signatures will not verify: 401
        defer { receiver.stop() }
        let pathToken = "path-token-0123456789abcdef", queryToken = "query-token-fedcba9876543210"
        let url = receiver.url("/hooks/\(pathToken)?token=\(queryToken)")
        var config: [String: ChannelSetting] = ["url": .string(url), "secret": .string(secret), "headers": .map(["Authorization": .string("Bearer header-credential-42")]),
                                                "ca_file": .string(receiver.caFile), "timeout_seconds": .number(30)]
        let webhook = try channel(config)
        // The short timeout only where the hang is: an answered request must not lose a race with a loaded machine.
        config["timeout_seconds"] = .number(1)
        let impatient = try channel(config)
        var reasons: [String] = []
        func collect(_ outcome: ChannelSendOutcome) {
            switch outcome {
            case .retry(_, let reason), .rejected(let reason), .failed(let reason): reasons.append(reason)
            case .delivered: Issue.record("expected a refusal")
            }
        }
        collect(await webhook.attempt(send()))  // 401 signature verification failed
        try await receiver.control("POST", "/control/secrets", json: ["secrets": .array([.string(secret)]), "soulacy_secret": .string(secret)])
        try await receiver.script([["status": 429, "retry_after": 1], ["status": 400], ["hang": true], ["status": 410]])
        for n in 0..<5 { collect(await (n == 2 ? impatient : webhook).attempt(send())) }
        receiver.stop()
        collect(await (try channel(config)).attempt(send()))  // connection refused
        #expect(reasons.count == 7)
        #expect(reasons[5].contains("is disabled since") && reasons[5].contains("after it answered 410 Gone"))
        #expect(reasons[0].contains("401") && reasons[0].contains("signature verification failed"))
        let key = Data(base64Encoded: String(secret.dropFirst(6)))!.base64EncodedString()
        for reason in reasons {
            for secretText in [secret, String(secret.dropFirst(6)), key, pathToken, queryToken, "header-credential-42", url] {
                #expect(!reason.contains(secretText), "\(reason)")
            }
        }
    }
}

extension ISO8601DateFormatter {
    static var withFractionalSeconds: ISO8601DateFormatter {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter
    }
}
