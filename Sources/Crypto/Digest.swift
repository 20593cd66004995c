internal import COpenSSL

/// SHA-256, fetched from OpenSSL's default provider once. `EVP_sha256()` names the algorithm without an
/// implementation, and OpenSSL 3 then fetches one on every call, under a lock: over half of a short hash's time
/// (each API request hashes its bearer key). A fetched method is immutable and may be shared by every thread.
private nonisolated(unsafe) let sha256Method: OpaquePointer? = EVP_MD_fetch(nil, "SHA256", nil) ?? EVP_sha256()

/// SHA-256 and HMAC-SHA256 through OpenSSL's EVP interface.
public enum SHA256 {
    public static func hash<Bytes: Sequence>(_ data: Bytes) -> [UInt8] where Bytes.Element == UInt8 {
        let input = Array(data)
        var output = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        input.withUnsafeBytes { inBuf in
            _ = EVP_Digest(inBuf.baseAddress, inBuf.count, &output, &length, sha256Method, nil)
        }
        return output
    }

    public static func hash(_ string: String) -> [UInt8] { hash(Array(string.utf8)) }
}

/// An HMAC context with its digest already set to SHA-256, copied for each MAC. OpenSSL 3's one-shot `HMAC()`
/// fetches the HMAC implementation and then the digest by name on every call (about 40% of a short MAC's time;
/// every webhook attempt signs twice). The template is never changed after it is made, so copying it from
/// several threads at once is safe; nil (no HMAC in the provider) falls back to the one-shot call.
private nonisolated(unsafe) let hmacSHA256Template: OpaquePointer? = {
    guard let mac = EVP_MAC_fetch(nil, "HMAC", nil) else { return nil }
    defer { EVP_MAC_free(mac) }  // the context holds its own reference
    guard let context = EVP_MAC_CTX_new(mac) else { return nil }
    let set = "digest".withCString { name in
        "SHA256".withCString { digest in
            var params = [OSSL_PARAM_construct_utf8_string(name, UnsafeMutablePointer(mutating: digest), 0), OSSL_PARAM_construct_end()]
            return EVP_MAC_CTX_set_params(context, &params) == 1
        }
    }
    guard set else {
        EVP_MAC_CTX_free(context)
        return nil
    }
    return context
}()

public enum HMACSHA256 {
    public static func authenticate(_ message: [UInt8], key: [UInt8]) -> [UInt8] {
        var output = [UInt8](repeating: 0, count: 32)
        key.withUnsafeBytes { k in
            message.withUnsafeBytes { m in
                if let template = hmacSHA256Template, let context = EVP_MAC_CTX_dup(template) {
                    defer { EVP_MAC_CTX_free(context) }
                    var written = 0
                    let keyBytes = k.baseAddress?.assumingMemoryBound(to: UInt8.self)
                    if EVP_MAC_init(context, keyBytes, k.count, nil) == 1,
                       EVP_MAC_update(context, m.baseAddress?.assumingMemoryBound(to: UInt8.self), m.count) == 1,
                       EVP_MAC_final(context, &output, &written, output.count) == 1, written == 32 {
                        return
                    }
                }
                var length: UInt32 = 0
                _ = HMAC(sha256Method, k.baseAddress, Int32(k.count), m.baseAddress?.assumingMemoryBound(to: UInt8.self), m.count, &output, &length)
            }
        }
        return output
    }
}

/// Secure randomness and comparisons that take the same time whatever the bytes.
public enum SecureBytes {
    public static func random(count: Int) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        guard RAND_bytes(&bytes, Int32(count)) == 1 else {
            fatalError("OpenSSL RAND_bytes failed: the system has no entropy source")
        }
        return bytes
    }

    /// Compares in constant time for equal lengths; different lengths are unequal (length is not secret).
    public static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        if a.isEmpty { return true }
        return a.withUnsafeBytes { x in b.withUnsafeBytes { y in CRYPTO_memcmp(x.baseAddress, y.baseAddress, a.count) == 0 } }
    }

    public static func constantTimeEqual(_ a: String, _ b: String) -> Bool {
        // Hashing first makes the comparison independent of where the strings differ and of their length.
        constantTimeEqual(SHA256.hash(a), SHA256.hash(b))
    }
}
