import ChannelAPI
import Foundation
import HTTPClient

/// `soulacy doctor`'s dry call for APNs, which has no test endpoint: a background push, signed with a provider token
/// made just now, to a device token that cannot exist. APNs checks the provider token before the device token
/// (Apple's "Handling notification responses from APNs"), so the answer says which is wrong without anything
/// reaching a phone: 400 BadDeviceToken means the service is reachable and the key, key id and team id are
/// accepted; 403 InvalidProviderToken or ExpiredProviderToken means one of them (or the clock) is wrong.
public struct APNsProbe: ServiceProbe {
    /// Not hexadecimal, so never any phone's token (device tokens are 32 bytes in hex).
    public static let impossibleDeviceToken = "soulacy-doctor-probe-not-a-device-token"

    public let transport: APNsTransport
    /// The app's bundle id (the topic every wake-up of this gateway carries).
    public let topic: String

    public init(transport: APNsTransport, topic: String) {
        self.transport = transport
        self.topic = topic
    }

    public func probe() async -> ProbeResult {
        let configuration = transport.configuration
        var environments = [("production", configuration.productionURL)]
        if configuration.sandboxURL != configuration.productionURL { environments.append(("sandbox", configuration.sandboxURL)) }
        let token: String
        do { token = try await transport.providerToken.token() } catch {
            return .fail("cannot sign an APNs provider token with \(configuration.keyFile): \(error)",
                         fix: "SOULACY_MOBILE_APNS_PRIVATE_KEY_FILE must be the .p8 key Apple gave for key \(configuration.keyID)")
        }
        let client = HTTP2Client(configuration: HTTP2ClientConfiguration(caFile: configuration.caFile))
        var results: [ProbeResult] = []
        for (environment, base) in environments {
            results.append(await probe(environment: environment, base: base, token: token, client: client))
        }
        let worst = results.map(\.status).max() ?? .ok
        return ProbeResult(worst, results.map(\.message).joined(separator: "; "),
                           fix: results.compactMap(\.fix).first, clock: results.compactMap(\.clock).first).redacting([token])
    }

    private func probe(environment: String, base: String, token: String, client: HTTP2Client) async -> ProbeResult {
        let configuration = transport.configuration
        let keyFix = "check SOULACY_MOBILE_APNS_TEAM_ID (\(configuration.teamID)), SOULACY_MOBILE_APNS_KEY_ID (\(configuration.keyID)) "
            + "and SOULACY_MOBILE_APNS_PRIVATE_KEY_FILE: the .p8 must be that key id's, made in that team, with APNs enabled"
        let headers = [("authorization", "bearer \(token)"), ("apns-push-type", "background"), ("apns-topic", topic),
                       ("apns-priority", "5"), ("apns-expiration", "0"), ("content-type", "application/json")]
        let response: ClientResponse
        do {
            response = try await client.send(ClientRequest(method: "POST", url: "\(base)/3/device/\(Self.impossibleDeviceToken)", headers: headers,
                                                           body: Array(#"{"aps":{"content-available":1}}"#.utf8), timeout: .seconds(15)))
        } catch {
            return .fail("APNs \(environment) (\(base)) unreachable: \(error.description)",
                         fix: "check the network path to \(base) (outbound TCP 443 over HTTP/2)\(configuration.caFile.map { " and SOULACY_MOBILE_APNS_CA_FILE (\($0))" } ?? "")")
        }
        let clock = ServiceClockReading(service: "APNs \(environment)", dateHeader: response.headers["date"], credentialsAreTimeBound: true)
        let reason = APNsTransport.reason(in: response.body) ?? "HTTP \(response.status)"
        switch (response.status, reason) {
        case (400, "BadDeviceToken"), (400, "DeviceTokenNotForTopic"):
            return .ok("APNs \(environment): reachable, the provider token (team \(configuration.teamID), key \(configuration.keyID)) is accepted", clock: clock)
        case (400, "TopicDisallowed"):
            return .fail("APNs \(environment): the provider token is accepted, but pushes to \(topic) are not allowed for this team (400 TopicDisallowed)",
                         fix: "the APNs key must belong to the team that owns the app \(topic)", clock: clock)
        case (403, "ExpiredProviderToken"):
            return .fail("APNs \(environment): 403 ExpiredProviderToken for a token made just now: this machine's clock is off",
                         fix: "synchronise the clock (timedatectl set-ntp true, or chronyc makestep)", clock: clock)
        case (403, _):
            return .fail("APNs \(environment): the provider token is refused (403 \(reason)): the key, key id or team id is wrong", fix: keyFix, clock: clock)
        case (429, _), (500..<600, _):
            return .warn("APNs \(environment) answered \(response.status) \(reason); try again later", clock: clock)
        case (200, _):
            return .warn("APNs \(environment) accepted a push to a token that cannot exist; is SOULACY_MOBILE_APNS_PRODUCTION_URL/_SANDBOX_URL Apple's?", clock: clock)
        default:
            return .fail("APNs \(environment) answered \(response.status) \(reason)", fix: keyFix, clock: clock)
        }
    }
}
