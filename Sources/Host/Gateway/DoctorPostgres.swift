import Foundation
import PostgreSQL
import PostgresStores

/// `soulacy doctor`'s database checks for a gateway on PostgreSQL (`SOULACY_DATABASE_URL`), read in a read-only
/// session (`PostgresGatewaySchema.inspect`): the server answers; the connection is encrypted unless it stays on
/// this machine; this binary's migrations are all applied and none is newer; and how many nodes follow the
/// database now. The URL is only ever shown with its password replaced.
enum DoctorPostgres {
    static func database(url: String) async -> [DoctorFinding] {
        let shown = PostgresURL.redacted(url)
        let pool: PostgresPool
        do { pool = try PostgresPool(url: url, size: 1, applicationName: "soulacy-doctor") } catch {
            return [DoctorFinding(.fail, "database", "SOULACY_DATABASE_URL is not a PostgreSQL URL libpq reads: \(error)",
                                  fix: "set it as postgres://USER:PASSWORD@HOST:PORT/DATABASE?sslmode=verify-full")]
        }
        defer { pool.close() }
        let found: PostgresGatewayInspection
        do { found = try await PostgresGatewaySchema.inspect(pool) } catch {
            return [DoctorFinding(.fail, "database", "cannot reach PostgreSQL at \(shown): \(error)",
                                  fix: "check that the server runs and takes connections from here, and the URL's user, password and database")]
        }
        let megabytes = String(format: "%.1f MB", Double(found.databaseBytes) / 1_048_576)
        var findings = [DoctorFinding(.ok, "database", "PostgreSQL \(found.serverVersion) at \(shown) answers (\(megabytes))")]
        // A Unix socket (no address) or loopback stays on this machine; anything else should be TLS.
        let address = found.serverAddress
        let local = address == nil || address?.hasPrefix("127.") == true || address?.hasPrefix("::1") == true
        if found.encrypted {
            findings.append(DoctorFinding(.ok, "database tls", "the connection to PostgreSQL is encrypted (TLS)"))
        } else if !local {
            findings.append(DoctorFinding(.warn, "database tls", "the connection to PostgreSQL at \(address ?? "?") is not encrypted: API keys' hashes, sealed secrets and every line cross the network in the clear",
                                          fix: "add sslmode=verify-full (with the server's CA) or sslmode=require to SOULACY_DATABASE_URL"))
        }
        findings.append(migrations(found.migrations))
        findings.append(DoctorFinding(.ok, "nodes", found.followingNodes == 0 ? "no gateway node is connected to this database now"
                                      : "\(found.followingNodes) gateway node(s) connected to this database now"))
        return findings
    }

    static func migrations(_ status: (missing: [String], unknown: [String])?) -> DoctorFinding {
        guard let status else {
            return DoctorFinding(.fail, "migrations", "the database has no soulacy_migrations table: no gateway has started on it yet, or it is another program's",
                                 fix: "SOULACY_DATABASE_URL must name the gateway's database; a new one is set up by the first soulacy serve")
        }
        return DoctorFiles.migrationsFinding(missing: status.missing, unknown: status.unknown, total: PostgresGatewaySchema.migrations.count,
                                             newerFix: "run the newer soulacy on every node", olderFix: "restart a node with this soulacy (take a pg_dump first)")
    }
}
