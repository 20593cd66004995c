import APIKit
import Foundation
import Identity
import JSON
import Mobile
import MobileHTTP
import WebPush

/// Browser notifications (docs/console-api.md §"Browser notifications"): the console reads the gateway's VAPID
/// public key, subscribes the browser, and posts the subscription here; the browser is then a device of platform
/// `web` that gets the same generic wake-ups as phones. Both answer 404 `webpush_off` with SOULACY_WEBPUSH=off.
public struct WebPushAPI: Sendable {
    let transport: WebPushTransport?
    let mobile: MobileStorage

    public init(transport: WebPushTransport?, mobile: MobileStorage) {
        self.transport = transport
        self.mobile = mobile
    }

    public var routes: [Route] {
        [
            Route.answeredAtOnce(.GET, "/api/v1/console/webpush", role: .viewer, summary: "The gateway's VAPID public key browsers subscribe with", handler: publicKey),
            Route(.POST, "/api/v1/console/webpush/subscriptions", role: .viewer, summary: "Subscribe this browser as a device (Web Push)", handler: subscribe),
        ]
    }

    struct PublicKeyView: Encodable {
        var publicKey: String
        enum CodingKeys: String, CodingKey { case publicKey = "public_key" }
    }

    struct Subscribed: Encodable {
        var deviceID: String
        enum CodingKeys: String, CodingKey { case deviceID = "device_id" }
    }

    @Sendable func publicKey(_ request: HTTPRequest, caller: Principal) throws -> HTTPResponse {
        .json(PublicKeyView(publicKey: try enabled().publicKey))
    }

    /// `POST …/subscriptions`: `PushSubscription.toJSON()` and `name`. The same endpoint again updates its device.
    @Sendable func subscribe(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let transport = try enabled()
        let body = try JSONObject(body: request.body)
        let subscription = try WebPushSubscription(json: body)
        let name = try Self.name(try body.optionalString("name"))
        let deviceID = transport.deviceID(for: subscription)
        let registration = DeviceRegistration(browserID: deviceID, name: name, sealedSubscription: try transport.seal(subscription, deviceID: deviceID))
        try await MobileAPI.ensureRoom(forDevice: deviceID, subject: caller.subject, in: mobile.devices, field: "endpoint")
        return try await mobile.transactions.answer { session in
            do {
                _ = try mobile.devices.register(registration, subject: caller.subject, keyID: caller.keyID, in: session)
            } catch DeviceOwnershipError.ownedByAnotherSubject {
                throw APIError(status: 409, code: "subscription_owned_by_another_user",
                               message: "endpoint: this browser is subscribed for another person of this gateway; they remove it first (DELETE /api/v1/mobile/devices/:id)",
                               field: "endpoint")
            }
            return .json(Subscribed(deviceID: deviceID), status: 201)
        }
    }

    private func enabled() throws(APIError) -> WebPushTransport {
        guard let transport else {
            throw APIError(status: 404, code: "webpush_off", message: "browser notifications are off on this gateway (SOULACY_WEBPUSH=off)")
        }
        return transport
    }

    /// What the console calls the browser: trimmed, at most 200 bytes, no control characters; "Browser" when absent.
    static func name(_ text: String?) throws(APIError) -> String {
        guard let text else { return "Browser" }
        guard text.utf8.count <= DeviceRegistration.maximumNameLength else {
            throw APIError.invalidField("name", "at most \(DeviceRegistration.maximumNameLength) bytes of UTF-8, got \(text.utf8.count)")
        }
        guard !text.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw APIError.invalidField("name", "must not contain control characters")
        }
        let trimmed = SchemaWhitespace.trim(text)
        return trimmed.isEmpty ? "Browser" : trimmed
    }
}
