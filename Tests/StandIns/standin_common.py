"""Shared parts of the local service stand-ins: TLS certificate, ASGI helpers, the control port."""
import asyncio
import base64
import datetime
import ipaddress
import json
import os

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def b64url_decode(text):
    """Base64url without padding, as JWTs carry it."""
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def ensure_certificate(directory):
    """A self-signed certificate for 127.0.0.1/localhost, kept in `directory` so a restart serves the same one."""
    cert_path = os.path.join(directory, "standin-cert.pem")
    key_path = os.path.join(directory, "standin-key.pem")
    if os.path.exists(cert_path) and os.path.exists(key_path):
        return cert_path, key_path
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "soulacy test stand-in")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    with open(key_path, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    with open(cert_path, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    return cert_path, key_path


async def read_body(receive, limit=64 * 1024 * 1024):
    body = b""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return body
        body += message.get("body", b"")
        if len(body) > limit:
            return body
        if not message.get("more_body"):
            return body


async def respond(send, status, payload=None, headers=()):
    data = b"" if payload is None else (payload if isinstance(payload, bytes) else json.dumps(payload).encode())
    hdrs = [(b"content-length", str(len(data)).encode())] + [(k.encode(), v.encode()) for k, v in headers]
    if payload is not None:
        hdrs.append((b"content-type", b"application/json"))
    await send({"type": "http.response.start", "status": status, "headers": hdrs})
    await send({"type": "http.response.body", "body": data})


async def lifespan(scope, receive, send):
    """Answers the ASGI lifespan protocol; returns True when `scope` was a lifespan scope."""
    if scope["type"] != "lifespan":
        return False
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return True


async def shared_control(standin, path, data, send):
    """The control routes every stand-in has (health, requests, script, reset); True when `path` was one of them."""
    if path == "/control/health":
        # The pid lets the test tell its own stand-in from another that got the same free port first.
        await respond(send, 200, {"ok": True, "pid": os.getpid()})
    elif path == "/control/requests":
        await respond(send, 200, {"requests": standin.requests})
    elif path == "/control/script":
        standin.script.extend(data.get("responses", []))
        await respond(send, 200, {"queued": len(standin.script)})
    elif path == "/control/reset":
        standin.reset()
        await respond(send, 200, {"ok": True})
    else:
        return False
    return True


def header_map(scope):
    result = {}
    for k, v in scope.get("headers", []):
        name = k.decode("latin-1").lower()
        result.setdefault(name, []).append(v.decode("latin-1"))
    return result


def serve(app, tls_port, control_port, cert_dir):
    from hypercorn.asyncio import serve as hypercorn_serve
    from hypercorn.config import Config

    cert, key = ensure_certificate(cert_dir)
    config = Config()
    config.bind = [f"127.0.0.1:{tls_port}"]
    config.insecure_bind = [f"127.0.0.1:{control_port}"]
    config.certfile = cert
    config.keyfile = key
    config.alpn_protocols = ["h2", "http/1.1"]
    config.accesslog = None
    config.errorlog = "-"
    config.loglevel = "WARNING"
    config.keep_alive_timeout = 300
    config.h2_max_concurrent_streams = 1000
    asyncio.run(hypercorn_serve(app, config))
