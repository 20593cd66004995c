import ChannelAPI
import Foundation
import HTTPServer
import LLM
import Mobile

/// The phone builtins an LLM agent may name: `mobile.list_nodes`, `mobile.invoke`, `mobile.command_status`
/// (SOULACY-AGENTS.md §14), run in-process against the device-command queue, acting for the run's person.
public enum PhoneTools {
    /// The original's thirteen device commands.
    public static let commands = [
        "device.info", "location.current", "contacts.search", "calendar.events", "reminders.list", "motion.current", "system.notify",
        "camera.capture", "photos.pick", "canvas.present", "canvas.snapshot", "health.summary", "focus.status",
    ]
    public static let maximumParamsBytes = 64 * 1024
    public static let maximumQueuedPerDevice = 100

    public static func all(store: MobileStore, commands: DeviceCommands, clock: any WallClock) -> [String: any AgentTool] {
        let tools: [any AgentTool] = [ListNodes(store: store), Invoke(store: store, commands: commands),
                                      CommandStatus(store: store, commands: commands, clock: clock)]
        return Dictionary(uniqueKeysWithValues: tools.map { ($0.spec.name, $0) })
    }

    static func failure(_ message: String) -> String { "error: \(message)" }

    /// A device's capabilities as command names; this gateway's older `canvas` switch stands for canvas.present.
    static func capabilities(_ device: Device) -> [String] {
        var names = Set(device.capabilities.filter { commands.contains($0) })
        if device.capabilities.contains("canvas") { names.insert("canvas.present") }
        return names.sorted()
    }

    /// Status as the original names it: a command the phone has fetched is running.
    static func status(_ state: String) -> String {
        switch state {
        case "delivered": return "running"
        default: return state
        }
    }

    static func json(_ c: DeviceCommands.Command) -> JSONValue {
        var object: [String: JSONValue] = ["id": .string(c.id), "device_id": .string(c.deviceID), "command": .string(c.command), "params": c.params,
                                           "status": .string(status(c.state)), "expires_at": .timestamp(c.expiresAt)]
        if let result = c.result { object["result"] = result }
        return .object(object)
    }

    struct ListNodes: AgentTool {
        let store: MobileStore
        var spec: ToolSpec {
            ToolSpec(name: "mobile.list_nodes", description: "List the person's paired phones with the device commands each has enabled.",
                     parameters: ["type": "object", "properties": [:]])
        }

        func call(_ arguments: JSONValue, run: ToolRunContext) async -> String {
            do {
                let nodes: [JSONValue] = try store.devices(subject: run.subject).map { device in
                    ["device_id": .string(device.id), "name": .string(device.name), "platform": .string(device.platform.rawValue),
                     "capabilities": .array(PhoneTools.capabilities(device).map(JSONValue.string)), "permissions": [:],
                     "foreground_only": true, "updated_at": .timestamp(device.updatedAt)]
                }
                return JSONValue.array(nodes).serialized()
            } catch {
                return PhoneTools.failure("could not read the phones: \(error)")
            }
        }
    }

    struct Invoke: AgentTool {
        let store: MobileStore
        let commands: DeviceCommands
        var spec: ToolSpec {
            ToolSpec(name: "mobile.invoke", description: "Queue a device command on one of the person's phones; read its result with mobile.command_status.",
                     parameters: [
                        "type": "object", "required": ["device_id", "command"],
                        "properties": [
                            "device_id": ["type": "string", "description": "The phone, from mobile.list_nodes."],
                            "command": ["type": "string", "enum": .array(PhoneTools.commands.map(JSONValue.string))],
                            "params": ["type": "object", "description": "The command's parameters (at most 64 KiB of JSON)."],
                            "expires_in_seconds": ["type": "integer", "minimum": 30, "maximum": 900],
                        ],
                     ])
        }

        func call(_ arguments: JSONValue, run: ToolRunContext) async -> String {
            guard let deviceID = arguments["device_id"]?.stringValue, !deviceID.isEmpty else { return PhoneTools.failure("device_id is required") }
            guard let command = arguments["command"]?.stringValue, !command.isEmpty else { return PhoneTools.failure("command is required") }
            guard PhoneTools.commands.contains(command) else {
                return PhoneTools.failure("unknown command \"\(command)\"; one of \(PhoneTools.commands.joined(separator: ", "))")
            }
            let params = arguments["params"] ?? .object([:])
            guard params.objectValue != nil else { return PhoneTools.failure("params must be an object") }
            guard params.serializedBytes().count <= PhoneTools.maximumParamsBytes else { return PhoneTools.failure("params must be at most 64 KiB of JSON") }
            // Honoured only from 30 to 900 seconds, as in the original; otherwise five minutes.
            var expiresIn = 300
            if let asked = arguments["expires_in_seconds"]?.numberValue, (30...900).contains(asked) { expiresIn = Int(asked) }
            do {
                guard let device = try store.device(id: deviceID), device.subject == run.subject else {
                    return PhoneTools.failure("no phone \"\(deviceID)\" of this person; call mobile.list_nodes")
                }
                guard PhoneTools.capabilities(device).contains(command) else {
                    return PhoneTools.failure("device has not enabled \(command); the person can switch it on under Settings → Device access")
                }
                var stored = params
                var waits = false
                if command == "canvas.present" {
                    let card = try CanvasCard(params)
                    stored = card.json
                    waits = card.waitsForSubmit
                }
                guard try commands.queuedCount(deviceID: device.id) < PhoneTools.maximumQueuedPerDevice else {
                    return PhoneTools.failure("this phone already has \(PhoneTools.maximumQueuedPerDevice) commands waiting")
                }
                let queued = try commands.queue(deviceID: device.id, subject: run.subject, command: command, params: stored, waits: waits, expiresIn: expiresIn)
                guard case .object(var object) = PhoneTools.json(queued) else { return "{}" }
                object["status"] = "queued"
                object["created_at"] = .timestamp(queued.expiresAt.addingTimeInterval(-TimeInterval(expiresIn)))
                return JSONValue.object(object).serialized()
            } catch let error as APIError {
                return PhoneTools.failure(error.message)
            } catch {
                return PhoneTools.failure("\(error)")
            }
        }
    }

    struct CommandStatus: AgentTool {
        let store: MobileStore
        let commands: DeviceCommands
        let clock: any WallClock
        var spec: ToolSpec {
            ToolSpec(name: "mobile.command_status", description: "Read a device command's status and result, waiting up to wait_seconds for it to finish.",
                     parameters: [
                        "type": "object", "required": ["device_id", "command_id"],
                        "properties": [
                            "device_id": ["type": "string"], "command_id": ["type": "string"],
                            "wait_seconds": ["type": "integer", "minimum": 0, "maximum": 25],
                        ],
                     ])
        }

        func call(_ arguments: JSONValue, run: ToolRunContext) async -> String {
            guard let deviceID = arguments["device_id"]?.stringValue, let commandID = arguments["command_id"]?.stringValue else {
                return PhoneTools.failure("device_id and command_id are required")
            }
            let wait = min(max(Int(arguments["wait_seconds"]?.numberValue ?? 0), 0), 25)
            let deadline = ContinuousClock.now + .seconds(wait)
            while true {
                guard let command = try? commands.command(id: commandID), command.deviceID == deviceID, command.subject == run.subject else {
                    return PhoneTools.failure("no command \"\(commandID)\" on phone \"\(deviceID)\"")
                }
                let terminal = command.state == "completed" || command.state == "expired" || command.expiresAt <= clock.now()
                if terminal || ContinuousClock.now >= deadline {
                    if !terminal || command.state == "completed" || command.state == "expired" { return PhoneTools.json(command).serialized() }
                    var expired = command
                    expired.state = "expired"
                    return PhoneTools.json(expired).serialized()
                }
                try? await Task.sleep(for: .milliseconds(500))
                if Task.isCancelled { return PhoneTools.failure("the run ended") }
            }
        }
    }
}
