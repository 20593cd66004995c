internal import COpenSSL
import Foundation

public enum SealError: Error, Sendable, Equatable, CustomStringConvertible {
    case malformed
    case authenticationFailed
    case crypto(String)
    public var description: String {
        switch self {
        case .malformed: return "the envelope is not base64url(IV ‖ ciphertext ‖ tag)"
        case .authenticationFailed: return "the envelope does not open with this key and header (tampered, or another key)"
        case .crypto(let what): return "OpenSSL failed: \(what)"
        }
    }
}

/// HKDF-SHA256 (RFC 5869) through OpenSSL's EVP_KDF.
public enum HKDF {
    public static func deriveKey(secret: [UInt8], salt: [UInt8], info: String, length: Int = 32) throws(SealError) -> [UInt8] {
        try deriveKey(secret: secret, salt: salt, info: Array(info.utf8), length: length)
    }

    public static func deriveKey(secret: [UInt8], salt: [UInt8], info infoBytes: [UInt8], length: Int = 32) throws(SealError) -> [UInt8] {
        guard let ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, nil) else { throw .crypto("HKDF context") }
        defer { EVP_PKEY_CTX_free(ctx) }
        var out = [UInt8](repeating: 0, count: length)
        var outLength = length
        guard EVP_PKEY_derive_init(ctx) == 1, EVP_PKEY_CTX_set_hkdf_md(ctx, EVP_sha256()) == 1,
              EVP_PKEY_CTX_set1_hkdf_salt(ctx, salt, Int32(salt.count)) == 1,
              EVP_PKEY_CTX_set1_hkdf_key(ctx, secret, Int32(secret.count)) == 1,
              EVP_PKEY_CTX_add1_hkdf_info(ctx, infoBytes, Int32(infoBytes.count)) == 1,
              EVP_PKEY_derive(ctx, &out, &outLength) == 1, outLength == length else { throw .crypto("HKDF derive") }
        return out
    }
}

/// AES-256-GCM, fetched once: `EVP_aes_256_gcm()` names the cipher without an implementation, and OpenSSL 3
/// fetches one on every init under a lock (a third of sealing a short value; every channel send's destination is
/// sealed when written and opened when claimed). A fetched cipher is immutable and shared by every thread.
private nonisolated(unsafe) let aes256GCM: OpaquePointer? = EVP_CIPHER_fetch(nil, "AES-256-GCM", nil) ?? EVP_aes_256_gcm()

/// AES-256-GCM sealing into the relay envelope: base64url-no-pad(IV 12 ‖ ciphertext ‖ tag 16). The header
/// (version and type) is authenticated, so an item cannot be replayed as another kind.
public enum SealedBox {
    public static func seal(_ plaintext: [UInt8], key: [UInt8], header: String) throws(SealError) -> String {
        guard key.count == 32 else { throw .crypto("the key must be 32 bytes") }
        let iv = SecureBytes.random(count: 12)
        guard let ctx = EVP_CIPHER_CTX_new() else { throw .crypto("cipher context") }
        defer { EVP_CIPHER_CTX_free(ctx) }
        var out = [UInt8](repeating: 0, count: plaintext.count + 16)
        var length: Int32 = 0
        var total = 0
        let aad = Array(header.utf8)
        guard EVP_EncryptInit_ex(ctx, aes256GCM, nil, key, iv) == 1,
              aad.isEmpty || EVP_EncryptUpdate(ctx, nil, &length, aad, Int32(aad.count)) == 1,
              EVP_EncryptUpdate(ctx, &out, &length, plaintext, Int32(plaintext.count)) == 1 else { throw .crypto("encrypt") }
        total = Int(length)
        let finalOK = out.withUnsafeMutableBufferPointer { EVP_EncryptFinal_ex(ctx, $0.baseAddress! + total, &length) }
        guard finalOK == 1 else { throw .crypto("encrypt final") }
        total += Int(length)
        var tag = [UInt8](repeating: 0, count: 16)
        guard EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, 16, &tag) == 1 else { throw .crypto("tag") }
        return Base64URL.encode(iv + out[0..<total] + tag)
    }

    public static func open(_ envelope: String, key: [UInt8], header: String) throws(SealError) -> [UInt8] {
        guard let bytes = Base64URL.decode(envelope), bytes.count >= 28, key.count == 32 else { throw .malformed }
        let iv = Array(bytes[0..<12]), tag = Array(bytes[(bytes.count - 16)...]), body = Array(bytes[12..<(bytes.count - 16)])
        guard let ctx = EVP_CIPHER_CTX_new() else { throw .crypto("cipher context") }
        defer { EVP_CIPHER_CTX_free(ctx) }
        var out = [UInt8](repeating: 0, count: body.count + 16)
        var length: Int32 = 0
        let aad = Array(header.utf8)
        var tagCopy = tag
        guard EVP_DecryptInit_ex(ctx, aes256GCM, nil, key, iv) == 1,
              aad.isEmpty || EVP_DecryptUpdate(ctx, nil, &length, aad, Int32(aad.count)) == 1,
              EVP_DecryptUpdate(ctx, &out, &length, body, Int32(body.count)) == 1,
              EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, 16, &tagCopy) == 1 else { throw .authenticationFailed }
        let total = Int(length)
        let finalOK = out.withUnsafeMutableBufferPointer { EVP_DecryptFinal_ex(ctx, $0.baseAddress! + total, &length) }
        guard finalOK == 1 else { throw .authenticationFailed }
        return Array(out[0..<(total + Int(length))])
    }
}

/// A self-signed ECDSA P-256 certificate for the gateway's TLS, and the public-key pin phones check.
public enum SelfSignedCertificate {
    /// `dnsNames` and `ipAddresses` go into the subject alternative names (`localhost` always); the phone ignores
    /// them (it checks the pin only), other clients that trust the certificate itself use them.
    public static func generate(commonName: String, organization: String? = nil, ipAddresses: [String], dnsNames: [String] = [],
                                days: Int = 3650) throws(SealError) -> (keyPEM: String, certificatePEM: String) {
        guard let keygen = EVP_PKEY_CTX_new_id(EVP_PKEY_EC, nil) else { throw .crypto("EC key context") }
        defer { EVP_PKEY_CTX_free(keygen) }
        var generated: OpaquePointer?
        guard EVP_PKEY_keygen_init(keygen) == 1, EVP_PKEY_CTX_set_ec_paramgen_curve_nid(keygen, NID_X9_62_prime256v1) == 1,
              EVP_PKEY_keygen(keygen, &generated) == 1, let key = generated else { throw .crypto("EC key generation") }
        defer { EVP_PKEY_free(key) }
        guard let x509 = X509_new() else { throw .crypto("X509_new") }
        defer { X509_free(x509) }
        X509_set_version(x509, 2)
        ASN1_INTEGER_set(X509_get_serialNumber(x509), Int(UInt32.random(in: 1...UInt32.max)))
        X509_gmtime_adj(X509_getm_notBefore(x509), -3600)
        X509_gmtime_adj(X509_getm_notAfter(x509), days * 86400)
        X509_set_pubkey(x509, key)
        let name = X509_get_subject_name(x509)
        X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, commonName, -1, -1, 0)
        if let organization { X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, organization, -1, -1, 0) }
        X509_set_issuer_name(x509, name)
        var names: [String] = []
        for dns in ["localhost"] + dnsNames where !names.contains("DNS:" + dns) { names.append("DNS:" + dns) }
        for ip in ipAddresses where !names.contains("IP:" + ip) { names.append("IP:" + ip) }
        var ctx = X509V3_CTX()
        X509V3_set_ctx(&ctx, x509, x509, nil as OpaquePointer?, nil as OpaquePointer?, 0)
        for (nid, value) in [(NID_subject_alt_name, names.joined(separator: ",")), (NID_ext_key_usage, "serverAuth")] {
            if let ext = X509V3_EXT_conf_nid(nil, &ctx, nid, value) {
                X509_add_ext(x509, ext, -1)
                X509_EXTENSION_free(ext)
            }
        }
        guard X509_sign(x509, key, EVP_sha256()) > 0 else { throw .crypto("X509_sign") }
        func pem(_ write: (OpaquePointer?) -> Int32) throws(SealError) -> String {
            guard let bio = BIO_new(BIO_s_mem()) else { throw .crypto("BIO") }
            defer { BIO_free(bio) }
            guard write(bio) == 1 else { throw .crypto("PEM write") }
            var pointer: UnsafeMutablePointer<CChar>?
            let count = BIO_ctrl(bio, BIO_CTRL_INFO, 0, &pointer)
            return String(decoding: UnsafeRawBufferPointer(start: pointer, count: count), as: UTF8.self)
        }
        let keyPEM = try pem { PEM_write_bio_PrivateKey($0, key, nil, nil, 0, nil, nil) }
        let certPEM = try pem { PEM_write_bio_X509($0, x509) }
        return (keyPEM, certPEM)
    }

    /// The pin the original Soulacy app checks (`fp` in its pairing link): SHA-256 of the leaf's public key in the
    /// bytes iOS' SecKeyCopyExternalRepresentation gives — for EC the uncompressed point 0x04‖X‖Y, for RSA the
    /// PKCS#1 DER (what i2d_PublicKey writes) — as 64 lower-case hex digits. Not the certificate, not the SPKI.
    public static func publicKeyPin(pem: String) throws(SealError) -> String {
        try withCertificate(pem: pem) { x509 throws(SealError) in
            guard let key = X509_get0_pubkey(x509) else { throw .crypto("the certificate has no public key") }
            var encoded: UnsafeMutablePointer<UInt8>? = nil
            let length = i2d_PublicKey(key, &encoded)
            guard length > 0, let encoded else { throw .crypto("public key encoding") }
            defer { CRYPTO_free(encoded, #file, #line) }
            return Hex.encode(SHA256.hash(Array(UnsafeBufferPointer(start: encoded, count: Int(length)))))
        }
    }

    /// When a PEM certificate stops being valid (its notAfter), for the metric operators alert on.
    public static func expiry(pem: String) throws(SealError) -> Date {
        try withCertificate(pem: pem) { x509 throws(SealError) in
            guard let notAfter = X509_get0_notAfter(x509) else { throw .crypto("the certificate has no notAfter") }
            var moment = tm()
            guard ASN1_TIME_to_tm(notAfter, &moment) == 1 else { throw .crypto("the certificate's notAfter cannot be read") }
            return Date(timeIntervalSince1970: TimeInterval(timegm(&moment)))
        }
    }

    /// Parses a PEM certificate for the length of `body` only.
    private static func withCertificate<T>(pem: String, _ body: (OpaquePointer) throws(SealError) -> T) throws(SealError) -> T {
        let bytes = Array(pem.utf8)
        let parsed: OpaquePointer? = bytes.withUnsafeBytes { buffer in
            guard let bio = BIO_new_mem_buf(buffer.baseAddress, Int32(buffer.count)) else { return nil }
            defer { BIO_free(bio) }
            return PEM_read_bio_X509(bio, nil, nil, nil)
        }
        guard let x509 = parsed else { throw .crypto("not a PEM certificate") }
        defer { X509_free(x509) }
        return try body(x509)
    }
}
