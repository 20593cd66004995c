import ChannelAPI
import ChannelSupport
import Foundation
import HTTPClient
import JSON

/// `soulacy doctor`'s dry call for a Slack bot: `auth.test` ("Checks authentication & identity",
/// https://api.slack.com/methods/auth.test), which names the workspace and the bot and posts nothing.
extension SlackChannel: ServiceProbe {
    public func probe() async -> ProbeResult {
        struct Identity: Decodable {
            let ok: Bool
            let error: String?
            let team: String?
            let user: String?
        }
        let secrets = [configuration.botToken, configuration.appToken].compactMap { $0 }
        let fix = "check bot_token of '\(name)' under channels.slack (the Bot User OAuth Token, xoxb-…), and api_url if one is set"
        let request = ClientRequest(method: "POST", url: configuration.apiURL + "/auth.test",
                                    headers: [("Authorization", "Bearer \(configuration.botToken)"),
                                              ("Content-Type", "application/x-www-form-urlencoded"), ("Accept", "application/json")],
                                    timeout: configuration.timeout)
        let client = HTTP2Client(configuration: HTTP2ClientConfiguration(caFile: configuration.caFile))
        let response: ClientResponse, clock: ServiceClockReading?
        switch await ProbeCall.send(request, client: client, service: "Slack", secrets: secrets, fix: fix) {
        case .failure(let failure): return failure.result
        case .success(let answer): (response, clock) = answer
        }
        let answer = try? JSONCoding.decode(Identity.self, from: response.body, what: "Slack's answer")
        let result: ProbeResult
        if response.status == 200, let answer, answer.ok {
            result = .ok("auth.test: the token is accepted (bot \(answer.user ?? "?") in the workspace \(answer.team ?? "?"))", clock: clock)
        } else if response.status == 200, let code = answer?.error {
            switch SlackError(rawValue: code) {
            case .invalidAuth, .notAuthed, .tokenRevoked, .accountInactive:
                result = .fail("auth.test: Slack refused the bot token (\(code))", fix: fix, clock: clock)
            case .rateLimited:
                result = .warn("auth.test: Slack answered \(code); try again later", clock: clock)
            default:
                result = .fail("auth.test: Slack answered \(code)", fix: fix, clock: clock)
            }
        } else if response.status == 429 || response.status >= 500 {
            result = .warn("auth.test: Slack answered \(response.status); try again later", clock: clock)
        } else {
            result = .fail("auth.test: Slack answered \(response.status) \(HTTPOutcome.excerpt(response.body) ?? "")", fix: fix, clock: clock)
        }
        return result.redacting(secrets)
    }
}
