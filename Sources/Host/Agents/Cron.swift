import Foundation

public struct CronError: Error, Sendable, Equatable, CustomStringConvertible {
    public let message: String
    public var description: String { message }
}

/// A cron expression as Soulacy reads it (robfig/cron v3): five fields (minute hour day-of-month month
/// day-of-week), or six with a leading seconds field, or a descriptor (`@daily`, `@every 1h30m`, …), optionally
/// prefixed with `CRON_TZ=<zone> ` or `TZ=<zone> `.
///
/// Fields take `*`, `?`, numbers, names (JAN–DEC, SUN–SAT), ranges `a-b`, steps `*/n` and `a-b/n`, and lists.
/// As in Vixie cron, when both day fields are restricted a day matching either one fires.
public struct CronSchedule: Sendable, Equatable, CustomStringConvertible {
    public let expression: String
    /// The zone named by a `CRON_TZ=`/`TZ=` prefix; it overrides the schedule's zone.
    public let timeZone: TimeZone?
    /// `@every <duration>`: fires at this interval from when the schedule starts, not on a calendar.
    public let interval: Duration?
    let seconds: UInt64
    let minutes: UInt64
    let hours: UInt64
    let daysOfMonth: UInt64
    let months: UInt64
    let daysOfWeek: UInt64
    let dayOfMonthRestricted: Bool
    let dayOfWeekRestricted: Bool

    public var description: String { expression }

    private static let macros: [String: String] = [
        "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
        "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *",
    ]
    private static let monthNames = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
    private static let dayNames = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]

    public init(_ text: String) throws(CronError) {
        var trimmed = text.trimmingCharacters(in: .whitespaces)
        expression = trimmed
        var zone: TimeZone?
        for prefix in ["CRON_TZ=", "TZ="] where trimmed.hasPrefix(prefix) {
            let rest = trimmed.dropFirst(prefix.count)
            let name = String(rest.prefix { $0 != " " && $0 != "\t" })
            guard let tz = TimeZone(identifier: name) else {
                throw CronError(message: "unknown time zone '\(name)' in \(prefix); use an IANA name such as Europe/Berlin or UTC")
            }
            zone = tz
            trimmed = rest.dropFirst(name.count).trimmingCharacters(in: .whitespaces)
        }
        timeZone = zone
        var source = trimmed
        var interval: Duration?
        if trimmed.lowercased().hasPrefix("@every") {
            let text = trimmed.dropFirst("@every".count).trimmingCharacters(in: .whitespaces)
            guard let every = DurationText.parse(text), every >= .seconds(1) else {
                throw CronError(message: "@every needs a duration of at least 1s such as 90s, 15m or 1h30m; got '\(text)'")
            }
            interval = every
            source = "* * * * *"
        } else if trimmed.hasPrefix("@") {
            guard let expanded = Self.macros[trimmed.lowercased()] else {
                throw CronError(message: "unknown cron descriptor '\(trimmed)'; use one of \(Self.macros.keys.sorted().joined(separator: ", ")), @every <duration>, or five fields")
            }
            source = expanded
        }
        self.interval = interval
        var fields = source.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
        if fields.count == 6 {
            seconds = try Self.field(fields.removeFirst(), name: "second", range: 0...59, names: [])
        } else {
            seconds = 1
        }
        guard fields.count == 5 else {
            throw CronError(message: "cron needs five fields (minute hour day-of-month month day-of-week), or six with seconds first; got \(fields.count) in '\(trimmed)'")
        }
        fields = fields.map { $0 == "?" ? "*" : $0 }
        minutes = try Self.field(fields[0], name: "minute", range: 0...59, names: [])
        hours = try Self.field(fields[1], name: "hour", range: 0...23, names: [])
        daysOfMonth = try Self.field(fields[2], name: "day-of-month", range: 1...31, names: [])
        months = try Self.field(fields[3], name: "month", range: 1...12, names: Self.monthNames, firstNameValue: 1)
        var dow = try Self.field(fields[4], name: "day-of-week", range: 0...7, names: Self.dayNames)
        if dow & (1 << 7) != 0 { dow = (dow | 1) & ~(1 << 7) }  // 7 is Sunday too
        daysOfWeek = dow
        dayOfMonthRestricted = !fields[2].hasPrefix("*")
        dayOfWeekRestricted = !fields[4].hasPrefix("*")
        // With a free day-of-week, only the day-of-month decides: a day no chosen month has never comes.
        if dayOfMonthRestricted && !dayOfWeekRestricted {
            let longest = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
            let possible = (1...12).contains { month in
                months & (1 << UInt64(month)) != 0 && (1...longest[month - 1]).contains { daysOfMonth & (1 << UInt64($0)) != 0 }
            }
            guard possible else {
                throw CronError(message: "'\(trimmed)' never fires: no chosen month has day \(fields[2]) (day-of-month field)")
            }
        }
    }

    /// A cron number: digits only (no sign), so '+5' and '-5' are not read as numbers.
    private static func number(_ token: Substring) -> Int? {
        guard !token.isEmpty, token.count <= 4, token.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        return Int(token)
    }

    private static func field(_ text: String, name: String, range: ClosedRange<Int>, names: [String], firstNameValue: Int = 0) throws(CronError) -> UInt64 {
        func value(_ token: Substring) throws(CronError) -> Int {
            if let n = number(token) {
                guard range.contains(n) else { throw CronError(message: "\(name) value \(n) is outside \(range.lowerBound)-\(range.upperBound)") }
                return n
            }
            if let index = names.firstIndex(of: token.uppercased()) { return index + firstNameValue }
            let hint = names.isEmpty ? "a number \(range.lowerBound)-\(range.upperBound)" : "a number \(range.lowerBound)-\(range.upperBound) or a name (\(names.joined(separator: ", ")))"
            throw CronError(message: "\(name) field: '\(token)' is not \(hint)")
        }
        var bits: UInt64 = 0
        for item in text.split(separator: ",", omittingEmptySubsequences: false) {
            guard !item.isEmpty else { throw CronError(message: "\(name) field '\(text)' has an empty list item") }
            let pieces = item.split(separator: "/", omittingEmptySubsequences: false)
            guard pieces.count <= 2 else { throw CronError(message: "\(name) field: '\(item)' has more than one step") }
            var step = 1
            if pieces.count == 2 {
                guard let s = number(pieces[1]), s > 0 else { throw CronError(message: "\(name) field: step in '\(item)' must be a positive number") }
                step = s
            }
            let span = pieces[0]
            guard !span.isEmpty else {
                throw CronError(message: "\(name) field: '\(item)' has a step with nothing to step over; write */\(pieces[1]) or a-b/\(pieces[1])")
            }
            // The highest value a step may reach: day-of-week's 7 is Sunday again, so steps stop at 6 as `*` does.
            let stepCeiling = name == "day-of-week" ? 6 : range.upperBound
            var low: Int
            var high: Int
            if span == "*" {
                low = range.lowerBound
                high = stepCeiling
            } else if let dash = span.firstIndex(of: "-") {
                guard dash != span.startIndex else {
                    throw CronError(message: "\(name) field: '\(span)' is not a value; a range is a-b and negative numbers do not exist in cron")
                }
                low = try value(span[..<dash])
                high = try value(span[span.index(after: dash)...])
                guard low <= high else { throw CronError(message: "\(name) field: range '\(span)' runs backwards") }
            } else {
                low = try value(span)
                // `a/n` means from a to the end of the field, stepping n.
                high = pieces.count == 2 ? stepCeiling : low
                // `7/2` would step over nothing and never fire; robfig refuses a step start past 6 too.
                guard low <= high else {
                    let hint = name == "day-of-week" ? "; Sunday is 0 when a step starts there: write 0/\(pieces[1])" : ""
                    throw CronError(message: "\(name) field: '\(item)' starts a step at \(low), past \(high), the last value a step reaches\(hint)")
                }
            }
            for v in stride(from: low, through: high, by: step) { bits |= 1 << UInt64(v) }
        }
        return bits
    }

    private func has(_ set: UInt64, _ value: Int) -> Bool { set & (1 << UInt64(value)) != 0 }

    private func dayMatches(day: Int, weekday: Int) -> Bool {
        let domOK = has(daysOfMonth, day)
        let dowOK = has(daysOfWeek, weekday)
        if dayOfMonthRestricted && dayOfWeekRestricted { return domOK || dowOK }
        return domOK && dowOK
    }

    /// The first fire strictly after `date` in `timeZone`.
    ///
    /// Daylight saving: a local time skipped by a spring-forward fires once at the moment of the change;
    /// a local time repeated by a fall-back fires once, at its first occurrence.
    public func nextFire(after date: Date, in timeZone: TimeZone) -> Date? {
        if let interval {
            // robfig/cron: the next whole second after `date` plus the interval.
            let whole = floor(date.timeIntervalSince1970)
            return Date(timeIntervalSince1970: whole + Double(interval.components.seconds) + Double(interval.components.attoseconds) / 1e18)
        }
        let timeZone = self.timeZone ?? timeZone
        var utc = Calendar(identifier: .gregorian)
        utc.timeZone = TimeZone(identifier: "UTC")!
        // Work on "naive" local wall-clock time, expressed as seconds in a UTC calendar.
        let naiveNow = Int(floor(date.timeIntervalSince1970)) + timeZone.secondsFromGMT(for: date)
        // This minute may still hold a later second (six-field expressions).
        var candidate = naiveNow / 60 * 60
        let limit = naiveNow + 28 * 366 * 86400 + 86400
        while candidate < limit {
            let c = utc.dateComponents([.year, .month, .day, .hour, .minute, .weekday], from: Date(timeIntervalSince1970: Double(candidate)))
            let dayStart = candidate - c.hour! * 3600 - c.minute! * 60
            guard has(months, c.month!) else {
                // Jump to the first day of the next month.
                var next = DateComponents(year: c.year, month: c.month! + 1, day: 1)
                next.timeZone = utc.timeZone
                candidate = Int(utc.date(from: next)!.timeIntervalSince1970)
                continue
            }
            guard dayMatches(day: c.day!, weekday: c.weekday! - 1) else {
                candidate = dayStart + 86400
                continue
            }
            guard has(hours, c.hour!) else {
                candidate = dayStart + (c.hour! + 1) * 3600
                continue
            }
            guard has(minutes, c.minute!) else {
                candidate += 60
                continue
            }
            for second in 0..<60 where has(seconds, second) {
                if let instant = Self.instant(forNaive: candidate + second, in: timeZone), instant > date {
                    return instant
                }
            }
            candidate += 60
        }
        return nil
    }

    /// The earliest real instant showing naive local time `naive`; for a time skipped by DST, the change itself.
    static func instant(forNaive naive: Int, in timeZone: TimeZone) -> Date? {
        let before = timeZone.secondsFromGMT(for: Date(timeIntervalSince1970: Double(naive - 86400)))
        let after = timeZone.secondsFromGMT(for: Date(timeIntervalSince1970: Double(naive + 86400)))
        let offsets = Set([before, after, timeZone.secondsFromGMT(for: Date(timeIntervalSince1970: Double(naive)))])
        let valid = offsets
            .map { Date(timeIntervalSince1970: Double(naive - $0)) }
            .filter { timeZone.secondsFromGMT(for: $0) == naive - Int($0.timeIntervalSince1970) }
            .sorted()
        if let first = valid.first { return first }
        // In a spring-forward gap: fire when the clocks change.
        return timeZone.nextDaylightSavingTimeTransition(after: Date(timeIntervalSince1970: Double(naive - max(before, after) - 1)))
    }
}
