import ChannelAPI

extension Device {
    /// What a browser's row holds as its bundle id (the column is not null; a browser has no app bundle).
    public static let webBundleID = "web"
}

extension DeviceRegistration {
    /// A browser subscribed through Web Push (`POST /api/v1/console/webpush/subscriptions`): notifications on, no
    /// APNs environment or Live Activities, and as push token the subscription sealed by the Web Push transport
    /// (opaque here: the store keeps it as it keeps any token, and clears it when the push service says it is gone).
    public init(browserID id: String, name: String, sealedSubscription: String) {
        self.id = id
        self.name = name
        platform = .web
        bundleID = Device.webBundleID
        pushToken = sealedSubscription
        pushEnvironment = nil
        notificationsEnabled = true
        liveStartToken = nil
        capabilities = []
    }
}
