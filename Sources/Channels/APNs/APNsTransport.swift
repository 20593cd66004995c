import ChannelAPI
import Crypto
import Foundation
import HTTPClient
import JSON

/// Wakes iOS devices directly through APNs: ES256 provider token, HTTP/2 through libcurl,
/// one multiplexed connection per environment (sandbox and production).
public final class APNsTransport: WakeTransport {
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

    /// Connections opened so far, for both environments together.
    public var connectionsOpened: Int { production.connectionsOpened + sandbox.connectionsOpened }

    public func canWake(_ target: WakeTarget) -> Bool {
        target.platform == .ios && !target.pushToken.isEmpty
    }

    public func send(_ signal: WakeSignal, to target: WakeTarget) async -> WakeOutcome {
        let request: APNsRequest
        do {
            request = try APNsRequest(signal: signal, bundleID: target.bundleID, now: clock.now())
        } catch {
            return .failed(reason: error.description)
        }
        // One renewal per send at most: a second rejection is reported, not looped on.
        for attempt in 0..<2 {
            let token: String
            do { token = try await providerToken.token() } catch { return .failed(reason: "cannot sign the provider token: \(error)") }
            let client = target.environment == .production ? production : sandbox
            let base = target.environment == .production ? configuration.productionURL : configuration.sandboxURL
            let response: ClientResponse
            do {
                response = try await client.send(ClientRequest(method: "POST", url: "\(base)/3/device/\(target.pushToken)",
                                                               headers: request.headers(providerToken: token), body: request.body))
            } catch {
                return .retry(after: nil, reason: "APNs unreachable: \(error.description)")
            }
            if response.status == 200 { return .delivered }
            let reason = APNsReason(rawValue: Self.reason(in: response.body) ?? "HTTP \(response.status)")
            switch reason.action(status: response.status) {
            case .retry:
                return .retry(after: RetryAfter.parse(response.headers["retry-after"]), reason: "APNs \(response.status) \(reason.rawValue)")
            case .tokenRejected:
                return .tokenRejected(reason: "APNs \(response.status) \(reason.rawValue)")
            case .permanentFailure:
                return .failed(reason: "APNs \(response.status) \(reason.rawValue)")
            case .renewProviderToken:
                do {
                    if let wait = try await providerToken.rejected(token) {
                        return .retry(after: wait, reason: "APNs \(response.status) \(reason.rawValue); provider token renewed recently")
                    }
                } catch {
                    return .failed(reason: "cannot sign the provider token: \(error)")
                }
                if attempt == 1 { return .retry(after: nil, reason: "APNs \(response.status) \(reason.rawValue) after renewal") }
            }
        }
        return .retry(after: nil, reason: "APNs refused the provider token")
    }

    /// Apple's error body: `{"reason": "BadDeviceToken", "timestamp"?}`.
    static func reason(in body: [UInt8]) -> String? {
        struct ErrorBody: Decodable { let reason: String? }
        return (try? JSONCoding.decode(ErrorBody.self, from: Data(body)))?.reason
    }

}
