import ChannelAPI
import ChannelSupport
import Foundation
import HTTPClient
import JSON

/// `soulacy doctor`'s dry call for a Discord bot: Get Current User (`GET /users/@me`, "Returns the user object of
/// the requester's account", https://discord.com/developers/docs/resources/user#get-current-user). Nothing is posted.
extension DiscordChannel: ServiceProbe {
    public func probe() async -> ProbeResult {
        struct CurrentUser: Decodable {
            let id: String
            let username: String?
        }
        let fix = "check token of '\(name)' under channels.discord (the bot's token from the Developer Portal, without 'Bot '), and api_url if one is set"
        let request = ClientRequest(method: "GET", url: configuration.apiURL + "/users/@me",
                                    headers: [("Authorization", "Bot \(configuration.token)"), ("User-Agent", Self.userAgent)],
                                    timeout: configuration.timeout)
        let client = HTTP2Client(configuration: HTTP2ClientConfiguration(caFile: configuration.caFile))
        let response: ClientResponse, clock: ServiceClockReading?
        switch await ProbeCall.send(request, client: client, service: "Discord", secrets: [configuration.token], fix: fix) {
        case .failure(let failure): return failure.result
        case .success(let answer): (response, clock) = answer
        }
        let result: ProbeResult
        if (200..<300).contains(response.status) {
            let user = try? JSONCoding.decode(CurrentUser.self, from: response.body, what: "Discord's answer")
            result = .ok("GET /users/@me: the token is accepted (bot \(user?.username ?? "?") id \(user?.id ?? "?"))", clock: clock)
        } else {
            let error = try? JSONCoding.decode(DiscordError.self, from: response.body, what: "Discord's answer")
            let summary = error.map(\.summary) ?? HTTPOutcome.excerpt(response.body) ?? "no message"
            // Discord's own message often starts with the status ("401: Unauthorized").
            let words = summary.hasPrefix("\(response.status)") ? summary : "\(response.status) \(summary)"
            switch response.status {
            case 401, 403:
                result = .fail("GET /users/@me: Discord refused the bot token (\(words))", fix: fix, clock: clock)
            case 429, 500..<600:
                result = .warn("GET /users/@me: Discord answered \(words); try again later", clock: clock)
            default:
                result = .fail("GET /users/@me: Discord answered \(words)", fix: fix, clock: clock)
            }
        }
        return result.redacting([configuration.token])
    }
}
