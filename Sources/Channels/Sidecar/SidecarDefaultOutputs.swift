import ChannelAPI

extension SidecarChannelFactory {
    /// Each sidecar's `default_output_to` under its `channel` name (one item, or every item of the list).
    public func defaultOutputs(_ settings: ChannelSettings) throws(ChannelConfigError) -> [String: DefaultOutput] {
        let items = settings.values["command"] == nil ? try settings.values["sidecars"].map { v throws(ChannelConfigError) in try Self.blocks(from: v) } ?? [] : [settings]
        var defaults: [String: DefaultOutput] = [:]
        for item in items {
            guard let config = try Self.config(item), let own = DefaultOutput(item) else { continue }
            defaults[config.name] = own
        }
        return defaults
    }
}
