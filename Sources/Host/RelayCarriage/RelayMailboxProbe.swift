import ChannelAPI
import Foundation
import HTTPClient
import JSON

/// `soulacy doctor`'s dry call for the relay mailbox (`SOULACY_RELAY_MAILBOX_URL`): its open `GET /health`, which
/// `soulacy-relay` answers `{"ok": true, "service": "soulacy-relay"}`. No mailbox, bearer or item is touched.
public struct RelayMailboxProbe: ServiceProbe {
    public let url: String
    public let caFile: String?

    public init(url: String, caFile: String?) {
        self.url = url.hasSuffix("/") ? String(url.dropLast()) : url
        self.caFile = caFile
    }

    public func probe() async -> ProbeResult {
        struct Health: Decodable {
            let ok: Bool?
            let service: String?
        }
        let fix = "check SOULACY_RELAY_MAILBOX_URL (\(url)) and that soulacy-relay runs there"
            + (caFile.map { "; SOULACY_RELAY_MAILBOX_CA_FILE is \($0)" } ?? "")
        let client = HTTP2Client(configuration: HTTP2ClientConfiguration(caFile: caFile))
        let response: ClientResponse
        do {
            response = try await client.send(ClientRequest(method: "GET", url: url + "/health", timeout: .seconds(10)))
        } catch {
            return .fail("\(url) unreachable: \(error.description)", fix: fix)
        }
        let clock = ServiceClockReading(service: "the relay mailbox", dateHeader: response.headers["date"], credentialsAreTimeBound: false)
        let health = try? JSONCoding.decode(Health.self, from: Data(response.body))
        if response.status == 200, health?.ok == true {
            return .ok("\(url): GET /health answered ok (\(health?.service ?? "a relay"))", clock: clock)
        }
        return .fail("\(url): GET /health answered \(response.status), not a soulacy-relay's health", fix: fix, clock: clock)
    }
}
