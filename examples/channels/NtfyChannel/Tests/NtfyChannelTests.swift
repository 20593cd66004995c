import ChannelAPI
import Foundation
import NtfyChannel
import Testing

/// The example channel on its own, against a local ntfy stand-in.
@Suite("Example: ntfy channel")
struct NtfyChannelTests {
    func send(_ parts: [String], to topic: String = "alerts", agentName: String = "Backup") -> ChannelSend {
        ChannelSend(id: "out_1", channel: "ntfy", destination: topic,
                    output: Output(agentID: "backup", agentName: agentName, sessionID: "s1", title: "\(agentName) finished", parts: parts), createdAt: Date())
    }

    func channel(_ ntfy: NtfyStandIn, token: String? = NtfyStandIn.token, priority: NtfyPriority? = nil, tags: [String] = []) -> NtfyChannel {
        NtfyChannel(configuration: NtfyConfiguration(serverURL: ntfy.url, token: token, priority: priority, tags: tags))
    }

    @Test("the factory reads channels.ntfy, with ntfy.sh by default, and names the key at fault")
    func factory() throws {
        let factory = NtfyChannelFactory()
        let read = try factory.configuration(ChannelSettings(kind: "ntfy", values: [
            "enabled": .bool(true), "api_url": .string("https://ntfy.example.com/"), "token": .string("tk_abc"), "priority": .number(4),
            "tags": .list([.string("robot"), .string("floppy_disk")]), "markdown": .string("yes"),
        ]))
        #expect(read == NtfyConfiguration(serverURL: "https://ntfy.example.com", token: "tk_abc", priority: .high, tags: ["robot", "floppy_disk"], markdown: true))
        #expect(try factory.configuration(ChannelSettings(kind: "ntfy", values: ["enabled": .bool(true)])).serverURL == "https://ntfy.sh")
        #expect(try factory.make(ChannelSettings(kind: "ntfy", values: ["enabled": .bool(false)])).isEmpty)
        #expect(try factory.make(ChannelSettings(kind: "ntfy", values: ["enabled": .bool(true)])).map(\.name) == ["ntfy"])

        func refusal(_ values: [String: ChannelSetting]) -> String? {
            do { _ = try factory.configuration(ChannelSettings(kind: "ntfy", values: values)); return nil } catch { return error.field }
        }
        #expect(refusal(["priority": .string("loud")]) == "channels.ntfy.priority")
        #expect(refusal(["token": .string("tk_abc def")]) == "channels.ntfy.token")
        #expect(refusal(["tags": .string("robot, two words")]) == "channels.ntfy.tags")
        #expect(refusal(["api_url": .string("ntfy.sh")]) == "channels.ntfy.api_url")
    }

    @Test("a topic is checked at load as ntfy routes it: 1 to 64 of [-_A-Za-z0-9], not one of the web app's names")
    func topics() throws {
        let channel = NtfyChannel(configuration: NtfyConfiguration())
        try channel.validate(destination: "home-alerts_2")
        try channel.validate(destination: String(repeating: "a", count: 64))
        for bad in ["", "two words", "alerts/json", "ümlaut", String(repeating: "a", count: 65), "docs", "v1"] {
            #expect(throws: DestinationError.self, "\(bad)") { try channel.validate(destination: bad) }
        }
    }

    @Test("publishes to POST /<topic>: the text as body, title, priority and tags as headers, the token as Bearer; the message id comes back")
    func delivered() async throws {
        let ntfy = try NtfyStandIn()
        let outcome = await channel(ntfy, priority: .high, tags: ["floppy_disk", "house"])
            .attempt(send(["Backup done.", "", "3 snapshots kept."], agentName: "Sauvegarde nocturne du serveur de la maison, café compris"))
        let message = try #require(ntfy.published.first)
        #expect(outcome == .delivered(remoteID: message.id))
        #expect(message.method == "POST" && message.topic == "alerts" && message.token == NtfyStandIn.token)
        #expect(message.message == "Backup done.\n\n3 snapshots kept.")
        // Not ASCII: sent as RFC 2047 encoded words (a header a proxy passes unchanged), which ntfy decodes.
        #expect(message.rawTitle?.hasPrefix("=?UTF-8?B?") == true && message.rawTitle?.contains("?= =?UTF-8?B?") == true && message.rawTitle?.unicodeScalars.allSatisfy(\.isASCII) == true)
        #expect(message.title == "Sauvegarde nocturne du serveur de la maison, café compris finished")  // two words, joined again
        #expect(message.priority == 4 && message.tags == ["floppy_disk", "house"] && !message.markdown)
        await ntfy.stop()
    }

    @Test("a long output is cut to ntfy's 4096-byte message, which a server without attachments would refuse whole")
    func sizeLimit() async throws {
        let ntfy = try NtfyStandIn()
        let long = String(repeating: "Zeile für Zeile. ", count: 400)  // about 7,200 bytes, with two-byte characters
        guard case .delivered = await channel(ntfy).attempt(send([long])) else { Issue.record("expected delivered"); return }
        let message = try #require(ntfy.published.first)
        #expect(message.message.utf8.count <= 4096 && message.message.hasSuffix("…"))
        #expect(long.hasPrefix(String(message.message.dropLast())))
        await ntfy.stop()
    }

    @Test("ntfy's 429 is a retry in its words, after Retry-After when a proxy in front gives one; a 500 and no server are retries too")
    func retries() async throws {
        let ntfy = try NtfyStandIn()
        ntfy.limitRequests(to: 1, retryAfter: "7")
        let channel = channel(ntfy)
        guard case .delivered = await channel.attempt(send(["first"])) else { Issue.record("expected delivered"); return }
        let limited = await channel.attempt(send(["second"]))
        #expect(limited == .retry(after: .seconds(7), reason: "ntfy answered 429: limit reached: too many requests, please be nice (code 42901)"))
        ntfy.limitRequests(to: 2)
        guard case .retry(nil, let reason) = await channel.attempt(send(["third"])) else { Issue.record("expected a retry without a wait"); return }
        #expect(reason.contains("42901"))

        ntfy.limitRequests(to: .max)
        ntfy.failing(true)
        guard case .retry(_, let failing) = await channel.attempt(send(["fourth"])) else { Issue.record("expected retry on 500"); return }
        #expect(failing.contains("500") && failing.contains("50001"))
        #expect(ntfy.published.count == 1)
        await ntfy.stop()

        let gone = NtfyChannel(configuration: NtfyConfiguration(serverURL: ntfy.url, timeout: .seconds(5)))
        guard case .retry(_, let unreachable) = await gone.attempt(send(["fifth"])) else { Issue.record("expected retry when no server answers"); return }
        #expect(unreachable.contains("could not reach ntfy"))
    }

    @Test("an unknown token (401), a topic the token may not write and no token on a protected topic (403) are refusals in ntfy's words, never with the token")
    func refusals() async throws {
        let ntfy = try NtfyStandIn(writable: ["alerts"])
        let wrongToken = "tk_notknown0000000000000000000"
        let unknown = await channel(ntfy, token: wrongToken).attempt(send(["x"]))
        #expect(unknown == .rejected(reason: "ntfy answered 401: unauthorized (code 40101)"))
        let notWritable = await channel(ntfy).attempt(send(["x"], to: "someone-elses"))
        #expect(notWritable == .rejected(reason: "ntfy answered 403: forbidden (code 40301)"))
        let anonymous = await channel(ntfy, token: nil).attempt(send(["x"]))
        #expect(anonymous == .rejected(reason: "ntfy answered 403: forbidden (code 40301)"))
        #expect(ntfy.published.isEmpty)
        for outcome in [unknown, notWritable, anonymous] { #expect(!"\(outcome)".contains("tk_")) }
        await ntfy.stop()
    }

    @Test("an output with no text, or a topic that is not one, fails without a request")
    func nothingToSend() async throws {
        let ntfy = try NtfyStandIn()
        guard case .failed = await channel(ntfy).attempt(send(["", "  \n"])) else { Issue.record("expected failed"); return }
        guard case .failed = await channel(ntfy).attempt(send(["x"], to: "not a topic")) else { Issue.record("expected failed"); return }
        #expect(ntfy.requestCount == 0)
        await ntfy.stop()
    }
}
