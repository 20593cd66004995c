import ChannelAPI

/// The channels a block with an optional `bots:` list stands for, under the original's ids (Slack and Discord in
/// both originals): without `bots:` the block itself is the channel `<kind>`; with it, each row is a bot of its
/// own and the block's own token is not used: row 0 is `<kind>`, row i > 0 is `<kind>-<agent_id>` (the agent id
/// with every character outside A-Z a-z 0-9 _ - turned into `-`).
public enum BotRows {
    /// The keys a bot row takes from its block when it does not set them itself: where the service is, not who
    /// the bot is.
    public static let inherited = ["api_url", "ca_file", "timeout_seconds"]

    /// Each channel's id and settings; a row's settings name its keys `channels.<kind>.bots[<i>].<key>`.
    public static func resolve(_ settings: ChannelSettings) throws(ChannelConfigError) -> [(id: String, settings: ChannelSettings)] {
        let rows = try settings.blocks("bots")
        guard !rows.isEmpty else { return [(settings.kind, settings)] }
        var resolved: [(id: String, settings: ChannelSettings)] = []
        for (index, row) in rows.enumerated() {
            var values = row.values
            for key in inherited where values[key] == nil {
                values[key] = settings.values[key]
            }
            let rowSettings = ChannelSettings(kind: "\(settings.kind).bots[\(index)]", values: values)
            let id: String
            if index == 0 {
                id = settings.kind
            } else {
                guard let agent = rowSettings.string("agent_id") else {
                    throw ChannelConfigError(field: rowSettings.field("agent_id"),
                                             problem: "is required for every bot after the first (its channel id is \(settings.kind)-<agent_id>)")
                }
                id = "\(settings.kind)-\(sanitizedID(agent))"
            }
            if resolved.contains(where: { $0.id == id }) {
                throw ChannelConfigError(field: rowSettings.field("agent_id"), problem: "gives the channel id '\(id)' a second time")
            }
            resolved.append((id, rowSettings))
        }
        return resolved
    }

    /// Each bot's `default_output_to` under its channel id; the block's own default belongs to `<kind>` unless
    /// row 0 sets one of its own (as the original reads the block, then its rows).
    public static func defaultOutputs(_ settings: ChannelSettings) throws(ChannelConfigError) -> [String: DefaultOutput] {
        var defaults = DefaultOutput(settings).map { [settings.kind: $0] } ?? [:]
        for (id, row) in try resolve(settings) {
            if let own = DefaultOutput(row) { defaults[id] = own }
        }
        return defaults
    }

    /// The original's `sanitizeID`: keeps `[A-Za-z0-9_-]`, maps every other character to `-`.
    public static func sanitizedID(_ text: String) -> String {
        // Per Unicode scalar, as Go ranges over runes.
        String(String.UnicodeScalarView(text.unicodeScalars.map { scalar in
            switch scalar {
            case "A"..."Z", "a"..."z", "0"..."9", "_", "-": scalar
            default: "-"
            }
        }))
    }
}
