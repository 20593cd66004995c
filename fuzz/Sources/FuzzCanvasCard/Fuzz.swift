import FuzzDriver
import APIKit
import Mobile

/// Canvas cards: any JSON gives a valid card within the limits or a refusal that names where and why.
@_cdecl("FuzzCanvasCard_main")
public func fuzzCanvasCardMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    soulacy_fuzz_main(argc, argv) { data, size in fuzzCanvasCard(data, size) }
}

func fuzzCanvasCard(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let data else { return 0 }
    guard let value = try? JSONValue.parse(Array(UnsafeBufferPointer(start: data, count: size))) else { return 0 }
    do {
        let card = try CanvasCard(value)
        if (card.json["components"]?.arrayValue?.count ?? 0) > CanvasCard.maximumComponents { fatalError("accepted too many components") }
        if let form = card.form, form.fields.count > CanvasCard.maximumFormFields { fatalError("accepted too many fields") }
    } catch {
        if error.field == nil || error.message.isEmpty { fatalError("refusal without a field: \(error)") }
    }
    return 0
}
