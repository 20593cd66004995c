import FuzzDriver
import APIKit
import Mobile

/// Registration bodies: any bytes give a registration or a JSONFieldError (a 400) that names a field or the JSON problem.
@_cdecl("FuzzDeviceRegistration_main")
public func fuzzDeviceRegistrationMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    soulacy_fuzz_main(argc, argv) { data, size in fuzzDeviceRegistration(data, size) }
}

func fuzzDeviceRegistration(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let data else { return 0 }
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    do {
        let registration = try DeviceRegistration(json: JSONObject(body: bytes))
        if registration.id.isEmpty || registration.id.count > 128 { fatalError("accepted a bad id") }
        if registration.platform == .android, registration.liveStartToken != nil { fatalError("kept a live token for Android") }
    } catch {
        if error.apiError.status != 400 || error.message.isEmpty { fatalError("unexpected refusal \(error)") }
    }
    return 0
}
