import Foundation
import HTTPServer
import Logging
import Metrics

/// One access-log line per request (method, route pattern, status, duration, bytes, request id) at info, and the
/// HTTP metrics. Never the path's own values, the query (it can carry a code), a header or a body: the route's
/// pattern stands for the path, so neither logs nor metric labels hold an id, a key or a person.
public struct AccessLogMiddleware: Middleware {
    let log: Log?
    let requests: Counter?
    let duration: Histogram?

    /// `log` nil: no access log (`SOULACY_ACCESS_LOG=off`); `metrics` nil: no HTTP metrics.
    public init(log: Log?, metrics: MetricsRegistry?) {
        self.log = log?.component("http")
        requests = metrics?.counter("soulacy_http_requests_total", "HTTP requests answered, by route pattern, method and status.",
                                    labels: ["route", "method", "status"], maximumSeries: 4000)
        duration = metrics?.histogram("soulacy_http_request_duration_seconds", "Time to answer an HTTP request, by route pattern and method.",
                                      labels: ["route", "method"], buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10, 30],
                                      maximumSeries: 2000)
    }

    public func handle(_ request: HTTPRequest, context: RequestContext, next: NextResponder) async throws -> HTTPResponse {
        let response = await next(request, context)
        record(request, context, response)
        return response
    }

    public func screen(_ request: HTTPRequest, context: inout RequestContext) -> Screening { .pass }

    public func answeredAtOnce(_ request: HTTPRequest, context: RequestContext, with response: HTTPResponse) {
        record(request, context, response)
    }

    /// Methods outside HTTP's own few are one label value: a client cannot mint label values.
    static func method(_ request: HTTPRequest) -> String {
        switch request.method {
        case "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS": return request.method
        default: return "other"
        }
    }

    func record(_ request: HTTPRequest, _ context: RequestContext, _ response: HTTPResponse) {
        let took = ContinuousClock.now - context.startedAt
        let seconds = Double(took.components.seconds) + Double(took.components.attoseconds) / 1e18
        let route = context.route?.pattern ?? "unmatched"
        let method = Self.method(request)
        requests?.add([route, method, String(response.status)])
        duration?.observe(seconds, labels: [route, method])
        guard let log, log.isEnabled(.info) else { return }
        let milliseconds = (seconds * 10_000).rounded() / 10
        log.log(.info, "\(method) \(route) \(response.status) \(milliseconds) ms", metadata: [
            "request_id": context.requestID, "method": method, "route": route, "status": String(response.status),
            "duration_ms": String(milliseconds), "bytes": String(response.body.count),
        ])
    }
}
