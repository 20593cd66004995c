import Foundation

/// Secrets handed over by systemd's `LoadCredential=` (systemd.exec(5)): the unit copies them into
/// `$CREDENTIALS_DIRECTORY`, readable by this service only, and they become the files the settings name, unless a
/// setting already names a file of its own.
public enum SystemdCredentials {
    /// Credential names the units in deploy/ use, and the setting each one fills.
    public static let files: [(credential: String, setting: String)] = [
        ("apns.p8", "SOULACY_MOBILE_APNS_PRIVATE_KEY_FILE"),
        ("fcm-service-account.json", "SOULACY_MOBILE_FCM_CREDENTIALS_FILE"),
    ]

    public static func apply(to environment: [String: String]) -> [String: String] {
        guard let directory = environment["CREDENTIALS_DIRECTORY"], !directory.isEmpty else { return environment }
        var result = environment
        for (credential, setting) in files where (result[setting] ?? "").isEmpty {
            let path = directory + "/" + credential
            if FileManager.default.fileExists(atPath: path) { result[setting] = path }
        }
        return result
    }
}
