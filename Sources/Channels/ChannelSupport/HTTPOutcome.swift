import ChannelAPI
import Foundation
import HTTPClient

/// The usual meaning of an HTTP answer for a channel's attempt: 2xx delivered, 408/425/429/5xx again later
/// (after `Retry-After` when given), any other 4xx refused for good with the service's own words.
public enum HTTPOutcome {
    /// `service` names it in reasons ("Slack answered 403: invalid_auth"); `detail` is the service's message.
    public static func classify(_ response: ClientResponse, service: String, detail: String?, retryAfter: Duration? = nil,
                                remoteID: String? = nil) -> ChannelSendOutcome {
        let words = detail.map { ": \($0)" } ?? ""
        switch response.status {
        case 200..<300:
            return .delivered(remoteID: remoteID)
        case 408, 425, 429, 500..<600:
            return .retry(after: retryAfter ?? RetryAfter.parse(response.headers["retry-after"]), reason: "\(service) answered \(response.status)\(words)")
        default:
            return .rejected(reason: "\(service) answered \(response.status)\(words)")
        }
    }

    /// A request that did not get an answer: worth another try, unless it can never be sent as it is.
    public static func transportFailure(_ error: ClientTransportError, service: String) -> ChannelSendOutcome {
        .retry(after: nil, reason: "could not reach \(service): \(error.description)")
    }

    /// Up to `limit` bytes of a body as text, for a reason line when the service gave no structured message.
    public static func excerpt(_ body: [UInt8], limit: Int = 300) -> String? {
        guard !body.isEmpty else { return nil }  // most answers (a 204, a 200 without a body): no string to build
        let text = String(decoding: body.prefix(limit), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        return text.isEmpty ? nil : text
    }
}
