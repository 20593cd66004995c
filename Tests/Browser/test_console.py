"""The web console in a real browser: headless Chromium from Debian, driven by Selenium, against a real
`soulacy serve` process whose APNs is the stand-in in Tests/StandIns (the same one the Swift suites use).

Run by scripts/test-console (scripts/test calls it). SOULACY_BUILD_DIR names the build with the soulacy binary;
SOULACY_CONSOLE_SCREENSHOTS=DIR saves each page, light and dark, at 1280 and 375 px into DIR (docs/screenshots).
SOULACY_CONSOLE_ALLOW_MISSING=1 (a branch that lacks some of docs/console-api.md's routes) skips the checks whose
route is not served yet instead of failing them; scripts/test never sets it.
"""
from http.client import HTTPConnection
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest
from axe_selenium_python import Axe
from selenium import webdriver
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("SOULACY_BUILD_DIR") or os.path.join(ROOT, ".build", "debug")
SOULACY = os.path.join(BUILD, "soulacy")
STANDINS = os.path.join(ROOT, "Tests", "StandIns")
ALLOW_MISSING = os.environ.get("SOULACY_CONSOLE_ALLOW_MISSING") == "1"
# Release builds under AddressSanitizer answer slower than a debug build: every wait is generous.
WAIT = 30
# What arrives over the event stream: well before the page's fallback re-read (every 20 s while the stream is down).
LIVE = 10
PAGES = ["inbox", "devices", "approvals", "pairing", "agents", "health"]
TEAM_ID, KEY_ID = "TEAM123456", "KEY1234567"
TOKENS = {"phone-1": "a1" * 32, "phone-2": "b2" * 32}

SOUL = """
agents:
  - id: echo
    name: Echo
    runner:
      command: ["/bin/cat"]
      timeout: 10s
  - id: victim
    name: Victim
    description: Must never run from another origin
    runner:
      command: ["/bin/cat"]
      timeout: 10s
  - id: asker
    name: Careful helper
    runner:
      command: ["/bin/sh", "-c", "curl -s -X POST -H \\"Authorization: Bearer $SOULACY_RUN_TOKEN\\" -H 'Content-Type: application/json' -d '{\\"agent_id\\":\\"asker\\",\\"tool\\":\\"shell.run\\",\\"call_id\\":\\"call_browser\\",\\"arguments\\":{\\"command\\":\\"systemctl restart nginx\\"},\\"session_id\\":\\"'$SOULACY_SESSION_ID'\\"}' $SOULACY_API_URL/api/v1/approvals"]
      timeout: 60s
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method, url, body=None, headers=None, timeout=15):
    """One plain HTTP call: (status, headers, parsed JSON or text)."""
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    request = urllib.request.Request(url, data=data, method=method, headers=dict(headers or {}))
    if data is not None and "Content-Type" not in request.headers:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, answer_headers, raw = response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        status, answer_headers, raw = error.code, dict(error.headers), error.read()
    try:
        parsed = json.loads(raw) if raw else None
    except ValueError:
        parsed = raw.decode(errors="replace")
    return status, answer_headers, parsed


def eventually(check, timeout=WAIT, interval=0.2, message="condition"):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {message} (last: {last!r})")


class APNsStandIn:
    """Tests/StandIns/apns_standin.py: HTTP/2 over TLS, checks the ES256 provider token, answers with Apple's reasons."""

    def __init__(self, directory):
        self.directory = directory
        self.key = os.path.join(directory, "AuthKey.p8")
        subprocess.run(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", self.key], check=True, capture_output=True)
        os.chmod(self.key, 0o600)
        subprocess.run(["openssl", "pkey", "-in", self.key, "-pubout", "-out", os.path.join(directory, "AuthKey.pub")], check=True, capture_output=True)
        self.tls_port, self.control_port = free_port(), free_port()
        env = dict(os.environ, PYTHONPATH=STANDINS, PYTHONUNBUFFERED="1")
        self.log = open(os.path.join(directory, "apns.log"), "w")
        self.process = subprocess.Popen([sys.executable, os.path.join(STANDINS, "apns_standin.py"), "--tls-port", str(self.tls_port),
                                         "--control-port", str(self.control_port), "--cert-dir", directory,
                                         "--public-key", os.path.join(directory, "AuthKey.pub"), "--team-id", TEAM_ID, "--key-id", KEY_ID],
                                        env=env, stdout=self.log, stderr=subprocess.STDOUT)
        eventually(lambda: self.healthy(), timeout=60, message="the APNs stand-in to start")

    def healthy(self):
        if self.process.poll() is not None:
            raise AssertionError("the APNs stand-in exited: " + open(self.log.name).read())
        try:
            status, _, body = self.control("GET", "/control/health")
            return status == 200 and body.get("pid") == self.process.pid
        except OSError:
            return False

    def control(self, method, path, body=None):
        return http(method, f"http://127.0.0.1:{self.control_port}{path}", body)

    @property
    def environment(self):
        url = f"https://127.0.0.1:{self.tls_port}"
        return {"SOULACY_MOBILE_APNS_TEAM_ID": TEAM_ID, "SOULACY_MOBILE_APNS_KEY_ID": KEY_ID, "SOULACY_MOBILE_APNS_PRIVATE_KEY_FILE": self.key,
                "SOULACY_MOBILE_APNS_PRODUCTION_URL": url, "SOULACY_MOBILE_APNS_SANDBOX_URL": url,
                "SOULACY_MOBILE_APNS_CA_FILE": os.path.join(self.directory, "standin-cert.pem")}

    def stop(self):
        self.process.kill()
        self.process.wait(10)


class Gateway:
    """`soulacy serve` as a child process on a loopback port, with a fresh data directory."""

    def __init__(self, directory, environment):
        self.directory = directory
        self.data = os.path.join(directory, "data")
        config = os.path.join(directory, "SOUL.yaml")
        with open(config, "w") as f:
            f.write(SOUL)
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        env = {"PATH": "/usr/bin:/bin", "HOME": directory, "SOULACY_RATE_LIMIT_PER_MINUTE": "0"}
        env.update({k: v for k, v in os.environ.items() if k in ("ASAN_OPTIONS", "LSAN_OPTIONS", "UBSAN_OPTIONS")})
        env.update(environment)
        self.env = env
        self.log_path = os.path.join(directory, "gateway.log")
        self.log = open(self.log_path, "w")
        self.process = subprocess.Popen([SOULACY, "serve", "--config", config, "--data", self.data, "--listen", f"127.0.0.1:{self.port}"],
                                        env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        eventually(lambda: self.started(), timeout=60, message="soulacy serve to listen")
        self.key = re.search(r"SOULACY_ADMIN_KEY=(\S+)", self.output()).group(1)

    def output(self):
        with open(self.log_path) as f:
            return f.read()

    def started(self):
        if self.process.poll() is not None:
            raise AssertionError("soulacy exited: " + self.output())
        return "is listening on" in self.output()

    def api(self, method, path, body=None, key=None, headers=None):
        all_headers = dict(headers or {})
        if key is not False:
            all_headers["Authorization"] = f"Bearer {key or self.key}"
        status, _, parsed = http(method, self.base + path, body, all_headers)
        return status, parsed

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()


@pytest.fixture(scope="module")
def work():
    directory = tempfile.mkdtemp(prefix="soulacy-console-")
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
def apns(work):
    directory = os.path.join(work, "apns")
    os.makedirs(directory)
    standin = APNsStandIn(directory)
    yield standin
    standin.stop()


@pytest.fixture(scope="module")
def gateway(work, apns):
    gateway = Gateway(work, apns.environment)
    yield gateway
    gateway.stop()


@pytest.fixture(scope="module")
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for argument in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,900", "--hide-scrollbars",
                     "--lang=en-US", "--force-prefers-reduced-motion"]:
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"), options=options)
    driver.set_script_timeout(WAIT)
    yield driver
    driver.quit()


def probe(gateway, method, path):
    """The status and (unless it is an event stream, which never ends) the JSON body of one call with the admin key."""
    connection = HTTPConnection("127.0.0.1", gateway.port, timeout=15)
    try:
        connection.request(method, path, body=None if method == "GET" else b"{}",
                           headers={"Authorization": f"Bearer {gateway.key}", "Content-Type": "application/json"})
        response = connection.getresponse()
        if "text/event-stream" in (response.getheader("Content-Type") or ""):
            return response.status, None
        raw = response.read()
        try:
            return response.status, json.loads(raw) if raw else None
        except ValueError:
            return response.status, None
    finally:
        connection.close()


def needs(gateway, method, path, why):
    """The route must be served; on a branch without it (ALLOW_MISSING) the check is skipped and says so."""
    status, body = probe(gateway, method, path)
    missing = status == 404 and isinstance(body, dict) and str(body.get("error", "")).startswith("no route for")
    if missing and ALLOW_MISSING:
        pytest.skip(f"{method} {path} is not served on this branch yet ({why})")
    assert not missing, f"{method} {path} is not served: {why}"


def needs_session_routes(gateway):
    needs(gateway, "GET", "/api/v1/console/session", "console sessions")


def wait_for(driver, css, timeout=WAIT, message=None):
    try:
        return WebDriverWait(driver, timeout).until(lambda d: d.find_elements(By.CSS_SELECTOR, css))
    except TimeoutException:
        raise AssertionError(f"{message or css} did not appear; page says: {driver.find_element(By.TAG_NAME, 'main').text[:800]}")


def signed_out_page(driver, gateway):
    """The console loaded afresh with no cookie (a hash change alone would keep the page, and its session, alive)."""
    driver.get(gateway.base + "/")
    driver.delete_all_cookies()
    driver.get("about:blank")
    driver.get(gateway.base + "/#/inbox")


def sign_in(driver, gateway, key=None, code=None):
    """A fresh browser session (no cookie), then the sign-in form with a key or a one-time code."""
    signed_out_page(driver, gateway)
    wait_for(driver, "#signin-key")
    if code is not None:
        driver.find_element(By.ID, "signin-code").send_keys(code + "\n")
    else:
        driver.find_element(By.ID, "signin-key").send_keys((key or gateway.key) + "\n")
    wait_for(driver, "#lines", message="the inbox after signing in")


def go(driver, gateway, page):
    driver.get(f"{gateway.base}/#/{page}")
    wait_for(driver, "#page-title")


def page_fetch(driver, method, path, body=None, csrf=True, headers=None):
    """A fetch from inside the page (same origin, the session cookie), with the session's CSRF token."""
    return driver.execute_async_script("""
        const [method, path, body, csrf, extra, done] = arguments;
        (async () => {
          const session = await (await fetch('/api/v1/console/session')).json().catch(() => ({}));
          const headers = Object.assign({'Content-Type': 'application/json'}, extra || {});
          if (csrf && session.csrf_token) headers['X-CSRF-Token'] = session.csrf_token;
          const response = await fetch(path, {method, headers, body: body === null ? undefined : JSON.stringify(body)});
          let json = null;
          try { json = await response.json(); } catch (e) {}
          done({status: response.status, json});
        })().catch((e) => done({status: -1, json: String(e)}));
    """, method, path, body, csrf, headers or {})


def timeline_kinds(driver, delivery, device):
    """The kinds of one device's steps, read in one go (the list is redrawn as the events arrive)."""
    return driver.execute_script("""
        return [...document.querySelectorAll(`li.line[data-id="${arguments[0]}"] ol.timeline[data-device="${arguments[1]}"] li.step`)]
            .map((step) => step.dataset.kind);""", delivery, device)


def text_of(driver, css):
    """An element's text, read in one go; "" while it is not there."""
    return driver.execute_script("const e = document.querySelector(arguments[0]); return e ? e.innerText : '';", css)


def register_phones(gateway):
    for device, token in TOKENS.items():
        status, body = gateway.api("POST", "/api/v1/mobile/devices", {"id": device, "name": device.replace("-", " ").title(), "push_token": token,
                                                                      "notifications_enabled": True})
        assert status in (200, 201), body


# MARK: Serving the page


def test_page_and_assets_are_served_with_a_strict_policy(gateway):
    status, headers, body = http("GET", gateway.base + "/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert '<script type="module" src="/console/app.js">' in body
    policy = headers["Content-Security-Policy"]
    for directive in ["default-src 'self'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'", "base-uri 'none'", "form-action 'self'"]:
        assert directive in policy
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
    assert headers["X-Content-Type-Options"] == "nosniff" and headers["Referrer-Policy"] == "no-referrer"
    # Nothing inline for the policy to block: no <script> without src, no style attribute or element, no on… handler.
    assert not re.search(r"<script(?![^>]*\bsrc=)", body) and "style=" not in body and "<style" not in body and not re.search(r"\son[a-z]+=", body)
    status, headers, script = http("GET", gateway.base + "/console/app.js")
    assert status == 200 and headers["Content-Type"].startswith("text/javascript") and "import" in script
    etag = headers["ETag"]
    status, again, _ = http("GET", gateway.base + "/console/app.js", headers={"If-None-Match": etag})
    assert status == 304 and again["ETag"] == etag
    assert http("GET", gateway.base + "/console/nothing.js")[0] == 404
    # Every module the page loads is served, and none sets HTML from a string.
    for name in re.findall(r'from "\./([a-z]+\.js)"', script):
        status, _, text = http("GET", f"{gateway.base}/console/{name}")
        assert status == 200, name
        assert "innerHTML" not in text and "outerHTML" not in text and "insertAdjacentHTML" not in text, name
    # The pairing page is still the gateway's own.
    status, headers, text = http("GET", gateway.base + "/mobile")
    assert status == 200 and "Soulacy app" in text


# MARK: Signing in


def test_sign_in_with_a_key_then_sign_out(browser, gateway):
    needs_session_routes(gateway)
    sign_in(browser, gateway)
    assert "admin" in browser.find_element(By.ID, "who-text").text
    cookie = browser.get_cookie("soulacy_session")
    assert cookie and cookie["httpOnly"] and cookie.get("sameSite") == "Strict"
    assert not browser.execute_script("return document.cookie").count("soulacy_session"), "the session cookie is HttpOnly"
    browser.find_element(By.ID, "sign-out").click()
    wait_for(browser, "#signin-key", message="the sign-in page after signing out")
    # The session is over on the server, not only in this browser.
    status, _, _ = http("GET", gateway.base + "/api/v1/console/session", headers={"Cookie": f"soulacy_session={cookie['value']}"})
    assert status == 401


def test_a_wrong_key_is_refused_in_words(browser, gateway):
    needs_session_routes(gateway)
    signed_out_page(browser, gateway)
    wait_for(browser, "#signin-key")
    browser.find_element(By.ID, "signin-key").send_keys("sk_not_a_key\n")
    error = wait_for(browser, "#signin-error:not([hidden])")[0]
    assert "not accepted" in error.text


def test_sign_in_with_a_one_time_code(browser, gateway):
    needs_session_routes(gateway)
    made = subprocess.run([SOULACY, "console-code", "--data", gateway.data], capture_output=True, text=True, env=gateway.env, timeout=60)
    assert made.returncode == 0, made.stdout + made.stderr
    code = re.search(r"\b(\d{6})\b", made.stdout).group(1)
    sign_in(browser, gateway, code=code)
    assert "admin" in browser.find_element(By.ID, "who-text").text
    # One use only.
    status, _, _ = http("POST", gateway.base + "/api/v1/console/session", {"code": code})
    assert status == 401


# MARK: A delivery's path to each phone


def test_a_delivery_moves_queued_sent_fetched_read_and_a_410_shows_token_rejected(browser, gateway, apns):
    needs_session_routes(gateway)
    needs(gateway, "GET", "/api/v1/console/deliveries", "the inbox with each delivery's timeline")
    register_phones(gateway)
    # phone-2's token is one Apple no longer knows: its wake-up is answered 410 Unregistered.
    assert apns.control("POST", "/control/unregister", {"token": TOKENS["phone-2"]})[0] == 200
    sign_in(browser, gateway)
    status, sent = gateway.api("POST", "/api/v1/channels/mobile/test", {"title": "Browser test line", "body": "Hello from the browser test"})
    assert status == 201, sent
    delivery = sent["delivery_id"]
    line = wait_for(browser, f'li.line[data-id="{delivery}"]', timeout=LIVE, message="the new line (live)")[0]
    line.find_element(By.CSS_SELECTOR, "button.line-head").click()
    eventually(lambda: "sent" in timeline_kinds(browser, delivery, "phone-1"), message="phone-1's wake-up sent")
    eventually(lambda: "token_rejected" in timeline_kinds(browser, delivery, "phone-2"), message="phone-2's token rejected")
    pushed = [r for r in apns.control("GET", "/control/requests")[2]["requests"] if r.get("token") == TOKENS["phone-1"]]
    assert pushed, "the stand-in took phone-1's wake-up"
    assert "Hello from the browser test" not in json.dumps(pushed), "a wake-up never carries the output"
    # The phone reads the line through the API, then sends its receipt: the open timeline follows, live.
    status, _ = gateway.api("GET", f"/api/v1/mobile/deliveries/{delivery}?device_id=phone-1")
    assert status == 200
    eventually(lambda: "fetched" in timeline_kinds(browser, delivery, "phone-1"), timeout=LIVE, message="phone-1 fetched (live)")
    status, _ = gateway.api("POST", f"/api/v1/mobile/deliveries/{delivery}/read", {"device_id": "phone-1"})
    assert status == 200
    eventually(lambda: "read" in timeline_kinds(browser, delivery, "phone-1"), timeout=LIVE, message="phone-1 read (live)")
    kinds = timeline_kinds(browser, delivery, "phone-1")
    order = [kinds.index(kind) for kind in ["queued", "attempt", "sent", "fetched", "read"]]
    assert order == sorted(order), kinds
    attempt = text_of(browser, f'li.line[data-id="{delivery}"] ol.timeline[data-device="phone-1"] li.step[data-kind="attempt"]')
    assert "200" in attempt and "ms" in attempt, attempt
    rejected = text_of(browser, f'li.line[data-id="{delivery}"] ol.timeline[data-device="phone-2"]')
    assert "410" in rejected, rejected
    # The state filter and the id search narrow the list.
    go(browser, gateway, f"inbox?q={delivery[:12]}")
    wait_for(browser, f'li.line[data-id="{delivery}"]')
    go(browser, gateway, "inbox?q=dlv_nothing_like_it")
    wait_for(browser, "#lines li.empty")
    # Devices: phone-2's token is cleared, and why.
    needs(gateway, "GET", "/api/v1/console/devices", "devices")
    go(browser, gateway, "devices")
    wait_for(browser, 'article.device[data-device="phone-2"]')
    assert "cleared" in text_of(browser, 'article.device[data-device="phone-2"]')


def test_a_test_push_shows_the_services_answer(browser, gateway, apns):
    needs_session_routes(gateway)
    needs(gateway, "GET", "/api/v1/console/devices", "devices")
    register_phones(gateway)
    sign_in(browser, gateway)
    go(browser, gateway, "devices")
    button = wait_for(browser, 'button[data-action="test-push"][data-device="phone-1"]')[0]
    button.click()
    result = eventually(lambda: "delivered" in text_of(browser, "#push-result-phone-1") and text_of(browser, "#push-result-phone-1"),
                        message="the test push's answer")
    assert "apns" in result and "ms" in result, result


# MARK: Approvals


def test_approve_in_the_browser_while_a_run_waits(browser, gateway):
    needs_session_routes(gateway)
    sign_in(browser, gateway)
    go(browser, gateway, "approvals")
    answer = {}

    def run():
        answer["status"], answer["body"] = gateway.api("POST", "/api/v1/agents/asker/trigger", {})

    waiting = threading.Thread(target=run)
    waiting.start()
    wait_for(browser, 'article.approval[data-approval="call_browser"]', timeout=LIVE, message="the run's approval (live)")
    text = text_of(browser, 'article.approval[data-approval="call_browser"]')
    assert "shell.run" in text and "systemctl restart nginx" in text and "Careful helper" in text, text
    browser.find_element(By.CSS_SELECTOR, 'article.approval[data-approval="call_browser"] button[data-action="approve"]').click()
    decided = wait_for(browser, "#decision-text")[0]
    assert decided.get_attribute("data-state") == "approved"
    waiting.join(WAIT)
    assert answer.get("status") == 200, answer
    assert '"approved":true' in answer["body"]["result"].replace(" ", ""), answer
    wait_for(browser, '#decided li[data-approval="call_browser"][data-state="approved"]')


def test_deny_on_the_api_updates_the_browser(browser, gateway):
    needs_session_routes(gateway)
    needs(gateway, "GET", "/api/v1/console/events", "live updates")
    sign_in(browser, gateway)
    go(browser, gateway, "approvals")
    status, body = gateway.api("POST", "/api/v1/approvals", {"agent_id": "echo", "tool": "email.send", "call_id": "call_api_deny",
                                                              "arguments": {"to": "everyone@example.com"}, "wait": False})
    assert status == 201, body
    wait_for(browser, 'article.approval[data-approval="call_api_deny"]', timeout=LIVE, message="the new approval (live)")
    status, body = gateway.api("POST", "/api/v1/approvals/call_api_deny/deny", {})
    assert status == 200 and body["approved"] is False
    wait_for(browser, '#decided li[data-approval="call_api_deny"][data-state="denied"]', timeout=LIVE, message="the denial (live)")
    assert not browser.execute_script("return document.body.classList.contains('offline')"), "the event stream is open"
    assert not browser.find_elements(By.CSS_SELECTOR, 'article.approval[data-approval="call_api_deny"]')


# MARK: Pairing


def test_pair_by_reading_the_qr_code_from_a_screenshot(browser, gateway, work):
    needs_session_routes(gateway)
    needs(gateway, "POST", "/api/v1/console/pairing", "pairing codes with a QR")
    sign_in(browser, gateway)
    go(browser, gateway, "pairing")
    wait_for(browser, "#pair-form")[0].find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    image = wait_for(browser, "#offer-qr")[0]
    eventually(lambda: browser.execute_script("return arguments[0].complete && arguments[0].naturalWidth > 0", image), message="the QR image")
    shown = browser.find_element(By.ID, "offer-code").text.strip()
    assert re.search(r"\d+ (s|min)", browser.find_element(By.ID, "offer-remaining").text)
    path = os.path.join(work, "qr.png")
    with open(path, "wb") as f:
        f.write(image.screenshot_as_png)
    decoded = subprocess.run(["zbarimg", "--raw", "-q", path], capture_output=True, text=True, timeout=30)
    assert decoded.returncode == 0, f"no QR code read from the screenshot: {decoded.stderr}"
    text = decoded.stdout.strip()
    query = parse_qs(urlparse(text).query)
    code = (query.get("code") or query.get("pair") or [text])[0]
    assert code == shown, (text, shown)
    status, paired = gateway.api("POST", "/api/v1/pairing/redeem", {"code": code, "name": "Phone from the QR"}, key=False)
    assert status == 200 and paired["paired"] is True, paired
    # The new key is listed as the owner's, with who minted it.
    browser.refresh()
    wait_for(browser, f'tr[data-key="{paired["key_id"]}"]', message="the new key in 'Your keys'")


# MARK: Who may see and do what


def test_a_viewer_sees_only_their_own_data_and_cannot_act(browser, gateway):
    needs_session_routes(gateway)
    needs(gateway, "GET", "/api/v1/console/deliveries", "the inbox")
    register_phones(gateway)
    status, owners = gateway.api("POST", "/api/v1/channels/mobile/test", {"to": "user:owner", "title": "The owner's private line", "body": "owner only"})
    assert status == 201
    status, offer = gateway.api("POST", "/api/v1/pairing/tokens", {"name": "Ben", "role": "viewer"})
    assert status in (200, 201), offer
    status, ben = gateway.api("POST", "/api/v1/pairing/redeem", {"code": offer["code"], "name": "Ben's phone"}, key=False)
    assert status == 200 and ben["role"] == "viewer", ben
    status, _ = gateway.api("POST", "/api/v1/mobile/devices", {"id": "ben-phone", "name": "Ben's phone", "push_token": "c3" * 32}, key=ben["token"])
    assert status in (200, 201)
    sign_in(browser, gateway, key=ben["token"])
    assert "read-only" in browser.find_element(By.ID, "who-text").text
    assert not browser.find_elements(By.CSS_SELECTOR, f'li.line[data-id="{owners["delivery_id"]}"]')
    for page in PAGES:
        go(browser, gateway, page)
        time.sleep(0.5)
        assert not browser.find_elements(By.CSS_SELECTOR, "button[data-action], #pair-form"), f"{page} offers a viewer an action"
        if page == "devices":
            cards = wait_for(browser, "article.device")
            assert [c.get_attribute("data-device") for c in cards] == ["ben-phone"]
    # Not through the page's own fetches either: another person's line is unknown, and acting is refused.
    assert page_fetch(browser, "GET", f"/api/v1/console/deliveries/{owners['delivery_id']}")["status"] == 404
    refused = page_fetch(browser, "POST", "/api/v1/agents/echo/run", {})
    assert refused["status"] == 403, refused
    assert page_fetch(browser, "POST", "/api/v1/console/devices/phone-1/test-push", {})["status"] in (403, 404)


def test_a_cookie_used_from_another_origin_cannot_act(browser, gateway):
    needs_session_routes(gateway)
    needs(gateway, "GET", "/api/v1/console/agents", "agents with their last runs")
    sign_in(browser, gateway)
    cookie = {"Cookie": "soulacy_session=" + browser.get_cookie("soulacy_session")["value"]}
    status, _, session = http("GET", gateway.base + "/api/v1/console/session", headers=cookie)
    assert status == 200
    csrf = session["csrf_token"]
    # With the token but from another origin, or with no token at all: refused.
    status, _, body = http("POST", gateway.base + "/api/v1/agents/victim/run", {}, dict(cookie, **{"X-CSRF-Token": csrf, "Origin": "http://evil.example"}))
    assert status == 403 and body["code"] == "csrf_failed", body
    status, _, body = http("POST", gateway.base + "/api/v1/agents/victim/run", {}, cookie)
    assert status == 403 and body["code"] == "csrf_failed", body
    status, _, body = http("POST", gateway.base + "/api/v1/agents/victim/run", {}, dict(cookie, **{"X-CSRF-Token": "not-the-token"}))
    assert status == 403, body
    # A page on another origin of the same site (another port: the browser sends the SameSite cookie) posts to the
    # gateway in the signed-in browser; nothing runs.
    evil = ThreadingHTTPServer(("127.0.0.1", 0), evil_page(gateway.base))
    threading.Thread(target=evil.serve_forever, daemon=True).start()
    try:
        browser.get(f"http://127.0.0.1:{evil.server_address[1]}/")
        eventually(lambda: browser.execute_script("return document.title") == "sent", message="the other origin's requests")
    finally:
        evil.shutdown()
    time.sleep(1)
    status, agents = gateway.api("GET", "/api/v1/console/agents")
    victim = next(a for a in agents["agents"] if a["id"] == "victim")
    assert victim["last_runs"] == [], victim
    # The same cookie from the gateway's own page, with its token, does act: the refusals above were the checks.
    browser.get(gateway.base + "/#/agents")
    wait_for(browser, "#agent-list")
    assert page_fetch(browser, "POST", "/api/v1/agents/echo/run", {})["status"] == 202


def evil_page(target):
    class EvilPage(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            page = f"""<!doctype html><title>evil</title><form id=f method=post action="{target}/api/v1/agents/victim/run"></form><script>
              Promise.allSettled([
                fetch("{target}/api/v1/agents/victim/run", {{method: "POST", credentials: "include", mode: "no-cors", body: "{{}}"}}),
                fetch("{target}/api/v1/agents/victim/run", {{method: "POST", credentials: "include", mode: "no-cors",
                      headers: {{"Content-Type": "text/plain"}}, body: "{{}}"}}),
              ]).then(() => {{ document.title = "sent"; }});
            </script>""".encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)
    return EvilPage


# MARK: Every page: accessibility, light and dark, desktop and phone


def test_every_page_passes_axe_light_and_dark_at_desktop_and_phone_width(browser, gateway):
    needs_session_routes(gateway)
    out = os.environ.get("SOULACY_CONSOLE_SCREENSHOTS")
    if out:
        os.makedirs(out, exist_ok=True)
    problems = []

    def check(name):
        for scheme in ["light", "dark"]:
            browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": scheme}]})
            for width in [1280, 375]:
                browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {"width": width, "height": 800 if width > 500 else 740,
                                                                               "deviceScaleFactor": 1, "mobile": width < 500})
                browser.execute_script("window.scrollTo(0, 0)")
                time.sleep(0.3)
                overflow = browser.execute_script("return document.documentElement.scrollWidth")
                if overflow > width:
                    problems.append(f"{name} {scheme} {width}: the page is {overflow} px wide")
                # Before axe, which scrolls each element it checks into view.
                if out:
                    browser.save_screenshot(os.path.join(out, f"{name}-{scheme}-{width}.png"))
                axe = Axe(browser)
                axe.inject()
                result = axe.run()
                for violation in result["violations"]:
                    if violation["impact"] in ("serious", "critical"):
                        problems.append(f"{name} {scheme} {width}: {violation['id']} ({violation['impact']}) at {[n['target'] for n in violation['nodes']][:3]}")
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})

    signed_out_page(browser, gateway)
    wait_for(browser, "#signin-key")
    check("signin")
    sign_in(browser, gateway)
    for page in PAGES:
        go(browser, gateway, page)
        time.sleep(1)
        if page == "inbox" and browser.find_elements(By.CSS_SELECTOR, "li.line button.line-head"):
            browser.find_element(By.CSS_SELECTOR, "li.line button.line-head").click()
            time.sleep(0.5)
        if page == "pairing" and browser.find_elements(By.CSS_SELECTOR, "#pair-form button[type=submit]"):
            browser.find_element(By.CSS_SELECTOR, "#pair-form button[type=submit]").click()
            wait_for(browser, "#offer-qr, #offer .error")
        check(page)
    assert not problems, "\n".join(problems)
    # No script error on any page (a failed request the page handled is the browser's log, not an error of ours).
    errors = [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE" and "Failed to load resource" not in e["message"]]
    assert not errors, errors


def test_the_console_is_usable_with_the_keyboard_alone(browser, gateway):
    needs_session_routes(gateway)
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    def press(*keys):
        ActionChains(browser).send_keys(*keys).perform()

    def focused(attribute="id"):
        return browser.switch_to.active_element.get_attribute(attribute)

    signed_out_page(browser, gateway)
    wait_for(browser, "#signin-code")
    # The code field has focus on arrival; Tab reaches the key field through the code form's button.
    assert focused() == "signin-code"
    press(Keys.TAB)
    assert browser.switch_to.active_element.tag_name == "button"
    press(Keys.TAB)
    assert focused() == "signin-key"
    press(gateway.key, Keys.ENTER)
    wait_for(browser, "#lines")
    # From the page's heading, Shift+Tab goes back up to the navigation; Enter on a link changes the page and
    # focuses its heading.
    eventually(lambda: focused() == "page-title", message="focus on the Inbox heading")
    for _ in range(20):
        if focused("data-page") == "devices":
            break
        press(Keys.SHIFT, Keys.TAB)
    assert focused("data-page") == "devices"
    press(Keys.ENTER)
    eventually(lambda: focused() == "page-title" and "Devices" in browser.switch_to.active_element.text, message="focus on the Devices heading")
    # The skip link is the page's first stop and leads to the main content.
    first = browser.execute_script("return document.querySelector('a[href], button, input, select, [tabindex]:not([tabindex=\"-1\"])')")
    assert first.get_attribute("textContent") == "Skip to content" and first.get_attribute("href").endswith("#main")
