import APIKit
import Foundation
import Identity
import QRCode

/// The console's pairing card: the same code `POST /api/v1/pairing/tokens` makes (same body, same rules), with
/// the QR code the CLI prints drawn as SVG, so a phone's camera reads it off the screen.
extension HouseholdAPI {
    struct ConsoleCodeOffer: Encodable {
        var offer: CodeOffer
        var qrSVG: String

        enum CodingKeys: String, CodingKey { case qrSVG = "qr_svg" }

        func encode(to encoder: any Encoder) throws {
            try offer.encode(to: encoder)
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(qrSVG, forKey: .qrSVG)
        }
    }

    @Sendable func consolePairing(_ request: HTTPRequest, caller: Principal) async throws -> HTTPResponse {
        try await makeCode(request, caller: caller) { offer in
            // The QR carries the original app's link, exactly as `soulacy pair` prints it.
            guard let code = QRCode(offer.pairURL) else { throw APIError.internal("the pairing link does not fit a QR code") }
            return .json(ConsoleCodeOffer(offer: offer, qrSVG: code.svg()))
        }
    }
}
