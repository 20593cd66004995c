import ChannelAPI
import Foundation
import HTTPClient

/// One dry call of a chat channel's probe: the request, the answer or a failed result saying the service was not
/// reached, and the service's clock from the answer's `Date` header.
public enum ProbeCall {
    /// `secrets` are taken out of any text that may quote the request (libcurl's errors can quote the URL).
    public static func send(_ request: ClientRequest, client: HTTP2Client, service: String, secrets: [String],
                            fix: String) async -> Result<(ClientResponse, ServiceClockReading?), ProbeFailure> {
        let response: ClientResponse
        do {
            response = try await client.send(request)
        } catch {
            return .failure(ProbeFailure(result: ProbeResult.fail("\(service) unreachable at \(host(of: request.url)): \(error.description)", fix: fix)
                .redacting(secrets)))
        }
        let clock = ServiceClockReading(service: service, dateHeader: response.headers["date"], credentialsAreTimeBound: false)
        return .success((response, clock))
    }

    /// The scheme, host and port of a URL, never its path (which can carry a token, as Telegram's does).
    public static func host(of url: String) -> String {
        guard let components = URLComponents(string: url), let host = components.host else { return "the configured api_url" }
        return "\(components.scheme ?? "https")://\(host)\(components.port.map { ":\($0)" } ?? "")"
    }
}

/// A probe that ended before an answer could be read, with the result to report.
public struct ProbeFailure: Error, Sendable {
    public let result: ProbeResult
}
