/// What a caller may do. Each role includes the ones below it.
public enum Role: String, Sendable, Codable, CaseIterable, Comparable {
    /// Reads its own inbox, approvals and agents, and chats.
    case viewer
    /// Also acts: approves, runs agents, fires triggers.
    case `operator`
    /// Also manages: keys, pairing for others, channel tests.
    case admin

    private var rank: Int {
        switch self {
        case .viewer: return 0
        case .operator: return 1
        case .admin: return 2
        }
    }

    public static func < (lhs: Role, rhs: Role) -> Bool { lhs.rank < rhs.rank }

    public func allows(_ required: Role) -> Bool { self >= required }
}

/// The authenticated caller of a request: whose data it sees (`subject`) and what it may do (`role`).
public struct Principal: Sendable, Equatable {
    /// The subject that keys minted before identities existed belong to.
    public static let ownerSubject = "owner"

    public let keyID: String
    public let subject: String
    public let role: Role

    public init(keyID: String, subject: String, role: Role) {
        self.keyID = keyID
        self.subject = subject
        self.role = role
    }
}

/// Who may call a route.
public enum Access: Sendable, Equatable {
    /// No credential needed (health, pairing redemption, webhooks with their own secret).
    case open
    /// A valid API key of at least this role.
    case role(Role)
}
