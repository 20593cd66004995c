import ChannelAPI
import Foundation
import JSON

/// The JSON body and headers of one APNs request, built from a wake-up's generic fields only.
public struct APNsRequest: Sendable, Equatable {
    public static let maximumPayloadBytes = 4096
    public static let liveActivityTopicSuffix = ".push-type.liveactivity"

    public var pushType: String
    public var topic: String
    public var priority: Int
    public var expiration: Int
    public var collapseID: String?
    public var apnsID: String?
    public var body: [UInt8]

    public init(signal: WakeSignal, bundleID: String, now: Date) throws(APNsPayloadError) {
        var aps: [String: JSONValue] = [:]
        switch signal.kind {
        case .alert:
            pushType = "alert"
            topic = bundleID
            aps["alert"] = ["title": .string(signal.title), "body": .string(signal.body)]
            aps["sound"] = "default"
            aps["category"] = .string(signal.category.rawValue)
            aps["thread-id"] = .string(signal.threadID)
            // The original app's contract (§5.2): content-available on every alert, so iOS wakes the app to fetch
            // the line it names; interruption-level only when time-sensitive.
            aps["content-available"] = 1
            if signal.timeSensitive { aps["interruption-level"] = "time-sensitive" }
            priority = signal.priority.rawValue
        case .background:
            pushType = "background"
            topic = bundleID
            aps["content-available"] = 1
            // Apple requires priority 5 for background pushes.
            priority = 5
        case .liveActivity:
            pushType = "liveactivity"
            topic = bundleID + Self.liveActivityTopicSuffix
            priority = signal.priority.rawValue
        }
        let bytes: [UInt8]
        if signal.kind == .liveActivity, let update = signal.liveActivity {
            // A Live Activity's body is the exact content-state document the phone draws from, already written.
            bytes = update.apnsBody
        } else {
            var root: [String: JSONValue] = ["aps": .object(aps), "category": .string(signal.category.rawValue),
                                             "deep_link": .string(signal.deepLink), "thread_id": .string(signal.threadID)]
            if let id = signal.deliveryID { root["delivery_id"] = .string(id) }
            for (key, value) in signal.extra where root[key] == nil { root[key] = .string(value) }
            // Written directly: Foundation's JSONSerialization was half the cost of a push.
            bytes = JSONValue.object(root).serializedBytes()
        }
        guard bytes.count <= Self.maximumPayloadBytes else { throw .tooLarge(bytes.count) }
        body = bytes
        let expiresAt = signal.expiresAt ?? now.addingTimeInterval(24 * 3600)
        expiration = Int(expiresAt.timeIntervalSince1970)
        collapseID = signal.collapseID.map { String($0.utf8.prefix(64))! }
        apnsID = signal.wakeID.map { $0.uuidString.lowercased() }
    }

    /// Header list in the order APNs documents them.
    public func headers(providerToken: String) -> [(String, String)] {
        var headers = [("authorization", "bearer \(providerToken)"), ("apns-push-type", pushType), ("apns-topic", topic),
                       ("apns-priority", String(priority)), ("apns-expiration", String(expiration))]
        if let collapseID { headers.append(("apns-collapse-id", collapseID)) }
        if let apnsID { headers.append(("apns-id", apnsID)) }
        headers.append(("content-type", "application/json"))
        return headers
    }
}

public enum APNsPayloadError: Error, Sendable, Equatable, CustomStringConvertible {
    case tooLarge(Int)
    case notEncodable

    public var description: String {
        switch self {
        case .tooLarge(let n): return "the APNs payload is \(n) bytes; the limit is \(APNsRequest.maximumPayloadBytes)"
        case .notEncodable: return "the APNs payload could not be encoded as JSON"
        }
    }
}
