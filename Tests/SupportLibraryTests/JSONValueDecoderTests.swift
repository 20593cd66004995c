import Foundation
import APIKit
import Testing

/// The one request decoder refuses in `JSONObject`'s words, naming the field with its path.
@Suite("Request decoder")
struct JSONValueDecoderTests {
    struct Item: Decodable, Equatable {
        var title: String
        var done: Bool?
    }

    struct Body: Decodable, Equatable {
        var name: String
        var count: Int?
        var ratio: Double?
        var items: [Item]?
        var extra: JSONValue?
    }

    func refusal(_ text: String) -> JSONFieldError? {
        do {
            _ = try JSONValueDecoder().decode(Body.self, from: try JSONValue.parse(Array(text.utf8)))
            return nil
        } catch {
            return error
        }
    }

    @Test("a valid body decodes; null and absent optionals are nil; free-form JSON stays as it is")
    func decodes() throws {
        let body = try JSONValueDecoder().decode(Body.self, from: try JSONValue.parse(Array(#"{"name":"a","count":null,"items":[{"title":"t","done":true}],"extra":{"k":[1]}}"#.utf8)))
        #expect(body == Body(name: "a", count: nil, ratio: nil, items: [Item(title: "t", done: true)], extra: ["k": [1]]))
    }

    struct Answers: Decodable, Equatable {
        var answers: [String: JSONValue]?
        var list: [JSONValue]?
        var extra: JSONValue?
    }

    @Test("free-form maps and lists keep their nulls; a null free-form field is still absent")
    func freeFormNulls() throws {
        let text = #"{"answers":{"a":null,"b":2},"list":[null,"x"],"extra":null}"#
        let body = try JSONValueDecoder().decode(Answers.self, from: try JSONValue.parse(Array(text.utf8)))
        #expect(body == Answers(answers: ["a": .null, "b": 2], list: [.null, "x"], extra: nil))
    }

    @Test("each refusal is the same 400 JSONObject gives for the same mistake")
    func refusals() throws {
        let object = JSONObject(try JSONValue.parse(Array(#"{"name":5,"count":2.5}"#.utf8)).objectValue!)
        var expected: JSONFieldError?
        do { _ = try object.string("name") } catch { expected = error }
        #expect(refusal(#"{"name":5}"#) == expected)
        #expect(refusal(#"{"name":5}"#)?.message == "name: must be a string, got a number")
        #expect(refusal(#"{}"#) == .missing("name"))
        #expect(refusal(#"{"name":null}"#) == .missing("name"))
        #expect(refusal(#"{"name":"a","count":2.5}"#) == .invalid("count", "must be a whole number"))
        #expect(refusal(#"{"name":"a","count":1e30}"#) == .invalid("count", "must be a whole number"))
        #expect(refusal(#"{"name":"a","items":[{"title":"t"},{"done":"yes","title":"u"}]}"#) == .invalid("items[1].done", "must be true or false, got a string"))
        #expect(refusal(#"{"name":"a","items":[{}]}"#) == .missing("items[0].title"))
        #expect(refusal(#"{"name":"a","items":{}}"#) == .invalid("items", "must be an array, got an object"))
        #expect(refusal(#"[1]"#)?.kind == .invalidJSON)
        #expect(refusal(#"{"name":"a",}"#)?.kind == .invalidJSON)
    }

    @Test("the HTTP layer answers a refusal as the route's 400 shape")
    func answers() {
        let error = JSONFieldError.invalid("items[1].done", "must be true or false, got a string").apiError
        #expect(error.status == 400 && error.code == "invalid_field" && error.field == "items[1].done")
        #expect(JSONFieldError.missing("name").apiError.code == "missing_field")
        #expect(JSONFieldError.invalidJSON("x").apiError.code == "invalid_json")
        #expect(throws: JSONFieldError.invalid("name", "must be at most 3 characters, got 4")) { try "abcd".limited(to: 3, field: "name") }
    }
}
