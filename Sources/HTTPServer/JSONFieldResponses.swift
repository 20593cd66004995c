@_exported import JSON

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
