internal import COpenSSL

/// A private key read from PEM (PKCS#8 or SEC1), shared by the signing keys and the key agreement.
enum PEMPrivateKey {
    /// The key (the caller owns it and frees it with EVP_PKEY_free), or nil when the text is no private key;
    /// OpenSSL's error queue is cleared then, so a later call does not report this failure.
    static func read(_ pem: String) -> OpaquePointer? {
        let bytes = Array(pem.utf8)
        // The memory BIO reads the bytes in place, so it is used up inside the closure that lends them.
        let parsed: OpaquePointer? = bytes.withUnsafeBytes { buffer in
            guard let bio = BIO_new_mem_buf(buffer.baseAddress, Int32(buffer.count)) else { return nil }
            defer { BIO_free(bio) }
            return PEM_read_bio_PrivateKey(bio, nil, nil, nil)
        }
        if parsed == nil { ERR_clear_error() }
        return parsed
    }
}
