"""The checked-in documents generated from the pydantic models match them, and the check notices a stale one."""

from __future__ import annotations

import json
import re
import shutil

import jsonschema

from controller import openapi
from devtools import schemas


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
