import Foundation
import Gateway
import GatewayTestSupport
import Testing

/// Next-fire times: field syntax, macros, names, month ends and daylight-saving changes.
@Suite("Cron schedules")
struct CronScheduleTests {
    static func date(_ iso: String) -> Date { try! Date(iso, strategy: .iso8601) }
    static let utc = TimeZone(identifier: "UTC")!
    static let berlin = TimeZone(identifier: "Europe/Berlin")!
    static let newYork = TimeZone(identifier: "America/New_York")!

    func fires(_ expression: String, after start: String, in tz: TimeZone = utc, count: Int) throws -> [String] {
        let cron = try CronSchedule(expression)
        var at = Self.date(start)
        var result: [String] = []
        for _ in 0..<count {
            guard let next = cron.nextFire(after: at, in: tz) else { break }
            result.append(next.formatted(.iso8601))
            at = next
        }
        return result
    }

    @Test("ranges, steps, lists and names")
    func syntax() throws {
        #expect(try fires("*/20 9-10 * * *", after: "2026-01-05T08:59:00Z", count: 4) ==
                ["2026-01-05T09:00:00Z", "2026-01-05T09:20:00Z", "2026-01-05T09:40:00Z", "2026-01-05T10:00:00Z"])
        #expect(try fires("0 12 * * MON,wed,FRI", after: "2026-01-05T12:00:00Z", count: 3) ==
                ["2026-01-07T12:00:00Z", "2026-01-09T12:00:00Z", "2026-01-12T12:00:00Z"])
        #expect(try fires("30 6 1 JAN-MAR/2 *", after: "2026-01-01T07:00:00Z", count: 2) ==
                ["2026-03-01T06:30:00Z", "2027-01-01T06:30:00Z"])
        #expect(try fires("5/15 0 * * *", after: "2026-01-01T00:00:00Z", count: 4) ==
                ["2026-01-01T00:05:00Z", "2026-01-01T00:20:00Z", "2026-01-01T00:35:00Z", "2026-01-01T00:50:00Z"])
        // 7 is Sunday as well as 0.
        #expect(try fires("0 0 * * 7", after: "2026-01-01T00:00:00Z", count: 1) == ["2026-01-04T00:00:00Z"])
    }

    @Test("Soulacy's cron: a leading seconds field, ?, @every, and CRON_TZ= / TZ= prefixes")
    func soulacyExtensions() throws {
        #expect(try fires("30 */15 9 * * *", after: "2026-01-05T09:14:00Z", count: 3) ==
                ["2026-01-05T09:15:30Z", "2026-01-05T09:30:30Z", "2026-01-05T09:45:30Z"])
        #expect(try fires("0 0 12 ? * MON", after: "2026-01-05T00:00:00Z", count: 1) == ["2026-01-05T12:00:00Z"])
        #expect(try fires("@every 1h30m", after: "2026-01-05T09:14:07.250Z", count: 2) == ["2026-01-05T10:44:07Z", "2026-01-05T12:14:07Z"])
        // The prefix wins over the zone the schedule is read in.
        #expect(try fires("CRON_TZ=Europe/Berlin 0 8 * * *", after: "2026-01-05T00:00:00Z", in: Self.newYork, count: 1) == ["2026-01-05T07:00:00Z"])
        #expect(try fires("TZ=America/New_York 0 8 * * *", after: "2026-01-05T00:00:00Z", count: 1) == ["2026-01-05T13:00:00Z"])
        #expect(try CronSchedule("CRON_TZ=Europe/Berlin 0 8 * * *").timeZone?.identifier == "Europe/Berlin")
        #expect(throws: CronError.self) { try CronSchedule("CRON_TZ=Mars/Base 0 8 * * *") }
        #expect(throws: CronError.self) { try CronSchedule("@every 0s") }
        #expect(throws: CronError.self) { try CronSchedule("0 0 0 8 * * *") }
    }

    @Test("macros")
    func macros() throws {
        #expect(try fires("@daily", after: "2026-01-01T10:00:00Z", count: 1) == ["2026-01-02T00:00:00Z"])
        #expect(try fires("@hourly", after: "2026-01-01T10:00:00Z", count: 1) == ["2026-01-01T11:00:00Z"])
        #expect(try fires("@weekly", after: "2026-01-01T10:00:00Z", count: 1) == ["2026-01-04T00:00:00Z"])
        #expect(try fires("@monthly", after: "2026-01-15T10:00:00Z", count: 1) == ["2026-02-01T00:00:00Z"])
        #expect(try fires("@yearly", after: "2026-01-15T10:00:00Z", count: 1) == ["2027-01-01T00:00:00Z"])
        #expect(try fires("@midnight", after: "2026-01-15T10:00:00Z", count: 1) == ["2026-01-16T00:00:00Z"])
    }

    @Test("month ends: the 31st skips short months, Feb 29 waits for a leap year")
    func monthEnds() throws {
        #expect(try fires("0 9 31 * *", after: "2026-01-31T10:00:00Z", count: 3) ==
                ["2026-03-31T09:00:00Z", "2026-05-31T09:00:00Z", "2026-07-31T09:00:00Z"])
        #expect(try fires("0 0 29 2 *", after: "2026-03-01T00:00:00Z", count: 1) == ["2028-02-29T00:00:00Z"])
        #expect(try fires("59 23 28-31 * *", after: "2026-02-27T00:00:00Z", count: 2) ==
                ["2026-02-28T23:59:00Z", "2026-03-28T23:59:00Z"])
    }

    @Test("day-of-month and day-of-week both restricted: either matches (Vixie cron)")
    func dayOr() throws {
        // The 13th, or any Friday.
        #expect(try fires("0 0 13 * FRI", after: "2026-02-01T00:00:00Z", count: 4) ==
                ["2026-02-06T00:00:00Z", "2026-02-13T00:00:00Z", "2026-02-20T00:00:00Z", "2026-02-27T00:00:00Z"])
    }

    @Test("in a time zone: 08:00 Berlin is 07:00 UTC in winter and 06:00 UTC in summer")
    func timeZones() throws {
        #expect(try fires("0 8 * * *", after: "2026-03-27T12:00:00Z", in: Self.berlin, count: 3) ==
                ["2026-03-28T07:00:00Z", "2026-03-29T06:00:00Z", "2026-03-30T06:00:00Z"])
    }

    @Test("spring forward: a time skipped by the change fires once when clocks jump")
    func springForward() throws {
        // Berlin, 29 March 2026: 02:00 CET jumps to 03:00 CEST (01:00 UTC).
        #expect(try fires("30 2 * * *", after: "2026-03-28T12:00:00Z", in: Self.berlin, count: 2) ==
                ["2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"])
        // Every 15 minutes across the gap: 01:45 CET, then the change (03:00 CEST) once, then 03:15.
        #expect(try fires("*/15 * * * *", after: "2026-03-29T00:40:00Z", in: Self.berlin, count: 3) ==
                ["2026-03-29T00:45:00Z", "2026-03-29T01:00:00Z", "2026-03-29T01:15:00Z"])
        // New York, 8 March 2026: 02:30 does not exist.
        #expect(try fires("30 2 * * *", after: "2026-03-07T12:00:00Z", in: Self.newYork, count: 2) ==
                ["2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"])
    }

    @Test("fall back: a repeated local time fires once, at its first occurrence")
    func fallBack() throws {
        // Berlin, 25 October 2026: 03:00 CEST goes back to 02:00 CET; 02:30 happens twice.
        #expect(try fires("30 2 * * *", after: "2026-10-24T12:00:00Z", in: Self.berlin, count: 2) ==
                ["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"])
        // Hourly across the repeat: 02:00 CEST (00:00Z), 03:00 CET (02:00Z); the second 02:00 is not fired again.
        #expect(try fires("0 * * * *", after: "2026-10-24T23:30:00Z", in: Self.berlin, count: 3) ==
                ["2026-10-25T00:00:00Z", "2026-10-25T02:00:00Z", "2026-10-25T03:00:00Z"])
        // Starting inside the repeated hour does not fire its times a second time.
        #expect(try fires("45 2 * * *", after: "2026-10-25T01:10:00Z", in: Self.berlin, count: 1) == ["2026-10-26T01:45:00Z"])
    }

    @Test("7 is Sunday alone and in ranges; a step from 0 covers Sunday onward")
    func sundayAsSeven() throws {
        #expect(try fires("0 0 * * 7", after: "2026-12-03T00:00:00Z", count: 1) == ["2026-12-06T00:00:00Z"])
        #expect(try fires("0 0 * * 5-7", after: "2026-12-03T00:00:00Z", count: 3) == ["2026-12-04T00:00:00Z", "2026-12-05T00:00:00Z", "2026-12-06T00:00:00Z"])
        #expect(try fires("0 0 * * 0/2", after: "2026-12-05T00:00:00Z", count: 2) == ["2026-12-06T00:00:00Z", "2026-12-08T00:00:00Z"])
    }

    @Test("soulacy check refuses 0 0 * * 7/2 at the cron's position instead of printing an empty next fire")
    func checkNamesTheStep() async throws {
        let dir = TestGateway.makeTemporaryDirectory()
        let file = dir + "/SOUL.yaml"
        try "id: fortnight\nname: Fortnight\ntrigger: cron\nschedule:\n  cron: \"0 0 * * 7/2\"\n  output: {channel: mobile, to: all}\nrunner:\n  command: [\"/bin/cat\"]\n"
            .write(toFile: file, atomically: true, encoding: .utf8)
        let (status, output) = try await runProgram(RepositoryPaths.soulacyBinary, ["check", file])
        #expect(status != 0, "\(output)")
        #expect(output.contains("SOUL.yaml:5:9") && output.contains("'7/2' starts a step at 7"), "\(output)")
    }

    @Test("bad expressions say which field and why", arguments: [
        ("* * * *", "five fields"),
        ("60 * * * *", "minute value 60"),
        ("* 24 * * *", "hour value 24"),
        ("* * 0 * *", "day-of-month value 0"),
        ("* * * 13 *", "month value 13"),
        ("* * * FOO *", "month field: 'FOO'"),
        ("* * * * 8", "day-of-week value 8"),
        ("*/0 * * * *", "step"),
        ("5-1 * * * *", "runs backwards"),
        ("1,,2 * * * *", "empty list item"),
        ("@reboot", "unknown cron descriptor"),
        // Accepted before with no next fire, and never fired.
        ("0 0 * * 7/2", "day-of-week field: '7/2' starts a step at 7"),
        ("0 0 * * 1,7/3", "write 0/3"),
    ])
    func errors(expression: String, expected: String) {
        #expect {
            _ = try CronSchedule(expression)
        } throws: { error in
            (error as? CronError)?.message.contains(expected) == true
        }
    }
}
