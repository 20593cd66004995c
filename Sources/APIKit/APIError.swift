import Foundation
import HTTPServer

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
        // Every key is a string: the original's `error`, this gateway's `code` and `field`, and the details.
        var body = details
        body["error"] = message
        body["code"] = code
        if let field { body["field"] = field }
        var response = HTTPResponse.json(body, status: status)
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
    /// 429 with `Retry-After`: the whole seconds until the caller may try again.
    public static func tooManyRequests(_ message: String, code: String, retryAfter seconds: Int) -> APIError {
        var error = APIError(status: 429, code: code, message: message)
        error.extraHeaders["Retry-After"] = String(seconds)
        return error
    }

    public static func `internal`(_ message: String) -> APIError {
        APIError(status: 500, code: "internal_error", message: message)
    }
    public static func unavailable(_ message: String, code: String = "unavailable") -> APIError {
        APIError(status: 503, code: code, message: message)
    }
}

/// A domain error that knows its HTTP answer (Hummingbird's `HTTPResponseError`): stores throw their own errors, the
/// HTTP layer conforms them in its files, and the router answers with them.
public protocol HTTPResponseError: Error {
    var apiError: APIError { get }
}

extension APIError {
    /// The answer an error thrown by a route stands for: itself, or a domain error's mapping (nil for any other
    /// error, which the router's error responder answers).
    public init?(answering error: any Error) {
        if let error = error as? APIError { self = error } else if let error = error as? any HTTPResponseError { self = error.apiError } else { return nil }
    }
}

extension HTTPResponse {
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
}

extension HTTPRequest {
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
}
