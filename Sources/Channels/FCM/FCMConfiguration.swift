import Crypto
import Foundation
import JSON

/// The service account and project the FCM transport sends as, read from SOULACY_MOBILE_FCM_*.
public struct FCMConfiguration: Sendable {
    public static let defaultBaseURL = "https://fcm.googleapis.com"
    public static let messagingScope = "https://www.googleapis.com/auth/firebase.messaging"

    public var projectID: String
    public var clientEmail: String
    public var privateKeyID: String?
    /// PEM text of the account's RSA key; never logged.
    public var privateKeyPEM: String
    public var tokenURI: String
    public var credentialsFile: String
    public var baseURL: String
    public var caFile: String?

    public init(projectID: String, clientEmail: String, privateKeyID: String?, privateKeyPEM: String, tokenURI: String,
                credentialsFile: String = "(inline)", baseURL: String = Self.defaultBaseURL, caFile: String? = nil) {
        self.projectID = projectID
        self.clientEmail = clientEmail
        self.privateKeyID = privateKeyID
        self.privateKeyPEM = privateKeyPEM
        self.tokenURI = tokenURI
        self.credentialsFile = credentialsFile
        self.baseURL = baseURL
        self.caFile = caFile
    }

    /// nil when FCM is not configured; an error naming the file and the field when it is configured wrongly.
    public static func fromEnvironment(_ env: [String: String]) throws(FCMConfigurationError) -> FCMConfiguration? {
        guard let file = env["SOULACY_MOBILE_FCM_CREDENTIALS_FILE"] else {
            if env["SOULACY_MOBILE_FCM_PROJECT_ID"] != nil { throw .missingFile }
            return nil
        }
        let text: String
        do { text = try SecretFile.read(file, variable: "SOULACY_MOBILE_FCM_CREDENTIALS_FILE") } catch { throw .file(error) }
        guard let object = try? JSONCoding.decode([String: JSONValue].self, from: text) else {
            throw .invalid(file, "it is not a JSON object (download the service-account key as JSON)")
        }
        func field(_ name: String) throws(FCMConfigurationError) -> String {
            guard let value = object[name]?.stringValue, !value.isEmpty else { throw .invalid(file, "the field '\(name)' is missing or empty") }
            return value
        }
        let type = try field("type")
        guard type == "service_account" else { throw .invalid(file, "type is '\(type)'; a service-account key has type 'service_account'") }
        let email = try field("client_email")
        let key = try field("private_key")
        let tokenURI = try field("token_uri")
        guard tokenURI.hasPrefix("https://") else { throw .invalid(file, "token_uri must be an https URL") }
        let project: String
        if let override = env["SOULACY_MOBILE_FCM_PROJECT_ID"], !override.isEmpty { project = override } else { project = try field("project_id") }
        guard project.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == ":" || $0 == "." }) else {
            throw .invalid(file, "project id '\(project)' has characters a Firebase project id cannot have")
        }
        return FCMConfiguration(projectID: project, clientEmail: email, privateKeyID: object["private_key_id"]?.stringValue,
                                privateKeyPEM: key, tokenURI: tokenURI, credentialsFile: file,
                                baseURL: env["SOULACY_MOBILE_FCM_URL"] ?? defaultBaseURL, caFile: env["SOULACY_MOBILE_FCM_CA_FILE"])
    }
}

public enum FCMConfigurationError: Error, Sendable, Equatable, CustomStringConvertible {
    case missingFile
    case file(SecretFileError)
    case invalid(String, String)
    case unusableKey(String, String)

    public var description: String {
        switch self {
        case .missingFile: return "SOULACY_MOBILE_FCM_PROJECT_ID is set but SOULACY_MOBILE_FCM_CREDENTIALS_FILE is not"
        case .file(let error): return error.description
        case let .invalid(file, why): return "SOULACY_MOBILE_FCM_CREDENTIALS_FILE: \(file): \(why)"
        case let .unusableKey(file, why): return "SOULACY_MOBILE_FCM_CREDENTIALS_FILE: \(file): private_key cannot be used: \(why)"
        }
    }
}
