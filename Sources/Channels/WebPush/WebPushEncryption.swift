import Crypto

/// RFC 8291 message encryption in RFC 8188's `aes128gcm` coding, one record: an ephemeral P-256 key agrees a secret
/// with the browser's key, HKDF-SHA256 mixes in its auth secret, and AES-128-GCM seals the plaintext followed by
/// the last-record delimiter 0x02 (and zero padding). Every primitive is libcrypto's.
public enum WebPushEncryption {
    /// The `rs` header field: the most one record (plaintext, delimiter, padding, tag) may be.
    public static let recordSize = 4096
    /// salt (16) ‖ rs (4) ‖ idlen (1) ‖ keyid (the 65-byte ephemeral public key).
    public static let headerSize = 86
    /// Push services must take 4096 bytes of body (RFC 8030 §7.2); what is left for the plaintext in one record.
    public static let maximumPlaintext = 4096 - headerSize - 16 - 1

    /// The body to POST, with a fresh ephemeral key and salt.
    public static func encrypt(_ plaintext: [UInt8], to subscription: WebPushSubscription, padding: Int = 0) throws(WebPushEncryptionError) -> [UInt8] {
        let ephemeral: P256PrivateKey
        do { ephemeral = try P256PrivateKey() } catch { throw .crypto(error.description) }
        return try encrypt(plaintext, to: subscription, senderKey: ephemeral, salt: SecureBytes.random(count: 16), padding: padding)
    }

    /// The same with a given key and salt (RFC 8291 Appendix A's example checks it byte for byte).
    public static func encrypt(_ plaintext: [UInt8], to subscription: WebPushSubscription, senderKey: P256PrivateKey, salt: [UInt8],
                               padding: Int = 0) throws(WebPushEncryptionError) -> [UInt8] {
        guard salt.count == 16, padding >= 0 else { throw .crypto("the salt is 16 bytes and padding is not negative") }
        guard plaintext.count + padding <= maximumPlaintext else { throw .tooLarge(plaintext.count) }
        let senderPublic: [UInt8], ecdhSecret: [UInt8]
        do throws(P256Error) {
            senderPublic = try senderKey.publicKey()
            ecdhSecret = try senderKey.sharedSecret(with: subscription.p256dh)
        } catch .notAPoint {
            throw .badSubscriptionKey
        } catch {
            throw .crypto(error.description)
        }
        return try seal(plaintext, padding: padding, ecdhSecret: ecdhSecret, uaPublic: subscription.p256dh, asPublic: senderPublic,
                        auth: subscription.auth, salt: salt)
    }

    private static func seal(_ plaintext: [UInt8], padding: Int, ecdhSecret: [UInt8], uaPublic: [UInt8], asPublic: [UInt8], auth: [UInt8],
                             salt: [UInt8]) throws(WebPushEncryptionError) -> [UInt8] {
        do throws(SealError) {
            // RFC 8291 §3.4: IKM = HKDF(salt = auth_secret, ikm = ecdh_secret, info = "WebPush: info" 0x00 ‖ ua_public ‖ as_public, 32).
            let keyInfo = Array("WebPush: info".utf8) + [0] + uaPublic + asPublic
            let ikm = try HKDF.deriveKey(secret: ecdhSecret, salt: auth, info: keyInfo, length: 32)
            // RFC 8188 §2.2-2.3: the content encryption key and the nonce, from the message's own salt.
            let cek = try HKDF.deriveKey(secret: ikm, salt: salt, info: Array("Content-Encoding: aes128gcm".utf8) + [0], length: 16)
            let nonce = try HKDF.deriveKey(secret: ikm, salt: salt, info: Array("Content-Encoding: nonce".utf8) + [0], length: 12)
            // One record, so its sequence number is 0 and the nonce is used as derived; 0x02 marks the last record.
            let record = plaintext + [0x02] + [UInt8](repeating: 0, count: padding)
            let sealed = try AES128GCM.seal(record, key: cek, nonce: nonce)
            let rs = UInt32(recordSize)
            let header = salt + [UInt8(rs >> 24), UInt8((rs >> 16) & 0xFF), UInt8((rs >> 8) & 0xFF), UInt8(rs & 0xFF)] + [UInt8(asPublic.count)] + asPublic
            return header + sealed
        } catch {
            throw .crypto(error.description)
        }
    }
}

public enum WebPushEncryptionError: Error, Sendable, Equatable, CustomStringConvertible {
    case tooLarge(Int)
    /// The browser's p256dh is no key to agree with (checked at subscription; kept for a stored one).
    case badSubscriptionKey
    case crypto(String)

    public var description: String {
        switch self {
        case .tooLarge(let n): return "the Web Push message is \(n) bytes; one record carries at most \(WebPushEncryption.maximumPlaintext)"
        case .badSubscriptionKey: return "the subscription's p256dh is not a P-256 public key"
        case .crypto(let why): return "cannot encrypt the Web Push message: \(why)"
        }
    }
}
