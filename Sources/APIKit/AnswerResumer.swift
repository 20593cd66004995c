import Storage
import HTTPServer
import Identity

/// Rebuilds the answer of a call whose effect committed but whose answer was never recorded, because the process
/// died while the call waited for something after its effect (a person's decision, a phone's result, a run's end).
///
/// Such a call names what it waits for before its effect (`CommitHook.current?.resume(from: "<kind>:<id>")`); the
/// idempotency log stores that reference with its "applied" line. A retry that finds the line without an answer asks
/// the resumer of that kind, which answers from what the effect left in the database, waiting again as the call
/// would have. Nothing is applied a second time.
public struct AnswerResumer: Sendable {
    public let kind: String
    /// The answer for `id`, or nil when it cannot be rebuilt (the retry then hears that the answer was lost).
    /// Thrown API errors are the answer, as from a route.
    public let resume: @Sendable (_ id: String, _ caller: Principal) async throws -> HTTPResponse?

    public init(kind: String, resume: @escaping @Sendable (_ id: String, _ caller: Principal) async throws -> HTTPResponse?) {
        self.kind = kind
        self.resume = resume
    }

    /// The reference a call stores: `<kind>:<id>`.
    public static func reference(kind: String, id: String) -> String { kind + ":" + id }

    /// A reference whose id has two parts, `<kind>:<first>/<second>`; `first` must hold no `/` (a device id, a status).
    public static func reference(kind: String, _ first: String, _ second: String) -> String { reference(kind: kind, id: first + "/" + second) }

    /// `(kind, id)` of a stored reference: the two sides of its first colon.
    public static func parse(_ reference: String) -> (kind: String, id: String)? {
        split(reference, at: ":")
    }

    /// The two parts of a two-part id (`reference(kind:_:_:)`).
    public static func parts(of id: String) -> (first: String, second: String)? {
        split(id, at: "/")
    }

    private static func split(_ text: String, at separator: Character) -> (String, String)? {
        guard let index = text.firstIndex(of: separator) else { return nil }
        return (String(text[..<index]), String(text[text.index(after: index)...]))
    }
}
