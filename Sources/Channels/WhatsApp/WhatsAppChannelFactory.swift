import ChannelAPI
import ChannelSupport

/// Builds the WhatsApp channel from `channels.whatsapp` as the Soulacy user wrote it:
///
/// ```yaml
/// channels:
///   whatsapp:
///     enabled: true
///     phone_number_id: "106540352242922"   # quoted, though a bare number is accepted here
///     access_token: EAAG…                   # `token`, as default.yaml names it, is accepted too
///     api_version: v20.0                    # optional
///     api_url: https://graph.facebook.com   # a proxy or a stand-in
///     ca_file: /etc/ssl/private-ca.pem
/// ```
/// `verify_token` and `app_secret` belong to the inbound webhook and are not read here.
public struct WhatsAppChannelFactory: ChannelFactory {
    public let kind = "whatsapp"

    public init() {}

    public func make(_ settings: ChannelSettings) throws(ChannelConfigError) -> [any OutboundChannel] {
        guard try settings.bool("enabled") == true else { return [] }
        return [WhatsAppChannel(configuration: try configuration(settings))]
    }

    public func configuration(_ settings: ChannelSettings) throws(ChannelConfigError) -> WhatsAppConfiguration {
        // The original reads only a YAML string and silently skips the channel for a bare number; a number whose
        // digits survive YAML's float reading is taken here as the same id (a longer one must be quoted).
        let phoneNumberID = try settings.requiredString("phone_number_id")
        guard phoneNumberID.unicodeScalars.allSatisfy({ ("0"..."9").contains($0) }) else {
            let hint = settings.values["phone_number_id"].flatMap { if case .number = $0 { return true } else { return nil } } == true
                ? "; quote it, a bare number this long loses digits in YAML" : ""
            throw ChannelConfigError(field: settings.field("phone_number_id"),
                                     problem: "must be the Cloud API's phone number id (digits, from WhatsApp Manager → API Setup), not the phone number\(hint)")
        }
        let accessToken = try self.accessToken(settings)
        let version = try apiVersion(settings)
        return WhatsAppConfiguration(phoneNumberID: phoneNumberID, accessToken: accessToken, apiVersion: version,
                                     apiURL: try settings.apiURL(default: "https://graph.facebook.com"), caFile: settings.caFile,
                                     timeout: .seconds(try settings.int("timeout_seconds", in: 1...300) ?? 15))
    }

    /// `access_token`, the key the original's code reads; `token`, the key its default.yaml ships, when only it is set.
    private func accessToken(_ settings: ChannelSettings) throws(ChannelConfigError) -> String {
        switch (settings.string("access_token"), settings.string("token")) {
        case (let access?, let token?) where access != token:
            throw ChannelConfigError(field: settings.field("access_token"), problem: "and \(settings.field("token")) are both set and differ; keep access_token")
        case (let access?, _): return access
        case (nil, let token?): return token
        case (nil, nil): throw ChannelConfigError(field: settings.field("access_token"), problem: "is required (or token, as default.yaml names it)")
        }
    }

    /// `v20.0` unless set; `20.0` is read as `v20.0`.
    private func apiVersion(_ settings: ChannelSettings) throws(ChannelConfigError) -> String {
        guard var version = settings.string("api_version") else { return "v20.0" }
        if version.first?.isNumber == true { version = "v" + version }
        let parts = version.dropFirst().split(separator: ".", omittingEmptySubsequences: false)
        guard version.first == "v", parts.count == 2, parts.allSatisfy({ !$0.isEmpty && $0.allSatisfy(\.isASCII) && $0.allSatisfy(\.isNumber) }) else {
            throw ChannelConfigError(field: settings.field("api_version"), problem: "must be a Graph API version like v20.0, got '\(version)'")
        }
        return version
    }
}
