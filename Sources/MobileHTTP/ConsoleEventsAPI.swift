import APIKit
import Foundation
import Identity
import Mobile

/// `GET /console/events`: the console's live updates as server-sent events, about the caller's own data only.
extension ConsoleInboxAPI {
    @Sendable func events(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        // A stream never ends by itself: a path that carries whole answers (the relay carriage, which names itself
        // instead of an address) would wait on it for ever.
        guard request.remoteAddress.contains(".") || request.remoteAddress.contains(":") else {
            throw APIError(status: 400, code: "not_streamable", message: "the console's event stream needs a direct connection to the gateway")
        }
        let subscription = store.consoleEvents.subscribe(subject: caller.subject, isAdmin: caller.role == .admin)
        let stream = ResponseStream()
        // A first line at once, so the browser knows the stream is open; a reconnect waits 2 s.
        stream.write("retry: 2000\n: soulacy console events\n\n")
        let (keepAlive, limit) = (self.keepAlive, streamBufferLimit)
        let heartbeat = Task {
            // Every write also finds out whether the browser is still there: a gone one ends the subscription.
            while !Task.isCancelled {
                try? await Task.sleep(for: keepAlive)
                if stream.isClosed || Task.isCancelled { break }
                stream.write(": keep-alive\n\n")
            }
            subscription.cancel()
        }
        Task {
            while let event = await subscription.next() {
                // A browser that does not read holds the writer here, never the publishers: its subscription's queue
                // fills instead, and then ends it.
                while stream.bufferedByteCount > limit, !stream.isClosed, !subscription.isEnded {
                    try? await Task.sleep(for: .milliseconds(50))
                }
                if stream.isClosed { break }
                stream.write(event.frame)
            }
            subscription.cancel()
            heartbeat.cancel()
            stream.finish()
        }
        return .streaming(stream, headers: [("Content-Type", "text/event-stream"), ("Cache-Control", "no-cache"), ("X-Accel-Buffering", "no")])
    }
}
