import Foundation
import GatewayTestSupport
import Crypto
import Testing

@Suite("Crypto wrapper")
struct CryptoTests {
    @Test("SHA-256 and HMAC-SHA256 match the published test vectors")
    func vectors() {
        #expect(Hex.encode(SHA256.hash("abc")) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        // RFC 4231 test case 2.
        #expect(Hex.encode(HMACSHA256.authenticate(Array("what do ya want for nothing?".utf8), key: Array("Jefe".utf8)))
                == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
    }

    @Test("SHA-256 through the once-fetched method: the empty and two-block vectors, and from many threads at once")
    func sha256SharedMethod() async {
        #expect(Hex.encode(SHA256.hash([UInt8]())) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        let twoBlocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"
        #expect(Hex.encode(SHA256.hash(twoBlocks)) == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
        let wrong = await withTaskGroup(of: Int.self) { group in
            for _ in 0..<8 {
                group.addTask { (0..<2_000).filter { _ in Hex.encode(SHA256.hash("abc")) != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" }.count }
            }
            return await group.reduce(0, +)
        }
        #expect(wrong == 0)
    }

    @Test("HMAC-SHA256 through the shared context: RFC 4231 vectors (a key longer than a block too), an empty key, and from many threads at once")
    func hmacSharedContext() async {
        let key = [UInt8](repeating: 0x0b, count: 20)
        let caseOne = "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"
        #expect(Hex.encode(HMACSHA256.authenticate(Array("Hi There".utf8), key: key)) == caseOne)
        #expect(Hex.encode(HMACSHA256.authenticate(Array("Test Using Larger Than Block-Size Key - Hash Key First".utf8),
                                                   key: [UInt8](repeating: 0xaa, count: 131)))
                == "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54")
        #expect(Hex.encode(HMACSHA256.authenticate([], key: [])) == "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad")
        let wrong = await withTaskGroup(of: Int.self) { group in
            for task in 0..<8 {
                group.addTask {
                    // Alternating keys, so a context that kept an earlier key would show.
                    (0..<2_000).filter { n in
                        (n + task) % 2 == 0 ? Hex.encode(HMACSHA256.authenticate(Array("Hi There".utf8), key: key)) != caseOne
                            : Hex.encode(HMACSHA256.authenticate(Array("what do ya want for nothing?".utf8), key: Array("Jefe".utf8)))
                                != "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
                    }.count
                }
            }
            return await group.reduce(0, +)
        }
        #expect(wrong == 0)
    }

    @Test("hex and base64url round-trip and reject bad input")
    func encodings() {
        let bytes: [UInt8] = [0, 1, 0xfe, 0xff, 0x7f]
        #expect(Hex.decode(Hex.encode(bytes)) == bytes)
        #expect(Hex.decode("ABcd") == [0xab, 0xcd])
        #expect(Hex.decode("abc") == nil)
        #expect(Hex.decode("zz") == nil)
        #expect(Base64URL.decode(Base64URL.encode(bytes)) == bytes)
        #expect(!Base64URL.encode(SecureBytes.random(count: 32)).contains(where: { "+/=".contains($0) }))
    }

    @Test("base64url is RFC 4648's alphabet swapped, without padding, at every length; padding only at the end")
    func base64URLAgainstFoundation() {
        for length in 0...70 {
            let bytes = SecureBytes.random(count: length) + [0xfb, 0xff, 0xfe].prefix(length % 4)
            let standard = Data(bytes).base64EncodedString()
            let expected = String(standard.map { $0 == "+" ? "-" : $0 == "/" ? "_" : $0 }.filter { $0 != "=" })
            #expect(Base64URL.encode(bytes) == expected)
            #expect(Base64URL.decode(expected) == bytes)
            // Padded text reads too; the standard alphabet is taken as it always was.
            #expect(Base64URL.decode(expected + String(repeating: "=", count: (4 - expected.count % 4) % 4)) == bytes)
            #expect(Base64URL.decode(standard) == bytes)
        }
        #expect(Base64URL.decode("-_-_") == [0xfb, 0xff, 0xbf])
        #expect(Base64URL.decode("") == [])
        for bad in ["a=bc", "ab=c", "a", "ab c", "ab\u{00e9}c", "a*bc"] {
            #expect(Base64URL.decode(bad) == nil, "\(bad)")
        }
        // Whatever the text, the same answer as the string-replacing decoder it replaced (Foundation's quirks too).
        func replacing(_ text: String) -> [UInt8]? {
            var s = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
            guard !s.contains("=") || text.hasSuffix("=") else { return nil }
            while s.count % 4 != 0 { s += "=" }
            return Data(base64Encoded: s).map { Array($0) }
        }
        for text in ["====", "=", "AA==", "AA=", "A===", "AAA=", "-_==", "ab+/", "a b", "\u{0}AAA", "AAAA\n", "Zm9v\u{00e9}", "+/+/", "Zg", "Zm8"] {
            #expect(Base64URL.decode(text) == replacing(text), "\(text.debugDescription)")
        }
    }

    @Test("random bytes differ and comparisons are by value")
    func randomAndCompare() {
        #expect(SecureBytes.random(count: 32) != SecureBytes.random(count: 32))
        #expect(SecureBytes.constantTimeEqual([1, 2, 3], [1, 2, 3]))
        #expect(!SecureBytes.constantTimeEqual([1, 2, 3], [1, 2, 4]))
        #expect(!SecureBytes.constantTimeEqual([1, 2], [1, 2, 3]))
        #expect(SecureBytes.constantTimeEqual("secret", "secret"))
        #expect(!SecureBytes.constantTimeEqual("secret", "secreT"))
    }
}

@Suite("Sealing")
struct SealingTests {
    @Test("time-ordered UUID text is RFC 9562 version 7, lower case, and sorts by time")
    func uuidText() throws {
        let early = TimeOrderedID.uuidText(now: Date(timeIntervalSince1970: 1_700_000_000))
        let late = TimeOrderedID.uuidText(now: Date(timeIntervalSince1970: 1_700_000_001))
        let parsed = try #require(UUID(uuidString: early))
        #expect(parsed.uuidString.lowercased() == early)
        #expect(early.count == 36 && early == early.lowercased())
        #expect(Array(early.utf8)[14] == UInt8(ascii: "7"))
        #expect("89ab".contains(Array(early)[19]))
        #expect(early.hasPrefix("018bcfe5-6800"))  // 1,700,000,000,000 ms in the first 48 bits
        #expect(early < late)
        let hex = TimeOrderedID.uuidHex(now: Date(timeIntervalSince1970: 1_700_000_000))
        #expect(hex.count == 32 && hex.hasPrefix("018bcfe56800") && Hex.decode(hex)?.count == 16)
    }

    @Test("a secret written by SecretFile is readable by its owner only, and reads back; an impossible path is refused")
    func secretFileWrite() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("secret-\(UUID().uuidString).pem").path
        try SecretFile.write("-----BEGIN PRIVATE KEY-----\nabc\n", to: path)
        let mode = try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int
        #expect(mode == 0o600)
        #expect(try SecretFile.read(path, variable: "TEST_KEY") == "-----BEGIN PRIVATE KEY-----\nabc\n")
        #expect(throws: SecretFileError.unwritable(path: "/nonexistent-dir/key.pem")) { try SecretFile.write("x", to: "/nonexistent-dir/key.pem") }
    }

    @Test("HKDF-SHA256 matches RFC 5869 test case 1")
    func hkdf() throws {
        let ikm = [UInt8](repeating: 0x0b, count: 22)
        let salt = Hex.decode("000102030405060708090a0b0c")!
        let info = Hex.decode("f0f1f2f3f4f5f6f7f8f9")!
        let okm = try HKDF.deriveKey(secret: ikm, salt: salt, info: info, length: 42)
        #expect(Hex.encode(okm) == "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865")
    }

    @Test("AES-256-GCM envelopes open only with the key and header they were sealed with")
    func aesGCM() throws {
        let key = SecureBytes.random(count: 32)
        let sealed = try SealedBox.seal(Array("hello".utf8), key: key, header: "v1 record")
        #expect(try SealedBox.open(sealed, key: key, header: "v1 record") == Array("hello".utf8))
        #expect(throws: SealError.authenticationFailed) { try SealedBox.open(sealed, key: key, header: "v1 result") }
        #expect(throws: SealError.authenticationFailed) { try SealedBox.open(sealed, key: SecureBytes.random(count: 32), header: "v1 record") }
        #expect(throws: SealError.malformed) { try SealedBox.open("abc", key: key, header: "v1 record") }
    }

    @Test("the gateway's certificate: CN, O, server-auth use and names as the original makes it; the pin is SHA-256 of the EC point, as openssl computes it")
    func certificate() async throws {
        let made = try SelfSignedCertificate.generate(commonName: "Soulacy gateway", organization: "Soulacy", ipAddresses: ["127.0.0.1", "::1"], dnsNames: ["box", "box.local"])
        #expect(made.certificatePEM.hasPrefix("-----BEGIN CERTIFICATE-----") && made.keyPEM.contains("PRIVATE KEY"))
        let pin = try SelfSignedCertificate.publicKeyPin(pem: made.certificatePEM)
        #expect(pin.count == 64 && Hex.decode(pin) != nil)
        let directory = NSTemporaryDirectory() + "cert-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try made.certificatePEM.write(toFile: directory + "/c.pem", atomically: true, encoding: .utf8)
        @Sendable func shell(_ command: String) async throws -> String {
            try await waitedOnOwnThread {
                let process = TestProcess()
                process.executableURL = URL(fileURLWithPath: "/bin/sh")
                process.arguments = ["-c", command]
                process.currentDirectoryURL = URL(fileURLWithPath: directory)
                let pipe = Pipe()
                process.standardOutput = pipe
                try GatewayTestSupport.launch(process)
                let data = pipe.fileHandleForReading.readDataToEndOfFile()
                process.waitUntilExit()
                return String(decoding: data, as: UTF8.self)
            }
        }
        let text = try await shell("openssl x509 -in c.pem -noout -text")
        #expect(text.contains("CN = Soulacy gateway") && text.contains("O = Soulacy") && text.contains("TLS Web Server Authentication"), "\(text)")
        #expect(text.contains("DNS:localhost") && text.contains("DNS:box.local") && text.contains("IP Address:127.0.0.1") && text.contains("ASN1 OID: prime256v1"))
        // The 65-byte uncompressed point 0x04‖X‖Y is the last 65 bytes of the SPKI DER.
        let point = try await shell("openssl x509 -in c.pem -pubkey -noout | openssl pkey -pubin -outform DER | tail -c 65 | openssl dgst -sha256 -r")
        #expect(point.hasPrefix(pin), "\(point)")
    }
}

/// Keys as Google and Apple issue them load: the PEM is read while its bytes are still lent to OpenSSL.
@Suite("Signing keys from PEM")
struct SigningKeyPEMTests {
    @Test("RSA keys of 2048 and 3072 bits (Google's service accounts) and an EC P-256 key (APNs .p8) load and sign", arguments: ["2048", "3072", "ec"])
    func loads(_ kind: String) async throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("key-\(UUID().uuidString).pem").path
        defer { try? FileManager.default.removeItem(atPath: file) }
        // Key generation takes seconds under the sanitizer: it waits on a thread of its own, not Swift's pool.
        try await waitedOnOwnThread {
            let process = TestProcess()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
            process.arguments = kind == "ec" ? ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", file]
                : ["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:\(kind)", "-out", file]
            try GatewayTestSupport.launch(process)
            process.waitUntilExit()
        }
        let pem = try String(contentsOfFile: file, encoding: .utf8)
        let key = try SigningKey(pem: pem, algorithm: kind == "ec" ? .es256 : .rs256)
        let signature = try key.sign(Array("message".utf8))
        #expect(signature.count == (kind == "ec" ? 64 : Int(kind)! / 8))
    }
}

/// Blocking work (a child process) on a thread of its own, so it holds none of Swift's cooperative threads.
func waitedOnOwnThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread.detachNewThread { continuation.resume(with: Result { try body() }) }
    }
}
