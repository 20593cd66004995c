import ChannelAPI
import Foundation
import HTTPClient
import JSON

/// `soulacy doctor`'s dry call for FCM: the OAuth 2.0 token exchange for the service account, then a
/// `validate_only` send ("Flag for testing the request without actually delivering the message",
/// https://firebase.google.com/docs/reference/fcm/rest/v1/projects.messages/send) to a registration token that
/// cannot exist. FCM checks the access token and the project before the registration token.
extension FCMTransport: ServiceProbe {
    /// Not a registration token any device was ever given.
    public static let impossibleRegistrationToken = "soulacy-doctor-probe-not-a-registration-token"

    public func probe() async -> ProbeResult {
        let account = "the service account \(configuration.clientEmail) (\(configuration.credentialsFile))"
        let client = HTTP2Client(configuration: HTTP2ClientConfiguration(caFile: configuration.caFile))
        let accessToken: String
        do {
            accessToken = try await accessTokens.token()
        } catch {
            let clock = await tokenEndpointClock(client: client)
            switch error {
            case .refused(let status, let detail):
                return .fail("Google's token endpoint refused \(account): \(status) \(detail)",
                             fix: "the key in SOULACY_MOBILE_FCM_CREDENTIALS_FILE was deleted or disabled, or this machine's clock is off: "
                                + "make a new key for \(configuration.clientEmail) in the Google Cloud console", clock: clock)
            case .unreachable(let why):
                return .fail("Google's token endpoint \(ProbeURL.host(of: configuration.tokenURI)) unreachable: \(why)",
                             fix: "check the network path to \(ProbeURL.host(of: configuration.tokenURI))", clock: clock)
            case .signing(let why):
                return .fail("cannot sign the OAuth assertion for \(account): \(why)",
                             fix: "private_key in SOULACY_MOBILE_FCM_CREDENTIALS_FILE must be the account's RSA key", clock: clock)
            }
        }
        struct ValidateOnly: Encodable {
            let validate_only: Bool
            let message: FCMMessage.Message
        }
        let message = FCMMessage.Message(token: Self.impossibleRegistrationToken, data: ["category": "SOULACY_DOCTOR"],
                                         android: .init(priority: "high", collapseKey: nil, ttl: "0s"))
        guard let body = try? WireJSON.encode(ValidateOnly(validate_only: true, message: message)) else {
            return .fail("the FCM probe's message could not be encoded")
        }
        let url = "\(configuration.baseURL)/v1/projects/\(configuration.projectID)/messages:send"
        let response: ClientResponse
        do {
            response = try await client.send(ClientRequest(method: "POST", url: url, headers: [
                ("authorization", "Bearer \(accessToken)"), ("content-type", "application/json; charset=utf-8"),
            ], body: body, timeout: .seconds(15)))
        } catch {
            return .fail("FCM \(ProbeURL.host(of: url)) unreachable: \(error.description)", fix: "check the network path to \(ProbeURL.host(of: url))")
                .redacting([accessToken])
        }
        let clock = ServiceClockReading(service: "FCM", dateHeader: response.headers["date"], credentialsAreTimeBound: true)
        let error = FCMError(status: response.status, body: response.body)
        let words = "\(response.status) \(error.code)\(error.message.isEmpty ? "" : " (\(error.message))")"
        let projectFix = "SOULACY_MOBILE_FCM_PROJECT_ID (or project_id in the credentials file) must be the Firebase project of "
            + "\(configuration.clientEmail), and the account needs the role Firebase Cloud Messaging API Admin"
        let result: ProbeResult
        switch response.status {
        case 200,
             400 where error.code == "INVALID_ARGUMENT",
             404 where error.code == "UNREGISTERED":
            result = .ok("FCM: the access token for \(configuration.clientEmail) is accepted and project \(configuration.projectID) takes sends "
                         + "(validate_only, to a made-up registration token: \(words); nothing delivered)", clock: clock)
        case 401:
            result = .fail("FCM refused the access token just issued for \(account): \(words)", fix: projectFix, clock: clock)
        case 403, 404:
            result = .fail("FCM refused sends for project \(configuration.projectID): \(words)", fix: projectFix, clock: clock)
        case 429, 500..<600:
            result = .warn("FCM answered \(words); try again later", clock: clock)
        default:
            result = .fail("FCM answered \(words) to a validate_only send", fix: projectFix, clock: clock)
        }
        return result.redacting([accessToken])
    }

    /// The token endpoint's clock, read with a request that carries nothing (its answer is an error, its Date is
    /// still Google's): when the exchange is refused, a skewed clock is the first suspect.
    private func tokenEndpointClock(client: HTTP2Client) async -> ServiceClockReading? {
        guard let response = try? await client.send(ClientRequest(method: "GET", url: configuration.tokenURI, timeout: .seconds(10))) else { return nil }
        return ServiceClockReading(service: "Google OAuth", dateHeader: response.headers["date"], credentialsAreTimeBound: true)
    }
}

/// The scheme, host and port of a URL, never its path or query.
enum ProbeURL {
    static func host(of url: String) -> String {
        guard let components = URLComponents(string: url), let host = components.host else { return "the configured URL" }
        return "\(components.scheme ?? "https")://\(host)\(components.port.map { ":\($0)" } ?? "")"
    }
}
