import Foundation
import JSON

/// One message of a conversation with a model, in the shape all three wire formats can carry.
public struct ChatMessage: Sendable, Equatable {
    public enum Role: String, Sendable { case system, user, assistant, tool }
    public var role: Role
    public var content: String
    /// An assistant turn's tool calls.
    public var toolCalls: [ToolCall] = []
    /// A tool result's call id and tool name.
    public var toolCallID: String?
    public var toolName: String?

    public init(role: Role, content: String, toolCalls: [ToolCall] = [], toolCallID: String? = nil, toolName: String? = nil) {
        self.role = role
        self.content = content
        self.toolCalls = toolCalls
        self.toolCallID = toolCallID
        self.toolName = toolName
    }

    public static func system(_ text: String) -> ChatMessage { ChatMessage(role: .system, content: text) }
    public static func user(_ text: String) -> ChatMessage { ChatMessage(role: .user, content: text) }
    public static func assistant(_ text: String, toolCalls: [ToolCall] = []) -> ChatMessage { ChatMessage(role: .assistant, content: text, toolCalls: toolCalls) }
    public static func toolResult(_ text: String, for call: ToolCall) -> ChatMessage {
        ChatMessage(role: .tool, content: text, toolCallID: call.id, toolName: call.name)
    }
}

/// A tool the model asked to call; `arguments` is the JSON object it gave.
public struct ToolCall: Sendable, Equatable {
    public var id: String
    public var name: String
    public var arguments: JSONValue

    public init(id: String, name: String, arguments: JSONValue) {
        self.id = id
        self.name = name
        self.arguments = arguments
    }
}

/// A tool offered to the model: its parameters are a JSON Schema object.
public struct ToolSpec: Sendable, Equatable {
    public var name: String
    public var description: String
    public var parameters: JSONValue

    public init(name: String, description: String, parameters: JSONValue) {
        self.name = name
        self.description = description
        self.parameters = parameters
    }
}

public struct ChatRequest: Sendable {
    public var model: String
    public var messages: [ChatMessage]
    public var tools: [ToolSpec] = []
    public var temperature: Double?
    public var topP: Double?
    /// 0 means the provider's default.
    public var maxTokens: Int = 0
    /// `auto`, `none`, `required` or a tool name; nil leaves it to the provider.
    public var toolChoice: String?
    /// The longest one attempt may take.
    public var timeout: Duration = .seconds(300)
    /// When the whole call, retries and their waits included, must be over (the run's deadline); nil means
    /// `timeout` from the call's start. A retry whose wait would end past it is not made.
    public var deadline: ContinuousClock.Instant?
    /// Told before each retry (the run's events). It gets the status, the attempt and the wait, never the prompt or the answer.
    public var onRetry: (@Sendable (ProviderRetry) async -> Void)?

    public init(model: String, messages: [ChatMessage]) {
        self.model = model
        self.messages = messages
    }
}

public struct ChatReply: Sendable, Equatable {
    public var text: String
    public var toolCalls: [ToolCall]
    /// Why the model stopped (`stop`, `tool_calls`, `end_turn`, `length`, …) as the provider says it.
    public var finishReason: String?

    public init(text: String, toolCalls: [ToolCall] = [], finishReason: String? = nil) {
        self.text = text
        self.toolCalls = toolCalls
        self.finishReason = finishReason
    }
}

/// Why a model call failed; the description never holds the API key.
public struct LLMError: Error, Sendable, Equatable, CustomStringConvertible {
    /// `notSent`: the call waited for a free connection to the provider until its time was up, and never went out.
    public enum Kind: String, Sendable { case unreachable, timedOut, notSent, rejected, refused, malformed, notConfigured }
    public var kind: Kind
    public var message: String

    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    public var description: String { message }
}

/// The provider seam: one conversation turn against one wire format.
public protocol ChatProvider: Sendable {
    /// The provider id as agent files name it (`ollama`, `openai`, `anthropic`, …).
    var id: String { get }
    var defaultModel: String { get }
    func complete(_ request: ChatRequest) async throws(LLMError) -> ChatReply
    /// The same turn, its text handed to `onText` piece by piece as the provider streams it. Only a turn without
    /// tools streams (as Soulacy streams a tool-less agent's reply); with tools this is `complete`.
    func stream(_ request: ChatRequest, onText: @escaping @Sendable (String) -> Void) async throws(LLMError) -> ChatReply
}
