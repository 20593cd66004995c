// Routes are written against the kit alone, as Hummingbird re-exports HummingbirdCore: requests and responses come
// from the server wrapper, JSON values and the request decoder from JSON.
@_exported import HTTPServer
@_exported import JSON
// Each request's context carries a logger.
@_exported import Logging
