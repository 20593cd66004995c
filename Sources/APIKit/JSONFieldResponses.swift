import HTTPServer

/// A client's bad JSON is a 400 naming the field, as every route reports it.
extension JSONFieldError: HTTPResponseError {
    public var apiError: APIError {
        switch kind {
        case .invalidJSON: return APIError(status: 400, code: "invalid_json", message: message)
        case .missing: return APIError(status: 400, code: "missing_field", message: message, field: field)
        case .invalid: return APIError(status: 400, code: "invalid_field", message: message, field: field)
        }
    }
}

extension HTTPRequest {
    /// The body as a request type, through the one request decoder (`JSONValueDecoder`): invalid JSON and every
    /// wrong field are 400s naming what is wrong. No body at all reads as `{}` when `allowEmpty`.
    public func decode<T: Decodable>(_ type: T.Type, allowEmpty: Bool = false) throws(JSONFieldError) -> T {
        let value = allowEmpty && body.isEmpty ? JSONValue.object([:]) : try JSONValue.parse(body)
        return try JSONValueDecoder().decode(type, from: value)
    }
}
