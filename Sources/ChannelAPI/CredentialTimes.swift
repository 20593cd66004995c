import Foundation

/// When a credential a transport holds was made or runs out: what an operator alerts on before pushes start failing
/// (an APNs provider token that stopped being renewed, an FCM access token about to expire). The gateway exports each
/// as a Unix-timestamp gauge labelled by `credential`, a fixed name, never a key id or a token.
public struct CredentialTime: Sendable, Equatable {
    public enum Event: String, Sendable {
        /// When the credential in use was made.
        case issued
        /// When the credential in use stops being accepted.
        case expires
    }

    /// A fixed name per kind of credential, such as `apns_provider_token`.
    public var credential: String
    public var event: Event
    public var at: Date

    public init(credential: String, event: Event, at: Date) {
        self.credential = credential
        self.event = event
        self.at = at
    }
}

/// A transport (or channel) that holds a credential with a lifetime. Read at scrape time from any thread: quick, no I/O.
public protocol ReportsCredentialTimes: Sendable {
    /// The credentials in use now; empty until the first one is made.
    var credentialTimes: [CredentialTime] { get }
}
