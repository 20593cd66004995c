import Crypto
import Synchronization

/// Rendered inbox pages, kept until the database changes. Phones ask for their inbox on every wake-up and
/// every app start, far more often than it changes; a page is rendered once per change, then copied out.
/// Correctness rests on `DatabasePool.changeGeneration`: a page is used only while no write has committed
/// since the generation read before its queries ran.
final class InboxPageCache: Sendable {
    struct Key: Hashable, Sendable {
        let subject: String
        let deviceID: String?
        let cursor: Int64?
        let limit: Int
    }

    struct Page: Sendable {
        let generation: UInt64
        let body: [UInt8]
        /// A strong validator of the body, for If-None-Match.
        let etag: String
    }

    private let pages = Mutex<[Key: Page]>([:])
    /// Enough for every phone of a household and a few pages each; about 8 KB per page of 20 lines.
    let capacity: Int

    init(capacity: Int = 512) {
        self.capacity = capacity
    }

    func page(for key: Key, generation: UInt64) -> Page? {
        pages.withLock { pages in
            guard let page = pages[key], page.generation == generation else { return nil }
            return page
        }
    }

    /// Keeps `body` as the page for `key` at `generation`; returns the page with its validator.
    @discardableResult
    func store(_ body: [UInt8], for key: Key, generation: UInt64) -> Page {
        let page = Page(generation: generation, body: body, etag: "\"" + Hex.encode(Array(SHA256.hash(body).prefix(16))) + "\"")
        pages.withLock { pages in
            if pages.count >= capacity, pages[key] == nil {
                // Pages of older generations are dead weight; if all are current, start over.
                pages = pages.filter { $0.value.generation == generation }
                if pages.count >= capacity { pages.removeAll(keepingCapacity: true) }
            }
            pages[key] = page
        }
        return page
    }
}
