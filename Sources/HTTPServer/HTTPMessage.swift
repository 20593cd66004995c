import Foundation
import Identity

public enum HTTPMethod: String, Sendable, CaseIterable {
    case GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS
}

/// One request as the handlers see it: the body is complete and within the server's limit.
public struct HTTPRequest: Sendable {
    public var method: String
    public var path: String
    public var query: [String: String]
    /// Header names are lower-cased.
    public var headers: [String: String]
    public var body: [UInt8]
    public var remoteAddress: String
    /// Values of the route pattern's `:name` segments.
    public var pathParameters: [String: String] = [:]
    /// Set by the router when the route needs a credential.
    public var principal: Principal?
    /// Whether it came over this server's TLS (the pinned Wi-Fi listener): secrets a phone must not get in the clear
    /// are only answered then.
    public var isSecure = false

    public init(method: String, path: String, query: [String: String] = [:], headers: [String: String] = [:], body: [UInt8] = [], remoteAddress: String = "") {
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
        self.remoteAddress = remoteAddress
    }

    public func header(_ name: String) -> String? { headers[name.lowercased()] }

    /// The authenticated caller; routes with `Access.role` always have one, and hand it to their handlers
    /// (`AuthenticatedRouteHandler`), so no handler reads it as an optional.
    func caller() throws(APIError) -> Principal {
        guard let principal else { throw APIError.unauthorized("an API key is required (Authorization: Bearer <key>)") }
        return principal
    }

    public func parameter(_ name: String) -> String { pathParameters[name] ?? "" }

    /// A query value that must be one of `allowed` (`fallback` when absent); anything else is a 400 naming it.
    public func queryChoice(_ name: String, among allowed: [String], fallback: String) throws(APIError) -> String {
        guard let value = query[name] else { return fallback }
        guard allowed.contains(value) else {
            throw APIError.invalidField(name, "must be one of \(allowed.joined(separator: ", ")), got \"\(value)\"")
        }
        return value
    }

    /// A true/false query flag (false when absent).
    public func queryFlag(_ name: String) throws(APIError) -> Bool {
        try queryChoice(name, among: ["true", "false"], fallback: "false") == "true"
    }

    /// The token of an `Authorization: Bearer <token>` header (scheme case-insensitive, blanks around the token
    /// ignored); nil when there is no such header or it names another scheme or no token.
    public var bearerToken: String? {
        guard let header = header("authorization") else { return nil }
        // Byte-wise: this runs on every call, and Foundation's trimming costs more than the rest of routing.
        let bytes = header.utf8
        let scheme = "bearer ".utf8
        guard bytes.count > scheme.count, zip(bytes, scheme).allSatisfy({ $0 | 0x20 == $1 }) else { return nil }
        var rest = bytes.dropFirst(scheme.count)
        while let first = rest.first, first == 0x20 || first == 0x09 { rest.removeFirst() }
        while let last = rest.last, last == 0x20 || last == 0x09 { rest.removeLast() }
        return rest.isEmpty ? nil : String(Substring(rest))
    }

    /// True when If-None-Match names `etag` (or is `*`): the caller already holds this representation.
    /// Weak comparison, as RFC 9110 asks for If-None-Match.
    public func alreadyHas(etag: String) -> Bool {
        guard let header = header("if-none-match") else { return false }
        let wanted = etag.hasPrefix("W/") ? etag.dropFirst(2) : Substring(etag)
        return header.split(separator: ",").contains { candidate in
            let tag = candidate.trimmingCharacters(in: .whitespaces)
            return tag == "*" || (tag.hasPrefix("W/") ? tag.dropFirst(2) : Substring(tag)) == wanted
        }
    }
}

public struct HTTPResponse: Sendable {
    public var status: Int
    public var headers: [(String, String)]
    public var body: [UInt8]
    /// A body written while it is sent (server-sent events); `body` is then empty.
    public var stream: ResponseStream? = nil

    public init(status: Int, headers: [(String, String)] = [], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    public static func json<T: Encodable>(_ value: T, status: Int = 200) -> HTTPResponse {
        do {
            let data = try JSONCoding.encoder.encode(value)
            return HTTPResponse(status: status, headers: [("Content-Type", "application/json")], body: Array(data))
        } catch {
            return APIError.internal("could not encode the response").response
        }
    }

    public static func json(_ value: JSONValue, status: Int = 200) -> HTTPResponse {
        HTTPResponse(status: status, headers: [("Content-Type", "application/json")], body: value.serializedBytes())
    }

    public static let noContent = HTTPResponse(status: 204)

    /// A response whose body the handler goes on writing into `stream` after returning it.
    public static func streaming(_ stream: ResponseStream, status: Int = 200, headers: [(String, String)]) -> HTTPResponse {
        var response = HTTPResponse(status: status, headers: headers)
        response.stream = stream
        return response
    }

    /// The same response with a streamed body read to its end (for paths that carry whole answers, like the relay).
    public func collected() async -> HTTPResponse {
        guard let stream else { return self }
        var whole = self
        whole.body = await stream.readToEnd()
        whole.stream = nil
        return whole
    }

    public func header(_ name: String) -> String? {
        headers.first { $0.0.lowercased() == name.lowercased() }?.1
    }
}

/// A refusal as every route reports it: `{"error": "<message>", "code": "<machine code>", "field"?: "<field>"}` with an
/// HTTP status. The original Soulacy apps read `error` as a string; `code` and `field` are this gateway's additions.
public struct APIError: Error, Sendable, Equatable, CustomStringConvertible {
    public let status: Int
    public let code: String
    public let message: String
    public let field: String?
    /// Further string keys of the body, where the original's refusal has them (a role refusal's `role` and `required`).
    public var details: [String: String] = [:]
    public var extraHeaders: [String: String] = [:]

    public init(status: Int, code: String, message: String, field: String? = nil) {
        self.status = status
        self.code = code
        self.message = message
        self.field = field
    }

    public var description: String { "\(status) \(code): \(message)" }

    public var response: HTTPResponse {
        var body: [String: JSONValue] = details.mapValues(JSONValue.string)
        body["error"] = .string(message)
        body["code"] = .string(code)
        if let field { body["field"] = .string(field) }
        var response = HTTPResponse.json(.object(body), status: status)
        for (name, value) in extraHeaders.sorted(by: { $0.key < $1.key }) { response.headers.append((name, value)) }
        return response
    }

    public static func invalidField(_ field: String, _ message: String) -> APIError {
        APIError(status: 400, code: "invalid_field", message: "\(field): \(message)", field: field)
    }
    public static func missingField(_ field: String) -> APIError {
        APIError(status: 400, code: "missing_field", message: "\(field) is required", field: field)
    }
    public static func badRequest(_ message: String, code: String = "bad_request") -> APIError {
        APIError(status: 400, code: code, message: message)
    }
    public static func unauthorized(_ message: String) -> APIError {
        APIError(status: 401, code: "unauthorized", message: message)
    }
    public static func forbidden(_ message: String) -> APIError {
        APIError(status: 403, code: "forbidden", message: message)
    }
    /// The original's role refusal: `{"error": "insufficient permissions", "role": <the key's>, "required": <the route's>}`.
    public static func insufficientRole(has role: String, needs required: String) -> APIError {
        var error = APIError(status: 403, code: "insufficient_role", message: "insufficient permissions")
        error.details = ["role": role, "required": required]
        return error
    }
    public static func notFound(_ message: String) -> APIError {
        APIError(status: 404, code: "not_found", message: message)
    }
    public static func conflict(_ message: String, code: String = "conflict") -> APIError {
        APIError(status: 409, code: code, message: message)
    }
    public static func `internal`(_ message: String) -> APIError {
        APIError(status: 500, code: "internal_error", message: message)
    }
    public static func unavailable(_ message: String, code: String = "unavailable") -> APIError {
        APIError(status: 503, code: code, message: message)
    }
}

