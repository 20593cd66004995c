import Storage
import Mobile
import APIKit
import ChannelAPI
import Foundation
import Identity

/// The first command routes (`/api/v1/mobile/invoke`, `/api/v1/mobile/commands`) as thin aliases of the node
/// protocol: one queue, one set of rules. A device registered with the `canvas` capability is a node with
/// `canvas.present`; invoke enqueues on the node and may wait for the outcome; the phone's answer claims and settles.

public struct DeviceCommandsAPI: Sendable {
    public static let defaultExpiry = 120
    let devices: any DeviceRegistry
    let nodes: DeviceNodes

    public init(devices: any DeviceRegistry, nodes: DeviceNodes) {
        self.devices = devices
        self.nodes = nodes
    }

    public var routes: [Route] {
        [
            Route(.POST, "/api/v1/mobile/invoke", role: .operator, summary: "The mobile.invoke tool: send a device command (canvas.present)", handler: invoke),
            Route(.GET, "/api/v1/mobile/commands", role: .viewer, summary: "Commands waiting for this phone", handler: pending),
            Route(.POST, "/api/v1/mobile/commands/:id/result", role: .viewer, summary: "The phone's answer to a command", handler: result),
        ]
    }

    /// `POST /api/v1/mobile/invoke`: a card for one of the caller's phones; `wait` (default true) answers with the phone's.
    struct InvokeRequest: Decodable {
        var command: String
        var deviceID: String?
        var params: JSONValue?
        var expiresInSeconds: Double?
        var wait: Bool?

        enum CodingKeys: String, CodingKey {
            case command
            case deviceID = "device_id"
            case params
            case expiresInSeconds = "expires_in_seconds"
            case wait
        }
    }

    @Sendable func invoke(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let body = try request.decode(InvokeRequest.self)
        let command = body.command
        guard command == "canvas.present" else {
            throw APIError.invalidField("command", "'\(command)' is not a command of this route; use canvas.present (the others go through /api/v1/mobile/nodes)")
        }
        let device = try await devices.ownedDevice(try body.deviceID.limited(to: 128, field: "device_id"), subject: caller.subject)
        // The device first, then the card: a phone without the canvas switched on is told so whatever the card.
        guard try await nodes.adoptCanvasCapability(of: device) else {
            throw APIError(status: 409, code: "capability_off", message: "device_id: \(device.id) does not have the Soulacy canvas capability on", field: "device_id")
        }
        guard let params = body.params else { throw APIError.missingField("params") }
        let card = try CanvasCard(params)
        let expiresIn = try body.expiresInSeconds.wholeNumber(in: 1...Int(DeviceNodes.maximumExpiry), field: "expires_in_seconds") ?? Self.defaultExpiry
        let expiresAt = nodes.clock.now().addingTimeInterval(TimeInterval(expiresIn))
        guard body.wait ?? true else {
            // Not waiting: the queued command is the answer, committed with it.
            return try await nodes.transactions.answer { session in
                .json(CommandView(try nodes.enqueue(deviceID: device.id, subject: caller.subject, id: nil, command: command, params: card.json,
                                                    expiresAt: expiresAt, in: session)), status: 202)
            }
        }
        // Waiting: the answer is the phone's, known only later; a retry after a crash waits for it again (`resumer`).
        let commandID = UUID().uuidString.lowercased()
        CommitHook.current?.resume(from: AnswerResumer.reference(kind: Self.resumeKind, device.id, commandID))
        let queued = try await nodes.enqueue(deviceID: device.id, subject: caller.subject, id: commandID, command: command, params: card.json, expiresAt: expiresAt)
        return Self.settledAnswer(try await nodes.settle(id: queued.id, deviceID: device.id, subject: caller.subject))
    }

    static let resumeKind = "command"

    /// A waiting invoke whose process died before it answered (`<device>/<command id>`): its retry waits for the same
    /// command's outcome.
    public var resumer: AnswerResumer {
        AnswerResumer(kind: Self.resumeKind) { [nodes] id, caller in
            guard let (deviceID, commandID) = AnswerResumer.parts(of: id) else { return nil }
            return Self.settledAnswer(try await nodes.settle(id: commandID, deviceID: deviceID, subject: caller.subject))
        }
    }

    /// The answer to a waiting invoke: the phone's result, or what became of the command.
    static func settledAnswer(_ done: DeviceNodes.Command) -> HTTPResponse {
        switch done.status {
        case .completed:
            // The phone's own answer (free-form: presented, submitted, answers…), with the command's id.
            guard case .object(var result)? = done.result else { return .json(Outcome(commandID: done.id, presented: true, submitted: nil)) }
            result["command_id"] = .string(done.id)
            let phoneAnswer = JSONValue.object(result)
            return .json(phoneAnswer)
        case .expired:
            return .json(Outcome(commandID: done.id, expired: true))
        default:
            return .json(Outcome(commandID: done.id, status: done.status, error: done.error))
        }
    }

    @Sendable func pending(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let device = try await devices.ownedDevice(request.query["device_id"], subject: caller.subject)
        guard try await nodes.node(deviceID: device.id, subject: caller.subject) != nil else { return .json(["commands": [CommandView]()]) }
        return .json(["commands": try await nodes.pending(deviceID: device.id, subject: caller.subject).map(CommandView.init)])
    }

    /// The answer claims the command and settles it as completed, in one step of the node protocol's rules.
    @Sendable func result(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        let body = try request.decode(CardAnswer.self)
        let device = try await devices.ownedDevice(try body.deviceID.limited(to: 128, field: "device_id"), subject: caller.subject)
        return try await nodes.transactions.answer { session in
            let existing: DeviceNodes.Command
            do {
                existing = try nodes.command(id: request.parameter("id"), deviceID: device.id, subject: caller.subject, in: session)
            } catch {
                throw APIError.notFound("no command \(request.parameter("id")) for device \(device.id)")
            }
            let result = try Self.validateResult(body, for: existing)
            if existing.status == .queued { _ = try? nodes.claim(id: existing.id, deviceID: device.id, subject: caller.subject, in: session) }
            let current = try nodes.command(id: existing.id, deviceID: device.id, subject: caller.subject, in: session)
            guard current.status == .running,
                  let settled = try? nodes.finish(id: existing.id, deviceID: device.id, subject: caller.subject, status: .completed, result: result, error: nil, in: session) else {
                throw APIError.conflict("this command is already \(current.status); the first answer stands", code: "command_\(current.status)")
            }
            return .json(Accepted(commandID: settled.id, state: settled.status))
        }
    }

    /// The phone's answer to a card: presented, submitted, dismissed, form_id, answers keyed by field name,
    /// checklists by title (answers and checklists checked against the card, value by value).
    struct CardAnswer: Decodable {
        var deviceID: String?
        var presented: Bool?
        var submitted: Bool?
        var dismissed: Bool?
        var formID: String?
        var answers: [String: JSONValue]?
        var checklists: [String: JSONValue]?

        enum CodingKeys: String, CodingKey {
            case deviceID = "device_id"
            case presented
            case submitted
            case dismissed
            case formID = "form_id"
            case answers
            case checklists
        }
    }

    static func validateResult(_ body: CardAnswer, for command: DeviceNodes.Command) throws -> JSONValue {
        let card = try CanvasCard(command.params)
        let presented = body.presented ?? true
        let submitted = body.submitted ?? false
        let dismissed = body.dismissed ?? false
        guard !(submitted && dismissed) else { throw APIError.invalidField("submitted", "a card is either submitted or dismissed, not both") }
        var result: [String: JSONValue] = ["presented": .bool(presented), "submitted": .bool(submitted)]
        if dismissed { result["dismissed"] = true }
        if let form = card.form, submitted {
            let formID = body.formID ?? form.id
            guard formID == form.id else { throw APIError.invalidField("form_id", "this card's form is '\(form.id)'") }
            result["form_id"] = .string(formID)
            var answers: [String: JSONValue] = [:]
            for (name, value) in body.answers ?? [:] {
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
        for (title, value) in body.checklists ?? [:] {
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

// MARK: Answers, in the first protocol's field names

extension DeviceCommandsAPI {
    /// The first protocol's view of a node command: `state` and `waits_for_submit` as it had them.
    struct CommandView: Encodable {
        var id, deviceID, command: String
        var state: DeviceNodes.CommandStatus
        var params: JSONValue
        var waitsForSubmit: Bool
        var expiresAt: Timestamp

        init(_ c: DeviceNodes.Command) {
            id = c.id
            deviceID = c.deviceID
            command = c.command
            params = c.params
            state = c.status
            waitsForSubmit = (try? CanvasCard(c.params))?.waitsForSubmit ?? false
            expiresAt = Timestamp(c.expiresAt)
        }

        enum CodingKeys: String, CodingKey {
            case id, command, params, state
            case deviceID = "device_id", waitsForSubmit = "waits_for_submit", expiresAt = "expires_at"
        }
    }

    /// What became of a waited-for command when the phone gave no answer of its own.
    struct Outcome: Encodable {
        var commandID: String
        var presented = false
        var submitted: Bool? = false
        var expired: Bool?
        var status: DeviceNodes.CommandStatus?
        var error: String?

        enum CodingKeys: String, CodingKey {
            case presented, submitted, expired, status, error
            case commandID = "command_id"
        }
    }

    struct Accepted: Encodable {
        var ok = true
        var commandID: String
        var state: DeviceNodes.CommandStatus

        enum CodingKeys: String, CodingKey {
            case ok, state
            case commandID = "command_id"
        }
    }
}
