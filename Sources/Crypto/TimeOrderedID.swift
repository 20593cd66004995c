import Foundation

/// Identifiers that sort by creation time (a millisecond timestamp, then random bits), so new rows land at the
/// end of their index instead of all over it: far fewer pages to write per commit than random ids.
public enum TimeOrderedID {
    /// 12 hex digits of milliseconds since 1970, then `randomBytes` random bytes in hex.
    public static func hex(randomBytes: Int = 8, now: Date = Date()) -> String {
        let millis = UInt64(max(0, now.timeIntervalSince1970 * 1000))
        return String(millis, radix: 16).leftPadded(to: 12) + Hex.encode(SecureBytes.random(count: randomBytes))
    }

    /// A UUID in the version 7 layout (RFC 9562): 48-bit Unix milliseconds, version, random.
    public static func uuid(now: Date = Date()) -> UUID {
        let bytes = uuidBytes(now: now)
        return UUID(uuid: (bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
                           bytes[8], bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]))
    }

    /// The same, as lower-case text (8-4-4-4-12), formatted without Foundation's printf-based `uuidString`.
    public static func uuidText(now: Date = Date()) -> String {
        let hex = Hex.encode(uuidBytes(now: now)).utf8
        var text = [UInt8]()
        text.reserveCapacity(36)
        for (i, digit) in hex.enumerated() {
            if i == 8 || i == 12 || i == 16 || i == 20 { text.append(UInt8(ascii: "-")) }
            text.append(digit)
        }
        return String(decoding: text, as: UTF8.self)
    }

    /// The same 16 bytes as 32 lower-case hex digits, without the dashes (a channel send's id).
    public static func uuidHex(now: Date = Date()) -> String { Hex.encode(uuidBytes(now: now)) }

    private static func uuidBytes(now: Date) -> [UInt8] {
        var bytes = SecureBytes.random(count: 16)
        let millis = UInt64(max(0, now.timeIntervalSince1970 * 1000))
        for i in 0..<6 { bytes[i] = UInt8(truncatingIfNeeded: millis >> (8 * (5 - i))) }
        bytes[6] = (bytes[6] & 0x0F) | 0x70
        bytes[8] = (bytes[8] & 0x3F) | 0x80
        return bytes
    }
}

extension String {
    func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}
