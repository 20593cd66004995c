import Foundation
import Glibc
import Synchronization

/// One log line as a handler receives it.
public struct LogRecord: Sendable, Equatable {
    public let date: Date
    public let level: Log.Level
    /// The component that wrote it (`http`, `push`, `channels`, `scheduler`, …; `soulacy` when none was named).
    public let label: String
    public let message: String
    /// Context set with `Log.with(_:_:)` (a request id, a run id, a device id), in key order when printed.
    public let metadata: [String: String]

    public init(date: Date, level: Log.Level, label: String = Log.defaultLabel, message: String, metadata: [String: String]) {
        self.date = date
        self.level = level
        self.label = label
        self.message = message
        self.metadata = metadata
    }

    /// `2026-12-03T00:59:46Z info message component=push key=value …`, the line `StandardErrorLogHandler` writes.
    public var line: String {
        // Built in one string (a line per request when the access log is on: this is on the hot path).
        var pairs = metadata.map { (key: $0.key, value: $0.value) }
        if label != Log.defaultLabel {
            pairs.removeAll { $0.key == "component" }
            pairs.append((key: "component", value: label))
        }
        pairs.sort { $0.key < $1.key }
        var out = Self.utcSeconds(date)
        out.reserveCapacity(out.utf8.count + message.utf8.count + 16 + pairs.reduce(0) { $0 + $1.key.utf8.count + $1.value.utf8.count + 2 })
        out += " "
        out += level.rawValue
        out += " "
        out += message
        for pair in pairs {
            out += " "
            out += pair.key
            out += "="
            out += pair.value
        }
        return out
    }

    /// `2026-12-03T00:59:46Z`, as `Date.formatted(.iso8601)` writes it, from the C library's UTC calendar (no
    /// formatter per line).
    static func utcSeconds(_ date: Date) -> String {
        let interval = date.timeIntervalSince1970.rounded(.down)
        // Foundation's calendar is Julian before 1582-10-15 and its years stop at four digits: outside those dates
        // (and outside time_t, where the conversion would trap) the line is left to Foundation.
        guard interval >= -12_219_292_800, interval < 253_402_300_800 else { return date.formatted(.iso8601) }
        var seconds = time_t(interval)
        var parts = tm()
        guard gmtime_r(&seconds, &parts) != nil else { return date.formatted(.iso8601) }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(20)
        func digits(_ value: Int32, _ count: Int) {
            var divisor: Int32 = 1
            for _ in 1..<count { divisor *= 10 }
            var rest = value
            while divisor > 0 {
                bytes.append(UInt8(48 + rest / divisor))
                rest %= divisor
                divisor /= 10
            }
        }
        digits(parts.tm_year + 1900, 4); bytes.append(0x2D)
        digits(parts.tm_mon + 1, 2); bytes.append(0x2D)
        digits(parts.tm_mday, 2); bytes.append(0x54)
        digits(parts.tm_hour, 2); bytes.append(0x3A)
        digits(parts.tm_min, 2); bytes.append(0x3A)
        digits(parts.tm_sec, 2); bytes.append(0x5A)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// One JSON object: `time`, `level`, `component`, `message`, then the metadata as flat keys (a metadata key that
    /// would shadow one of those four is written with a `meta_` prefix).
    public var jsonLine: String {
        var out = "{\"time\":\(Self.quoted(Self.time(date))),\"level\":\(Self.quoted(level.rawValue)),\"component\":\(Self.quoted(label)),\"message\":\(Self.quoted(message))"
        for (key, value) in metadata.sorted(by: { $0.key < $1.key }) {
            let name = ["time", "level", "component", "message"].contains(key) ? "meta_" + key : key
            out += ",\(Self.quoted(name)):\(Self.quoted(value))"
        }
        return out + "}"
    }

    /// RFC 3339 with milliseconds, UTC.
    static func time(_ date: Date) -> String {
        date.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true))
    }

    /// A JSON string: quotes, backslashes and every control character escaped (a message can hold anything).
    static func quoted(_ text: String) -> String {
        var out = "\""
        out.reserveCapacity(text.utf8.count + 2)
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20 || scalar.value == 0x7F || scalar.value == 0x2028 || scalar.value == 0x2029:
                out += String(format: "\\u%04x", scalar.value)
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }
}

/// Where log lines go: stderr in the executables, memory in tests (`ChannelTesting.MemoryLogHandler`).
public protocol LogHandler: Sendable {
    func write(_ record: LogRecord)
}

/// Plain `key=value` lines on stderr.
public struct StandardErrorLogHandler: LogHandler {
    public init() {}
    public func write(_ record: LogRecord) { StandardErrorWriter.shared.write(record.line, urgent: record.level >= .warning) }
}

/// One JSON object per line on stderr (`SOULACY_LOG_FORMAT=json`), for log shippers.
public struct JSONLogHandler: LogHandler {
    public init() {}
    public func write(_ record: LogRecord) { StandardErrorWriter.shared.write(record.jsonLine, urgent: record.level >= .warning) }
}

/// Lines to stderr without a system call each: the access log writes one per request, and the hottest requests are
/// answered in microseconds. Lines wait at most 50 ms (a warning or worse goes at once, with what waited before it),
/// and whatever waits is written when the process exits.
final class StandardErrorWriter: Sendable {
    static let shared = StandardErrorWriter()
    static let flushInterval: Duration = .milliseconds(50)
    static let maximumBuffered = 64 * 1024

    private struct State {
        var buffer: [UInt8] = []
        var flushing = false
    }
    private let state = Mutex(State())

    private init() {
        atexit { StandardErrorWriter.shared.flush() }
    }

    private enum Next { case wait, flushNow, flushSoon }

    func write(_ line: String, urgent: Bool) {
        let next = state.withLock { s -> Next in
            s.buffer.append(contentsOf: line.utf8)
            s.buffer.append(0x0A)
            if urgent || s.buffer.count >= Self.maximumBuffered { return .flushNow }
            guard !s.flushing else { return .wait }
            s.flushing = true
            return .flushSoon
        }
        switch next {
        case .wait: break
        case .flushNow: flush()
        case .flushSoon:
            Thread.detachNewThread {
                Thread.sleep(forTimeInterval: 0.05)
                self.state.withLock { $0.flushing = false }
                self.flush()
            }
        }
    }

    /// One flush at a time, so lines reach stderr in the order they were written.
    private let writing = Mutex(())

    /// Writes everything waiting, in order.
    func flush() {
        writing.withLock { _ in flushLocked() }
    }

    private func flushLocked() {
        let bytes = state.withLock { s -> [UInt8] in
            defer { s.buffer.removeAll(keepingCapacity: true) }
            return s.buffer
        }
        guard !bytes.isEmpty else { return }
        bytes.withUnsafeBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                let written = Glibc.write(2, buffer.baseAddress! + offset, buffer.count - offset)
                if written <= 0 { if errno == EINTR { continue } else { return } }
                offset += written
            }
        }
    }
}

/// A logger value in swift-log's shape: a label naming the component, a level, metadata and a handler, handed by
/// the host to every part. Callers pass no secrets: keys, codes, tokens and agent output stay out of logs.
public struct Log: Sendable {
    /// swift-log's levels, from the chattiest to the gravest.
    public enum Level: String, Sendable, Comparable, CaseIterable {
        case trace, debug, info, notice, warning, error, critical
        private var rank: Int { Self.allCases.firstIndex(of: self)! }
        public static func < (a: Level, b: Level) -> Bool { a.rank < b.rank }
    }

    public static let defaultLabel = "soulacy"

    public var minimum: Level
    public var label: String = Log.defaultLabel
    public var metadata: [String: String] = [:]
    public var handler: any LogHandler

    public init(minimum: Level = .info, handler: any LogHandler = StandardErrorLogHandler()) {
        self.minimum = minimum
        self.handler = handler
    }

    /// What is wrong with a logging setting, naming the variable.
    public struct SettingError: Error, Sendable, CustomStringConvertible {
        public let description: String
    }

    /// The logger the settings ask for: `SOULACY_LOG_LEVEL` (trace, debug, info, notice, warning, error, critical;
    /// default info) and `SOULACY_LOG_FORMAT` (text or json; default text).
    public static func configured(from environment: [String: String]) throws(SettingError) -> Log {
        var level = Level.info
        if let text = environment["SOULACY_LOG_LEVEL"]?.trimmingCharacters(in: .whitespaces).lowercased(), !text.isEmpty {
            guard let parsed = Level(rawValue: text == "warn" ? "warning" : text) else {
                throw SettingError(description: "SOULACY_LOG_LEVEL must be one of \(Level.allCases.map(\.rawValue).joined(separator: ", ")), got '\(text)'")
            }
            level = parsed
        }
        let format = environment["SOULACY_LOG_FORMAT"]?.trimmingCharacters(in: .whitespaces).lowercased() ?? ""
        switch format {
        case "", "text": return Log(minimum: level, handler: StandardErrorLogHandler())
        case "json": return Log(minimum: level, handler: JSONLogHandler())
        default: throw SettingError(description: "SOULACY_LOG_FORMAT must be text or json, got '\(format)'")
        }
    }

    /// The same logger with one more piece of context on every line.
    public func with(_ key: String, _ value: String) -> Log {
        var copy = self
        copy.metadata[key] = value
        return copy
    }

    /// The same logger for a component (`push`, `channels`, `http`): its lines say which part wrote them.
    public func component(_ label: String) -> Log {
        var copy = self
        copy.label = label
        return copy
    }

    public func isEnabled(_ level: Level) -> Bool { level >= minimum }

    /// Context the current task puts on every line it logs, whichever logger writes it: the request id of the request
    /// being answered (bound by the router around a handler), so a line a store, a channel or a run writes while
    /// answering it names the request. A logger's own metadata wins over it on the same key.
    @TaskLocal public static var taskMetadata: [String: String] = [:]

    public func log(_ level: Level, _ message: @autoclosure () -> String, metadata extra: [String: String] = [:]) {
        guard level >= minimum else { return }
        var context = extra.isEmpty ? metadata : metadata.isEmpty ? extra : metadata.merging(extra) { $1 }
        let inherited = Log.taskMetadata
        if !inherited.isEmpty { context.merge(inherited) { own, _ in own } }
        handler.write(LogRecord(date: Date(), level: level, label: label, message: message(), metadata: context))
    }

    public func trace(_ message: @autoclosure () -> String) { log(.trace, message()) }
    public func debug(_ message: @autoclosure () -> String) { log(.debug, message()) }
    public func info(_ message: @autoclosure () -> String) { log(.info, message()) }
    public func notice(_ message: @autoclosure () -> String) { log(.notice, message()) }
    public func warning(_ message: @autoclosure () -> String) { log(.warning, message()) }
    public func error(_ message: @autoclosure () -> String) { log(.error, message()) }
    public func critical(_ message: @autoclosure () -> String) { log(.critical, message()) }
}
