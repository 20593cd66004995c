import Crypto
import Foundation

/// What the APNs transport needs, read from SOULACY_MOBILE_APNS_* and checked before the gateway starts.
public struct APNsConfiguration: Sendable {
    public static let productionURL = "https://api.push.apple.com"
    public static let sandboxURL = "https://api.sandbox.push.apple.com"

    public var teamID: String
    public var keyID: String
    /// The .p8 key's PEM text; never logged, never sent anywhere but into the signer.
    public var privateKeyPEM: String
    public var keyFile: String
    public var productionURL: String
    public var sandboxURL: String
    /// Trust this CA bundle instead of the system's (for a local stand-in or an inspecting proxy).
    public var caFile: String?

    public init(teamID: String, keyID: String, privateKeyPEM: String, keyFile: String = "(inline)",
                productionURL: String = Self.productionURL, sandboxURL: String = Self.sandboxURL, caFile: String? = nil) {
        self.teamID = teamID
        self.keyID = keyID
        self.privateKeyPEM = privateKeyPEM
        self.keyFile = keyFile
        self.productionURL = productionURL
        self.sandboxURL = sandboxURL
        self.caFile = caFile
    }

    /// nil when APNs is not configured (no variable set); an error when it is configured wrongly.
    public static func fromEnvironment(_ env: [String: String]) throws(APNsConfigurationError) -> APNsConfiguration? {
        let team = env["SOULACY_MOBILE_APNS_TEAM_ID"]
        let key = env["SOULACY_MOBILE_APNS_KEY_ID"]
        let file = env["SOULACY_MOBILE_APNS_PRIVATE_KEY_FILE"]
        if team == nil && key == nil && file == nil { return nil }
        guard let team, !team.isEmpty else { throw .missing("SOULACY_MOBILE_APNS_TEAM_ID") }
        guard let key, !key.isEmpty else { throw .missing("SOULACY_MOBILE_APNS_KEY_ID") }
        guard let file, !file.isEmpty else { throw .missing("SOULACY_MOBILE_APNS_PRIVATE_KEY_FILE") }
        guard team.count == 10, team.allSatisfy({ $0.isASCII && ($0.isUppercase || $0.isNumber) }) else {
            throw .invalid("SOULACY_MOBILE_APNS_TEAM_ID", "an Apple team id is 10 upper-case letters and digits")
        }
        guard key.count == 10, key.allSatisfy({ $0.isASCII && ($0.isUppercase || $0.isNumber) }) else {
            throw .invalid("SOULACY_MOBILE_APNS_KEY_ID", "an APNs key id is 10 upper-case letters and digits")
        }
        let pem: String
        do { pem = try SecretFile.read(file, variable: "SOULACY_MOBILE_APNS_PRIVATE_KEY_FILE") } catch { throw .keyFile(error) }
        return APNsConfiguration(teamID: team, keyID: key, privateKeyPEM: pem, keyFile: file,
                                 productionURL: env["SOULACY_MOBILE_APNS_PRODUCTION_URL"] ?? productionURL,
                                 sandboxURL: env["SOULACY_MOBILE_APNS_SANDBOX_URL"] ?? sandboxURL,
                                 caFile: env["SOULACY_MOBILE_APNS_CA_FILE"])
    }
}

public enum APNsConfigurationError: Error, Sendable, Equatable, CustomStringConvertible {
    case missing(String)
    case invalid(String, String)
    case keyFile(SecretFileError)
    case unusableKey(String, String)

    public var description: String {
        switch self {
        case .missing(let variable): return "APNs is partly configured: \(variable) is not set (set all of SOULACY_MOBILE_APNS_TEAM_ID, _KEY_ID and _PRIVATE_KEY_FILE, or none)"
        case let .invalid(variable, why): return "\(variable): \(why)"
        case .keyFile(let error): return error.description
        case let .unusableKey(file, why): return "the APNs key \(file) cannot be used: \(why)"
        }
    }
}

