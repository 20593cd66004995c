import ChannelAPI
import ChannelSupport
import Foundation
import HTTPClient

/// `soulacy doctor`'s dry call for a bot: `getMe` ("A simple method for testing your bot's authentication token",
/// https://core.telegram.org/bots/api#getme). It reads the bot's own User and sends nothing to anyone.
extension TelegramChannel: ServiceProbe {
    public func probe() async -> ProbeResult {
        struct NoParameters: Encodable {}
        struct Bot: Decodable {
            let id: Int64
            let username: String?
        }
        let fix = "check the token of the bot '\(name)' under channels.telegram (BotFather's /token), and api_url if one is set"
        let request: ClientRequest
        do { request = try api.request("getMe", body: NoParameters(), timeout: .seconds(15)) } catch {
            return .fail("cannot build the getMe request: \(error)")
        }
        let response: ClientResponse, clock: ServiceClockReading?
        switch await ProbeCall.send(request, client: client, service: "Telegram", secrets: [api.token], fix: fix) {
        case .failure(let failure): return failure.result
        case .success(let answer): (response, clock) = answer
        }
        let answer = TelegramAnswer<Bot>.decode(response.body)
        let result: ProbeResult
        if response.status == 200, answer?.ok == true, let bot = answer?.result {
            result = .ok("getMe: the token is accepted (bot \(bot.username.map { "@\($0)" } ?? "") id \(bot.id))", clock: clock)
        } else {
            let words = answer?.description ?? HTTPOutcome.excerpt(response.body) ?? "no description"
            switch response.status {
            case 401, 404:
                // Telegram answers 404 to a token it does not know the shape of, 401 to one it does not know.
                result = .fail("getMe: Telegram refused the bot token (\(response.status) \(words))", fix: fix, clock: clock)
            case 429, 500..<600:
                result = .warn("getMe: Telegram answered \(response.status) \(words); try again later", clock: clock)
            default:
                result = .fail("getMe: Telegram answered \(response.status) \(words)", fix: fix, clock: clock)
            }
        }
        return result.redacting([api.token])
    }
}
