import FuzzDriver
import RelayProtocol

/// Opening relay envelopes: any bytes, as any type, either open (only when sealed with this key) or fail cleanly.
private let keys = try! RelayKeys(secret: Array(repeating: 7, count: 32), deviceID: "key_fuzz")

@_cdecl("FuzzRelayEnvelope_main")
public func fuzzRelayEnvelopeMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    soulacy_fuzz_main(argc, argv) { data, size in fuzzRelayEnvelope(data, size) }
}

/// What every opened envelope carries beside its message.
private struct Stamp: Decodable {
    let v: Int
    let type: String
}

func fuzzRelayEnvelope(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let data else { return 0 }
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    for kind in [RelayEnvelope.Kind.record, .result, .command] {
        if let opened = try? RelayEnvelope.open(text, as: Stamp.self, kind: kind, key: keys.down), opened.type != kind.rawValue || opened.v != RelayEnvelope.version {
            fatalError("opened as the wrong type")
        }
    }
    return 0
}
