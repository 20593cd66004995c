import ChannelAPI
import Foundation
import GatewayTestSupport
import JSON
import Testing

/// What the Slack, Discord and WhatsApp tests share: sends as the framework makes them, and reading outcomes.
enum ChatTestKit {
    static func send(_ text: String, to destination: String, channel: String, id: String = UUID().uuidString, attempt: Int = 1) -> ChannelSend {
        ChannelSend(id: id, channel: channel, destination: destination,
                    output: Output(agentID: "helper", agentName: "Helper", sessionID: "session-1", parts: [text]),
                    attempt: attempt, createdAt: Date())
    }

    /// The reason of any outcome but `delivered`.
    static func reason(_ outcome: ChannelSendOutcome) -> String? {
        switch outcome {
        case .delivered: nil
        case .retry(_, let reason), .rejected(let reason), .failed(let reason): reason
        }
    }

    static func isRejected(_ outcome: ChannelSendOutcome) -> Bool {
        if case .rejected = outcome { true } else { false }
    }

    static func isRetry(_ outcome: ChannelSendOutcome) -> Bool {
        if case .retry = outcome { true } else { false }
    }

    static func retryAfter(_ outcome: ChannelSendOutcome) -> Duration? {
        if case .retry(let after, _) = outcome { after } else { nil }
    }

    static func remoteID(_ outcome: ChannelSendOutcome) -> String? {
        if case .delivered(let id) = outcome { id } else { nil }
    }

    /// No secret appears in the outcome's reason.
    static func expectNoSecret(_ outcome: ChannelSendOutcome, _ secrets: [String], sourceLocation: SourceLocation = #_sourceLocation) {
        guard let reason = reason(outcome) else { return }
        for secret in secrets {
            #expect(!reason.contains(secret), "a secret in the reason: \(reason)", sourceLocation: sourceLocation)
        }
    }

    /// A JSON object's keys, to check a request carries exactly what the service documents.
    static func keys(_ value: JSONValue?) -> Set<String> {
        Set(value?.objectValue?.keys.map { $0 } ?? [])
    }

    /// The request body the stand-in recorded, parsed.
    static func body(_ request: JSONValue) throws -> JSONValue {
        try JSONValue.parse(Array((request["body"]?.stringValue ?? "").utf8))
    }

    /// Text made of numbered paragraphs, `count` characters long in all, so pieces can be told apart.
    static func paragraphs(totalCharacters count: Int, paragraph: Int = 100) -> String {
        var text = ""
        var index = 0
        while text.count < count {
            let head = "¶\(index) "
            let line = head + String(repeating: "x", count: max(0, paragraph - 2 - head.count))
            text += (text.isEmpty ? "" : "\n\n") + line
            index += 1
        }
        return String(text.prefix(count))
    }
}
