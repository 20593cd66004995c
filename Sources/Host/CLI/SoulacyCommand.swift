import Dispatch
import Foundation
import Gateway
import Glibc

/// `soulacy serve | check | version`.
@main
struct SoulacyCommand {
    static let usage = """
        usage:
          soulacy serve --config FILE --data DIR [--listen ADDR:PORT]   run the gateway (default listen 127.0.0.1:8080)
          soulacy check FILE                                            validate a SOUL.yaml; errors as file:line:col: message
          soulacy version
        """

    static func main() async {
        var arguments = Array(CommandLine.arguments.dropFirst())
        guard let command = arguments.first else { fail(usage, code: 64) }
        arguments.removeFirst()
        switch command {
        case "serve": await serve(arguments)
        case "check": check(arguments)
        case "version", "--version": print("soulacy \(GatewayVersion.current)")
        case "help", "--help", "-h": print(usage)
        default: fail("unknown command '\(command)'\n\(usage)", code: 64)
        }
    }

    static func fail(_ message: String, code: Int32 = 1) -> Never {
        FileHandle.standardError.write(Data((message + "\n").utf8))
        exit(code)
    }

    static func options(_ arguments: [String], allowed: Set<String>) -> [String: String] {
        var result: [String: String] = [:]
        var i = 0
        while i < arguments.count {
            let name = arguments[i]
            guard name.hasPrefix("--"), allowed.contains(String(name.dropFirst(2))) else { fail("unknown option '\(name)'\n\(usage)", code: 64) }
            guard i + 1 < arguments.count else { fail("option \(name) needs a value", code: 64) }
            result[String(name.dropFirst(2))] = arguments[i + 1]
            i += 2
        }
        return result
    }

    static func check(_ arguments: [String]) {
        guard arguments.count == 1 else { fail("usage: soulacy check FILE", code: 64) }
        do {
            let config = try SoulConfigLoader.load(path: arguments[0], destinations: Gateway.destinationValidators)
            print("\(arguments[0]): ok, \(config.agents.count) agent(s)")
        } catch {
            fail(error.description, code: 1)
        }
    }

    static func serve(_ arguments: [String]) async {
        let opts = options(arguments, allowed: ["config", "data", "listen"])
        guard let config = opts["config"], let data = opts["data"] else { fail("serve needs --config FILE and --data DIR\n\(usage)", code: 64) }
        let listen = opts["listen"] ?? "127.0.0.1:8080"
        guard let colon = listen.lastIndex(of: ":"), let port = UInt16(listen[listen.index(after: colon)...]) else {
            fail("--listen must be ADDR:PORT, for example 127.0.0.1:8080", code: 64)
        }
        let host = String(listen[..<colon]).trimmingCharacters(in: CharacterSet(charactersIn: "[]"))

        let gateway: Gateway
        do {
            gateway = try Gateway(options: GatewayOptions(configPath: config, dataDirectory: data, host: host, port: port))
            if let token = try gateway.bootstrapAdminKey() {
                print("""
                    First start: created the owner's admin API key. It is shown this once; store it now.
                      SOULACY_ADMIN_KEY=\(token)
                    """)
            }
            try gateway.start()
        } catch {
            fail("soulacy: \(error)")
        }
        print("soulacy is listening on http://\(listen) (Ctrl-C stops it)")
        fflush(nil)

        await waitForTermination()
        FileHandle.standardError.write(Data("soulacy: stopping; letting requests and runs finish\n".utf8))
        await gateway.stop()
    }

    static func waitForTermination() async {
        let stream = AsyncStream<Int32> { continuation in
            let sources = [SIGINT, SIGTERM].map { sig in
                signal(sig, SIG_IGN)
                let source = DispatchSource.makeSignalSource(signal: sig, queue: .global())
                source.setEventHandler { continuation.yield(sig) }
                source.resume()
                return source
            }
            // The stream keeps the sources alive until it ends.
            nonisolated(unsafe) let retained = sources
            continuation.onTermination = { _ in retained.forEach { $0.cancel() } }
        }
        for await _ in stream { return }
    }
}
