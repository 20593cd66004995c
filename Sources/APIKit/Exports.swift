// Routes are written against the kit alone, as Hummingbird re-exports HummingbirdCore: requests and responses come
// from the server wrapper, JSON values and the request decoder from JSON.
@_exported import HTTPServer
@_exported import JSON
