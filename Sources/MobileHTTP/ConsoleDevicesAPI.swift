import APIKit
import ChannelAPI
import Foundation
import Identity
import Mobile

/// `GET /console/devices` and `POST /console/devices/:id/test-push`.
extension ConsoleInboxAPI {
    /// The test push every phone gets: generic words, no line, nothing of any agent's.
    static func testSignal() -> WakeSignal {
        var signal = WakeSignal(category: WakeSignal.Category(rawValue: "SOULACY_TEST"), title: "Soulacy",
                                body: "A test notification from your gateway.", deepLink: "soulacy://inbox", threadID: "soulacy-test")
        // Its own apns-id (and the relay's push_id), so the service's answer names this push.
        signal.wakeID = UUID()
        return signal
    }

    @Sendable func listDevices(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let devices = caller.role == .admin ? try await store.devices.allDevices() : try await store.devices.list(subject: caller.subject)
        var views: [DeviceView] = []
        for device in devices {
            let wakes = try await store.timelines.wakeSummary(deviceID: device.id)
            views.append(DeviceView(device, lastAttempt: wakes.lastAttempt, lastRejection: wakes.lastRejection,
                                    liveActivityTokens: try await store.timelines.liveActivityTokenCount(deviceID: device.id)))
        }
        return .json(DeviceList(devices: views))
    }

    @Sendable func testPush(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        // Only one's own phone, whatever the role; another's and none are the same answer.
        guard let device = try await store.devices.device(id: request.parameter("id")), device.subject == caller.subject else {
            throw APIError(status: 404, code: "not_found", message: "device not found", field: "id")
        }
        guard device.notificationsEnabled else {
            throw APIError(status: 409, code: "notifications_off", message: "id: this phone has turned notifications off", field: "id")
        }
        guard let target = device.wakeTarget else {
            throw APIError(status: 409, code: "no_push_token", message: "id: this phone has no push token (it was never given one, or the service rejected it)",
                           field: "id")
        }
        guard let transport = transports.transport(for: target) else {
            throw APIError(status: 409, code: "no_transport", message: "id: no push service is configured for \(target.platform.rawValue) phones", field: "id")
        }
        // Sent now, not through the outbox: the answer is the service's own, whatever it is.
        let attempt = await transport.attempt(Self.testSignal(), to: target)
        try await store.timelines.recordTestPush(attempt, deviceID: device.id, token: target.pushToken, transport: transport.name, at: clock.now())
        store.consoleEvents.publish(.device(device.id), to: .subjectAndAdmins(device.subject))
        return .json(TestPushAnswer(outcome: attempt.outcome.label, transport: transport.name, status: attempt.status, reason: attempt.reason,
                                    serviceID: attempt.serviceID, latencyMS: attempt.latencyMilliseconds))
    }
}

extension ConsoleInboxAPI {
    struct DeviceList: Encodable {
        var devices: [DeviceView]
    }

    struct DeviceView: Encodable {
        struct LastWake: Encodable {
            var at: Timestamp
            var outcome, transport: String
            var status: Int?
        }

        var id, name, subject, platform, token: String
        var environment: Nullable<String>
        var tokenClearedReason: String?
        var notificationsEnabled: Bool
        var lastWake: Nullable<LastWake>
        var liveActivityTokens: Int
        var createdAt: Timestamp

        init(_ device: Device, lastAttempt: DeliveryEvent?, lastRejection: DeliveryEvent?, liveActivityTokens: Int) {
            id = device.id
            name = device.name
            subject = device.subject
            platform = device.platform.rawValue
            environment = Nullable(device.pushEnvironment?.rawValue)
            notificationsEnabled = device.notificationsEnabled
            self.liveActivityTokens = liveActivityTokens
            createdAt = Timestamp(device.createdAt)
            // Cleared: no token now, and a service rejected the one it had after the app last registered.
            if device.pushToken != nil {
                token = "present"
            } else if let rejection = lastRejection, rejection.at >= device.updatedAt {
                token = "cleared"
                tokenClearedReason = rejection.reason ?? "rejected by \(rejection.transport ?? "the push service")"
            } else {
                token = "none"
            }
            lastWake = Nullable(lastAttempt.map {
                LastWake(at: Timestamp($0.at), outcome: $0.outcome ?? "", transport: $0.transport ?? "", status: $0.status)
            })
        }

        enum CodingKeys: String, CodingKey {
            case id, name, subject, platform, environment, token
            case tokenClearedReason = "token_cleared_reason", notificationsEnabled = "notifications_enabled", lastWake = "last_wake"
            case liveActivityTokens = "live_activity_tokens", createdAt = "created_at"
        }
    }

    struct TestPushAnswer: Encodable {
        var outcome, transport: String
        var status: Int?
        var reason, serviceID: String?
        var latencyMS: Int64

        enum CodingKeys: String, CodingKey { case outcome, transport, status, reason, serviceID = "service_id", latencyMS = "latency_ms" }
    }
}
