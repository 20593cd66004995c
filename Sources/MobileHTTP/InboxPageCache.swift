import Mobile
import Synchronization

/// Rendered inbox pages, kept until their person's inbox changes. Phones ask for their inbox on every wake-up and
/// every app start, far more often than it changes; a page is rendered once per change, then copied out.
/// Correctness rests on `InboxGenerations` (the store's): a page is used only while no write that changes its
/// person's inbox has committed since the generation read before its queries ran. A write for one person leaves
/// everyone else's pages current; a line for `all` changes everyone's.
public final class InboxPageCache: Sendable {
    public struct Key: Hashable, Sendable {
        let subject: String
        let deviceID: String?
        let cursor: Int64?
        let limit: Int
        public init(subject: String, deviceID: String?, cursor: Int64?, limit: Int) {
            self.subject = subject
            self.deviceID = deviceID
            self.cursor = cursor
            self.limit = limit
        }
    }

    public struct Page: Sendable {
        let generation: UInt64
        public let body: [UInt8]
        /// A strong validator of the body, for If-None-Match.
        public let etag: String
        /// The lines on the page, for the "fetched" step of their timelines.
        public let deliveryIDs: [String]
        let fetchNote: FetchNote

        /// True the first time only: the page's lines are noted as fetched once per rendering, and every later
        /// answer from the cache pays one atomic exchange for it.
        public func claimFetchNote() -> Bool { fetchNote.claim() }
    }

    /// Whether a page's lines were noted as fetched yet.
    final class FetchNote: Sendable {
        private let noted = Atomic<Bool>(false)
        func claim() -> Bool { !noted.exchange(true, ordering: .relaxed) }
    }

    private let state = Mutex<(pages: [Key: Page], bytes: Int)>(([:], 0))
    /// Memory the pages may hold in all (a page of 200 long lines is about 1 MB; one of 20 short ones 8 KB).
    let budgetBytes: Int

    public init(budgetBytes: Int = 8 << 20) {
        self.budgetBytes = budgetBytes
    }

    public func page(for key: Key, generation: UInt64) -> Page? {
        state.withLock { state in
            guard let page = state.pages[key], page.generation == generation else { return nil }
            return page
        }
    }

    /// Keeps `body` as the page for `key` at `generation` (unless it alone would take a quarter of the budget);
    /// returns the page with its validator either way. `etag`: a strong validator of `body` (`MobileAPI.render` makes it).
    @discardableResult
    public func store(_ body: [UInt8], etag: String, deliveryIDs: [String] = [], for key: Key, generation: UInt64) -> Page {
        let page = Page(generation: generation, body: body, etag: etag, deliveryIDs: deliveryIDs, fetchNote: FetchNote())
        guard body.count <= budgetBytes / 4 else { return page }
        state.withLock { state in
            if let old = state.pages.removeValue(forKey: key) { state.bytes -= old.body.count }
            if state.bytes + body.count > budgetBytes {
                // This person's pages of older generations are dead weight (generations are per person: other
                // people's are not comparable); if the rest fill the budget, start over.
                state.pages = state.pages.filter { $0.key.subject != key.subject || $0.value.generation == generation }
                state.bytes = state.pages.values.reduce(0) { $0 + $1.body.count }
                if state.bytes + body.count > budgetBytes { state = ([:], 0) }
            }
            state.pages[key] = page
            state.bytes += body.count
        }
        return page
    }

    /// Bytes held now (for tests and diagnostics).
    public var heldBytes: Int { state.withLock { $0.bytes } }
}
