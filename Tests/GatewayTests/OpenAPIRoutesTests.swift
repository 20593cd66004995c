import Foundation
import GatewayTestSupport
import Identity
import Testing
import YAML

/// openapi.yaml describes exactly the routes the router serves, with the same access rules.
@Suite("OpenAPI description")
struct OpenAPIRoutesTests {
    struct Operation: Hashable, CustomStringConvertible {
        let method: String
        let path: String
        let access: String
        var description: String { "\(method) \(path) [\(access)]" }
    }

    func documented() throws -> Set<Operation> {
        let text = try String(contentsOfFile: RepositoryPaths.root + "/openapi.yaml", encoding: .utf8)
        let root = try #require(try YAMLParser.parse(text))
        let paths = try #require(root.mappingEntries?.first { $0.key == "paths" }?.value.mappingEntries)
        var result: Set<Operation> = []
        for path in paths {
            for operation in path.value.mappingEntries ?? [] {
                let fields = operation.value.mappingEntries ?? []
                let role = fields.first { $0.key == "x-soulacy-role" }?.value.scalarValue
                let security = fields.first { $0.key == "security" }?.value
                let open: Bool = if case .sequence(let items, _) = security {
                    items.isEmpty || items.allSatisfy { $0.mappingEntries?.first?.key == "webhookSecret" }
                } else { false }
                let route = path.key.replacingOccurrences(of: "{", with: ":").replacingOccurrences(of: "}", with: "")
                result.insert(Operation(method: operation.key.uppercased(), path: route, access: open ? "open" : (role ?? "missing role")))
            }
        }
        return result
    }

    @Test("every route in the router is in openapi.yaml and nothing else is, with the same access")
    func matchesRouter() async throws {
        try await withTestGateway { (gw) async throws in
            let served = Set(gw.gateway.router.routes.map { route -> Operation in
                let access: String = switch route.access {
                case .open: "open"
                case .role(let role): role.rawValue
                }
                return Operation(method: route.method.rawValue, path: route.pattern, access: access)
            })
            let spec = try documented()
            #expect(served.subtracting(spec).isEmpty, "served but not documented: \(served.subtracting(spec).sorted { $0.description < $1.description })")
            #expect(spec.subtracting(served).isEmpty, "documented but not served: \(spec.subtracting(served).sorted { $0.description < $1.description })")
        }
    }
}
