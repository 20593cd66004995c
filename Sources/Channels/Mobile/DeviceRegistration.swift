import JSON
import Foundation
import ChannelAPI
import Crypto

/// A device registration that passed every rule of POST /api/v1/mobile/devices.
public struct DeviceRegistration: Sendable, Equatable {
    public static let maximumIDLength = 128
    public static let maximumNameLength = 200
    public static let maximumAndroidTokenLength = 4096
    /// Push-to-start tokens as the original accepts them: 32–512 hex characters, even length.
    public static let liveStartTokenHexLength = 32...512

    public var id: String
    public var name: String
    public var platform: WakeTarget.Platform
    public var bundleID: String
    public var pushToken: String?
    public var pushEnvironment: WakeTarget.Environment?
    public var notificationsEnabled: Bool
    public var liveStartToken: String?
    public var capabilities: Set<String>

    /// Validates a registration body with the original's normalisation (trimmed ids and names, lower-cased tokens,
    /// an empty token counts as absent, an unknown push_environment is production, notifications off unless enabled); each refusal names the field.
    public init(json body: JSONObject) throws(JSONFieldError) {
        let id = SchemaWhitespace.trim(try body.string("id", maxLength: Self.maximumIDLength))
        guard !id.isEmpty else { throw JSONFieldError.invalid("id", "must not be empty") }
        guard id.unicodeScalars.allSatisfy(Self.isIDCharacter) else {
            throw JSONFieldError.invalid("id", "may contain only letters, digits and . _ : - (an installation id such as a UUID)")
        }
        self.id = id

        // As the original: at most 200 bytes (Go's len), counted before trimming.
        let rawName = try body.optionalString("name") ?? ""
        guard rawName.utf8.count <= Self.maximumNameLength else {
            throw JSONFieldError.invalid("name", "device id or name is too long: at most \(Self.maximumNameLength) bytes of UTF-8, got \(rawName.utf8.count)")
        }
        let name = SchemaWhitespace.trim(rawName)
        guard !name.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw JSONFieldError.invalid("name", "must not contain control characters")
        }

        switch try body.optionalString("platform") {
        case nil, "ios": platform = .ios
        case "android": platform = .android
        case let other?: throw JSONFieldError.invalid("platform", "must be \"ios\" or \"android\", got \"\(other)\"")
        }

        self.name = name.isEmpty ? (platform == .ios ? "iPhone" : "Android phone") : name
        // As the original: absent means off; wake-ups and Live Activity starts go only to phones that said yes.
        notificationsEnabled = try body.optionalBool("notifications_enabled") ?? false
        var capabilities: Set<String> = []
        for (i, item) in (try body.optionalArray("capabilities") ?? []).enumerated() {
            guard let name = item.stringValue, (1...32).contains(name.count), name.allSatisfy({ $0.isASCII && ($0.isLowercase || $0.isNumber || "._-".contains($0)) }) else {
                throw JSONFieldError.invalid("capabilities[\(i)]", "must be a capability name such as \"canvas\"")
            }
            capabilities.insert(name)
        }
        guard capabilities.count <= 32 else { throw JSONFieldError.invalid("capabilities", "at most 32 capabilities") }
        self.capabilities = capabilities

        switch platform {
        case .ios:
            let bundle = try body.optionalString("bundle_id") ?? ""
            guard bundle.isEmpty || bundle == Device.iosBundleID else {
                throw JSONFieldError.invalid("bundle_id", "must identify the Soulacy iOS app (\(Device.iosBundleID)), got \"\(bundle)\"")
            }
            bundleID = Device.iosBundleID
            if let token = Self.normalisedToken(try body.optionalString("push_token")) {
                guard token.utf8.count == 64, Hex.decode(token) != nil else {
                    throw JSONFieldError.invalid("push_token", "an iOS push token is 32 bytes written as 64 hex characters")
                }
                pushToken = token
            } else {
                pushToken = nil
            }
            // As the original: development is kept, anything else (or nothing) is production.
            pushEnvironment = try body.optionalString("push_environment").map(SchemaWhitespace.trim) == "development" ? .development : .production
            // Absent or empty keeps the token already stored (the store merges it).
            if let token = Self.normalisedToken(try body.optionalString("live_start_token")) {
                guard Self.liveStartTokenHexLength.contains(token.utf8.count), token.utf8.count % 2 == 0, Hex.decode(token) != nil else {
                    throw JSONFieldError.invalid("live_start_token", "must be the push-to-start token as 32 to 512 hex characters")
                }
                liveStartToken = token
            } else {
                liveStartToken = nil
            }
        case .android:
            let bundle = try body.optionalString("bundle_id") ?? Device.androidBundleID
            guard bundle == Device.androidBundleID else {
                throw JSONFieldError.invalid("bundle_id", "must be omitted or \(Device.androidBundleID) for Android, got \"\(bundle)\"")
            }
            bundleID = bundle
            // An FCM token is opaque and stored as sent; empty counts as absent.
            if let token = try body.optionalString("push_token"), !token.isEmpty {
                guard token.count <= Self.maximumAndroidTokenLength else {
                    throw JSONFieldError.invalid("push_token", "must be at most \(Self.maximumAndroidTokenLength) characters, got \(token.count)")
                }
                guard !token.unicodeScalars.contains(where: { $0.properties.isWhitespace || $0.properties.generalCategory == .control }) else {
                    throw JSONFieldError.invalid("push_token", "must not contain whitespace")
                }
                pushToken = token
            } else {
                pushToken = nil
            }
            // Android has no APNs environment and no Live Activities: these fields are ignored, whatever they hold.
            pushEnvironment = nil
            liveStartToken = nil
        case .web:
            // Unreachable from this body (platform is ios or android above): browsers register through Web Push.
            throw JSONFieldError.invalid("platform", "a browser subscribes through POST /api/v1/console/webpush/subscriptions")
        }
    }

    /// Trimmed and lower-cased; empty counts as absent.
    static func normalisedToken(_ text: String?) -> String? {
        guard let token = text.map(SchemaWhitespace.trim)?.lowercased(), !token.isEmpty else { return nil }
        return token
    }

    private static func isIDCharacter(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar {
        case "a"..."z", "A"..."Z", "0"..."9", ".", "_", ":", "-": return true
        default: return false
        }
    }
}
