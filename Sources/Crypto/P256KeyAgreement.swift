internal import COpenSSL
import Foundation

public enum P256Error: Error, Sendable, Equatable, CustomStringConvertible {
    /// The bytes are not an uncompressed point (0x04 ‖ X ‖ Y) on the P-256 curve.
    case notAPoint
    case unreadablePEM
    case crypto(String)

    public var description: String {
        switch self {
        case .notAPoint: return "not an uncompressed P-256 public key (65 bytes, 0x04 ‖ X ‖ Y, a point on the curve)"
        case .unreadablePEM: return "the key is not a PEM P-256 private key OpenSSL can read"
        case .crypto(let what): return "OpenSSL failed: \(what)"
        }
    }
}

/// An ECDH P-256 private key held by OpenSSL: made fresh (an ephemeral key per Web Push message, the gateway's VAPID
/// key on first start) or read from PEM; gives its public half as the uncompressed point and agrees a shared secret
/// with a peer's point (RFC 8291's `ecdh_secret`).
public final class P256PrivateKey: @unchecked Sendable {
    // Read-only after init; OpenSSL allows concurrent use of one key with a context per call.
    private let key: OpaquePointer

    /// A fresh random key.
    public init() throws(P256Error) {
        guard let ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_EC, nil) else { throw .crypto("EC key context") }
        defer { EVP_PKEY_CTX_free(ctx) }
        var generated: OpaquePointer?
        guard EVP_PKEY_keygen_init(ctx) == 1, EVP_PKEY_CTX_set_ec_paramgen_curve_nid(ctx, NID_X9_62_prime256v1) == 1,
              EVP_PKEY_keygen(ctx, &generated) == 1, let made = generated else { throw .crypto("EC key generation") }
        key = made
    }

    /// A key written as PEM (PKCS#8 or SEC1); anything but a P-256 private key is refused.
    public init(pem: String) throws(P256Error) {
        guard let pkey = PEMPrivateKey.read(pem) else { throw .unreadablePEM }
        guard EVP_PKEY_get_base_id(pkey) == EVP_PKEY_EC, EVP_PKEY_get_bits(pkey) == 256 else {
            EVP_PKEY_free(pkey)
            throw .unreadablePEM
        }
        key = pkey
    }

    deinit { EVP_PKEY_free(key) }

    /// PKCS#8 PEM of the private key (what `SigningKey(pem:algorithm: .es256)` reads), for a file only its owner reads.
    public func pemRepresentation() throws(P256Error) -> String {
        guard let bio = BIO_new(BIO_s_mem()) else { throw .crypto("BIO") }
        defer { BIO_free(bio) }
        guard PEM_write_bio_PrivateKey(bio, key, nil, nil, 0, nil, nil) == 1 else { throw .crypto("PEM write") }
        var pointer: UnsafeMutablePointer<CChar>?
        let count = BIO_ctrl(bio, BIO_CTRL_INFO, 0, &pointer)
        guard count > 0, let pointer else { throw .crypto("PEM write") }
        return String(decoding: UnsafeRawBufferPointer(start: pointer, count: count), as: UTF8.self)
    }

    /// The public key as the uncompressed point 0x04 ‖ X ‖ Y (65 bytes), as Web Push and VAPID carry it.
    public func publicKey() throws(P256Error) -> [UInt8] {
        var encoded: UnsafeMutablePointer<UInt8>?
        let length = EVP_PKEY_get1_encoded_public_key(key, &encoded)
        guard length > 0, let encoded else { throw .crypto("public key encoding") }
        defer { CRYPTO_free(encoded, #file, #line) }
        let point = Array(UnsafeBufferPointer(start: encoded, count: length))
        guard point.count == 65, point[0] == 0x04 else { throw .crypto("the public key is not an uncompressed point") }
        return point
    }

    /// ECDH with a peer's uncompressed point: the 32-byte X coordinate of the shared point.
    public func sharedSecret(with peerPoint: [UInt8]) throws(P256Error) -> [UInt8] {
        let peer = try P256PublicKey.load(peerPoint)
        defer { EVP_PKEY_free(peer) }
        guard let ctx = EVP_PKEY_CTX_new(key, nil) else { throw .crypto("derive context") }
        defer { EVP_PKEY_CTX_free(ctx) }
        var length = 0
        guard EVP_PKEY_derive_init(ctx) == 1, EVP_PKEY_derive_set_peer(ctx, peer) == 1, EVP_PKEY_derive(ctx, nil, &length) == 1, length > 0 else {
            ERR_clear_error()
            throw .crypto("ECDH")
        }
        var secret = [UInt8](repeating: 0, count: length)
        guard EVP_PKEY_derive(ctx, &secret, &length) == 1 else {
            ERR_clear_error()
            throw .crypto("ECDH")
        }
        return Array(secret.prefix(length))
    }
}

/// P-256 public keys given as uncompressed points (a browser's `p256dh`).
public enum P256PublicKey {
    /// Whether `point` is 0x04 ‖ X ‖ Y of a point on P-256 (OpenSSL decodes it and checks the curve equation).
    public static func isValid(_ point: [UInt8]) -> Bool {
        guard let key = try? load(point) else { return false }
        EVP_PKEY_free(key)
        return true
    }

    /// An EVP_PKEY for the point; the caller frees it.
    static func load(_ point: [UInt8]) throws(P256Error) -> OpaquePointer {
        guard point.count == 65, point[0] == 0x04 else { throw .notAPoint }
        guard let ctx = EVP_PKEY_CTX_new_from_name(nil, "EC", nil) else { throw .crypto("EC context") }
        defer { EVP_PKEY_CTX_free(ctx) }
        guard EVP_PKEY_fromdata_init(ctx) == 1 else { throw .crypto("EC fromdata") }
        // OSSL_PARAM keeps the pointers it is given, so every one stays lent until EVP_PKEY_fromdata has returned.
        var made: OpaquePointer?
        let status: Int32 = "group".withCString { groupKey in
            "prime256v1".withCString { groupName in
                "pub".withCString { pubKey in
                    point.withUnsafeBytes { bytes in
                        var params = [
                            OSSL_PARAM_construct_utf8_string(groupKey, UnsafeMutablePointer(mutating: groupName), 0),
                            OSSL_PARAM_construct_octet_string(pubKey, UnsafeMutableRawPointer(mutating: bytes.baseAddress), bytes.count),
                            OSSL_PARAM_construct_end(),
                        ]
                        // EVP_PKEY_PUBLIC_KEY: the domain parameters and the public key.
                        return params.withUnsafeMutableBufferPointer { EVP_PKEY_fromdata(ctx, &made, Self.publicKeySelection, $0.baseAddress) }
                    }
                }
            }
        }
        guard status == 1, let key = made else {
            ERR_clear_error()
            throw .notAPoint
        }
        // fromdata decodes the point; the public check confirms it lies on the curve and is not the identity.
        guard let check = EVP_PKEY_CTX_new(key, nil) else {
            EVP_PKEY_free(key)
            throw .crypto("check context")
        }
        defer { EVP_PKEY_CTX_free(check) }
        guard EVP_PKEY_public_check(check) == 1 else {
            ERR_clear_error()
            EVP_PKEY_free(key)
            throw .notAPoint
        }
        return key
    }

    /// OSSL_KEYMGMT_SELECT_PUBLIC_KEY | OSSL_KEYMGMT_SELECT_ALL_PARAMETERS, which is OpenSSL's `EVP_PKEY_PUBLIC_KEY`
    /// (a macro Swift does not import).
    static let publicKeySelection = Int32(OSSL_KEYMGMT_SELECT_PUBLIC_KEY | OSSL_KEYMGMT_SELECT_ALL_PARAMETERS)
}

/// AES-128-GCM with a given key and nonce and no associated data, as RFC 8188's `aes128gcm` records use it.
public enum AES128GCM {
    /// ciphertext ‖ 16-byte tag.
    public static func seal(_ plaintext: [UInt8], key: [UInt8], nonce: [UInt8]) throws(SealError) -> [UInt8] {
        guard key.count == 16, nonce.count == 12 else { throw .crypto("AES-128-GCM takes a 16-byte key and a 12-byte nonce") }
        guard let ctx = EVP_CIPHER_CTX_new() else { throw .crypto("cipher context") }
        defer { EVP_CIPHER_CTX_free(ctx) }
        var out = [UInt8](repeating: 0, count: plaintext.count + 16)
        var length: Int32 = 0
        guard EVP_EncryptInit_ex(ctx, EVP_aes_128_gcm(), nil, key, nonce) == 1,
              EVP_EncryptUpdate(ctx, &out, &length, plaintext, Int32(plaintext.count)) == 1 else { throw .crypto("encrypt") }
        var total = Int(length)
        let finalOK = out.withUnsafeMutableBufferPointer { EVP_EncryptFinal_ex(ctx, $0.baseAddress! + total, &length) }
        guard finalOK == 1 else { throw .crypto("encrypt final") }
        total += Int(length)
        var tag = [UInt8](repeating: 0, count: 16)
        guard EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, 16, &tag) == 1 else { throw .crypto("tag") }
        return Array(out[0..<total]) + tag
    }

    /// The plaintext of ciphertext ‖ tag; `authenticationFailed` when it was not sealed with this key and nonce.
    public static func open(_ sealed: [UInt8], key: [UInt8], nonce: [UInt8]) throws(SealError) -> [UInt8] {
        guard key.count == 16, nonce.count == 12, sealed.count >= 16 else { throw .malformed }
        let body = Array(sealed[..<(sealed.count - 16)])
        var tag = Array(sealed[(sealed.count - 16)...])
        guard let ctx = EVP_CIPHER_CTX_new() else { throw .crypto("cipher context") }
        defer { EVP_CIPHER_CTX_free(ctx) }
        var out = [UInt8](repeating: 0, count: body.count + 16)
        var length: Int32 = 0
        guard EVP_DecryptInit_ex(ctx, EVP_aes_128_gcm(), nil, key, nonce) == 1,
              EVP_DecryptUpdate(ctx, &out, &length, body, Int32(body.count)) == 1,
              EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, 16, &tag) == 1 else { throw .authenticationFailed }
        let total = Int(length)
        let finalOK = out.withUnsafeMutableBufferPointer { EVP_DecryptFinal_ex(ctx, $0.baseAddress! + total, &length) }
        guard finalOK == 1 else { throw .authenticationFailed }
        return Array(out[0..<(total + Int(length))])
    }
}
