import Foundation

/// Plain line logs on stderr, handed by the host to every plugin. Callers pass no secrets: keys, codes, tokens and agent output stay out of logs.
public struct Log: Sendable {
    public enum Level: String, Sendable, Comparable {
        case debug, info, warning, error
        private var rank: Int { [.debug: 0, .info: 1, .warning: 2, .error: 3][self]! }
        public static func < (a: Level, b: Level) -> Bool { a.rank < b.rank }
    }

    public var minimum: Level
    public init(minimum: Level = .info) { self.minimum = minimum }

    public func log(_ level: Level, _ message: @autoclosure () -> String) {
        guard level >= minimum else { return }
        let line = "\(Date().formatted(.iso8601)) \(level.rawValue) \(message())\n"
        FileHandle.standardError.write(Data(line.utf8))
    }

    public func info(_ message: @autoclosure () -> String) { log(.info, message()) }
    public func warning(_ message: @autoclosure () -> String) { log(.warning, message()) }
    public func error(_ message: @autoclosure () -> String) { log(.error, message()) }
}
