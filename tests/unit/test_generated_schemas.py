"""The checked-in documents generated from the pydantic models match them, and the check notices a stale one."""

from __future__ import annotations

import json
import re
import shutil

import jsonschema
import pytest

from devtools import schemas
from tests.unit.test_api_errors import api  # noqa: F401 - the fixture
from ureplicator.controller import openapi


def test_every_generated_document_matches_its_models():
    assert schemas.stale() == []


def test_the_check_names_a_document_edited_by_hand(tmp_path, monkeypatch, capsys):
    for name in schemas.GENERATED:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(schemas.ROOT / name, tmp_path / name)
    edited = next(iter(schemas.GENERATED))
    (tmp_path / edited).write_text((tmp_path / edited).read_text().replace('"integer"', '"string"', 1))
    monkeypatch.setattr(schemas, "ROOT", tmp_path)

    assert schemas.main(["--check"]) == 1
    assert edited in capsys.readouterr().err


def test_the_openapi_document_is_valid_and_every_reference_resolves():
    doc = openapi.document()
    jsonschema.Draft202012Validator.check_schema({"$defs": doc["components"]["schemas"]})
    refs = set(re.findall(r"#/components/schemas/(\w+)", json.dumps(doc)))
    assert refs <= set(doc["components"]["schemas"])
    # The operator's view is validated on its own (tests/integration/test_operator_status.py): no references.
    assert "$ref" not in json.dumps(doc["components"]["schemas"]["Status"])


def _report() -> dict:
    from ureplicator.reports.model import Report

    cluster = {"alias": "a", "bootstrap_servers": "a:9092"}
    return Report("20260101T000000Z-abcdef", "2026-01-01T00:00:00Z", "2026-01-01T00:00:01Z", 1.0, "p", "g",
                  {"source": cluster, "destination": {**cluster, "alias": "b"}}, {"master": "local", "version": "3"},
                  100).to_dict()


def test_a_report_that_strays_from_its_model_fails_where_it_is_made_and_the_schema_agrees():
    from pydantic import ValidationError

    from ureplicator.reports.document import json_schema, validated

    doc = _report()
    jsonschema.validate(doc, json_schema())
    for stray in ({**doc, "surprise": 1}, {**doc, "bucket_size": 0}, {**doc, "started_at": "yesterday"}):
        with pytest.raises(ValidationError):
            validated(stray)
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(stray, json_schema())


def test_the_api_s_answers_match_the_generated_document(api):  # noqa: F811 - the imported fixture
    """The unit API (fakes) answers as the generated schemas say, without a running stack."""
    from tests.integration.test_api_contract import Contract

    contract = Contract(openapi.document())
    calls = [
        ("GET", "/topics", None), ("GET", "/topics/t", None), ("POST", "/topics", {"topic": "src-only"}),
        ("PUT", "/topics", {"topic": "t", "numPartitions": "2"}), ("POST", "/topics/t/pause", None),
        ("GET", "/instances", None), ("POST", "/instances", None), ("GET", "/validation", None),
        ("GET", "/noprogress", None), ("GET", "/blacklist", None),
        ("POST", "/blacklist", {"op": "blacklist", "topic": "t", "partition": 1}),
        ("GET", "/admin/rate_limit", None), ("POST", "/admin/rate_limit", {"records_per_s": 5}),
        ("GET", "/admin/workloadinfo", None), ("GET", "/admin/autobalancing_status", None),
        ("POST", "/topics", {"topic": "bad name"}), ("POST", "/admin/rate_limit", {"colour": 1}),
        ("GET", "/health", None), ("GET", "/healthz", None), ("DELETE", "/topics/t", None),
    ]
    for method, path, body in calls:
        status, answer = api.call(method, path, body)
        contract.check(method, path, status, answer)


def test_the_route_bodies_in_the_document_are_the_config_file_s_routes():
    """POST/PATCH /routes are checked by common.config's route parser; the models the document comes from must agree."""
    from dataclasses import MISSING, fields

    from ureplicator.common.config import RouteConfig, RouteWorkers
    from ureplicator.controller.schemas import RouteChange, RouteRequest
    from ureplicator.controller.schemas import RouteWorkers as RouteWorkersBody

    def defaults(dataclass_type: type) -> dict[str, object]:
        return {f.name: (f.default if f.default is not MISSING else
                         f.default_factory() if f.default_factory is not MISSING else None)  # type: ignore[misc]
                for f in fields(dataclass_type)}

    def model_defaults(model: type) -> dict[str, object]:
        return {name: (None if info.is_required() else info.get_default(call_default_factory=True))
                for name, info in model.model_fields.items()}

    route = defaults(RouteConfig)
    route["workers"] = defaults(RouteWorkers)
    body = model_defaults(RouteRequest)
    body["workers"] = model_defaults(RouteWorkersBody)
    assert body == route
    assert set(RouteChange.model_fields) == set(route) - {"id", "source", "destination"}
