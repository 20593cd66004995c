import ChannelAPI

/// The original lets these blocks' `default_output_to` stand for their URL. Such a default is the block's own
/// target, named by an empty `to`, so the URL (which carries the webhook's key) never becomes a run's destination.
enum WebhookDefaultOutputs {
    static func own(_ settings: ChannelSettings, urlKeys: [String]) -> [String: DefaultOutput] {
        guard let configured = settings.string("default_output_to") else { return [:] }
        let isTheURL = urlKeys.allSatisfy { settings.string($0) == nil }
        return [settings.kind: DefaultOutput(to: isTheURL ? "" : configured, template: settings.string("default_output_template"),
                                             botName: settings.string("bot_name"))]
    }
}

extension WebhookChannelFactory {
    /// `default_output_to` is the block's URL when `url` is absent; beside a `url`, it names an endpoint or a URL.
    public func defaultOutputs(_ settings: ChannelSettings) throws(ChannelConfigError) -> [String: DefaultOutput] {
        WebhookDefaultOutputs.own(settings, urlKeys: ["url"])
    }
}

extension TeamsChannelFactory {
    /// `default_output_to` is the incoming webhook's URL (an alias of `webhook_url`): the block's own target.
    public func defaultOutputs(_ settings: ChannelSettings) throws(ChannelConfigError) -> [String: DefaultOutput] {
        WebhookDefaultOutputs.own(settings, urlKeys: ["webhook_url", "url"])
    }
}

extension GoogleChatChannelFactory {
    /// As Teams: `default_output_to` is the space's webhook URL.
    public func defaultOutputs(_ settings: ChannelSettings) throws(ChannelConfigError) -> [String: DefaultOutput] {
        WebhookDefaultOutputs.own(settings, urlKeys: ["webhook_url", "url"])
    }
}
