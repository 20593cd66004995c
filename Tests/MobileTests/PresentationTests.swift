import ChannelAPI
import Foundation
import APIKit
import Testing
import Mobile

/// The inbox's `presentation`, checked as the original app reads it: typed blocks with empty keys omitted.
@Suite("Presentation of inbox lines")
struct PresentationTests {
    func json(_ presentation: Presentation?) throws -> [String: Any] {
        let data = try JSONEncoder().encode(try #require(presentation))
        return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
    }

    @Test("a fare table becomes a comparison with the cheapest row and a bar chart; the heading titles it")
    func table() throws {
        let body = """
        # Flights to Lisbon
        Three nonstop options came back for the weekend. Prices include bags.

        ## Fares
        | Airline | Price | Duration |
        |---|---|---|
        | TAP | $839 | 7h |
        | United | $912 | 7h |
        | Delta | $799 | 8h |
        """
        let p = try #require(Presentation(markdown: body))
        #expect(p.headline == "Flights to Lisbon")
        #expect(p.summary == "Three nonstop options came back for the weekend. Prices include bags.")
        let comparison = try #require(p.blocks.first { $0.kind == .comparison })
        #expect(comparison.title == "Fares")
        #expect(comparison.columns == ["Airline", "Price", "Duration"])
        #expect(comparison.rows?.count == 3)
        #expect(comparison.numeric == ["Price"])
        #expect(comparison.best?.column == "Price" && comparison.best?.row == 2)
        let chart = try #require(p.blocks.first { $0.kind == .chart }?.chart)
        #expect(chart.type == "bar" && chart.x == ["TAP", "United", "Delta"])
        #expect(chart.series.map(\.name) == ["Price"] && chart.series.first?.values == [839, 912, 799])
        // Neither the headline, the summary nor the table's heading is shown twice.
        #expect(!p.blocks.contains { $0.kind == .markdown && ($0.text?.contains("Fares") == true || $0.text?.contains("Lisbon") == true) })
    }

    @Test("checklists, timelines and link lists are typed; a mixed list stays markdown")
    func lists() throws {
        let body = """
        Here is what the day looks like for you today.

        - [x] Pack the charger
        - [ ] Print the tickets

        - 07:30 Standup
        - 9am — gym
        - 2026-12-03: review

        - [Book on TAP](https://flytap.com/book)
        - [Hotel](https://example.com/hotel)

        - bread
        - 2 eggs and [a link](https://example.com) in a sentence
        """
        let p = try #require(Presentation(markdown: body))
        let checklist = try #require(p.blocks.first { $0.kind == .checklist })
        #expect(checklist.items?.map(\.label) == ["Pack the charger", "Print the tickets"])
        #expect(checklist.items?.map(\.done) == [true, false])
        let timeline = try #require(p.blocks.first { $0.kind == .timeline })
        #expect(timeline.items?.map(\.at) == ["07:30", "9am", "2026-12-03"])
        #expect(timeline.items?.map(\.title) == ["Standup", "gym", "review"])
        let links = try #require(p.blocks.first { $0.kind == .links })
        #expect(links.items?.map(\.url) == ["https://flytap.com/book", "https://example.com/hotel"])
        #expect(p.blocks.last?.kind == .markdown && p.blocks.last?.text?.contains("- bread") == true)
    }

    @Test("labelled bold figures lead as metric tiles; a bare year in a sentence is not one")
    func metrics() throws {
        let body = "Portfolio update for the week is in.\n\nTotal: **$12,400** across accounts. Treasury yield climbed to **5.00%** — 10y. Inflation stays above target until **2029** as forecast."
        let p = try #require(Presentation(markdown: body))
        let metrics = try #require(p.blocks.first)
        #expect(metrics.kind == .metrics)
        #expect(metrics.items?.map(\.value) == ["$12,400", "5.00%"])
        #expect(metrics.items?.first?.label == "Total")
    }

    @Test("plain text is one markdown block; no text means no presentation; empty keys are omitted")
    func plain() throws {
        #expect(Presentation(markdown: "  \n ") == nil)
        let p = try #require(Presentation(markdown: "Good morning. It is Thursday."))
        #expect(p.headline == "Good morning. It is Thursday.")
        #expect(p.blocks.count == 1 && p.blocks.first?.kind == .markdown && p.blocks.first?.text == "Good morning. It is Thursday.")
        let object = try json(p)
        #expect(Set(object.keys) == ["headline", "blocks"])
        let block = try #require((object["blocks"] as? [[String: Any]])?.first)
        #expect(Set(block.keys) == ["kind", "text"])
    }
}

/// The one delivery view: the inbox's direct writer and `JSONEncoder` give the same bytes, whatever the text.
@Suite("Delivery view")
struct DeliveryViewTests {
    static func delivery(body: String, readAt: Date?, metadata: String = #"{"location.name":"Home \"north\"","trigger":"location"}"#) -> Delivery {
        Delivery(seq: 7, id: "dlv_1", destination: .device("phone-1"), agentID: "brief", agentName: "Brief / daily", sessionID: "s-1",
                 title: "Result from brief", body: body, partsJSON: ##"[{"text":"# Heading\n| a | b |\n|---|---|\n| 1 | 2 |\n| 3 | 4 |","type":"text"}]"##,
                 metadataJSON: metadata, createdAt: Date(timeIntervalSince1970: 1_790_000_000.123), readAt: readAt)
    }

    @Test("writer and encoder agree byte for byte: unread, read, list item, relay record, escapes and unicode")
    func sameBytes() throws {
        let bodies = ["plain", "quotes \" and \\ back\\slash / slash", "tab\tnew\nline\r ctrl \u{01}\u{1F} del \u{7F}", "émoji 🎉 中文", "",
                      "# Heading\n| a | b |\n|---|---|\n| 1 | 2 |\n| 3 | 4 |\n\n- [x] done\n- [ ] open"]
        for body in bodies {
            for readAt in [nil, Date(timeIntervalSince1970: 1_790_000_100.5)] {
                for view in [DeliveryView(Self.delivery(body: body, readAt: readAt)), DeliveryView.listItem(Self.delivery(body: body, readAt: readAt)),
                             DeliveryView(Self.delivery(body: body, readAt: readAt, metadata: "{}"), hasReadState: false)] {
                    var writer = JSONWriter(capacity: 256)
                    view.write(into: &writer)
                    let encoded = try JSONCoding.encoder.encode(view)
                    #expect(writer.bytes == Array(encoded), "\(String(decoding: writer.bytes, as: UTF8.self))\n\(String(decoding: encoded, as: UTF8.self))")
                }
                // The list's kept fragments with the read state between them are the same list item.
                let line = Self.delivery(body: body, readAt: readAt)
                let (head, tail) = DeliveryView.listFragments(line)
                var spliced = head
                DeliveryView.writeReadState(line.readAt, into: &spliced)
                spliced += tail
                #expect(spliced == Array(try JSONCoding.encoder.encode(DeliveryView.listItem(line))), "\(String(decoding: spliced, as: UTF8.self))")
            }
        }
    }
}
