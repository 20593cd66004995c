import ChannelAPI
import ChannelSupport
import Crypto
import Foundation
import HTTPClient
import JSON

/// The `webhook` channel: each output POSTed as JSON to an endpoint of yours, signed two ways on every attempt.
///
/// Destinations (`to:` in SOUL.yaml): empty → the block's single `url` (or `default_output_to`, as the original);
/// a name under `endpoints:`; or an absolute `https://` URL, only when the block sets `allow_any_url: true`
/// (plain `http://` only for loopback hosts). An ad-hoc URL is signed with the block's top-level secrets but gets
/// none of its `headers`, which often carry the configured endpoint's credentials.
///
/// Signing, fresh on each attempt: Standard Webhooks (`webhook-id` = the delivery id, the same on every retry;
/// `webhook-timestamp` = this attempt's unix seconds; `webhook-signature: v1,<base64 HMAC-SHA256>` of
/// `{id}.{timestamp}.{body}` per secret, space-separated during a rotation), and the original Soulacy adapter's
/// `X-Soulacy-Timestamp` + `X-Soulacy-Signature: sha256=<hex HMAC-SHA256(secret, "<ts>.<body>")>` with the first
/// secret, so existing receivers keep working. See `WebhookSecret` for how a secret becomes a key.
///
/// Answers: 2xx delivered; 410 Gone rejected and the endpoint disabled, so every later send to it is rejected
/// without a request, also after a restart, until its entry in the gateway config changes (its url, secrets or
/// headers: the disabled record holds a fingerprint of them, see `WebhookTarget.fingerprint`); 408, 425, 429, 5xx,
/// a timeout or no connection → retry (`Retry-After` honoured); 3xx and other 4xx rejected with up to 300 bytes of
/// the answer. The disabled endpoints live in the store the framework hands each attempt (`attempt(_:endpoints:)`,
/// the gateway's database); `attempt(_:)` alone keeps them in this channel's memory. The framework retries, not
/// this channel: from 2 s, doubling, capped at 15 min, with jitter, `Retry-After` when the endpoint gave one, and it
/// gives up after 24 hours.
///
/// A receiver verifying a delivery (Swift, with this repository's Crypto; Foundation for base64):
/// ```swift
/// func verified(id: String, timestamp: String, signatures: String, body: [UInt8], secret: String) -> Bool {
///     guard let t = Int64(timestamp), abs(Int64(Date().timeIntervalSince1970) - t) <= 300,
///           let key = Data(base64Encoded: String(secret.dropFirst("whsec_".count))) else { return false }
///     let mac = HMACSHA256.authenticate(Array("\(id).\(timestamp).".utf8) + body, key: Array(key))
///     let expected = Array(("v1," + Data(mac).base64EncodedString()).utf8)
///     return signatures.split(separator: " ").contains { SecureBytes.constantTimeEqual(Array($0.utf8), expected) }
/// }
/// // verified(id: h["webhook-id"], timestamp: h["webhook-timestamp"], signatures: h["webhook-signature"], ...)
/// ```
/// And in Python with the `standardwebhooks` package (pip install standardwebhooks):
/// ```python
/// from standardwebhooks.webhooks import Webhook
/// payload = Webhook("whsec_...").verify(request.body, request.headers)   # raises WebhookVerificationError
/// ```
public final class WebhookChannel: EndpointDisablingChannel {
    public let name: String
    let configuration: WebhookConfiguration
    private let client: HTTP2Client
    private let clock: any WallClock
    private let scrubber: SecretScrubber
    /// Where `attempt(_:)` keeps disabled endpoints when no store is handed in.
    private let processEndpoints = ProcessEndpointStates()

    init(name: String, configuration: WebhookConfiguration, clock: any WallClock) {
        self.name = name
        self.configuration = configuration
        self.clock = clock
        client = HTTP2Client(configuration: HTTP2ClientConfiguration(caFile: configuration.caFile,
                                                                     maximumConnectionsPerHost: HTTP2ClientConfiguration.pooledConnectionsPerHost))
        let endpoints = [configuration.single].compactMap { $0 } + configuration.endpoints.values
        scrubber = SecretScrubber(secrets: (endpoints.flatMap { $0.secrets } + configuration.adHocSecrets).flatMap { [$0.configured, Data($0.standardKey).base64EncodedString()] }
                                    + endpoints.flatMap { $0.headers.map(\.1) },
                                  urls: endpoints.map(\.url.text))
    }

    public func validate(destination: String) throws(DestinationError) {
        _ = try target(for: destination)
    }

    /// The endpoints of this configuration that `store` holds disabled, oldest first: records of an endpoint whose
    /// entry changed since, or that is no longer configured, are left out (they no longer disable anything).
    public func disabledEndpoints(in store: any EndpointStateStore) async throws -> [DisabledEndpoint] {
        let configured = Dictionary(([configuration.single].compactMap { $0 } + configuration.endpoints.values).map { ($0.key, $0.fingerprint) },
                                    uniquingKeysWith: { first, _ in first })
        let adHoc = WebhookTarget.fingerprint(url: nil, secrets: configuration.adHocSecrets, headers: [])
        return try await store.disabled(channel: name).filter { record in
            if let fingerprint = configured[record.endpoint] { return record.fingerprint == fingerprint }
            return configuration.allowAnyURL && record.endpoint.hasPrefix(WebhookTarget.adHocPrefix) && record.fingerprint == adHoc
        }
    }

    public func attempt(_ send: ChannelSend) async -> ChannelSendOutcome {
        await attempt(send, endpoints: processEndpoints)
    }

    public func attempt(_ send: ChannelSend, endpoints: any EndpointStateStore) async -> ChannelSendOutcome {
        let target: WebhookTarget
        do { target = try self.target(for: send.destination) } catch { return .failed(reason: error.description) }
        let scrubber = target.key.hasPrefix(WebhookTarget.adHocPrefix) ? self.scrubber.including(url: target.url.text) : self.scrubber
        do {
            if let record = try await endpoints.disabled(channel: name, endpoint: target.key) {
                guard record.fingerprint != target.fingerprint else {
                    return .rejected(reason: "endpoint \(target.display) is disabled since \(JSONValue.iso8601(record.since)) after it answered 410 Gone; "
                                     + target.reenable)
                }
                // Its entry changed since it was disabled: the config re-enabled it.
                try await endpoints.enable(channel: name, endpoint: target.key)
            }
        } catch {
            return .retry(after: nil, reason: scrubber.scrub("cannot read whether endpoint \(target.display) is disabled: \(error)"))
        }
        // The id is signed between dots (Standard Webhooks asks that it hold none) and travels in a header.
        guard !send.id.isEmpty, send.id.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: ".") }) else {
            return .failed(reason: "the delivery id '\(send.id)' cannot be a webhook-id (it must be printable ASCII without dots or spaces)")
        }
        let output = send.output
        guard !output.body.isEmpty else { return .failed(reason: "the output has no text to send") }

        let (body, contentType) = payload(for: send)
        let timestamp = Int64(clock.now().timeIntervalSince1970.rounded(.down))
        var headers: [(String, String)] = [("Content-Type", contentType), ("User-Agent", "Soulacy-Gateway")]
        for (header, value) in target.headers {
            headers.removeAll { $0.0.lowercased() == header.lowercased() }
            headers.append((header, value))
        }
        headers += WebhookSignature.headers(id: send.id, timestamp: timestamp, body: body, secrets: target.secrets)
        let request = ClientRequest(method: configuration.method, url: target.url.text, headers: headers, body: body, timeout: configuration.timeout)

        let service = "webhook endpoint \(target.display)"
        let response: ClientResponse
        do {
            response = try await client.send(request)
        } catch {
            return .retry(after: nil, reason: scrubber.scrub("could not reach \(service): \(error.description)"))
        }
        let detail = HTTPOutcome.excerpt(response.body, limit: 300).map(scrubber.scrub)
        switch response.status {
        case 410:
            let answered = "\(service) answered 410 Gone\(detail.map { ": \($0)" } ?? "")"
            let record = DisabledEndpoint(channel: name, endpoint: target.key, fingerprint: target.fingerprint, display: target.display,
                                          reason: answered, since: clock.now())
            do {
                try await endpoints.disable(record)
            } catch {
                return .rejected(reason: scrubber.scrub("\(answered); it could not be recorded as disabled (\(error)), so the next send to it is tried"))
            }
            return .rejected(reason: "\(answered); the endpoint is now disabled: later sends to it are rejected without a request; " + target.reenable)
        case 300..<400:
            return .rejected(reason: "\(service) answered \(response.status) (a redirect, which webhooks do not follow): point the endpoint at its final URL")
        default:
            return HTTPOutcome.classify(response, service: service, detail: detail)
        }
    }

    /// Where `to` sends, and with which secrets and headers.
    func target(for destination: String) throws(DestinationError) -> WebhookTarget {
        let to = Self.trimmed(destination)
        if to.isEmpty {
            guard let single = configuration.single else {
                let names = configuration.endpoints.keys.sorted()
                throw .invalid("channels.\(name) has no url for an empty `to`: set channels.\(name).url" + (names.isEmpty ? "" : ", or name one of its endpoints: \(names.joined(separator: ", "))"))
            }
            return single
        }
        if let endpoint = configuration.endpoints[to] { return endpoint }
        let lowered = to.lowercased()
        guard lowered.hasPrefix("https://") || lowered.hasPrefix("http://") else {
            let names = configuration.endpoints.keys.sorted()
            throw .invalid("channels.\(name): `to: \(to)` is not a named endpoint (" + (names.isEmpty ? "none are configured under channels.\(name).endpoints" : "configured: \(names.joined(separator: ", "))")
                           + ") nor an absolute https:// URL")
        }
        guard configuration.allowAnyURL else {
            throw .invalid("channels.\(name): a URL as `to` is allowed only when channels.\(name).allow_any_url is true; name an endpoint under channels.\(name).endpoints instead")
        }
        guard let url = WebhookURL(to) else {
            throw .invalid("channels.\(name): `to` is not an absolute https:// URL with a host")
        }
        if url.scheme == "http" && !url.isLoopback {
            throw .invalid("channels.\(name): a URL as `to` must be https:// (plain http:// is allowed only for loopback hosts: 127.0.0.1, ::1, localhost), got \(url.display)")
        }
        if url.isLinkLocalOrMetadata {
            throw .invalid("channels.\(name): refusing \(url.display): link-local and cloud-metadata addresses are never a webhook destination")
        }
        return WebhookTarget(adHoc: url, secrets: configuration.adHocSecrets, channel: name)
    }

    /// `text` without surrounding whitespace and newlines. Most destinations (an endpoint's name) have none, and
    /// Foundation's trimming builds a new string either way, on every attempt.
    static func trimmed(_ text: String) -> String {
        // Printable ASCII other than a space at both ends: nothing to trim.
        guard let first = text.utf8.first, let last = text.utf8.last, (0x21..<0x7F).contains(first), (0x21..<0x7F).contains(last) else {
            return text.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        return text
    }

    /// The body bytes and their type: the JSON event, or the original's `template` as plain text.
    func payload(for send: ChannelSend) -> ([UInt8], String) {
        let output = send.output
        let createdAt = JSONValue.iso8601(send.createdAt)
        if let template = configuration.template {
            let values: [String: String] = [
                "text": output.body, "agent_id": output.agentID, "agent_name": output.agentName, "session_id": output.sessionID,
                "channel": name, "thread_id": send.destination, "to": send.destination, "title": output.title, "id": send.id,
                "user_id": output.metadata["user_id"] ?? "scheduler", "username": output.metadata["username"] ?? "scheduler",
                "timestamp": createdAt,
            ]
            return (Array(Self.fill(template, with: values).utf8), "text/plain; charset=utf-8")
        }
        let event: JSONValue = .object([
            "id": .string(send.id),
            "type": "agent.output",
            "agent_id": .string(output.agentID),
            "agent_name": .string(output.agentName),
            "session_id": .string(output.sessionID),
            "title": .string(output.title),
            // The original's receivers read `text`: the parts joined with blank lines.
            "text": .string(output.body),
            "parts": .array(output.parts.filter { !$0.isEmpty }.map { .object(["type": "text", "text": .string($0)]) }),
            "metadata": .object(output.metadata.mapValues { .string($0) }),
            "created_at": .string(createdAt),
        ])
        return (event.serializedBytes(), "application/json")
    }

    /// `{name}` placeholders in one pass, so a value that holds `{text}` is not expanded again.
    static func fill(_ template: String, with values: [String: String]) -> String {
        var out = ""
        var rest = Substring(template)
        while let open = rest.firstIndex(of: "{") {
            out += rest[..<open]
            if let close = rest[open...].firstIndex(of: "}"), let value = values[String(rest[rest.index(after: open)..<close])] {
                out += value
                rest = rest[rest.index(after: close)...]
            } else {
                out += "{"
                rest = rest[rest.index(after: open)...]
            }
        }
        return out + rest
    }
}

/// One place a send can go.
struct WebhookTarget: Sendable {
    /// What a disabled record keys on: `endpoint:<name>`, `url` for the single one, `url:<hash of the URL>` for an
    /// ad-hoc one (a URL can carry a token, and the record is stored).
    let key: String
    /// How reasons name it: the endpoint's name, `channels.webhook.url`, or `https://host/…`; never a secret.
    let display: String
    let url: WebhookURL
    let secrets: [WebhookSecret]
    let headers: [(String, String)]
    /// A hash of what the config says for this target, so a changed entry re-enables an endpoint disabled by 410.
    let fingerprint: String
    /// How a reason tells to re-enable it once disabled.
    let reenable: String

    static let adHocPrefix = "url:"

    /// A configured endpoint; `entry` is its config path (`channels.webhook.endpoints.alerts`, `channels.webhook`).
    init(key: String, display: String, url: WebhookURL, secrets: [WebhookSecret], headers: [(String, String)], entry: String) {
        self.key = key
        self.display = display
        self.url = url
        self.secrets = secrets
        self.headers = headers
        fingerprint = Self.fingerprint(url: url.text, secrets: secrets, headers: headers)
        reenable = "to re-enable it, change its url, secret, secrets or headers under \(entry) in the gateway config (a restart alone does not)"
    }

    /// An absolute URL as `to`: the key pins the URL, the fingerprint the block's secrets it is signed with.
    init(adHoc url: WebhookURL, secrets: [WebhookSecret], channel: String) {
        key = Self.adHocPrefix + Hex.encode(Array(SHA256.hash(url.text).prefix(16)))
        display = url.display
        self.url = url
        self.secrets = secrets
        headers = []
        fingerprint = Self.fingerprint(url: nil, secrets: secrets, headers: [])
        reenable = "to re-enable it, change the secret or secrets under channels.\(channel) in the gateway config, or send to another URL (a restart alone does not)"
    }

    /// SHA-256 over the URL, each secret's own SHA-256 and each header (its value hashed too: it may be a
    /// credential), each length-prefixed; 128 bits in hex. It is stored, so no secret goes in unhashed.
    static func fingerprint(url: String?, secrets: [WebhookSecret], headers: [(String, String)]) -> String {
        var input = Array("soulacy-webhook-endpoint-1".utf8)
        func field(_ bytes: [UInt8]) { input += Array("\(bytes.count):".utf8) + bytes }
        field(Array((url ?? "").utf8))
        for secret in secrets { field(SHA256.hash(secret.configured)) }
        for (name, value) in headers { field(Array(name.lowercased().utf8)); field(SHA256.hash(value)) }
        return Hex.encode(Array(SHA256.hash(input).prefix(16)))
    }
}

/// The `webhook` block, read.
struct WebhookConfiguration: Sendable {
    var single: WebhookTarget?
    var endpoints: [String: WebhookTarget]
    var method: String
    var timeout: Duration
    var allowAnyURL: Bool
    var template: String?
    var caFile: String?
    /// The top-level `secret`/`secrets`, which also sign ad-hoc URLs.
    var adHocSecrets: [WebhookSecret]
}

/// Builds the `webhook` channel from `channels.webhook`.
///
/// Keys: `url` (falls back to `default_output_to`, as the original), `secret`, `secrets` (a list, for a rotation),
/// `headers` (a map, or the original's "Key: value" lines), `method` (POST; PUT and PATCH too), `timeout_seconds`
/// (10), `template` (the original's plain-text body with `{text}`, `{agent_id}`, … placeholders), `allow_any_url`
/// (false), `endpoints: {name: {url, secret, secrets, headers}}` (each endpoint keeps only its own secrets and
/// headers; the spec asks for a key per endpoint), `ca_file`. Secrets: `url`, `secret`, `secrets`, `headers`,
/// every endpoint's `url`, `secret`, `secrets`, `headers`.
public struct WebhookChannelFactory: ChannelFactory {
    public let kind = "webhook"
    let clock: any WallClock

    public init(clock: any WallClock = SystemWallClock()) {
        self.clock = clock
    }

    public func make(_ settings: ChannelSettings) throws(ChannelConfigError) -> [any OutboundChannel] {
        let method = (settings.string("method") ?? "POST").uppercased()
        guard ["POST", "PUT", "PATCH"].contains(method) else {
            throw ChannelConfigError(field: settings.field("method"), problem: "must be POST, PUT or PATCH, got '\(method)'")
        }
        let timeout = try settings.int("timeout_seconds", in: 1...300) ?? 10
        let topSecrets = try Self.secrets(settings)
        var single: WebhookTarget?
        if let text = settings.string("url") ?? settings.string("default_output_to") {
            let field = settings.field(settings.string("url") != nil ? "url" : "default_output_to")
            single = WebhookTarget(key: "url", display: settings.field("url"), url: try WebhookURL.parseConfigured(text, field: field),
                                   secrets: topSecrets, headers: try Self.headers(settings), entry: "channels.\(settings.kind)")
        }
        var endpoints: [String: WebhookTarget] = [:]
        switch settings.values["endpoints"] {
        case nil, .null?: break
        case .map(let blocks)?:
            for (endpointName, block) in blocks {
                let prefix = "\(settings.kind).endpoints.\(endpointName)"
                guard !endpointName.isEmpty, endpointName.unicodeScalars.allSatisfy({ CharacterSet.alphanumerics.contains($0) && $0.isASCII || $0 == "-" || $0 == "_" }) else {
                    throw ChannelConfigError(field: "channels.\(prefix)", problem: "an endpoint name is letters, digits, - and _ (it is what `to:` names)")
                }
                let endpoint: ChannelSettings
                switch block {
                case .map(let fields): endpoint = ChannelSettings(kind: prefix, values: fields)
                case .string: endpoint = ChannelSettings(kind: prefix, values: ["url": block])  // `name: https://…` shorthand
                default: throw ChannelConfigError(field: "channels.\(prefix)", problem: "must be a mapping with url (and secret, secrets, headers)")
                }
                let url = try WebhookURL.parseConfigured(try endpoint.requiredString("url"), field: endpoint.field("url"))
                endpoints[endpointName] = WebhookTarget(key: "endpoint:" + endpointName, display: endpointName, url: url,
                                                        secrets: try Self.secrets(endpoint), headers: try Self.headers(endpoint), entry: "channels.\(prefix)")
            }
        default:
            throw ChannelConfigError(field: settings.field("endpoints"), problem: "must be a mapping of endpoint names to {url, secret, secrets, headers}")
        }
        guard single != nil || !endpoints.isEmpty else {
            throw ChannelConfigError(field: settings.field("url"), problem: "is required (or default_output_to, or at least one entry under channels.\(settings.kind).endpoints)")
        }
        let template = settings.values["template"]?.text.flatMap { $0.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty ? nil : $0 }
        let configuration = WebhookConfiguration(single: single, endpoints: endpoints, method: method, timeout: .seconds(timeout),
                                                 allowAnyURL: try settings.bool("allow_any_url") ?? false, template: template,
                                                 caFile: settings.caFile, adHocSecrets: topSecrets)
        return [WebhookChannel(name: settings.kind, configuration: configuration, clock: clock)]
    }

    /// `secret` then each of `secrets`, without repeats.
    static func secrets(_ settings: ChannelSettings) throws(ChannelConfigError) -> [WebhookSecret] {
        var result: [WebhookSecret] = []
        if let secret = settings.string("secret") { result.append(try WebhookSecret(secret, field: settings.field("secret"))) }
        switch settings.values["secrets"] {
        case nil, .null?: break
        case .list(let items)?:
            for (index, item) in items.enumerated() {
                guard let text = item.text else { throw ChannelConfigError(field: "\(settings.field("secrets"))[\(index)]", problem: "must be a string") }
                let secret = try WebhookSecret(text, field: "\(settings.field("secrets"))[\(index)]")
                if !result.contains(secret) { result.append(secret) }
            }
        case .string(let text)?:
            let secret = try WebhookSecret(text, field: settings.field("secrets"))
            if !result.contains(secret) { result.append(secret) }
        default:
            throw ChannelConfigError(field: settings.field("secrets"), problem: "must be a list of secrets")
        }
        return result
    }

    /// Headers the signing sets itself may not be configured.
    static let signingHeaders: Set<String> = ["webhook-id", "webhook-timestamp", "webhook-signature", "x-soulacy-timestamp", "x-soulacy-signature",
                                              "content-length", "host"]

    /// `headers`: a map, or the original's "Key: value" lines.
    static func headers(_ settings: ChannelSettings) throws(ChannelConfigError) -> [(String, String)] {
        var pairs: [(String, String)] = []
        switch settings.values["headers"] {
        case nil, .null?: return []
        case .map?:
            pairs = (settings.stringMap("headers") ?? [:]).sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
        case .string(let lines)?:
            for line in lines.split(whereSeparator: \.isNewline) where !line.trimmingCharacters(in: .whitespaces).isEmpty {
                guard let colon = line.firstIndex(of: ":") else {
                    throw ChannelConfigError(field: settings.field("headers"), problem: "each line must be 'Name: value'")
                }
                pairs.append((line[..<colon].trimmingCharacters(in: .whitespaces), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)))
            }
        default:
            throw ChannelConfigError(field: settings.field("headers"), problem: "must be a mapping of header names to values, or 'Name: value' lines")
        }
        let token = CharacterSet(charactersIn: "!#$%&'*+-.^_`|~").union(.alphanumerics)
        for (header, value) in pairs {
            let field = "\(settings.field("headers")).\(header)"
            guard !header.isEmpty, header.unicodeScalars.allSatisfy({ $0.isASCII && token.contains($0) }) else {
                throw ChannelConfigError(field: field, problem: "is not a valid HTTP header name")
            }
            guard !value.contains(where: { $0 == "\r" || $0 == "\n" }) else {
                throw ChannelConfigError(field: field, problem: "must be on one line")
            }
            guard !signingHeaders.contains(header.lowercased()) else {
                throw ChannelConfigError(field: field, problem: "is set by the channel itself (signing and framing); remove it")
            }
        }
        return pairs
    }
}
