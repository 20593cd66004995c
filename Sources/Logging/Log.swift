import Foundation

/// One log line as a handler receives it.
public struct LogRecord: Sendable, Equatable {
    public let date: Date
    public let level: Log.Level
    public let message: String
    /// Context set with `Log.with(_:_:)` (a run id, a device id), in key order when printed.
    public let metadata: [String: String]

    /// `2026-12-03T00:59:46Z info message key=value …`, the line `StandardErrorLogHandler` writes.
    public var line: String {
        let context = metadata.sorted { $0.key < $1.key }.map { " \($0.key)=\($0.value)" }.joined()
        return "\(date.formatted(.iso8601)) \(level.rawValue) \(message)\(context)"
    }
}

/// Where log lines go: stderr in the executables, memory in tests (`ChannelTesting.MemoryLogHandler`).
public protocol LogHandler: Sendable {
    func write(_ record: LogRecord)
}

/// Plain lines on stderr.
public struct StandardErrorLogHandler: LogHandler {
    public init() {}
    public func write(_ record: LogRecord) { FileHandle.standardError.write(Data((record.line + "\n").utf8)) }
}

/// A logger value (swift-log's shape): a level, metadata and a handler, handed by the host to every plugin.
/// Callers pass no secrets: keys, codes, tokens and agent output stay out of logs.
public struct Log: Sendable {
    public enum Level: String, Sendable, Comparable {
        case debug, info, warning, error
        private var rank: Int { [.debug: 0, .info: 1, .warning: 2, .error: 3][self]! }
        public static func < (a: Level, b: Level) -> Bool { a.rank < b.rank }
    }

    public var minimum: Level
    public var metadata: [String: String] = [:]
    public var handler: any LogHandler

    public init(minimum: Level = .info, handler: any LogHandler = StandardErrorLogHandler()) {
        self.minimum = minimum
        self.handler = handler
    }

    /// The same logger with one more piece of context on every line.
    public func with(_ key: String, _ value: String) -> Log {
        var copy = self
        copy.metadata[key] = value
        return copy
    }

    public func log(_ level: Level, _ message: @autoclosure () -> String) {
        guard level >= minimum else { return }
        handler.write(LogRecord(date: Date(), level: level, message: message(), metadata: metadata))
    }

    public func debug(_ message: @autoclosure () -> String) { log(.debug, message()) }
    public func info(_ message: @autoclosure () -> String) { log(.info, message()) }
    public func warning(_ message: @autoclosure () -> String) { log(.warning, message()) }
    public func error(_ message: @autoclosure () -> String) { log(.error, message()) }
}
