// swift-tools-version:6.0
import PackageDescription

// libFuzzer harnesses, built apart from the main package with -sanitize=fuzzer,address (see scripts/fuzz).
let fuzzerFlags: [SwiftSetting] = [.unsafeFlags(["-parse-as-library"])]

let package = Package(
    name: "soulacy-fuzz",
    dependencies: [.package(name: "soulacy", path: "..")],
    targets: [
        .target(name: "FuzzDriver", path: "Sources/FuzzDriver"),
        .executableTarget(name: "FuzzSoulConfig", dependencies: ["FuzzDriver", .product(name: "SoulacyGateway", package: "soulacy")],
                          path: "Sources/FuzzSoulConfig", swiftSettings: fuzzerFlags),
        .executableTarget(name: "FuzzDeviceRegistration", dependencies: ["FuzzDriver", .product(name: "SoulacyMobile", package: "soulacy"),
                                                                         .product(name: "SoulacyAPIKit", package: "soulacy")],
                          path: "Sources/FuzzDeviceRegistration", swiftSettings: fuzzerFlags),
        .executableTarget(name: "FuzzCanvasCard", dependencies: ["FuzzDriver", .product(name: "SoulacyMobile", package: "soulacy"),
                                                                 .product(name: "SoulacyAPIKit", package: "soulacy")],
                          path: "Sources/FuzzCanvasCard", swiftSettings: fuzzerFlags),
        .executableTarget(name: "FuzzRelayEnvelope", dependencies: ["FuzzDriver", .product(name: "SoulacyRelayProtocol", package: "soulacy")],
                          path: "Sources/FuzzRelayEnvelope", swiftSettings: fuzzerFlags),
    ]
)
