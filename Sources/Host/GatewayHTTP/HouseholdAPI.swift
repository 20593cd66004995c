import Storage
import Household
import RelayCarriage
import APIKit
import Crypto
import Foundation
import LLM
import Synchronization
import Identity
import Mobile
import ChannelAPI

/// Pairing phones and watches, the household's members, and what each role may do.
public struct HouseholdAPI: Sendable {
    let household: any HouseholdStore
    let keys: any APIKeyStore
    let mobile: MobileStorage
    /// Wrong pairing codes, per client only: 80 random bits live 10 minutes, and no number of clients finds one,
    /// so a ceiling over everyone would only let anyone shut pairing for the household.
    let limiter: GuessingLimiter
    let clients: ClientAddresses
    /// The address a pairing link sends the phone to.
    let gatewayURL: @Sendable () -> String
    /// The LAN listener's address and certificate pin, when it is on.
    /// Where the pinned TLS is (`host:port`) and its pin, when pairing links should pin.
    let pinned: @Sendable () -> (address: String, pin: String)?
    /// The certificate's pin when the main port serves TLS (so a typed `base_url` can be pinned).
    let mainPortPin: String?
    /// Gives a redeemed phone its relay mailbox place and pairing secret, when a relay is configured.
    let enroll: @Sendable (String, String) async -> RelayCarriage.Enrollment?
    /// Whether a relay mailbox is configured (the redeem answer then says how to get onto it).
    var relayConfigured: @Sendable () -> Bool = { false }

    public init(household: any HouseholdStore, keys: any APIKeyStore, mobile: MobileStorage, limiter: GuessingLimiter = GuessingLimiter(), clients: ClientAddresses = ClientAddresses(), gatewayURL: @escaping @Sendable () -> String, pinned: @escaping @Sendable () -> (address: String, pin: String)?, mainPortPin: String?, enroll: @escaping @Sendable (String, String) async -> RelayCarriage.Enrollment?, relayConfigured: @escaping @Sendable () -> Bool = { false }) {
        self.household = household
        self.keys = keys
        self.mobile = mobile
        self.limiter = limiter
        self.clients = clients
        self.gatewayURL = gatewayURL
        self.pinned = pinned
        self.mainPortPin = mainPortPin
        self.enroll = enroll
        self.relayConfigured = relayConfigured
    }

    static func scopes(for role: Role) -> [String] {
        var scopes = ["agents:read", "inbox:read", "approvals:read", "chat", "devices:register"]
        if role >= .operator { scopes += ["agents:write", "approvals:write", "memory:write", "triggers:fire"] }
        if role >= .admin { scopes += ["admin"] }
        return scopes
    }

    public var routes: [Route] {
        var routes: [Route] = []
        for prefix in ["/api/v1", ""] {
            // The watch and Shortcuts call the short paths; the app calls /api/v1.
            routes.append(Route(.POST, "\(prefix)/pairing/tokens", role: .viewer, summary: "Create a pairing code (for yourself, or as admin for someone)", handler: createCode))
            routes.append(Route(.POST, "\(prefix)/pairing/redeem", access: .open, summary: "Redeem a pairing code for a managed key", handler: redeem)
                .flagged(.keylessOnSameWiFi))
        }
        routes.append(Route(.POST, "/api/v1/console/pairing", role: .viewer, summary: "A pairing code with its QR code as SVG (the console)", handler: consolePairing))
        routes.append(Route(.GET, "/api/v1/pairing/members", access: .role(.admin), summary: "Everyone with a paired phone", handler: members))
        routes.append(Route(.GET, "/mobile", access: .open, summary: "The page a pairing QR opens in a browser: open it in the Soulacy app", handler: mobilePage)
                .flagged(.keylessOnSameWiFi))
        return routes
    }

    /// The original's `POST /pairing/tokens`: no body pairs the caller's own device (a viewer's as a viewer, anyone
    /// else's as an operator); `name` (admins only) pairs someone else, as operator unless `role` says viewer.
    struct CodeRequest: Decodable {
        var name: String?
        var role: String?
        var baseURL: String?

        enum CodingKeys: String, CodingKey {
            case name
            case role
            case baseURL = "base_url"
        }
    }

    @Sendable func createCode(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        try await makeCode(request, caller: caller) { .json($0) }
    }

    /// Makes the code a pairing request asks for and answers with `answer(offer)`, in the transaction that stores it.
    func makeCode(_ request: HTTPRequest, caller: Principal, answer: @escaping @Sendable (CodeOffer) throws -> HTTPResponse) async throws -> HTTPResponse {
        // The whole body is read first, as the original decodes it: a wrong type anywhere is a 400 before any rule.
        let body = try request.decode(CodeRequest.self, allowEmpty: true)
        return try await household.transactions.answer { session in
            let offer: PairingOffer
            let displayName: String
            if let rawName = body.name {
                guard caller.role == .admin else { throw APIError.forbidden("only an admin can pair a phone for someone else") }
                guard rawName.unicodeScalars.count <= 60 else { throw APIError.invalidField("name", "must be at most 60 characters") }
                let name = SchemaWhitespace.trim(rawName)
                guard !name.isEmpty else { throw APIError.invalidField("name", "must not be empty") }
                let roleText = SchemaWhitespace.trim(body.role ?? "").lowercased()
                let role: Role
                switch roleText {
                case "", "operator": role = .operator
                case "viewer": role = .viewer
                default: throw APIError.invalidField("role", "must be \"operator\" or \"viewer\", got \"\(roleText)\"")
                }
                let subject = try household.subject(forName: name, in: session)
                guard subject != "admin", subject != caller.subject else {
                    throw APIError.invalidField("name", "'\(name)' names you or the owner; send no body to pair your own device")
                }
                offer = try household.createOffer(subject: subject, name: name, role: role, createdBy: caller.keyID, madeBy: caller.subject, now: Date(), in: session)
                displayName = name
            } else {
                guard body.role == nil else { throw APIError.invalidField("role", "goes with name; your own device gets your role") }
                displayName = try household.displayName(subject: caller.subject, in: session) ?? ""
                offer = try household.createOffer(subject: caller.subject, name: displayName.isEmpty ? caller.subject : displayName,
                                                  role: caller.role == .viewer ? .viewer : .operator, createdBy: caller.keyID, madeBy: caller.subject,
                                                  now: Date(), in: session)
            }
            let links = try pairingLinks(offer, typedBase: body.baseURL.limited(to: 500, field: "base_url").map(SchemaWhitespace.trim))
            let pinned = self.pinned()
            return try answer(CodeOffer(code: offer.code, expiresAt: Timestamp(offer.expiresAt), subject: offer.subject, displayName: displayName,
                                        role: offer.role.rawValue, pairURL: links.original, baseURL: links.base, fingerprint: links.pin,
                                        link: PairingLink.url(offer: offer, gateway: gatewayURL(), pinnedAddress: pinned?.address, pin: pinned?.pin)))
        }
    }

    /// The original app's link: `https://host:port/mobile?pair=CODE&fp=PIN` over the pinned listener when there is
    /// one, else `<gateway>/mobile?pair=CODE`. A `base_url` the operator typed is direct: with TLS on the main port
    /// it is pinned (an `http://` base becomes `https://` on the same host and port), as the original does.
    func pairingLinks(_ offer: PairingOffer, typedBase: String? = nil) throws -> (original: String, base: String, pin: String) {
        if let typedBase, !typedBase.isEmpty {
            guard let address = PairingLink.directAddress(ofBase: typedBase) else {
                throw APIError.invalidField("base_url", "must be http://host:port or https://host:port, got \"\(typedBase)\"")
            }
            if let pin = mainPortPin {
                return (PairingLink.original(code: offer.code, gateway: "", pinnedAddress: address, pin: pin), "https://\(address)", pin)
            }
            let base = typedBase.hasSuffix("/") ? String(typedBase.dropLast()) : typedBase
            return (PairingLink.original(code: offer.code, gateway: base), base, "")
        }
        if let pinned = pinned(), !pinned.pin.isEmpty {
            return (PairingLink.original(code: offer.code, gateway: gatewayURL(), pinnedAddress: pinned.address, pin: pinned.pin), "https://\(pinned.address)", pinned.pin)
        }
        return (PairingLink.original(code: offer.code, gateway: gatewayURL()), gatewayURL(), "")
    }

    /// `GET /mobile`: someone scanned the pairing QR with the camera; the page says to open it in the app.
    @Sendable func mobilePage(_ request: HTTPRequest) async throws -> HTTPResponse {
        let html = """
            <!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
            <title>Pair with Soulacy</title></head><body style="font-family: -apple-system, sans-serif; margin: 2em; max-width: 32em">
            <h1>Open this in the Soulacy app</h1>
            <p>This pairing code is for the Soulacy app. Open the app, choose <b>Pair with a gateway</b>, and scan the same QR code there.</p>
            <p>The code works once and only for two minutes; if it has run out, ask for a new one.</p>
            </body></html>
            """
        return HTTPResponse(status: 200, headers: [("Content-Type", "text/html; charset=utf-8"), ("Cache-Control", "no-store"),
                                                   ("Referrer-Policy", "no-referrer")], body: Array(html.utf8))
    }

    /// The original's `POST /pairing/redeem`: the code, and what to call the phone.
    struct RedeemRequest: Decodable {
        var code: String?
        var name: String?
    }

    @Sendable func redeem(_ request: HTTPRequest) async throws -> HTTPResponse {
        let client = clients.allowanceKey(of: request)
        let body = try request.decode(RedeemRequest.self)
        let code = SchemaWhitespace.trim(try body.code.limited(to: 64, field: "code") ?? "")
        guard !code.isEmpty else { throw APIError(status: 400, code: "missing_field", message: "code is required", field: "code") }
        let deviceName = try body.name.limited(to: 200, field: "name") ?? "Paired device"
        let guess = try limiter.admit(client, guessing: "wrong pairing codes")
        do {
            let minted = try await household.redeem(code: code, deviceName: deviceName)
            limiter.forgive(guess)
            let displayName = try await household.displayName(subject: minted.key.subject) ?? ""
            var answer = Paired(token: minted.token, keyID: minted.key.id, subject: minted.key.subject, role: minted.key.role.rawValue,
                                scopes: Self.scopes(for: minted.key.role), displayName: displayName, fingerprint: pinned()?.pin ?? "")
            // The relay path: the pairing secret S reaches the phone only over the pinned TLS listener, never in plain
            // HTTP (a tailnet or LAN eavesdropper) and never via the relay itself.
            if !request.isSecure, relayConfigured() {
                answer.relayHint = "pair over the pinned Wi-Fi link (https) to reach this gateway through the relay too"
            } else if request.isSecure, let relay = await enroll(minted.key.id, minted.key.subject) {
                answer.relay = RelayPlace(url: relay.url, mailboxID: relay.mailboxID, deviceID: relay.deviceID, secret: Base64URL.encode(relay.secret))
            }
            return .json(answer)
        } catch PairingError.tooManyKeys {
            limiter.forgive(guess)
            throw APIError(status: 409, code: "too_many_keys", message: PairingError.tooManyKeys.description, field: "code")
        } catch let error as PairingError {
            // The original's answer for any code that does not pair: 401 {paired: false, reason}; `error` and `code`
            // say the same for clients that read this gateway's error shape.
            let reason = "invalid or expired pairing code"
            let detail: String = switch error {
            case .unknownCode: "pairing_code_unknown"
            case .expired: "pairing_code_expired"
            case .alreadyUsed: "pairing_code_used"
            case .tooManyKeys: "too_many_keys"
            }
            return .json(NotPaired(reason: reason, error: "\(reason): \(error)", code: detail), status: 401)
        }
    }

    @Sendable func members(_ request: HTTPRequest) async throws -> HTTPResponse {
        let paired = try await keys.list().filter { $0.kind == .managed && $0.revokedAt == nil }
        let bySubject = Dictionary(grouping: paired, by: \.subject)
        var members: [Member] = []
        for subject in bySubject.keys.sorted() {
            let keys = bySubject[subject] ?? []
            members.append(Member(subject: subject, name: try await household.displayName(subject: subject) ?? subject,
                                  role: (keys.map(\.role).max() ?? .viewer).rawValue,
                                  keys: keys.map { Member.Key(id: $0.id, name: $0.name, role: $0.role.rawValue, createdAt: Timestamp($0.createdAt),
                                                                              mintedBy: Nullable($0.mintedBy)) },
                                  devices: try await mobile.devices.list(subject: subject).map { Member.Device(id: $0.id, name: $0.name, platform: $0.platform.rawValue) }))
        }
        return .json(["members": members])
    }
}

// MARK: Answers, in the original app's field names

extension HouseholdAPI {
    /// A pairing code and its links.
    struct CodeOffer: Encodable {
        var code: String
        var expiresAt: Timestamp
        var subject, displayName, role: String
        var pairURL, baseURL, fingerprint: String
        /// This gateway's three-path link (LAN, tailnet, relay), for its own client.
        var link: String

        enum CodingKeys: String, CodingKey {
            case code, subject, role, fingerprint, link
            case expiresAt = "expires_at", displayName = "display_name", pairURL = "pair_url", baseURL = "base_url"
        }
    }

    /// A redeemed code: the phone's key, shown this once.
    struct Paired: Encodable {
        var paired = true
        var token, keyID, subject, role: String
        var scopes: [String]
        var displayName, fingerprint: String
        var message = "Store this token; it is shown only once."
        var relayHint: String?
        var relay: RelayPlace?

        enum CodingKeys: String, CodingKey {
            case paired, token, subject, role, scopes, fingerprint, message, relay
            case keyID = "key_id", displayName = "display_name", relayHint = "relay_hint"
        }
    }

    /// The phone's place on the relay mailbox and its pairing secret (only over the pinned TLS listener).
    struct RelayPlace: Encodable {
        var url, mailboxID, deviceID, secret: String

        enum CodingKeys: String, CodingKey {
            case url, secret
            case mailboxID = "mailbox_id", deviceID = "device_id"
        }
    }

    /// The original's answer for any code that does not pair; `error` and `code` are this gateway's error shape.
    struct NotPaired: Encodable {
        var paired = false
        var reason, error, code: String
    }

    struct Member: Encodable {
        struct Key: Encodable {
            var id, name, role: String
            var createdAt: Timestamp
            /// Who made the pairing code this key came from; null when that was not recorded.
            var mintedBy: Nullable<String>

            enum CodingKeys: String, CodingKey {
                case id, name, role
                case createdAt = "created_at", mintedBy = "minted_by"
            }
        }

        struct Device: Encodable {
            var id, name, platform: String
        }

        var subject, name, role: String
        var keys: [Key]
        var devices: [Device]
    }
}
