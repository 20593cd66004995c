internal import COpenSSL
import Foundation

public enum SigningKeyError: Error, Sendable, Equatable, CustomStringConvertible {
    case unreadablePEM
    case wrongKeyType(expected: String)
    case signingFailed

    public var description: String {
        switch self {
        case .unreadablePEM: return "the key is not a PEM private key OpenSSL can read"
        case .wrongKeyType(let expected): return "the key is not \(expected)"
        case .signingFailed: return "OpenSSL could not sign with the key"
        }
    }
}

/// A private key loaded by OpenSSL from PEM (PKCS#8 .p8 files, service-account keys).
public final class SigningKey: @unchecked Sendable {
    public enum Algorithm: String, Sendable {
        /// ECDSA P-256 with SHA-256, signature as raw r‖s (what JWS wants; OpenSSL gives DER).
        case es256 = "ES256"
        /// RSASSA-PKCS1-v1_5 with SHA-256.
        case rs256 = "RS256"
    }

    // Read-only after init; OpenSSL allows concurrent signing with one key and a context per call.
    private let key: OpaquePointer
    public let algorithm: Algorithm

    public init(pem: String, algorithm: Algorithm) throws(SigningKeyError) {
        guard let pkey = PEMPrivateKey.read(pem) else { throw .unreadablePEM }
        let type = EVP_PKEY_get_base_id(pkey)
        switch algorithm {
        case .es256:
            guard type == EVP_PKEY_EC, EVP_PKEY_get_bits(pkey) == 256 else { EVP_PKEY_free(pkey); throw .wrongKeyType(expected: "an EC P-256 key") }
        case .rs256:
            guard type == EVP_PKEY_RSA else { EVP_PKEY_free(pkey); throw .wrongKeyType(expected: "an RSA key") }
        }
        key = pkey
        self.algorithm = algorithm
    }

    deinit { EVP_PKEY_free(key) }

    public func sign(_ message: [UInt8]) throws(SigningKeyError) -> [UInt8] {
        guard let ctx = EVP_MD_CTX_new() else { throw .signingFailed }
        defer { EVP_MD_CTX_free(ctx) }
        guard EVP_DigestSignInit(ctx, nil, EVP_sha256(), nil, key) == 1 else { throw .signingFailed }
        var length = 0
        guard message.withUnsafeBytes({ EVP_DigestSign(ctx, nil, &length, $0.baseAddress?.assumingMemoryBound(to: UInt8.self), $0.count) }) == 1 else { throw .signingFailed }
        var signature = [UInt8](repeating: 0, count: length)
        guard message.withUnsafeBytes({ EVP_DigestSign(ctx, &signature, &length, $0.baseAddress?.assumingMemoryBound(to: UInt8.self), $0.count) }) == 1 else { throw .signingFailed }
        signature.removeSubrange(length...)
        return algorithm == .es256 ? try Self.rawECDSA(fromDER: signature) : signature
    }

    private static func rawECDSA(fromDER der: [UInt8]) throws(SigningKeyError) -> [UInt8] {
        let parsed: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var pointer = buffer.baseAddress
            return d2i_ECDSA_SIG(nil, &pointer, buffer.count)
        }
        guard let sig = parsed else { throw .signingFailed }
        defer { ECDSA_SIG_free(sig) }
        var r: OpaquePointer?
        var s: OpaquePointer?
        ECDSA_SIG_get0(sig, &r, &s)
        var raw = [UInt8](repeating: 0, count: 64)
        guard BN_bn2binpad(r, &raw, 32) == 32 else { throw .signingFailed }
        let wrote = raw.withUnsafeMutableBufferPointer { BN_bn2binpad(s, $0.baseAddress! + 32, 32) }
        guard wrote == 32 else { throw .signingFailed }
        return raw
    }
}

/// Compact JWS (JWT) signing: base64url(header).base64url(claims).base64url(signature).
public enum JSONWebToken {
    public static func sign<Claims: Encodable>(claims: Claims, key: SigningKey, keyID: String? = nil) throws -> String {
        // APNs documents exactly {alg, kid}; Google's assertions carry typ as well.
        var header = ["alg": key.algorithm.rawValue]
        if key.algorithm == .rs256 { header["typ"] = "JWT" }
        if let keyID { header["kid"] = keyID }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let signingInput = Base64URL.encode(Array(try encoder.encode(header))) + "." + Base64URL.encode(Array(try encoder.encode(claims)))
        let signature = try key.sign(Array(signingInput.utf8))
        return signingInput + "." + Base64URL.encode(signature)
    }
}
