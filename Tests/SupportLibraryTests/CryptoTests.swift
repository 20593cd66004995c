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
