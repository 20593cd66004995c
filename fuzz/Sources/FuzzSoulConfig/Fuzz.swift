import FuzzDriver
import Gateway

/// SOUL.yaml loading never crashes, hangs or leaks on any input: it returns a config or errors with positions.
@_cdecl("FuzzSoulConfig_main")
public func fuzzSoulConfigMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    soulacy_fuzz_main(argc, argv) { data, size in fuzzSoulConfig(data, size) }
}

func fuzzSoulConfig(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let data else { return 0 }
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    var loader = SoulConfigLoader(file: "fuzz.yaml", destinations: Gateway.destinationValidators, environment: ["HOOK": "a-long-enough-secret"])
    do {
        _ = try loader.load(text: text)
    } catch {
        for e in error.errors where e.line < 1 || e.column < 1 { fatalError("error without a position: \(e)") }
    }
    return 0
}
