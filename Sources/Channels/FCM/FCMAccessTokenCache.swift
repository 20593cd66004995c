import ChannelAPI
import Crypto
import Foundation
import Synchronization
import HTTPClient
import JSON

public enum FCMTokenError: Error, Sendable, CustomStringConvertible {
    case unreachable(String)
    case refused(status: Int, detail: String)
    case signing(String)

    public var description: String {
        switch self {
        case .unreachable(let why): return "the token endpoint is unreachable: \(why)"
        case let .refused(status, detail): return "the token endpoint refused the assertion (\(status)): \(detail)"
        case .signing(let why): return "cannot sign the OAuth2 assertion: \(why)"
        }
    }
}

/// The OAuth2 access token FCM calls carry: minted from a signed RS256 assertion, reused until shortly before it
/// expires, refreshed once for every sender waiting at that moment.
public actor FCMAccessTokenCache {
    /// Refresh this long before the token's expiry.
    public static let refreshMargin: TimeInterval = 5 * 60

    private let configuration: FCMConfiguration
    private let key: SigningKey
    private let client: HTTP2Client
    private let clock: any WallClock
    private var current: (token: String, expiresAt: Date)?
    private var refreshing: Task<Result<(String, Date), FCMTokenError>, Never>?
    public private(set) var exchanges = 0
    /// When the token in use expires, readable without the actor (the metrics read it at scrape time).
    private let expiry = Mutex<Date?>(nil)

    /// When the access token in use expires (nil until the first exchange).
    public nonisolated var currentExpiry: Date? { expiry.withLock { $0 } }

    public init(configuration: FCMConfiguration, key: SigningKey, client: HTTP2Client, clock: any WallClock) {
        self.configuration = configuration
        self.key = key
        self.client = client
        self.clock = clock
    }

    struct Assertion: Encodable {
        let iss: String
        let scope: String
        let aud: String
        let iat: Int
        let exp: Int
    }

    public func token() async throws(FCMTokenError) -> String {
        if let current, clock.now().addingTimeInterval(Self.refreshMargin) < current.expiresAt { return current.token }
        return try await refresh()
    }

    /// FCM answered 401 to `token`: forget it so the next call mints a new one (once, however many senders saw it).
    public func invalidate(_ token: String) {
        if current?.token == token { current = nil }
    }

    private func refresh() async throws(FCMTokenError) -> String {
        if let refreshing {
            return try await refreshing.value.get().0
        }
        let task = Task { await self.exchange() }
        refreshing = task
        let result = await task.value
        refreshing = nil
        switch result {
        case .success(let (token, expiry)):
            current = (token, expiry)
            self.expiry.withLock { $0 = expiry }
            return token
        case .failure(let error):
            throw error
        }
    }

    private func exchange() async -> Result<(String, Date), FCMTokenError> {
        exchanges += 1
        let now = clock.now()
        let iat = Int(now.timeIntervalSince1970)
        let assertion: String
        do {
            assertion = try JSONWebToken.sign(claims: Assertion(iss: configuration.clientEmail, scope: FCMConfiguration.messagingScope,
                                                                aud: configuration.tokenURI, iat: iat, exp: iat + 3600),
                                              key: key, keyID: configuration.privateKeyID)
        } catch {
            return .failure(.signing("\(error)"))
        }
        let form = "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=\(assertion)"
        let response: ClientResponse
        do {
            response = try await client.send(ClientRequest(method: "POST", url: configuration.tokenURI,
                                                           headers: [("content-type", "application/x-www-form-urlencoded")], body: Array(form.utf8)))
        } catch {
            return .failure(.unreachable(error.description))
        }
        let answer = try? JSONCoding.decode(TokenAnswer.self, from: Data(response.body))
        guard response.status == 200, let token = answer?.access_token else {
            return .failure(.refused(status: response.status, detail: answer?.error ?? "no access_token"))
        }
        return .success((token, now.addingTimeInterval(answer?.expires_in ?? 3600)))
    }
}

/// Google's OAuth 2.0 token answer (RFC 6749 §5.1 and §5.2), the fields used.
struct TokenAnswer: Decodable {
    let access_token: String?
    let expires_in: Double?
    let error: String?
}
