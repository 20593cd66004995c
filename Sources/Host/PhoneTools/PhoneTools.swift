import ChannelAPI
import Foundation
import JSON
import LLM
import Agents
import Mobile

/// The phone builtins an LLM agent may name: `mobile.list_nodes`, `mobile.invoke`, `mobile.command_status`
/// (SOULACY-AGENTS.md §14), run in-process against the device-command queue, acting for the run's person.
public enum PhoneTools {
    public static func all(nodes: DeviceNodes, clock: any WallClock) -> [String: any AgentTool] {
        let tools: [any AgentTool] = [ListNodes(nodes: nodes), Invoke(nodes: nodes, clock: clock), CommandStatus(nodes: nodes)]
        return Dictionary(uniqueKeysWithValues: tools.map { ($0.spec.name, $0) })
    }

    static func failure(_ error: any Error) -> String {
        // Every error a tool meets says what is wrong in its description (store errors, a card's field).
        "error: \(error)"
    }

    struct ListNodes: AgentTool {
        let nodes: DeviceNodes
        var spec: ToolSpec {
            ToolSpec(name: "mobile.list_nodes", description: "List the person's phones (nodes) with the device commands each has enabled.",
                     parameters: ["type": "object", "properties": [:]])
        }

        func call(_ arguments: JSONValue, run: ToolRunContext) async -> String {
            do { return try JSONCoding.text(await nodes.nodes(subject: run.subject).map(DeviceNodes.NodeView.init)) } catch { return PhoneTools.failure(error) }
        }
    }

    struct Invoke: AgentTool {
        let nodes: DeviceNodes
        let clock: any WallClock
        var spec: ToolSpec {
            ToolSpec(name: "mobile.invoke", description: "Queue a device command on one of the person's phones; read its outcome with mobile.command_status.",
                     parameters: [
                        "type": "object", "required": ["device_id", "command"],
                        "properties": [
                            "device_id": ["type": "string", "description": "The phone, from mobile.list_nodes."],
                            "command": ["type": "string", "enum": .array(DeviceNodes.commands.map(JSONValue.string))],
                            "params": ["type": "object", "description": "The command's parameters (at most 64 KiB of JSON)."],
                            "expires_in_seconds": ["type": "integer", "minimum": 30, "maximum": 900],
                        ],
                     ])
        }

        func call(_ arguments: JSONValue, run: ToolRunContext) async -> String {
            guard let deviceID = arguments["device_id"]?.stringValue, !deviceID.isEmpty else { return "error: device_id is required" }
            guard let command = arguments["command"]?.stringValue, !command.isEmpty else { return "error: command is required" }
            // Honoured only from 30 to 900 seconds, as in the original; otherwise five minutes.
            var expiresIn = DeviceNodes.defaultExpiry
            if let asked = arguments["expires_in_seconds"]?.numberValue, (30...900).contains(asked) { expiresIn = asked }
            do {
                let queued = try await nodes.enqueue(deviceID: deviceID, subject: run.subject, id: nil, command: command,
                                               params: arguments["params"] ?? .object([:]), expiresAt: clock.now().addingTimeInterval(expiresIn))
                return try JSONCoding.text(DeviceNodes.CommandView(queued))
            } catch {
                return PhoneTools.failure(error)
            }
        }
    }

    struct CommandStatus: AgentTool {
        let nodes: DeviceNodes
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
                return "error: device_id and command_id are required"
            }
            // Clamped as a Double: Int(_:) traps on a number the model made up past Int's range (1e300) or on NaN.
            let asked = arguments["wait_seconds"]?.numberValue ?? 0
            let wait = asked.isNaN ? 0 : Int(min(max(asked, 0), 25))
            do {
                return try JSONCoding.text(DeviceNodes.CommandView(try await nodes.waitForOutcome(id: commandID, deviceID: deviceID, subject: run.subject, wait: .seconds(wait))))
            } catch {
                return PhoneTools.failure(error)
            }
        }
    }
}
