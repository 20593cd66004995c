/// The `reason` of an APNs error response. An open set: a reason Apple adds later still decodes.
public struct APNsReason: RawRepresentable, Sendable, Hashable {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let badCollapseId = APNsReason(rawValue: "BadCollapseId")
    public static let badDeviceToken = APNsReason(rawValue: "BadDeviceToken")
    public static let badExpirationDate = APNsReason(rawValue: "BadExpirationDate")
    public static let badMessageId = APNsReason(rawValue: "BadMessageId")
    public static let badPriority = APNsReason(rawValue: "BadPriority")
    public static let badTopic = APNsReason(rawValue: "BadTopic")
    public static let deviceTokenNotForTopic = APNsReason(rawValue: "DeviceTokenNotForTopic")
    public static let duplicateHeaders = APNsReason(rawValue: "DuplicateHeaders")
    public static let idleTimeout = APNsReason(rawValue: "IdleTimeout")
    public static let invalidPushType = APNsReason(rawValue: "InvalidPushType")
    public static let missingDeviceToken = APNsReason(rawValue: "MissingDeviceToken")
    public static let missingTopic = APNsReason(rawValue: "MissingTopic")
    public static let payloadEmpty = APNsReason(rawValue: "PayloadEmpty")
    public static let topicDisallowed = APNsReason(rawValue: "TopicDisallowed")
    public static let badCertificate = APNsReason(rawValue: "BadCertificate")
    public static let badCertificateEnvironment = APNsReason(rawValue: "BadCertificateEnvironment")
    public static let expiredProviderToken = APNsReason(rawValue: "ExpiredProviderToken")
    public static let forbidden = APNsReason(rawValue: "Forbidden")
    public static let invalidProviderToken = APNsReason(rawValue: "InvalidProviderToken")
    public static let missingProviderToken = APNsReason(rawValue: "MissingProviderToken")
    public static let unrelatedKeyIdInToken = APNsReason(rawValue: "UnrelatedKeyIdInToken")
    public static let badPath = APNsReason(rawValue: "BadPath")
    public static let methodNotAllowed = APNsReason(rawValue: "MethodNotAllowed")
    public static let expiredToken = APNsReason(rawValue: "ExpiredToken")
    public static let unregistered = APNsReason(rawValue: "Unregistered")
    public static let payloadTooLarge = APNsReason(rawValue: "PayloadTooLarge")
    public static let tooManyProviderTokenUpdates = APNsReason(rawValue: "TooManyProviderTokenUpdates")
    public static let tooManyRequests = APNsReason(rawValue: "TooManyRequests")
    public static let internalServerError = APNsReason(rawValue: "InternalServerError")
    public static let serviceUnavailable = APNsReason(rawValue: "ServiceUnavailable")
    public static let shutdown = APNsReason(rawValue: "Shutdown")

    /// What the dispatcher should do about this answer.
    public enum Action: Sendable, Equatable {
        case retry
        case tokenRejected
        case renewProviderToken
        case permanentFailure
    }

    public func action(status: Int) -> Action {
        switch self {
        case .badDeviceToken, .deviceTokenNotForTopic, .unregistered, .expiredToken:
            return .tokenRejected
        case .expiredProviderToken, .invalidProviderToken, .missingProviderToken:
            return .renewProviderToken
        case .idleTimeout, .tooManyProviderTokenUpdates, .tooManyRequests, .internalServerError, .serviceUnavailable, .shutdown:
            return .retry
        case .badCollapseId, .badExpirationDate, .badMessageId, .badPriority, .badTopic, .duplicateHeaders, .invalidPushType,
             .missingDeviceToken, .missingTopic, .payloadEmpty, .topicDisallowed, .badCertificate, .badCertificateEnvironment,
             .forbidden, .unrelatedKeyIdInToken, .badPath, .methodNotAllowed, .payloadTooLarge:
            return .permanentFailure
        default:
            // A reason we do not know yet: servers' trouble is worth retrying, a refusal of ours is not.
            return status >= 500 || status == 429 ? .retry : (status == 410 ? .tokenRejected : .permanentFailure)
        }
    }
}
