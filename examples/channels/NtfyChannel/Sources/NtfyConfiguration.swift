import ChannelAPI
import Foundation

/// One ntfy server's settings, read from `channels.ntfy` (see `NtfyChannelFactory`).
public struct NtfyConfiguration: Sendable, Equatable {
    /// The configured id SOUL.yaml names in `schedule.output.channel`.
    public var id: String
    /// The server's base URL without a trailing slash: `https://ntfy.sh`, or a self-hosted one (a sub-path is fine).
    public var serverURL: String
    /// An access token (`tk_…`, from `ntfy token add` or the web app's Account page), sent as `Bearer`: a secret.
    /// Nil publishes anonymously, as ntfy.sh allows for topics nobody reserved.
    public var token: String?
    /// Every message's priority; nil leaves ntfy's default (3).
    public var priority: NtfyPriority?
    /// Tags (emoji short codes such as `robot` show as emojis), in order.
    public var tags: [String]
    /// Sends `X-Markdown: yes`, so the web app renders the output's Markdown.
    public var markdown: Bool
    public var caFile: String?
    public var timeout: Duration

    public init(id: String = "ntfy", serverURL: String = "https://ntfy.sh", token: String? = nil, priority: NtfyPriority? = nil, tags: [String] = [],
                markdown: Bool = false, caFile: String? = nil, timeout: Duration = .seconds(15)) {
        self.id = id
        self.serverURL = serverURL
        self.token = token
        self.priority = priority
        self.tags = tags
        self.markdown = markdown
        self.caFile = caFile
        self.timeout = timeout
    }
}

/// ntfy's message priority: 1 (min) to 5 (max), 3 being the default. "Message priority" in ntfy's publishing docs.
public struct NtfyPriority: Sendable, Hashable, CustomStringConvertible {
    public let level: Int

    public static let min = NtfyPriority(checked: 1)
    public static let low = NtfyPriority(checked: 2)
    public static let `default` = NtfyPriority(checked: 3)
    public static let high = NtfyPriority(checked: 4)
    public static let max = NtfyPriority(checked: 5)

    private init(checked level: Int) { self.level = level }

    /// The forms ntfy accepts: `1`…`5`, `min`, `low`, `default`, `high`, `max` and its alias `urgent`; nil otherwise.
    public init?(_ text: String) {
        switch text.trimmingCharacters(in: .whitespaces).lowercased() {
        case "1", "min": level = 1
        case "2", "low": level = 2
        case "3", "default": level = 3
        case "4", "high": level = 4
        case "5", "max", "urgent": level = 5
        default: return nil
        }
    }

    public var description: String { String(level) }
}
