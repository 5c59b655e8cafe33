"""Drive a real headless Chromium (Debian `chromium`) over the DevTools protocol, for page tests.

Used by tests/test_dashboard.py and tools/dashboard_screenshot.py: load a URL, wait for the page to say
it is ready, collect every console error, uncaught exception and failed request, read the DOM with
JavaScript, take a full-page screenshot. Needs `websocket-client` (pip) and `chromium` (apt).
"""
from __future__ import annotations

import base64
import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-default-apps",
         "--hide-scrollbars", "--window-size=1280,900"]
OFFLINE_FLAGS = ["--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND"]


def chromium_binary() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Chromium:
    """One headless browser with one page. Use as a context manager."""

    def __init__(self, user_data_dir: Path, *, offline: bool = False, timeout: float = 30.0):
        import websocket  # websocket-client

        binary = chromium_binary()
        if binary is None:
            raise RuntimeError("chromium is not installed (apt-get install chromium)")
        self.user_data_dir = Path(user_data_dir)
        self.user_data_dir.mkdir(parents=True, exist_ok=True)
        self.log = (self.user_data_dir / "chromium.log").open("wb")
        cmd = [binary, *FLAGS, *(OFFLINE_FLAGS if offline else []), f"--user-data-dir={self.user_data_dir}",
               "--remote-debugging-port=0", "about:blank"]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.events: list[dict] = []
        self._id = 0
        try:
            port = self._wait_port(timeout)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=timeout) as r:
                pages = [t for t in json.load(r) if t.get("type") == "page"]
            self.ws = websocket.create_connection(pages[0]["webSocketDebuggerUrl"], timeout=timeout,
                                                  suppress_origin=True)
            for domain in ("Runtime", "Log", "Page", "Network"):
                self.call(f"{domain}.enable")
        except BaseException:
            self.close()
            raise

    def _wait_port(self, timeout: float) -> int:
        marker = self.user_data_dir / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode}; see {self.log.name}")
            if marker.is_file() and marker.read_text().strip():
                return int(marker.read_text().split()[0])
            time.sleep(0.05)
        raise TimeoutError(f"chromium did not open its DevTools port in {timeout} s")

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        ws = getattr(self, "ws", None)
        if ws is not None:
            ws.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def call(self, method: str, **params) -> dict:
        """Send one command and wait for its answer; events that arrive meanwhile are kept."""
        self._id += 1
        msg_id = self._id
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)

    def evaluate(self, expression: str):
        res = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in res:
            raise RuntimeError(f"{expression}: {res['exceptionDetails']}")
        return res["result"].get("value")

    def load(self, url: str, *, ready: str = "document.body && document.body.dataset.ready",
             timeout: float = 30.0):
        """Navigate and poll `ready` until it is truthy; returns its value."""
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.evaluate(f"document.readyState === 'complete' && ({ready})")
            if value:
                return value
            time.sleep(0.1)
        raise TimeoutError(f"{url}: not ready after {timeout} s")

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions, error log entries (CSP, failed loads) and failed requests."""
        out = []
        for e in self.events:
            m, p = e["method"], e.get("params", {})
            if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append("console: " + " ".join(str(a.get("value", a.get("description"))) for a in p["args"]))
            elif m == "Runtime.exceptionThrown":
                d = p["exceptionDetails"]
                out.append("exception: " + d.get("exception", {}).get("description", d.get("text", "")))
            elif m == "Log.entryAdded" and p["entry"]["level"] == "error":
                out.append(f"log: {p['entry']['text']} {p['entry'].get('url', '')}")
            elif m == "Network.loadingFailed":
                out.append(f"network: {p.get('errorText')} {p.get('blockedReason', '')}")
        return out

    def requested_urls(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.events if e["method"] == "Network.requestWillBeSent"]

    def screenshot(self, path: Path, *, width: int = 1280) -> Path:
        """A full-page PNG."""
        metrics = self.call("Page.getLayoutMetrics")
        height = int(metrics["cssContentSize"]["height"]) + 1
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
        shot = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path = Path(path)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path
