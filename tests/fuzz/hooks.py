"""Schemathesis hooks for batchpool's schema-driven fuzzer (tests/fuzz.rs runs it).

* Every request is authenticated as a client of that route would: the Batch routes, /billing and
  the web service management with Azure Batch Shared Key, signed over the request exactly as it
  goes on the wire (src/api/auth.rs, the wire reference's section 3); a web service's swagger.json
  and BES jobs with `Bearer <service key>`; the Pool Service with `Bearer <pool service key>`;
  the operator's routes with `Bearer <operator token>`.
  A fuzzer that only ever got 401/403 would test the authentication layer and nothing behind it.
* Path ids are half random, half the ids of objects the test made beforehand, so requests reach
  real pools, nodes, jobs, tasks, files, services and BES jobs. A DELETE gets the ids of objects
  made to be deleted, so the objects the rest of the run needs stay.
* Every response's status, and every request that got no response, is appended to
  $BATCHPOOL_FUZZ_LOG (one JSON object a line), so the test counts them itself instead of trusting
  a report format.

Environment (set by tests/fuzz.rs): BATCHPOOL_FUZZ_ACCOUNT, BATCHPOOL_FUZZ_KEY (base64),
BATCHPOOL_FUZZ_SERVICE_KEYS (JSON), BATCHPOOL_FUZZ_POOL_SERVICE_KEY, BATCHPOOL_FUZZ_OPERATOR_TOKEN,
BATCHPOOL_FUZZ_IDS (JSON, below),
BATCHPOOL_FUZZ_LOG, BATCHPOOL_FUZZ_SERVER_PID.
"""

import base64
import email.utils
import hashlib
import hmac
import json
import os
import re
import urllib.parse

import requests
import schemathesis
from hypothesis import strategies as st

ACCOUNT = os.environ["BATCHPOOL_FUZZ_ACCOUNT"]
KEY = base64.b64decode(os.environ["BATCHPOOL_FUZZ_KEY"])
# {"<service id>": "<its primary key>", ...}: the first is used for services the test did not make.
SERVICE_KEYS = json.loads(os.environ["BATCHPOOL_FUZZ_SERVICE_KEYS"])
POOL_SERVICE_KEY = os.environ["BATCHPOOL_FUZZ_POOL_SERVICE_KEY"]
OPERATOR_TOKEN = os.environ["BATCHPOOL_FUZZ_OPERATOR_TOKEN"]
LOG = os.environ["BATCHPOOL_FUZZ_LOG"]
# The server's resident memory is logged after every response, to tell which requests grow it.
SERVER_PID = os.environ["BATCHPOOL_FUZZ_SERVER_PID"]
# {"batch": {...}, "batch_delete": {...}, "ml": {...}, "ml_delete": {...}, "poolservice": {...},
#  "poolservice_delete": {...}, "task_file": "...", "node_file": "..."}: path parameter -> id.
IDS = json.loads(os.environ["BATCHPOOL_FUZZ_IDS"])

SIGNED_HEADERS = [
    "content-encoding",
    "content-language",
    "content-length",
    "content-md5",
    "content-type",
    "date",
    "if-modified-since",
    "if-match",
    "if-none-match",
    "if-unmodified-since",
    "range",
]

# A service's swagger.json and its BES jobs take the service key, not Shared Key.
BES_PATH = re.compile(r"^/(?:subscriptions|workspaces)/[^/]+/services/([^/]+)/(?:jobs|swagger\.json)(?:/|$)")


def _as_server_reads(value):
    """The header value as the server reads it: `HeaderValue::to_str` gives up on anything but
    visible ASCII and tab (and the server then signs an empty string); hyper drops trailing
    whitespace."""
    if isinstance(value, bytes):
        raw = value
    else:
        try:
            raw = str(value).encode("latin-1")
        except UnicodeEncodeError:
            return ""
    raw = raw.rstrip(b" \t")
    if any(not (32 <= b < 127 or b == 9) for b in raw):
        return ""
    return raw.decode("ascii")


def string_to_sign(method, url, headers):
    """src/api/auth.rs `string_to_sign`, over a prepared request."""
    lower = {}
    for name, value in headers.items():
        lower.setdefault(name.lower(), _as_server_reads(value))
    parts = [method.upper()]
    for name in SIGNED_HEADERS:
        value = lower.get(name, "")
        if name == "content-length" and not value and method.upper() not in ("GET", "HEAD"):
            value = "0"
        parts.append(value)
    sts = "\n".join(parts) + "\n"
    for name, value in sorted((n, v) for n, v in lower.items() if "ocp-" in n and v):
        sts += f"{name}:{value}\n"
    split = urllib.parse.urlsplit(url)
    sts += f"/{ACCOUNT}{split.path or '/'}"
    first = {}
    for name, value in urllib.parse.parse_qsl(split.query, keep_blank_values=True, errors="replace"):
        if value and name not in first:
            first[name] = value
    for name in sorted(first):
        sts += f"\n{name}:{first[name]}"
    return sts


class RouteAuth(requests.auth.AuthBase):
    """Applied by requests to the prepared request, after its body and Content-Length are final."""

    def __call__(self, r):
        path = urllib.parse.urlsplit(r.url).path
        if path.startswith("/poolservice/"):
            r.headers["Authorization"] = f"Bearer {POOL_SERVICE_KEY}"
        elif path.startswith("/batchpool/operator/"):
            r.headers["Authorization"] = f"Bearer {OPERATOR_TOKEN}"
        elif bes := BES_PATH.match(path):
            service = urllib.parse.unquote(bes.group(1))
            key = SERVICE_KEYS.get(service, next(iter(SERVICE_KEYS.values())))
            r.headers["Authorization"] = f"Bearer {key}"
        else:
            r.headers["ocp-date"] = email.utils.formatdate(usegmt=True)
            sts = string_to_sign(r.method, r.url, r.headers)
            sig = base64.b64encode(hmac.new(KEY, sts.encode("utf-8"), hashlib.sha256).digest()).decode()
            r.headers["Authorization"] = f"SharedKey {ACCOUNT}:{sig}"
        return r


def _real_ids(operation):
    path, method = operation.path, operation.method.upper()
    if path.startswith("/poolservice/"):
        group = "poolservice"
    elif path.startswith(("/subscriptions/", "/workspaces/")):
        group = "ml"
    else:
        group = "batch"
    ids = dict(IDS.get(f"{group}_delete" if method == "DELETE" else group, {}))
    if path.endswith("{filePath}"):
        ids["filePath"] = IDS["node_file"] if "/nodes/" in path else IDS["task_file"]
    return ids


@schemathesis.hook
def flatmap_path_parameters(context, path_parameters):
    if not path_parameters:
        return st.just(path_parameters)
    real = _real_ids(context.operation)
    known = {name: real[name] for name in path_parameters if name in real}
    if not known:
        return st.just(path_parameters)
    return st.sampled_from([path_parameters, {**path_parameters, **known}])


@schemathesis.hook
def before_call(context, case, kwargs):
    kwargs["auth"] = RouteAuth()


def _log(entry):
    with open(LOG, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")


@schemathesis.hook
def after_call(context, case, response):
    _follow_regenerated_key(response)
    entry = _describe(case, response.request)
    entry["status"] = response.status_code
    if response.status_code >= 500:
        entry["response"] = response.content[:300].decode("utf-8", "replace")
    _log(entry)


@schemathesis.hook
def after_network_error(context, case, request):
    entry = _describe(case, request)
    entry["status"] = None
    _log(entry)


def _follow_regenerated_key(response):
    """The fuzzer regenerates the services' keys too; the BES requests after it use the new one."""
    path = urllib.parse.urlsplit(response.request.url).path
    regenerated = re.match(r"^/(?:subscriptions|workspaces)/[^/]+/services/([^/]+)/regeneratekey$", path)
    if regenerated and response.status_code == 200:
        service = urllib.parse.unquote(regenerated.group(1))
        key = json.loads(response.content).get("PrimaryKey")
        if key and service in SERVICE_KEYS:
            SERVICE_KEYS[service] = key


def _server_rss_kb():
    try:
        with open(f"/proc/{SERVER_PID}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _describe(case, request):
    body = request.body or b""
    if isinstance(body, str):
        body = body.encode("utf-8", "replace")
    return {
        "operation": f"{case.operation.method.upper()} {case.operation.path}",
        "method": request.method,
        "url": request.url,
        "body": body[:500].decode("utf-8", "replace"),
        "rss_kb": _server_rss_kb(),
    }
