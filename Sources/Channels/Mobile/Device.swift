import ChannelAPI
import Foundation

/// A registered phone installation, owned by one subject.
public struct Device: Sendable, Equatable {
    public static let iosBundleID = "dev.soulacy.ios"
    public static let androidBundleID = "dev.soulacy.android"

    public var id: String
    public var subject: String
    public var name: String
    public var platform: WakeTarget.Platform
    public var bundleID: String
    public var pushToken: String?
    /// APNs environment; nil for Android.
    public var pushEnvironment: WakeTarget.Environment?
    public var notificationsEnabled: Bool
    /// ActivityKit push-to-start token; iOS only.
    public var liveStartToken: String?
    /// Features the app has switched on, such as "canvas".
    public var capabilities: Set<String> = []
    public var createdAt: Date
    public var updatedAt: Date

    public init(id: String, subject: String, name: String, platform: WakeTarget.Platform, bundleID: String, pushToken: String?,
                pushEnvironment: WakeTarget.Environment?, notificationsEnabled: Bool, liveStartToken: String?, capabilities: Set<String> = [],
                createdAt: Date, updatedAt: Date) {
        self.id = id
        self.subject = subject
        self.name = name
        self.platform = platform
        self.bundleID = bundleID
        self.pushToken = pushToken
        self.pushEnvironment = pushEnvironment
        self.notificationsEnabled = notificationsEnabled
        self.liveStartToken = liveStartToken
        self.capabilities = capabilities
        self.createdAt = createdAt
        self.updatedAt = updatedAt
    }

    /// Where a wake-up for this device goes, or nil when it has no token or notifications are off.
    public var wakeTarget: WakeTarget? {
        guard notificationsEnabled, let pushToken else { return nil }
        return WakeTarget(deviceID: id, platform: platform, pushToken: pushToken,
                          environment: pushEnvironment ?? .production, bundleID: bundleID)
    }
}
