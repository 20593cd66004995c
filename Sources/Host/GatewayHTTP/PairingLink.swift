import Storage
import Household
import APIKit
import Crypto
import Foundation
import LLM
import Synchronization
import Identity
import Mobile
import ChannelAPI

/// The links a pairing QR code carries.
public enum PairingLink {
    nonisolated(unsafe) static let basePattern = /([Hh][Tt][Tt][Pp][Ss]?):\/\/([A-Za-z0-9.\-]+|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?\/?/

    /// `host:port` of a direct base (`http(s)://host[:port][/]`, the default port by scheme); nil for anything else.
    public static func directAddress(ofBase base: String) -> String? {
        guard let match = base.wholeMatch(of: basePattern) else { return nil }
        let port = match.output.3.map { String($0.dropFirst()) } ?? (match.output.1.lowercased() == "https" ? "443" : "80")
        return "\(match.output.2):\(port)"
    }

    /// The original app's link: `https://<pinned>/mobile?pair=CODE&fp=PIN` over pinned TLS, else `<gateway>/mobile?pair=CODE`.
    public static func original(code: String, gateway: String, pinnedAddress: String? = nil, pin: String? = nil) -> String {
        if let pinnedAddress, let pin, !pin.isEmpty { return "https://\(pinnedAddress)/mobile?pair=\(code)&fp=\(pin)" }
        return "\(gateway)/mobile?pair=\(code)"
    }

    /// This gateway's three-path link: `lan` is where pinned TLS answers, `fp` its pin (the same as the original's).
    public static func url(offer: PairingOffer, gateway: String, pinnedAddress: String? = nil, pin: String? = nil) -> String {
        var components = URLComponents()
        components.scheme = "soulacy"
        components.host = "pair"
        var items = [URLQueryItem(name: "v", value: "1"), URLQueryItem(name: "code", value: offer.code),
                     URLQueryItem(name: "gateway", value: gateway), URLQueryItem(name: "name", value: offer.name)]
        if let pinnedAddress, let pin, !pin.isEmpty {
            items.append(URLQueryItem(name: "lan", value: pinnedAddress))
            items.append(URLQueryItem(name: "fp", value: pin))
        }
        components.queryItems = items
        return components.string ?? "soulacy://pair?v=1&code=\(offer.code)"
    }
}
