import ChannelAPI
import Synchronization

/// Keeps every log record in memory, so a test can check what was logged (and that no secret was).
public final class MemoryLogHandler: LogHandler {
    private let kept = Mutex<[LogRecord]>([])

    public init() {}

    public func write(_ record: LogRecord) { kept.withLock { $0.append(record) } }

    public var records: [LogRecord] { kept.withLock { $0 } }

    /// Every record as the line stderr would show.
    public var lines: [String] { records.map(\.line) }
}
