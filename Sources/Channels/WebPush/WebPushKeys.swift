import Crypto
import Foundation

/// The gateway's own Web Push keys, kept in the data directory beside its other secrets (owner-only files, never
/// logged): the VAPID key (ES256, RFC 8292) browsers subscribe to, made on first start and kept, since every
/// subscription is bound to its public half; and the key that seals each browser's subscription in the database,
/// so the database alone gives no endpoint or auth secret back.
public struct WebPushKeys: Sendable {
    public static let vapidKeyFileName = "webpush-vapid-key.pem"
    public static let subscriptionKeyFileName = "webpush-subscriptions.key"

    /// Signs the VAPID tokens.
    public let signingKey: SigningKey
    /// The VAPID public key as the uncompressed point (65 bytes): the browser's `applicationServerKey`, and `k=`.
    public let publicKey: [UInt8]
    /// AES-256-GCM key for the sealed subscriptions.
    let subscriptionKey: [UInt8]

    public var publicKeyBase64URL: String { Base64URL.encode(publicKey) }

    init(signingKey: SigningKey, publicKey: [UInt8], subscriptionKey: [UInt8]) {
        self.signingKey = signingKey
        self.publicKey = publicKey
        self.subscriptionKey = subscriptionKey
    }

    /// Reads both keys from `dataDirectory`, making each on first use. An existing VAPID key that cannot be read
    /// is an error to fix, never silently replaced: a new one would orphan every browser's subscription.
    public static func loadOrCreate(dataDirectory: String) throws(WebPushConfigurationError) -> WebPushKeys {
        let vapidPath = dataDirectory + "/" + vapidKeyFileName
        let pem: String
        if FileManager.default.fileExists(atPath: vapidPath) {
            do { pem = try SecretFile.read(vapidPath, variable: "the Web Push VAPID key") } catch { throw .keyFile(vapidPath, error.description) }
        } else {
            do {
                pem = try P256PrivateKey().pemRepresentation()
                try SecretFile.write(pem, to: vapidPath)
            } catch {
                throw .keyFile(vapidPath, "cannot make the VAPID key: \(error)")
            }
        }
        let publicKey: [UInt8]
        let signingKey: SigningKey
        do {
            publicKey = try P256PrivateKey(pem: pem).publicKey()
            signingKey = try SigningKey(pem: pem, algorithm: .es256)
        } catch {
            throw .keyFile(vapidPath, "not a P-256 private key in PEM; restore it from a backup, or remove it to make a new one (every browser then subscribes again)")
        }
        let subscriptionPath = dataDirectory + "/" + subscriptionKeyFileName
        let subscriptionKey: [UInt8]
        do { subscriptionKey = try SecretFile.key(at: subscriptionPath, variable: "the Web Push subscription key") } catch {
            throw .keyFile(subscriptionPath, error.description)
        }
        return WebPushKeys(signingKey: signingKey, publicKey: publicKey, subscriptionKey: subscriptionKey)
    }
}
