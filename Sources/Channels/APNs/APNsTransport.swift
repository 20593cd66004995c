import ChannelAPI
import Crypto
import Foundation
import HTTPClient
import JSON

/// Wakes iOS devices directly through APNs: ES256 provider token, HTTP/2 through libcurl,
/// one multiplexed connection per environment (sandbox and production).
public final class APNsTransport: WakeTransport, ReportsCredentialTimes {
    public let name = "apns"
    public let configuration: APNsConfiguration
    public let providerToken: APNsProviderToken
    private let production: HTTP2Client
    private let sandbox: HTTP2Client
    private let clock: any WallClock

    public init(configuration: APNsConfiguration, clock: any WallClock = SystemWallClock()) throws(APNsConfigurationError) {
        let key: SigningKey
        do {
            key = try SigningKey(pem: configuration.privateKeyPEM, algorithm: .es256)
        } catch {
            throw .unusableKey(configuration.keyFile, error.description)
        }
        self.configuration = configuration
        self.clock = clock
        providerToken = APNsProviderToken(teamID: configuration.teamID, keyID: configuration.keyID, key: key, clock: clock)
        let http = HTTP2ClientConfiguration(caFile: configuration.caFile)
        production = HTTP2Client(configuration: http)
        sandbox = HTTP2Client(configuration: http)
    }

    /// When the provider token in use was signed: APNs refuses one older than an hour.
    public var credentialTimes: [CredentialTime] {
        providerToken.lastIssuedAt.map { [CredentialTime(credential: "apns_provider_token", event: .issued, at: $0)] } ?? []
    }

    /// Connections opened so far, for both environments together.
    public var connectionsOpened: Int { production.connectionsOpened + sandbox.connectionsOpened }

    public func canWake(_ target: WakeTarget) -> Bool {
        target.platform == .ios && !target.pushToken.isEmpty
    }

    public func send(_ signal: WakeSignal, to target: WakeTarget) async -> WakeOutcome {
        await attempt(signal, to: target).outcome
    }

    /// One send with Apple's answer: its status, its `reason`, the `apns-id` it answered with, and the time it took.
    public func attempt(_ signal: WakeSignal, to target: WakeTarget) async -> WakeAttempt {
        let started = ContinuousClock.now
        // APNs answers every request with its apns-id (the one sent, or one it made up); no answer, no id.
        func answer(_ outcome: WakeOutcome, _ response: ClientResponse? = nil, reason: String? = nil, id: String? = nil) -> WakeAttempt {
            WakeAttempt(outcome: outcome, status: response?.status, reason: reason ?? (response == nil ? outcome.reason : nil),
                        serviceID: response.flatMap { $0.headers["apns-id"] ?? id }, latency: ContinuousClock.now - started)
        }
        let request: APNsRequest
        do {
            request = try APNsRequest(signal: signal, bundleID: target.bundleID, now: clock.now())
        } catch {
            return answer(.failed(reason: error.description))
        }
        // One renewal per send at most: a second rejection is reported, not looped on.
        for attempt in 0..<2 {
            let token: String
            do { token = try await providerToken.token() } catch { return answer(.failed(reason: "cannot sign the provider token: \(error)")) }
            let client = target.environment == .production ? production : sandbox
            let base = target.environment == .production ? configuration.productionURL : configuration.sandboxURL
            let response: ClientResponse
            do {
                response = try await client.send(ClientRequest(method: "POST", url: "\(base)/3/device/\(target.pushToken)",
                                                               headers: request.headers(providerToken: token), body: request.body))
            } catch {
                return answer(.retry(after: nil, reason: "APNs unreachable: \(error.description)"))
            }
            if response.status == 200 { return answer(.delivered, response, id: request.apnsID) }
            let given = Self.reason(in: response.body)
            let reason = APNsReason(rawValue: given ?? "HTTP \(response.status)")
            func refused(_ outcome: WakeOutcome) -> WakeAttempt { answer(outcome, response, reason: given, id: request.apnsID) }
            switch reason.action(status: response.status) {
            case .retry:
                return refused(.retry(after: RetryAfter.parse(response.headers["retry-after"]), reason: "APNs \(response.status) \(reason.rawValue)"))
            case .tokenRejected:
                return refused(.tokenRejected(reason: "APNs \(response.status) \(reason.rawValue)"))
            case .permanentFailure:
                return refused(.failed(reason: "APNs \(response.status) \(reason.rawValue)"))
            case .renewProviderToken:
                do {
                    if let wait = try await providerToken.rejected(token) {
                        return refused(.retry(after: wait, reason: "APNs \(response.status) \(reason.rawValue); provider token renewed recently"))
                    }
                } catch {
                    return refused(.failed(reason: "cannot sign the provider token: \(error)"))
                }
                if attempt == 1 { return refused(.retry(after: nil, reason: "APNs \(response.status) \(reason.rawValue) after renewal")) }
            }
        }
        return answer(.retry(after: nil, reason: "APNs refused the provider token"))
    }

    /// Apple's error body: `{"reason": "BadDeviceToken", "timestamp"?}`.
    static func reason(in body: [UInt8]) -> String? {
        struct ErrorBody: Decodable { let reason: String? }
        return (try? JSONCoding.decode(ErrorBody.self, from: Data(body)))?.reason
    }

}
