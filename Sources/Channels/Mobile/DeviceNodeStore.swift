import Foundation
import Storage

/// The rows behind the phone-as-node protocol (`DeviceNodes`): each phone's node and its command queue. A protocol:
/// each engine keeps them (`SQLiteDeviceNodeStore` beside the inbox in the data directory's file,
/// `PostgresDeviceNodeStore` on a database several gateways share), so a command queued through one node is polled,
/// claimed and answered through any other, and a waiter on one node sees an outcome posted on another.
///
/// Writes happen in the caller's session (they commit with an idempotent call's answer); reads are async. Commands
/// come back as stored: whether a queued one has expired by now is `DeviceNodes`' reading, not the store's.
public protocol DeviceNodeStore: Sendable {
    /// The engine seam's view of the store's database.
    var transactions: any TransactionalStorage { get }

    /// Stores the node, replacing the device's earlier one. A device id another person holds (as a node or as a
    /// registered device) is refused with `NodeError.notFound`, and nothing changes.
    func register(_ node: DeviceNodes.Node, in session: any StorageSession) throws
    /// The same node as committed, read inside the caller's transaction.
    func node(deviceID: String, subject: String, in session: any StorageSession) throws -> DeviceNodes.Node?
    func node(deviceID: String, subject: String) async throws -> DeviceNodes.Node?
    /// A person's nodes, most recently updated first, at most `limit`.
    func nodes(subject: String, limit: Int) async throws -> [DeviceNodes.Node]

    /// Queues `command` unless the device already has a command with its id, which is returned as stored instead
    /// (`created` false). Refuses with `NodeError.queueFull(limit)` when `queueLimit` unexpired commands are waiting.
    func insert(_ command: DeviceNodes.Command, queueLimit: Int, now: Date,
                in session: any StorageSession) throws -> (command: DeviceNodes.Command, created: Bool)
    func command(id: String, deviceID: String, subject: String, in session: any StorageSession) throws -> DeviceNodes.Command?
    func command(id: String, deviceID: String, subject: String) async throws -> DeviceNodes.Command?
    /// Queued and unexpired at `now`, oldest first, at most `limit`.
    func pending(deviceID: String, now: Date, limit: Int) async throws -> [DeviceNodes.Command]
    /// queued → running when still queued and unexpired at `now`; false otherwise (of two claims, one wins).
    func claim(id: String, deviceID: String, now: Date, in session: any StorageSession) throws -> Bool
    /// running → `status` with the phone's outcome; false when the command is not running.
    func finish(id: String, deviceID: String, status: DeviceNodes.CommandStatus, resultJSON: String?, error: String?, at: Date,
                in session: any StorageSession) throws -> Bool
    /// A command still queued or running at its expiry is settled as expired.
    func expire(id: String, deviceID: String, at: Date) async throws
    /// Removes commands whose expiry and settlement (if any) are both before `before`, results included (up to
    /// 1 MiB each): nobody waits on them any more. Returns how many went.
    func removeSettled(before: Date) async throws -> Int
}
