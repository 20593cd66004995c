"""[7] PostgreSQL: durable deliveries/s through 1 and 3 `soulacy serve` processes on one PostgreSQL server, beside
pgbench writing the same rows to the same server in the same run (the engine's limit), and the inbox GET on
PostgreSQL. The server keeps its durable defaults (fsync, synchronous commit, full-page writes on): a delivery is
acknowledged once it is on disk, as on SQLite.

Each delivery is what POST /api/v1/channels/mobile/test writes for a person with two phones that take no pushes:
the line, two recipients and two `skipped` steps, in one transaction. pgbench's script writes those five rows
in one statement per transaction, over as many connections.

Two shapes of load: every line to one person (whose feed lock orders their lines one commit at a time), and lines
spread over PEOPLE people with two phones each (a hosted gateway's shape: their locks do not wait on each other)."""
import glob
import json
import os
import pwd
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request

CLUSTER_USER = "soulacy-bench-pg"

PEOPLE = 100

# What one delivery writes, as pgbench sends it: the line (phone-written text as BYTEA), two recipients, two steps.
# PERSON and PHONE_PREFIX are filled in for the shape of load (one person, or one of PEOPLE drawn per transaction).
PGBENCH_TEMPLATE = r"""WITH d AS (
  INSERT INTO mobile_deliveries (id, destination, destination_kind, destination_value, destination_subject, agent_id, agent_name,
                                 session_id, title, body, parts, metadata, created_at)
  VALUES ('dlv_' || md5(random()::text || clock_timestamp()::text), 'user:' || PERSON, 'user', PERSON, PERSON, 'mobile-test',
          convert_to('Soulacy', 'UTF8'), convert_to('test-' || gen_random_uuid()::text, 'UTF8'), convert_to('Bench', 'UTF8'),
          convert_to('a benchmark line', 'UTF8'), '[{"type":"text","text":"a benchmark line"}]', '{}',
          (extract(epoch from clock_timestamp()) * 1000)::bigint)
  RETURNING id),
r AS (INSERT INTO mobile_delivery_recipients (delivery_id, device_id) SELECT id, PHONE_PREFIX || x FROM d, (VALUES ('phone-1'), ('phone-2')) v(x))
INSERT INTO mobile_delivery_events (delivery_id, device_id, kind, at, reason)
SELECT id, PHONE_PREFIX || x, 'skipped', (extract(epoch from clock_timestamp()) * 1000)::bigint, 'notifications turned off'
FROM d, (VALUES ('phone-1'), ('phone-2')) v(x);
"""

# The same rows under the locks the inbox takes for a line to one person, held to commit: share on the feed, exclusive
# on the person (PostgresInbox.lockFeed), so one person's lines commit one at a time and a feed reader misses none.
LOCKS = ("SELECT pg_advisory_xact_lock_shared(hashtext('mobile_inbox_feed'), 0);\n"
         "SELECT pg_advisory_xact_lock(hashtext('mobile_inbox_person'), hashtext(PERSON));\n")


def pgbench_script(many, locked):
    """The delivery's rows for pgbench: to the owner, or to one of PEOPLE people drawn per transaction; with or
    without the inbox's locks."""
    person, prefix = ("'p-' || lpad(:p::text, 3, '0')", "'p-' || lpad(:p::text, 3, '0') || '-'") if many else ("'owner'", "''")
    body = PGBENCH_TEMPLATE.replace("PHONE_PREFIX", prefix).replace("PERSON", person)
    if locked:
        body = "BEGIN;\n" + LOCKS.replace("PERSON", person) + body + "END;\n"
    return (f"\\set p random(1, {PEOPLE})\n" if many else "") + body


POST_LUA = """wrk.method = "POST"
wrk.body = '{"to": "user:owner", "title": "Bench", "body": "a benchmark line"}'
wrk.headers["Content-Type"] = "application/json"
"""

# Each request to the next of PEOPLE people in turn (each wrk thread counts on its own).
POST_MANY_LUA = """wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
counter = 0
request = function()
  counter = counter + 1
  local body = string.format('{"to": "user:p-%03d", "title": "Bench", "body": "a benchmark line"}', counter % PEOPLE + 1)
  return wrk.format(nil, nil, nil, body)
end
""".replace("PEOPLE", str(PEOPLE))


def server_binaries():
    found = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True).stdout.strip()
    if found and os.path.exists(os.path.join(found, "initdb")):
        return found
    return sorted(glob.glob("/usr/lib/postgresql/*/bin"))[-1]


def cluster_owner():
    """PostgreSQL refuses to run as root: an unprivileged system user of its own when this runs as root."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(CLUSTER_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin",
                        "--user-group", CLUSTER_USER], check=True, capture_output=True)
    return CLUSTER_USER


def as_owner(owner, args):
    return (["runuser", "-u", owner, "--"] if owner else []) + args


class Cluster:
    def __init__(self, work, port):
        # Its own directory under /tmp, not the run's (owner-only) one, which the cluster's user could not enter.
        self.dir = tempfile.mkdtemp(prefix="soulacy-bench-pg-")
        self.bin = server_binaries()
        self.owner = cluster_owner()
        if self.owner:
            shutil.chown(self.dir, self.owner, self.owner)
        os.chmod(self.dir, 0o700)
        self.port = port
        subprocess.run(as_owner(self.owner, [f"{self.bin}/initdb", "-D", f"{self.dir}/data", "-U", "soulacy", "--auth=trust",
                                             "--encoding=UTF8", "--no-locale", "--no-instructions"]), check=True, capture_output=True, cwd=self.dir)
        # Durable defaults; enough connections for three gateways' pools and pgbench.
        conf = f"{self.dir}/data/postgresql.auto.conf"
        with open(conf, "w") as f:
            f.write(f"port = {port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{self.dir}'\nmax_connections = 200\n"
                    "shared_buffers = 128MB\nlog_min_messages = warning\n")
        if self.owner:
            shutil.chown(conf, self.owner, self.owner)
        subprocess.run(as_owner(self.owner, [f"{self.bin}/pg_ctl", "-D", f"{self.dir}/data", "-l", f"{self.dir}/log", "-w", "start"]),
                       check=True, capture_output=True, cwd=self.dir)

    def url(self, database):
        return f"postgres://soulacy@127.0.0.1:{self.port}/{database}?sslmode=disable"

    def psql(self, database, sql):
        return subprocess.run(["psql", "-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", self.url(database), "-c", sql],
                              check=True, capture_output=True, text=True).stdout.strip()

    def create(self, database):
        self.psql("postgres", f"CREATE DATABASE {database}")

    def stop(self):
        subprocess.run(as_owner(self.owner, [f"{self.bin}/pg_ctl", "-D", f"{self.dir}/data", "-m", "immediate", "stop"]),
                       capture_output=True, cwd=self.dir)
        shutil.rmtree(self.dir, ignore_errors=True)


def start_gateways(bin_dir, work, cluster, database, count, free_port, procs):
    """`count` gateway processes on one database and one data directory; returns their ports and the owner's key."""
    data = os.path.join(work, f"pg-gw-{database}")
    os.makedirs(data)
    config = os.path.join(work, "pg-SOUL.yaml")
    with open(config, "w") as f:
        f.write("agents:\n  - id: echo\n    name: Echo\n    runner: {command: [/bin/cat]}\n")
    ports, key = [], None
    for node in range(count):
        port = free_port()
        out = open(os.path.join(work, f"pg-gw-{database}-{node}.out"), "w+")
        env = dict(os.environ, SOULACY_RATE_LIMIT_PER_MINUTE="0", SOULACY_DATABASE_URL=cluster.url(database), SOULACY_NODE_ID=f"bench-{node}",
                   SOULACY_TLS="off", SOULACY_ACCESS_LOG="off", SOULACY_AGENT_WATCH="off")
        env = {k: v for k, v in env.items() if not k.startswith("SOULACY_MOBILE_APNS_")}
        process = subprocess.Popen([os.path.join(bin_dir, "soulacy"), "serve", "--config", config, "--data", data, "--listen", f"127.0.0.1:{port}"],
                                   stdout=out, stderr=subprocess.STDOUT, env=env)
        procs.append(process)
        for _ in range(300):
            out.seek(0)
            text = out.read()
            if "is listening" in text:
                break
            if process.poll() is not None:
                raise RuntimeError(f"a gateway on PostgreSQL exited: {text[-400:]}")
            time.sleep(0.1)
        found = re.search(r"sk_[A-Za-z0-9_-]+", text)
        key = key or (found.group(0) if found else None)
        ports.append(port)
    return ports, key


def call(port, key, method, path, body=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method, data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    return urllib.request.urlopen(req).read()


def wrk_posts(urls, key, lua, duration, connections):
    """wrk against every URL at once; their requests/s summed, the worst p99, and every non-2xx or socket error."""
    runs = [subprocess.Popen(["wrk", "-t1", f"-c{connections}", f"-d{duration}", "--latency", "-s", lua, "-H", f"Authorization: Bearer {key}", url],
                             stdout=subprocess.PIPE, text=True) for url in urls]
    total, worst, errors = 0.0, 0.0, 0
    for run in runs:
        out = run.communicate()[0]
        total += float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
        m = re.search(r"^\s+99%\s+([\d.]+)(us|ms|s)", out, re.M)
        value, unit = float(m.group(1)), m.group(2)
        worst = max(worst, value / 1000 if unit == "us" else value * 1000 if unit == "s" else value)
        non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
        socket = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
        errors += (int(non2xx.group(1)) if non2xx else 0) + (sum(map(int, socket.groups())) if socket else 0)
    return {"per_second": total, "p99_ms": worst, "errors": errors}


def add_people(cluster, database):
    """PEOPLE people with two phones each that take no pushes, as the device registration stores them (written
    directly: a registration needs each person's own key)."""
    cluster.psql(database, f"""
        INSERT INTO mobile_devices (id, subject, name, platform, bundle_id, notifications_enabled, created_at, updated_at)
        SELECT 'p-' || lpad(p::text, 3, '0') || '-' || phone, 'p-' || lpad(p::text, 3, '0'), phone, 'ios', '', false,
               (extract(epoch from now()) * 1000)::bigint, (extract(epoch from now()) * 1000)::bigint
        FROM generate_series(1, {PEOPLE}) p, (VALUES ('phone-1'), ('phone-2')) v(phone)""")


def measure(work, bin_dir, free_port, procs, duration, wrk_run):
    """Every figure of [7]: {gateways: {1: ..., 3: ...} (one person), gateways_many: {1: ..., 3: ...} (PEOPLE people),
    pgbench, pgbench_person_locked, pgbench_many, pgbench_many_locked, get}."""
    luas = {}
    for name, text in (("one", POST_LUA), ("many", POST_MANY_LUA)):
        luas[name] = os.path.join(work, f"pg-post-{name}.lua")
        with open(luas[name], "w") as f:
            f.write(text)
    cluster = Cluster(work, free_port())
    try:
        figures = {"gateways": {}, "gateways_many": {}, "people": PEOPLE}
        for count in (1, 3):
            database = f"g{count}"
            cluster.create(database)
            ports, key = start_gateways(bin_dir, work, cluster, database, count, free_port, procs)
            for phone in ("phone-1", "phone-2"):
                call(ports[0], key, "POST", "/api/v1/mobile/devices", {"id": phone, "name": phone, "platform": "ios", "notifications_enabled": False})
            add_people(cluster, database)
            # 32 connections in all, spread over the gateways.
            urls = [f"http://127.0.0.1:{port}/api/v1/channels/mobile/test" for port in ports]
            for shape, lua, destination in (("gateways", luas["one"], "destination_value = 'owner'"),
                                            ("gateways_many", luas["many"], "destination_value LIKE 'p-%'")):
                posted = wrk_posts(urls, key, lua, duration, max(1, 32 // count))
                posted["stored"] = int(cluster.psql(database, f"SELECT count(*) FROM mobile_deliveries WHERE {destination}"))
                # Each line with both its phones: what the gateway wrote is the five rows pgbench writes.
                posted["recipients"] = int(cluster.psql(database, "SELECT count(*) FROM mobile_delivery_recipients r JOIN mobile_deliveries d "
                                                                  f"ON d.id = r.delivery_id WHERE d.{destination}"))
                figures[shape][count] = posted
            if count == 1:
                page = f"http://127.0.0.1:{ports[0]}/api/v1/mobile/deliveries?device_id=phone-1&limit=20"
                figures["get"] = wrk_run(page, [f"Authorization: Bearer {key}"])
            for process in procs[-count:]:
                process.terminate()
                process.wait(timeout=20)
        # The engine's limit: the same rows, one transaction each, over the same 32 connections, on a fresh database
        # with the same schema and devices (copied from one the gateways used).
        cluster.psql("postgres", "CREATE DATABASE pgb TEMPLATE g1")
        seconds = int(duration.rstrip("s"))
        for name, many, locked in (("pgbench", False, False), ("pgbench_person_locked", False, True),
                                   ("pgbench_many", True, False), ("pgbench_many_locked", True, True)):
            cluster.psql("pgb", "TRUNCATE mobile_deliveries, mobile_delivery_recipients, mobile_delivery_events CASCADE")
            script = os.path.join(work, f"{name}.sql")
            with open(script, "w") as f:
                f.write(pgbench_script(many, locked))
            out = subprocess.run(["pgbench", "-n", "-c", "32", "-j", "2", "-T", str(seconds), "-f", script, cluster.url("pgb")],
                                 capture_output=True, text=True, check=True).stdout
            tps = float(re.search(r"tps = ([\d.]+)", out).group(1))
            failed = re.search(r"number of failed transactions: (\d+)", out)
            figures[name] = {"per_second": tps, "failed": int(failed.group(1)) if failed else 0,
                             "stored": int(cluster.psql("pgb", "SELECT count(*) FROM mobile_deliveries"))}
        return figures
    finally:
        cluster.stop()
