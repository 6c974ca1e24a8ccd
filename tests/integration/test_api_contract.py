"""Every REST response matches the OpenAPI document; no input makes the API answer 500."""

from __future__ import annotations

import json
import re
import urllib.request

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import kafka_io

pytestmark = pytest.mark.integration


class Contract:
    def __init__(self, doc: dict) -> None:
        self.doc = doc
        self.routes = [
            (re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", path) + "$"), path) for path in doc["paths"]
        ]

    def schema_for(self, method: str, path: str, status: int) -> dict | None:
        for pattern, template in self.routes:
            if pattern.match(path.split("?")[0]):
                op = self.doc["paths"][template].get(method.lower())
                if op is None:
                    return None
                response = op["responses"].get(str(status))
                assert response is not None, f"{method} {template} answered {status}, not in the document"
                return response["content"]["application/json"]["schema"]
        return None

    def check(self, method: str, path: str, status: int, body: object) -> None:
        schema = self.schema_for(method, path, status)
        if schema is None or status >= 400:
            schema = {"$ref": "#/components/schemas/Error"} if status >= 400 else None
        if schema is None:
            return
        resolver_doc = {**schema, "components": self.doc["components"]}
        jsonschema.validate(body, resolver_doc, cls=jsonschema.Draft202012Validator)


@pytest.fixture
def contract_pipeline(pipeline, services):
    pipeline.start_controller()
    pipeline.start_worker("w1")
    # The calls below drain and whitelist w1: it must have registered first (a start takes a second or two)
    kafka_io.wait_for(lambda: [r["worker"] for r in pipeline.api("GET", "/instances")[1].get("instances", [])]
                      == ["w1"], 30, "worker w1 registered")
    status, doc = pipeline.api("GET", "/openapi.json")
    assert status == 200
    jsonschema.Draft202012Validator.check_schema({"$defs": doc["components"]["schemas"]})
    return pipeline, Contract(doc)


def test_every_endpoint_answers_per_the_document(contract_pipeline, services):
    pipeline, contract = contract_pipeline
    topic = f"{pipeline.name}-api"
    kafka_io.create_topic(services["source"], topic, 3)
    kafka_io.produce(services["source"], topic, 30, 3)
    calls = [
        ("GET", "/health", None, 200),
        ("GET", "/topics", None, 200),
        ("POST", "/topics", {"topic": topic, "numPartitions": "3"}, 201),
        ("POST", f"/topics/{topic}", None, 409),
        ("GET", f"/topics/{topic}", None, 200),
        ("PUT", "/topics", {"topic": topic, "numPartitions": 3}, 200),
        ("PUT", "/topics", {"topic": topic, "numPartitions": 9}, 400),
        ("POST", f"/topics/{topic}/pause", None, 200),
        ("POST", f"/topics/{topic}/resume", None, 200),
        ("POST", f"/topics/{topic}/explode", None, 404),
        ("GET", "/instances", None, 200),
        ("POST", "/instances", None, 202),
        ("DELETE", "/instances/nobody", None, 404),
        ("POST", "/instances/nobody", None, 404),
        ("DELETE", "/instances/w1", None, 200),
        ("DELETE", "/instances/w1", None, 409),
        ("POST", "/instances/w1", None, 200),
        ("GET", "/validation", None, 200),
        ("GET", "/offset", None, 200),
        ("GET", f"/offset/{topic}/1", None, 200),
        ("GET", f"/offset/{topic}/7", None, 404),
        ("GET", "/offset/unknown-topic/0", None, 404),
        ("GET", "/noprogress", None, 200),
        ("POST", "/blacklist", {"topic": topic, "partition": 2, "op": "blacklist"}, 200),
        ("GET", "/blacklist", None, 200),
        ("POST", "/blacklist", {"topic": topic, "partition": 2, "op": "whitelist"}, 200),
        ("POST", "/blacklist", {"topic": topic, "op": "nuke"}, 400),
        ("GET", "/admin/autobalancing_status", None, 200),
        ("POST", "/admin/disable_autobalancing", None, 200),
        ("POST", "/admin/enable_autobalancing", None, 200),
        ("GET", "/admin/workloadinfo", None, 200),
        ("POST", "/admin/rate_limit", {"records_per_s": 5000, "bytes_per_s": 0}, 200),
        ("GET", "/admin/rate_limit", None, 200),
        ("POST", "/admin/rate_limit", {"records_per_s": -1}, 400),
        ("GET", "/admin/self_destruct", None, 404),
        ("GET", "/groups", None, 200),
        ("GET", "/groups/nobody-at-all/translation", None, 404),
        ("POST", "/groups/nobody-at-all/sync", {"force": 1}, 400),
        ("GET", "/clusters", None, 200),
        ("GET", "/routes", None, 200),
        ("GET", "/routes/default", None, 200),
        ("GET", "/routes/default/topics", None, 200),
        ("GET", f"/routes/default/topics/{topic}", None, 200),
        ("GET", f"/topics/{topic}?src=src&dst=dst", None, 200),
        ("GET", "/routes/default/validation", None, 200),
        ("GET", "/routes/default/groups", None, 200),
        ("GET", "/routes/default/verification", None, 404),  # no controller.verification_dir here
        ("GET", f"/routes/default/offset/{topic}/1", None, 200),
        ("GET", f"/topics/{topic}?route=default", None, 200),
        ("GET", "/routes/nope/topics", None, 404),
        ("POST", "/routes", {"id": "x", "source": "src", "destination": "nowhere"}, 400),
        ("POST", "/routes", {"id": "x", "source": "src", "destination": "dst"}, 400),
        ("PATCH", "/routes/default", {"forward": "origin"}, 409),
        ("DELETE", "/routes/default", None, 409),
        ("DELETE", f"/topics/{topic}", None, 200),
        ("PATCH", "/topics", None, 405),
        # A second route: the bare paths now need one named
        ("POST", "/routes", {"id": "back", "source": "dst", "destination": "src", "topic_naming": "prefix"}, 201),
        ("GET", "/topics", None, 400),
        ("GET", "/routes/back", None, 200),
        ("PATCH", "/routes/back", {"source": "src"}, 400),
        ("PATCH", "/routes/back", {"forward": "origin", "workers": {"min": 0}}, 200),
        ("POST", "/routes/back/pause", None, 200),
        ("POST", "/routes/back/resume", None, 200),
        ("GET", "/routes/back/instances", None, 200),
        ("GET", "/routes/back/groups", None, 200),  # translated between dst and src, with its own reader
        # A route no worker serves is waiting_for_workers: every endpoint of it answers, none with a 500
        ("GET", "/routes/back", None, 200),
        ("GET", "/routes/back/validation", None, 200),
        ("GET", "/routes/back/noprogress", None, 200),
        ("GET", "/routes/back/offset", None, 200),
        ("GET", "/routes/back/admin/workloadinfo", None, 200),
        ("GET", "/routes/back/blacklist", None, 200),
        ("GET", "/routes/back/verification", None, 404),
        ("GET", "/groups", None, 400),
        ("DELETE", "/routes/back", None, 200),
        ("GET", "/routes/back", None, 404),
    ]
    for method, path, body, expected in calls:
        status, payload = pipeline.api(method, path, body)
        assert status == expected, (method, path, body, payload)
        contract.check(method, path, status, payload)
    # The rate limit set through the API is what every worker reads
    status, limit = pipeline.api("GET", "/admin/rate_limit")
    assert limit == {"records_per_s": 5000, "bytes_per_s": 0}
    # And /metrics is Prometheus text with the controller's metrics
    with urllib.request.urlopen(f"{pipeline.url}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    assert 'ureplicator_controller_leader{route="default"} 1.0' in text
    assert "ureplicator_controller_rebalances_total" in text


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=8,
)
bodies = st.one_of(
    json_values.map(json.dumps),
    st.fixed_dictionaries({"topic": st.text(max_size=300) | st.integers(), "numPartitions": json_values}).map(
        json.dumps
    ),
    st.binary(max_size=64).map(lambda b: b.decode("latin-1")),
)
paths = st.sampled_from(
    ["/topics", "/topics/{x}", "/topics/{x}/pause", "/topics/{x}/{x}", "/instances/{x}", "/offset/{x}/{x}",
     "/blacklist", "/admin/{x}", "/instances", "/validation", "/noprogress", "/groups/{x}/translation",
     "/groups/{x}/sync", "/clusters", "/routes", "/routes/{x}", "/routes/{x}/topics", "/routes/{x}/pause"]
)
segments = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="/?#%"), min_size=1, max_size=30)


def test_fuzzed_requests_never_get_a_500(contract_pipeline):
    pipeline, contract = contract_pipeline

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
    @given(method=st.sampled_from(["GET", "POST", "PUT", "DELETE"]), path=paths, segment=segments, body=bodies)
    def fuzz(method, path, segment, body):
        url_path = path.replace("{x}", urllib.request.quote(segment, safe=""))
        request = urllib.request.Request(f"{pipeline.url}{url_path}", data=body.encode("utf-8", "surrogatepass"),
                                         method=method, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=15) as resp:
                status, payload = resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            status, payload = exc.code, json.loads(exc.read())
        assert status < 500 or status == 503, (method, url_path, body, payload)
        if status >= 400:
            contract.check(method, url_path, status, payload)

    fuzz()
