import ChannelAPI
import Crypto
import Foundation
import HTTPServer
import Identity
import SQLite

/// Commands agents send to a phone (`canvas.present` through the mobile.invoke tool): queued in SQLite,
/// the phone woken, fetched and answered by the phone; a card with a form keeps the command open until
/// the person submits or dismisses it, or it expires.
public actor DeviceCommands {
    public static let supported = ["canvas.present"]
    public static let maximumExpiry = 900
    public static let defaultExpiry = 120

    public static let migrations: [Migration] = [
        Migration("mobile.6-device-commands", """
            CREATE TABLE mobile_device_commands (
                id TEXT PRIMARY KEY,
                device_id TEXT NOT NULL,
                subject TEXT NOT NULL,
                command TEXT NOT NULL,
                params TEXT NOT NULL,
                waits INTEGER NOT NULL,
                state TEXT NOT NULL CHECK (state IN ('queued', 'delivered', 'completed', 'expired')),
                result TEXT,
                created_at INTEGER NOT NULL,
                expires_at INTEGER NOT NULL,
                completed_at INTEGER
            );
            CREATE INDEX mobile_device_commands_by_device ON mobile_device_commands (device_id, state);
            """),
    ]

    public struct Command: Sendable, Equatable {
        public var id: String
        public var deviceID: String
        public var subject: String
        public var command: String
        public var params: JSONValue
        public var waits: Bool
        public var state: String
        public var result: JSONValue?
        public var expiresAt: Date
    }

    nonisolated let store: MobileStore
    nonisolated let dispatcher: PushDispatcher?
    nonisolated let clock: any WallClock
    private var waiters = Waiters<Command?>()

    public init(store: MobileStore, dispatcher: PushDispatcher?, clock: any WallClock) throws {
        self.store = store
        self.dispatcher = dispatcher
        self.clock = clock
        try store.database.migrate(Self.migrations)
    }

    static func ms(_ d: Date) -> Int64 { d.sqliteMillis }

    static func expireQueued(deviceID: String, in db: Connection, now: Date) throws {
        try db.run("UPDATE mobile_device_commands SET state = 'expired', completed_at = ? WHERE device_id = ? AND state IN ('queued', 'delivered')", ms(now), deviceID)
    }

    static func command(_ row: Row) -> Command {
        Command(id: row.string("id") ?? "", deviceID: row.string("device_id") ?? "", subject: row.string("subject") ?? "",
                command: row.string("command") ?? "", params: (try? JSONValue.parse(Array((row.string("params") ?? "{}").utf8))) ?? .null,
                waits: row.bool("waits") ?? false, state: row.string("state") ?? "",
                result: row.string("result").flatMap { try? JSONValue.parse(Array($0.utf8)) },
                expiresAt: row.date("expires_at") ?? Date(sqliteMillis: 0))
    }

    public nonisolated func command(id: String) throws -> Command? {
        try store.database.read { db in try db.query("SELECT * FROM mobile_device_commands WHERE id = ?", id).first.map(Self.command) }
    }

    /// Queues a command for a phone and wakes it.
    public nonisolated func queue(deviceID: String, subject: String, command: String, params: JSONValue, waits: Bool, expiresIn: Int) throws -> Command {
        let now = clock.now()
        let id = "cmd_" + Hex.encode(SecureBytes.random(count: 10))
        let expires = now.addingTimeInterval(TimeInterval(expiresIn))
        try store.database.transaction { db in
            try db.run("""
                INSERT INTO mobile_device_commands (id, device_id, subject, command, params, waits, state, created_at, expires_at)
                VALUES (?, ?, ?, ?, ?, ?, 'queued', ?, ?)
                """, id, deviceID, subject, command, params.serialized(), waits, Self.ms(now), Self.ms(expires))
        }
        let signal = WakeSignal(category: .command, title: "Soulacy", body: "An agent has something to show you.",
                                deepLink: "soulacy://command/\(id)", threadID: "commands", extra: ["command_id": id, "command": command],
                                expiresAt: expires, collapseID: id)
        if try store.queueWakeUp(signal, deviceID: deviceID) { dispatcher?.poke() }
        return Command(id: id, deviceID: deviceID, subject: subject, command: command, params: params, waits: waits, state: "queued", result: nil, expiresAt: expires)
    }

    /// What a phone has waiting; fetching marks them delivered.
    public nonisolated func pending(deviceID: String) throws -> [Command] {
        let now = Self.ms(clock.now())
        return try store.database.transaction { db in
            let rows = try db.query("SELECT * FROM mobile_device_commands WHERE device_id = ? AND state IN ('queued', 'delivered') AND expires_at > ? ORDER BY created_at",
                                    deviceID, now).map(Self.command)
            try db.run("UPDATE mobile_device_commands SET state = 'delivered' WHERE device_id = ? AND state = 'queued' AND expires_at > ?", deviceID, now)
            return rows
        }
    }

    /// Records the phone's answer once; returns the command as completed and whether this answer completed it.
    public func complete(id: String, deviceID: String, result: JSONValue) throws -> (Command, Bool) {
        let now = clock.now()
        let changed = try store.database.transaction { db in
            try db.run("""
                UPDATE mobile_device_commands SET state = 'completed', result = ?, completed_at = ?
                WHERE id = ? AND device_id = ? AND state IN ('queued', 'delivered') AND expires_at > ?
                """, result.serialized(), Self.ms(now), id, deviceID, Self.ms(now)) == 1
        }
        if !changed { _ = try expireIfDue(id) }
        guard let command = try command(id: id) else { throw APIError.notFound("no command \(id)") }
        if command.state == "completed" || command.state == "expired" { wake(id, command) }
        return (command, changed)
    }

    nonisolated func expireIfDue(_ id: String) throws -> Bool {
        try store.database.transaction { db in
            try db.run("UPDATE mobile_device_commands SET state = 'expired', completed_at = ? WHERE id = ? AND state IN ('queued', 'delivered') AND expires_at <= ?",
                       Self.ms(clock.now()), id, Self.ms(clock.now())) == 1
        }
    }

    /// Waits for the phone's answer or the expiry.
    public func wait(id: String) async -> Command? {
        guard let current = try? command(id: id) else { return nil }
        if current.state == "completed" || current.state == "expired" { return current }
        let timer = Task { [clock] in
            try? await clock.sleep(until: current.expiresAt)
            if !Task.isCancelled { self.expireAndWake(id) }
        }
        defer { timer.cancel() }
        return await withCheckedContinuation { waiters.park(id, ticket: waiters.ticket(), $0) }
    }

    private func expireAndWake(_ id: String) {
        _ = try? expireIfDue(id)
        wake(id, try? command(id: id))
    }

    private func wake(_ id: String, _ command: Command?) {
        waiters.answer(id, with: command)
    }
}

/// The routes: the mobile.invoke tool for agents, and the phone's side (fetch, answer).
public struct DeviceCommandsAPI: Sendable {
    let store: MobileStore
    let commands: DeviceCommands

    public init(store: MobileStore, commands: DeviceCommands) {
        self.store = store
        self.commands = commands
    }

    public var routes: [Route] {
        [
            Route(.POST, "/api/v1/mobile/invoke", access: .role(.operator), summary: "The mobile.invoke tool: send a device command (canvas.present)", handler: invoke),
            Route(.GET, "/api/v1/mobile/commands", access: .role(.viewer), summary: "Commands waiting for this phone", handler: pending),
            Route(.POST, "/api/v1/mobile/commands/:id/result", access: .role(.viewer), summary: "The phone's answer to a command", handler: result),
        ]
    }

    static func json(_ c: DeviceCommands.Command) -> JSONValue {
        ["id": .string(c.id), "device_id": .string(c.deviceID), "command": .string(c.command), "params": c.params,
         "state": .string(c.state), "waits_for_submit": .bool(c.waits), "expires_at": .timestamp(c.expiresAt)]
    }

    @Sendable func invoke(_ request: HTTPRequest) async throws -> HTTPResponse {
        let caller = try request.caller()
        let body = try JSONObject(body: request.body)
        let command = try body.string("command")
        guard DeviceCommands.supported.contains(command) else {
            throw APIError.invalidField("command", "'\(command)' is not a device command; use one of \(DeviceCommands.supported.joined(separator: ", "))")
        }
        let device = try store.ownedDevice(try body.optionalString("device_id", maxLength: 128), subject: caller.subject)
        guard device.capabilities.contains("canvas") else {
            throw APIError(status: 409, code: "capability_off", message: "device_id: \(device.id) does not have the Soulacy canvas capability on", field: "device_id")
        }
        guard let params = body.fields["params"] else { throw APIError.missingField("params") }
        let card = try CanvasCard(params)
        let expiresIn = try body.optionalInteger("expires_in_seconds", in: 1...DeviceCommands.maximumExpiry) ?? DeviceCommands.defaultExpiry
        let queued = try commands.queue(deviceID: device.id, subject: caller.subject, command: command, params: card.json,
                                        waits: card.waitsForSubmit, expiresIn: expiresIn)
        guard try body.optionalBool("wait") ?? true else { return .json(Self.json(queued), status: 202) }
        guard let done = await commands.wait(id: queued.id) else { throw APIError.internal("the command vanished") }
        if done.state == "expired" {
            return .json(["command_id": .string(done.id), "presented": false, "submitted": false, "expired": true])
        }
        guard case .object(var result)? = done.result else { return .json(["command_id": .string(done.id), "presented": true]) }
        result["command_id"] = .string(done.id)
        return .json(.object(result))
    }

    @Sendable func pending(_ request: HTTPRequest) async throws -> HTTPResponse {
        let caller = try request.caller()
        let device = try store.ownedDevice(request.query["device_id"], subject: caller.subject)
        return .json(["commands": .array(try commands.pending(deviceID: device.id).map(Self.json))])
    }

    @Sendable func result(_ request: HTTPRequest) async throws -> HTTPResponse {
        let caller = try request.caller()
        let body = try JSONObject(body: request.body)
        let device = try store.ownedDevice(try body.optionalString("device_id", maxLength: 128), subject: caller.subject)
        guard let existing = try commands.command(id: request.parameter("id")), existing.deviceID == device.id else {
            throw APIError.notFound("no command \(request.parameter("id")) for device \(device.id)")
        }
        let result = try Self.validateResult(body, for: existing)
        let (command, completedNow) = try await commands.complete(id: existing.id, deviceID: device.id, result: result)
        guard completedNow else {
            throw APIError.conflict("this command is already \(command.state); the first answer stands", code: "command_\(command.state)")
        }
        return .json(["ok": true, "command_id": .string(command.id), "state": .string(command.state)])
    }

    /// The phone's answer: presented, submitted, dismissed, form_id, answers keyed by field name, checklists by title.
    static func validateResult(_ body: JSONObject, for command: DeviceCommands.Command) throws -> JSONValue {
        let card = try CanvasCard(command.params)
        let presented = try body.optionalBool("presented") ?? true
        let submitted = try body.optionalBool("submitted") ?? false
        let dismissed = try body.optionalBool("dismissed") ?? false
        guard !(submitted && dismissed) else { throw APIError.invalidField("submitted", "a card is either submitted or dismissed, not both") }
        var result: [String: JSONValue] = ["presented": .bool(presented), "submitted": .bool(submitted)]
        if dismissed { result["dismissed"] = true }
        if let form = card.form, submitted {
            let formID = try body.optionalString("form_id") ?? form.id
            guard formID == form.id else { throw APIError.invalidField("form_id", "this card's form is '\(form.id)'") }
            result["form_id"] = .string(formID)
            var answers: [String: JSONValue] = [:]
            for (name, value) in try body.optionalObject("answers")?.fields ?? [:] {
                guard let kind = form.fields[name] else {
                    throw APIError.invalidField("answers.\(name)", "is not a field of form '\(form.id)'; fields: \(form.fields.keys.sorted().joined(separator: ", "))")
                }
                let ok: Bool = switch kind {
                case "number": value.numberValue != nil || value == .null
                case "toggle": value.boolValue != nil || value == .null
                default: value.stringValue != nil || value == .null
                }
                guard ok else { throw APIError.invalidField("answers.\(name)", "does not fit the field's kind \(kind)") }
                answers[name] = value
            }
            result["answers"] = .object(answers)
        }
        var checklists: [String: JSONValue] = [:]
        for (title, value) in try body.optionalObject("checklists")?.fields ?? [:] {
            guard card.checklists.contains(title) else { throw APIError.invalidField("checklists.\(title)", "is not a checklist of this card") }
            guard let items = value.arrayValue, items.allSatisfy({ $0["label"]?.stringValue != nil && $0["done"]?.boolValue != nil }) else {
                throw APIError.invalidField("checklists.\(title)", "must be [{label, done}]")
            }
            checklists[title] = value
        }
        if !card.checklists.isEmpty || !checklists.isEmpty { result["checklists"] = .object(checklists) }
        return .object(result)
    }
}
