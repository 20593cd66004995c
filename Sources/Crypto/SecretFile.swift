import Foundation
import Glibc

public enum SecretFileError: Error, Sendable, Equatable, CustomStringConvertible {
    case unreadable(path: String, variable: String, reason: String)
    case tooOpen(path: String, variable: String, mode: String)
    case unwritable(path: String)

    public var description: String {
        switch self {
        case let .unreadable(path, variable, reason): return "\(variable): cannot read \(path): \(reason)"
        case let .tooOpen(path, variable, mode):
            return "\(variable): \(path) is readable by group or others (mode \(mode)); make it readable by the service account only, for example chmod 600 \(path)"
        case .unwritable(let path): return "cannot write the secret file \(path)"
        }
    }
}

/// Reads a secret file (an APNs .p8, a service-account JSON) after checking that only its owner can read it,
/// and writes one (a TLS key) that only its owner can read.
public enum SecretFile {
    /// Creates `path` readable and writable by its owner only (mode 0600) with `text` in it.
    public static func write(_ text: String, to path: String) throws(SecretFileError) {
        guard FileManager.default.createFile(atPath: path, contents: Data(text.utf8), attributes: [.posixPermissions: 0o600]) else {
            throw .unwritable(path: path)
        }
    }

    /// A random key kept in `path` (hex, owner-only), made on first use: what seals secrets that are stored
    /// elsewhere (a database), so that store alone gives none of them back.
    public static func key(at path: String, variable: String, count: Int = 32) throws(SecretFileError) -> [UInt8] {
        if !FileManager.default.fileExists(atPath: path) {
            try write(Hex.encode(SecureBytes.random(count: count)) + "\n", to: path)
        }
        let text = try read(path, variable: variable).trimmingCharacters(in: .whitespacesAndNewlines)
        guard let key = Hex.decode(text), key.count == count else {
            throw .unreadable(path: path, variable: variable, reason: "not a \(count)-byte key written as hex")
        }
        return key
    }

    public static func read(_ path: String, variable: String) throws(SecretFileError) -> String {
        var info = stat()
        guard stat(path, &info) == 0 else {
            throw (.unreadable(path: path, variable: variable, reason: String(cString: strerror(errno))))
        }
        guard info.st_mode & 0o077 == 0 else {
            throw (.tooOpen(path: path, variable: variable, mode: String(info.st_mode & 0o777, radix: 8)))
        }
        guard let data = FileManager.default.contents(atPath: path), let text = String(data: data, encoding: .utf8) else {
            throw (.unreadable(path: path, variable: variable, reason: "permission denied or not UTF-8 text"))
        }
        return text
    }
}
