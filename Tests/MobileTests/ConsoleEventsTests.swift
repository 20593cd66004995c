import ChannelAPI
import Foundation
import Glibc
import GatewayTestSupport
import APIKit
import Identity
import Mobile
import Synchronization
import Testing

/// The console's live updates: the in-process hub (scoping, coalescing, a bounded queue per subscriber) and
/// `GET /api/v1/console/events` read by a raw HTTP client as a browser's EventSource reads it.
@Suite("Console events", .serialized)
struct ConsoleEventsTests {
    /// Reads a server-sent event stream as it arrives, on a thread of its own.
    final class EventStreamReader: @unchecked Sendable {
        let fd: Int32
        private let lock = NSLock()
        private var text = ""

        /// Keeps only the last `keep` characters when set (a reader that drains a long stream).
        let keep: Int?

        init(port: UInt16, key: String, receiveBuffer: Int32? = nil, keep: Int? = nil) throws {
            self.keep = keep
            guard let fd = RawHTTP.connect(port: port, timeout: 10) else { throw TestFailure("cannot connect") }
            if var size = receiveBuffer { setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size)) }
            self.fd = fd
            let request = Array("GET /api/v1/console/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(key)\r\nAccept: text/event-stream\r\n\r\n".utf8)
            _ = request.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        }

        deinit { close(fd) }

        var received: String { lock.withLock { text } }

        /// Reads until `condition` holds for what arrived (or the server closes, or 10 s pass).
        @discardableResult
        func read(until condition: @escaping @Sendable (String) -> Bool) async -> Bool {
            await onOwnThread { [self] in
                var buffer = [UInt8](repeating: 0, count: 65536)
                while !condition(received) {
                    let n = recv(fd, &buffer, buffer.count, 0)
                    if n <= 0 { return condition(received) }
                    let piece = String(decoding: buffer[0..<n], as: UTF8.self)
                    lock.withLock {
                        text += piece
                        if let keep, text.utf8.count > 2 * keep { text = String(text.suffix(keep)) }
                    }
                }
                return true
            }
        }

        /// The events so far: name and data.
        var events: [(event: String, data: String)] {
            var result: [(String, String)] = []
            var event = "message"
            let lines = String(String.UnicodeScalarView(received.unicodeScalars.filter { $0 != "\r" })).split(separator: "\n", omittingEmptySubsequences: false)
            for line in lines {
                if line.hasPrefix("event: ") { event = String(line.dropFirst(7)) }
                if line.hasPrefix("data: ") {
                    result.append((event, String(line.dropFirst(6))))
                    event = "message"
                }
            }
            return result
        }
    }

    // MARK: The hub

    @Test("a forwarder gets every event published, in order, however many: 200,000 publishes through one forwarder, no growth of the call")
    func forwarderUnderLoad() async throws {
        // Kept as a bare closure in the hub's lock, each publish wrapped it in two more thunks; at a few thousand
        // publishes a call through it overflowed the stack of the thread that published (a gateway on PostgreSQL
        // with a console open on another node died under load). A thread of the pool's own stack size publishes.
        let hub = ConsoleEventHub()
        let counted = Atomic<Int>(0)
        let lastID = Mutex<String?>(nil)
        hub.forward(to: { event, _ in
            counted.add(1, ordering: .relaxed)
            lastID.withLock { $0 = event.id }
        })
        #expect(hub.isForwarding && hub.isHeard && hub.subscriberCount == 0)
        let total = 200_000
        let done = Atomic<Bool>(false)
        let thread = Thread {
            for index in 0..<total { hub.publish(.delivery("dlv_\(index)"), to: .subject("owner")) }
            done.store(true, ordering: .releasing)
        }
        thread.stackSize = 1 << 20
        thread.start()
        while !done.load(ordering: .acquiring) { try await Task.sleep(for: .milliseconds(10)) }
        #expect(counted.load(ordering: .relaxed) == total)
        #expect(lastID.withLock { $0 } == "dlv_\(total - 1)")
        hub.forward(to: nil)
        hub.publish(.delivery("after"), to: .everyone)
        #expect(!hub.isForwarding && counted.load(ordering: .relaxed) == total)
    }

    @Test("an event reaches its audience only: one person, everyone, or a person and the admins")
    func audiences() async throws {
        let hub = ConsoleEventHub()
        let owner = hub.subscribe(subject: "owner", isAdmin: true)
        let priya = hub.subscribe(subject: "priya", isAdmin: false)
        hub.publish(.delivery("dlv_owner"), to: .subject("owner"))
        hub.publish(.device("priya-phone"), to: .subjectAndAdmins("priya"))
        hub.publish(.agents, to: .everyone)
        hub.publish(.approval("call_1", state: "approved"), to: .subject("priya"))
        #expect(await owner.next() == .delivery("dlv_owner"))
        #expect(await owner.next() == .device("priya-phone"))
        #expect(await owner.next() == .agents)
        #expect(await priya.next() == .device("priya-phone"))
        #expect(await priya.next() == .agents)
        #expect(await priya.next() == .approval("call_1", state: "approved"))
        #expect(owner.queuedCount == 0 && priya.queuedCount == 0)
        #expect(ConsoleEvent.approval("call_1", state: "approved").frame == "event: approval\ndata: {\"id\":\"call_1\",\"state\":\"approved\"}\n\n")
        #expect(ConsoleEvent.agents.frame == "event: agents\ndata: {}\n\n")
        owner.cancel()
        #expect(await owner.next() == nil)
        #expect(hub.subscriberCount == 1)
        hub.close()
        #expect(await priya.next() == nil && hub.subscriberCount == 0)
        // A closed hub ends a new subscription at once.
        #expect(await hub.subscribe(subject: "owner", isAdmin: false).next() == nil)
    }

    @Test("news already waiting is not queued twice; a reader that falls behind its bound is ended, and publishing never waits")
    func boundedAndCoalesced() async throws {
        let hub = ConsoleEventHub()
        let slow = hub.subscribe(subject: "owner", isAdmin: false, capacity: 8)
        let reading = hub.subscribe(subject: "owner", isAdmin: false, capacity: 100_000)
        for _ in 0..<1000 { hub.publish(.delivery("dlv_same"), to: .subject("owner")) }
        #expect(slow.queuedCount == 1 && !slow.isEnded)
        let started = ContinuousClock.now
        for i in 0..<50_000 { hub.publish(.delivery("dlv_\(i)"), to: .subject("owner")) }
        let took = ContinuousClock.now - started
        // The slow one held at most its bound, then was ended; the other kept everything.
        #expect(slow.isEnded && slow.overflowed && slow.queuedCount == 0)
        #expect(await slow.next() == nil)
        #expect(reading.queuedCount == 50_001 && !reading.isEnded)
        #expect(hub.subscriberCount == 1)
        // Publishing never waited for the slow reader, which never read: a publish that did would not have returned.
        // The bound only catches that, with room for a loaded machine under AddressSanitizer.
        #expect(took < .seconds(60), "50,000 publishes took \(took)")
    }

    @Test("a waiting reader gets the next event, and cancelling its task ends the subscription")
    func waitingReader() async throws {
        let hub = ConsoleEventHub()
        let subscription = hub.subscribe(subject: "owner", isAdmin: false)
        // Whether the reader is already waiting or not yet, it gets the event.
        let got = Task { await subscription.next() }
        hub.publish(.device("phone"), to: .subject("owner"))
        #expect(await got.value == .device("phone"))
        let waiting = Task { await subscription.next() }
        waiting.cancel()
        #expect(await waiting.value == nil)
        #expect(subscription.isEnded && hub.subscriberCount == 0)
    }

    // MARK: Over HTTP

    @Test("the stream carries a delivery event to its owner and not to another person; approvals and devices too")
    func streamScoping() async throws {
        try await withTestGateway { (gw) async throws in
            let priya = try await gw.mintKey(subject: "priya", role: "operator")
            let ownerStream = try EventStreamReader(port: gw.gateway.port, key: gw.adminKey)
            let priyaStream = try EventStreamReader(port: gw.gateway.port, key: priya)
            #expect(await ownerStream.read { $0.contains(": soulacy console events") })
            #expect(await priyaStream.read { $0.contains(": soulacy console events") })
            #expect(ownerStream.received.hasPrefix("HTTP/1.1 200") && ownerStream.received.lowercased().contains("content-type: text/event-stream"))
            #expect(await eventually { gw.gateway.mobileStore.consoleEvents.subscriberCount == 2 })

            let owners = try await DeliveryTimelineTests.sendLine(gw, to: "user:owner")
            #expect(await ownerStream.read { $0.contains(owners) })
            #expect(ownerStream.events.contains { $0.event == "delivery" && $0.data == "{\"id\":\"\(owners)\"}" })
            // Priya's own news comes after the owner's was published: had the owner's reached her, it would be here first.
            let hers = try await DeliveryTimelineTests.sendLine(gw, to: "user:priya")
            #expect(await priyaStream.read { $0.contains(hers) })
            #expect(!priyaStream.received.contains(owners))

            // An approval asked for priya reaches her stream only.
            let asked = try await gw.request("POST", "/api/v1/approvals", json: ["agent_id": "echo", "tool": "shell", "wait": false], key: .some(priya))
            let callID = try #require(asked.json["call_id"]?.stringValue, "\(asked.text)")
            #expect(await priyaStream.read { $0.contains(callID) })
            #expect(priyaStream.events.contains { $0.event == "approval" && $0.data.contains("\"state\":\"pending\"") })
            // A device event about priya's phone also reaches the admin.
            gw.gateway.mobileStore.consoleEvents.publish(.device("priya-phone"), to: .subjectAndAdmins("priya"))
            #expect(await ownerStream.read { $0.contains("priya-phone") })
            #expect(!ownerStream.received.contains(callID) && !ownerStream.received.contains(hers))
            // A run's end is news for everyone's agents page.
            _ = try await gw.runAgent("echo", input: "hello", to: "user:owner")
            #expect(await priyaStream.read { $0.contains("event: agents") })
            #expect(priyaStream.events.contains { $0.event == "agents" && $0.data == "{}" })
        }
    }

    @Test("a read receipt is news for the line's owner: an open timeline shows read without a reload")
    func readReceipt() async throws {
        try await withTestGateway { (gw) async throws in
            let registered = try await gw.request("POST", "/api/v1/mobile/devices", json: ["id": "phone", "push_token": .string(String(repeating: "ab", count: 32))])
            #expect(registered.status == 201, "\(registered.text)")
            let line = try await DeliveryTimelineTests.sendLine(gw, to: "user:owner")
            let stream = try EventStreamReader(port: gw.gateway.port, key: gw.adminKey)
            #expect(await stream.read { $0.contains(": soulacy console events") })
            #expect(await eventually { gw.gateway.mobileStore.consoleEvents.subscriberCount == 1 })
            let read = try await gw.request("POST", "/api/v1/mobile/deliveries/\(line)/read", json: ["device_id": "phone"])
            #expect(read.status == 200, "\(read.text)")
            #expect(await stream.read { $0.contains(line) })
            #expect(stream.events.contains { $0.event == "delivery" && $0.data == "{\"id\":\"\(line)\"}" })
        }
    }

    @Test("a reader that stops reading never holds publishers, the gateway or other readers; its stream ends once it falls behind")
    func slowReader() async throws {
        try await withTestGateway { (gw) async throws in
            let hub = gw.gateway.mobileStore.consoleEvents
            // A browser that asks and then never reads, with a small receive buffer.
            let stalled = try EventStreamReader(port: gw.gateway.port, key: gw.adminKey, receiveBuffer: 4096)
            #expect(await stalled.read { $0.contains(": soulacy console events") })
            #expect(await eventually { hub.subscriberCount == 1 })
            // Beside it, a browser that reads everything: the test goes on only once it has each burst, so it is
            // never behind, whatever the machine's load.
            let reading = try EventStreamReader(port: gw.gateway.port, key: gw.adminKey, keep: 8192)
            #expect(await reading.read { $0.contains(": soulacy console events") })
            #expect(await eventually { hub.subscriberCount == 2 })
            var longest = Duration.zero
            var published = 0
            let padding = String(repeating: "x", count: 300)
            // The stalled one's socket fills, then its stream's buffer, then its bounded queue: then it is ended.
            while hub.subscriberCount == 2 && published < 200_000 {
                let started = ContinuousClock.now
                for _ in 0..<20 {
                    hub.publish(.delivery("dlv_\(published)_\(padding)"), to: .subject("owner"))
                    published += 1
                }
                longest = max(longest, ContinuousClock.now - started)
                if published % 1000 == 0 {
                    // A write path that publishes (a line stored) goes through while the reader is stuck.
                    _ = try await DeliveryTimelineTests.sendLine(gw)
                }
                let last = "\"id\":\"dlv_\(published - 1)_\(padding)\""
                guard await reading.read(until: { $0.contains(last) }) else {
                    Issue.record("the reading stream stopped after \(published) events")
                    return
                }
            }
            #expect(hub.subscriberCount == 1, "after \(published) events: \(hub.subscriberCount) streams subscribed")
            // A publish that waited for the stalled reader would not return while it stays stalled (to the end of the
            // test); the bound catches that with room for any stall of a loaded machine.
            #expect(longest < .seconds(60), "a burst of 20 publishes took \(longest)")
            #expect(stalled.received.utf8.count < 64 * 1024)
            // The gateway still answers, and the reading stream still gets news.
            #expect(try await gw.request("GET", "/api/v1/console/devices").status == 200)
            hub.publish(.device("after-the-stall"), to: .subjectAndAdmins("owner"))
            #expect(await reading.read { $0.contains("after-the-stall") })
        }
    }

    @Test("a path that carries whole answers (the relay carriage) is refused the never-ending stream")
    func notThroughTheRelay() async throws {
        try await withTestGateway { (gw) async throws in
            let owner = Principal(keyID: "relay-phone", subject: "owner", role: .admin)
            let carried = await gw.gateway.router.handle(HTTPRequest(method: "GET", path: "/api/v1/console/events", remoteAddress: "relay"),
                                                         authenticated: owner)
            #expect(carried.status == 400 && carried.stream == nil)
            #expect(gw.gateway.mobileStore.consoleEvents.subscriberCount == 0)
        }
    }

    @Test("the gateway stops promptly with event streams open: they end first")
    func shutdownEndsStreams() async throws {
        let gw = try await TestGateway.start()
        let stream = try EventStreamReader(port: gw.gateway.port, key: gw.adminKey)
        #expect(await stream.read { $0.contains(": soulacy console events") })
        let started = ContinuousClock.now
        await gw.stop()
        #expect(ContinuousClock.now - started < .seconds(8))
        // The stream was finished: the chunked body's last chunk arrived (or the connection closed).
        #expect(await stream.read { $0.contains("\r\n0\r\n\r\n") })
    }
}
