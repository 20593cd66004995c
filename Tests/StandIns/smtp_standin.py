#!/usr/bin/env python3
"""A local SMTP submission server (aiosmtpd) that requires STARTTLS before AUTH and AUTH before mail, and records mail.

Start:  python3 smtp_standin.py --tls-port P --control-port C --cert-dir DIR [--user U --password W]
        [--smtps-port S]
        --tls-port is the SMTP port (plain SMTP that must be upgraded with STARTTLS, as on submission port 587);
        --smtps-port, when given, is implicit TLS from the first byte (RFC 8314, as on port 465), AUTH still required;
        defaults: user "gateway@soulacy.test", password "smtp-test-password"
Ready:  GET /control/health -> {"ok": true, "pid": N}; stdout "READY smtp tls=P control=C pid=N smtps=S"

Rules enforced (RFC 5321 SMTP, RFC 3207 STARTTLS, RFC 4954 SMTP AUTH, RFC 6409 message submission; aiosmtpd's
documented options require_starttls / auth_required / auth_require_tls, https://aiosmtpd.aio-libs.org/):
  * EHLO first; before STARTTLS only EHLO/HELO/NOOP/RSET/QUIT/STARTTLS: anything else -> 530 "Must issue a STARTTLS
    command first"; AUTH is not even advertised before TLS (and -> 538 5.7.11 if tried).
  * AUTH PLAIN or LOGIN with the configured user/password; anything else -> 535 5.7.8 "Authentication credentials
    invalid"; MAIL before a successful AUTH -> 530 5.7.0 "Authentication required".
  * Messages over 10 MiB -> 552 (SIZE is advertised).
  * Scripted replies: the next MAIL, RCPT or DATA (as the step says) answers the scripted code, e.g. 450/451/452/
    550/552/554, the client's cue to retry (4xx) or give up (5xx).

Control port (plain HTTP), besides the shared routes (health, requests, script, delay, reset):
  GET  /control/messages -> {"messages": [{"mail_from", "rcpt_tos", "headers": {name: [values]}, "subject", "from",
        "to", "message_id", "body" (the text/plain part, or the whole text), "html" (text/html part or null),
        "raw" (first 256 KiB), "size", "tls": true, "implicit_tls", "auth_user", "peer", "time"}...]}   (also as /control/requests)
  GET  /control/auth     -> {"attempts": [{"mechanism", "login", "success", "tls", "time"}...]}
  POST /control/script   {"responses": [{"stage": "rcpt"|"mail"|"data", "code": 451, "message": "4.3.0 Try again"},
        {"stage": "data", "delay_ms": 3000}]}   consumed in order by the stage named
"""
import argparse
import asyncio
import email
import email.policy
import ssl
import sys
import time

from aiosmtpd.smtp import SMTP, AuthResult, LoginPassword

import channel_common as cc
import standin_common as common

MAX_MESSAGE = 10 * 1024 * 1024


def secured(server, session):
    return session.ssl is not None or getattr(server, "implicit_tls", False)


class SMTPStandIn(cc.ChannelStandIn):
    name = "smtp"

    def __init__(self, user, password):
        self.user = user
        self.password = password
        super().__init__()

    def reset_state(self):
        self.auth_attempts = cc.Records()

    # -- aiosmtpd authenticator and handler hooks --
    def __call_authenticator(self, server, session, envelope, mechanism, auth_data):
        ok = isinstance(auth_data, LoginPassword) and auth_data.login.decode("utf-8", "replace") == self.user \
            and auth_data.password.decode("utf-8", "replace") == self.password
        self.auth_attempts.append({"mechanism": mechanism, "login": auth_data.login.decode("utf-8", "replace") if isinstance(auth_data, LoginPassword) else None,
                                   "success": ok, "tls": secured(server, session), "time": time.time()})
        return AuthResult(success=ok, handled=False, auth_data=auth_data if ok else None)

    def authenticator(self):
        return self.__call_authenticator

    async def scripted(self, stage):
        for index, step in enumerate(self.script):
            if step.get("stage", "data").lower() == stage:
                self.script.pop(index)
                await self.pause(step)
                if step.get("code"):
                    return f"{int(step['code'])} {step.get('message', 'scripted reply')}"
                return None
        await self.pause()
        return None

    async def handle_MAIL(self, server, session, envelope, address, mail_options):
        reply = await self.scripted("mail")
        if reply:
            return reply
        envelope.mail_from = address
        envelope.mail_options.extend(mail_options)
        return "250 OK"

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        reply = await self.scripted("rcpt")
        if reply:
            return reply
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        reply = await self.scripted("data")
        if reply:
            return reply
        raw = envelope.original_content or envelope.content or b""
        message = email.message_from_bytes(raw, policy=email.policy.default)
        headers = {}
        for name, value in message.items():
            headers.setdefault(name, []).append(str(value))
        plain = message.get_body(preferencelist=("plain",))
        html = message.get_body(preferencelist=("html",))
        body = plain.get_content() if plain is not None else (message.get_content() if not message.is_multipart() else "")
        self.requests.append({
            "mail_from": envelope.mail_from, "rcpt_tos": list(envelope.rcpt_tos), "headers": headers,
            "subject": message.get("Subject"), "from": message.get("From"), "to": message.get("To"),
            "message_id": message.get("Message-ID"), "body": body, "html": html.get_content() if html is not None else None,
            "raw": raw[:cc.MAX_KEPT_BODY].decode("utf-8", "replace"), "size": len(raw), "tls": secured(server, session),
            "implicit_tls": getattr(server, "implicit_tls", False),
            "auth_user": session.auth_data.login.decode("utf-8", "replace") if isinstance(session.auth_data, LoginPassword) else None,
            "peer": list(session.peer) if session.peer else None, "time": time.time(),
        })
        return "250 2.0.0 Message accepted for delivery"

    async def extra_control(self, path, method, data, send):
        if path == "/control/messages":
            await cc.respond_json(send, 200, {"messages": self.requests.list(), "dropped": self.requests.dropped})
        elif path == "/control/auth":
            await cc.respond_json(send, 200, {"attempts": self.auth_attempts.list()})
        else:
            return False
        return True


async def run(args):
    standin = SMTPStandIn(args.user, args.password)
    cert, key = common.ensure_certificate(args.cert_dir)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    loop = asyncio.get_running_loop()
    factory = lambda: SMTP(standin, hostname="smtp.standin.test", ident="Soulacy SMTP stand-in", tls_context=context,
                           require_starttls=True, auth_required=True, auth_require_tls=True,
                           authenticator=standin.authenticator(), data_size_limit=MAX_MESSAGE, loop=loop)
    servers = [await loop.create_server(factory, "127.0.0.1", args.tls_port)]
    if args.smtps_port:
        def implicit():
            # The connection is TLS from its first byte (RFC 8314 "submissions"), so AUTH needs no STARTTLS here.
            smtp = SMTP(standin, hostname="smtp.standin.test", ident="Soulacy SMTP stand-in", auth_required=True,
                        auth_require_tls=False, authenticator=standin.authenticator(), data_size_limit=MAX_MESSAGE, loop=loop)
            smtp.implicit_tls = True
            return smtp
        servers.append(await loop.create_server(implicit, "127.0.0.1", args.smtps_port, ssl=context))
    stop = cc.shutdown_event()
    try:
        await cc.serve_async(standin, None, args.control_port, args.cert_dir, stopping=stop,
                             on_ready=lambda: cc.print_ready("smtp", args.tls_port, args.control_port, f"smtps={args.smtps_port or 0}"))
    finally:
        for server in servers:
            server.close()
            await server.wait_closed()
    return 0


def main():
    parser = argparse.ArgumentParser()
    cc.add_standard_arguments(parser)
    parser.add_argument("--user", default="gateway@soulacy.test")
    parser.add_argument("--password", default="smtp-test-password")
    parser.add_argument("--smtps-port", type=int, default=0, help="also serve implicit TLS (as on port 465) here")
    args = parser.parse_args()
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
