import Crypto
import Foundation
import JSON

/// Keys a phone and its gateway derive from the 32-byte pairing secret S, with the device id as salt
/// (HKDF-SHA256). The relay never learns S: it sees only SHA-256(R) and ciphertext.
public struct RelayKeys: Sendable, Equatable {
    /// Seals what goes down to the phone (records, results).
    public let down: [UInt8]
    /// Seals what goes up to the gateway (commands).
    public let up: [UInt8]
    /// The phone's bearer at the relay.
    public let auth: [UInt8]
    /// Keys the collapse id of relay pushes.
    public let collapse: [UInt8]

    public init(secret: [UInt8], deviceID: String) throws(SealError) {
        let salt = Array(deviceID.utf8)
        down = try HKDF.deriveKey(secret: secret, salt: salt, info: "plannotator-inbox relay key v1")
        up = try HKDF.deriveKey(secret: secret, salt: salt, info: "plannotator-inbox relay up v1")
        auth = try HKDF.deriveKey(secret: secret, salt: salt, info: "plannotator-inbox relay auth v1")
        collapse = try HKDF.deriveKey(secret: secret, salt: salt, info: "plannotator-inbox relay collapse v1")
    }

    /// The bearer the phone presents to the relay.
    public var bearer: String { Base64URL.encode(auth) }
    public var bearerSHA256: String { Hex.encode(SHA256.hash(bearer)) }

    public func collapseID(threadID: String) -> String { Hex.encode(HMACSHA256.authenticate(Array(threadID.utf8), key: collapse)) }
}

/// What travels sealed through the relay, as typed messages (`RelayMessages.swift`). The version and type are the
/// AEAD's header, so an item opened as the wrong type, or of another version, fails authentication; they are also
/// written inside (`v`, `type`) and checked on opening.
public enum RelayEnvelope {
    public static let version = 1

    /// `push` is the sealed payload of a wake-up: sealed under its own header, so a relay cannot pass a push off
    /// as a down item (or an item as a push).
    public enum Kind: String, Sendable { case record, result, command, push }

    public static func header(_ kind: Kind) -> String { "soulacy-relay v\(version) \(kind.rawValue)" }

    public static func seal(_ message: some Encodable, kind: Kind, key: [UInt8]) throws -> String {
        let data = try JSONCoding.encoder.encode(Stamped(message: message, type: kind.rawValue))
        return try SealedBox.seal(Array(data), key: key, header: header(kind))
    }

    public static func open<Message: Decodable>(_ envelope: String, as type: Message.Type, kind: Kind, key: [UInt8]) throws -> Message {
        let data = Data(try SealedBox.open(envelope, key: key, header: header(kind)))
        let stamp = try JSONCoding.decode(Stamp.self, from: data)
        guard stamp.v == version, stamp.type == kind.rawValue else { throw SealError.malformed }
        return try JSONCoding.decode(Message.self, from: data)
    }

    /// The version and type written beside a message's own keys.
    private struct Stamp: Codable {
        var v: Int
        var type: String
    }

    private struct Stamped<Message: Encodable>: Encodable {
        let message: Message
        let type: String

        func encode(to encoder: any Encoder) throws {
            try message.encode(to: encoder)
            try Stamp(v: RelayEnvelope.version, type: type).encode(to: encoder)
        }
    }
}
