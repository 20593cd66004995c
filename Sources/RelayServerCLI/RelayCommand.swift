import APNs
import Foundation
import HTTPServer
import RelayMailbox

/// `soulacy-relay --data DIR [--listen ADDR:PORT]`: the end-to-end encrypted mailbox, deployable on its own.
@main
struct RelayCommand {
    static func main() async {
        var options: [String: String] = [:]
        var args = Array(CommandLine.arguments.dropFirst())
        while args.count >= 2, args[0].hasPrefix("--") {
            options[String(args[0].dropFirst(2))] = args[1]
            args.removeFirst(2)
        }
        guard args.isEmpty, let data = options["data"] else {
            FileHandle.standardError.write(Data("usage: soulacy-relay --data DIR [--listen ADDR:PORT] [--max-item-bytes N]\n".utf8))
            exit(64)
        }
        let listen = options["listen"] ?? "127.0.0.1:8787"
        guard let colon = listen.lastIndex(of: ":"), let port = UInt16(listen[listen.index(after: colon)...]) else {
            FileHandle.standardError.write(Data("--listen must be ADDR:PORT\n".utf8))
            exit(64)
        }
        do {
            try FileManager.default.createDirectory(atPath: data, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            // With SOULACY_MOBILE_APNS_* set, the relay wakes phones for new items (a generic alert, sealed payload).
            let push = try APNsConfiguration.fromEnvironment(ProcessInfo.processInfo.environment).map { try APNsTransport(configuration: $0) }
            let api = MailboxAPI(store: try MailboxStore(path: data + "/relay.db"), maximumItemBytes: Int(options["max-item-bytes"] ?? "") ?? 256 * 1024, push: push)
            let router = api.router
            let server = HTTPServer(configuration: HTTPServerConfiguration(host: String(listen[..<colon]), port: port, maximumBodyBytes: 4 << 20)) { await router.handle($0) }
            try server.start()
            print("soulacy-relay is listening on http://\(String(listen[..<colon])):\(server.port)")
            fflush(nil)
            while true { try await Task.sleep(for: .seconds(3600)) }
        } catch {
            FileHandle.standardError.write(Data("soulacy-relay: \(error)\n".utf8))
            exit(1)
        }
    }
}
