import Foundation

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

    public func parameter(_ name: String) -> String { pathParameters[name] ?? "" }

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
