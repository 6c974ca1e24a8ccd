"""The lock files: the tested set that every install (make, CI, images) uses, in agreement with setup.cfg."""

from __future__ import annotations

import re
import shutil
import sys

import pytest

from devtools import pylock

REPO = pylock.ROOT


def test_the_lock_pins_the_tested_set_for_every_supported_python_in_agreement_with_setup_cfg():
    assert pylock.check() == []
    for python in pylock.PYTHONS:
        pinned = pylock.pins(REPO / "requirements.lock", python)
        # the application's whole stack is pinned, the binding the C loop proves itself on included
        for name in ("confluent-kafka", "kazoo", "flask", "waitress", "pydantic", "structlog", "tenacity",
                     "prometheus-client", "pyspark", "pip", "setuptools"):
            assert name in pinned, f"requirements.lock does not pin {name} for Python {python}"
    # where a package needs another release on one Python, each pin holds behind its own marker
    assert "tomli" in pylock.pins(REPO / "requirements.lock", "3.10")
    assert "tomli" not in pylock.pins(REPO / "requirements.lock", "3.11")


def test_this_interpreter_installs_from_the_lock_and_an_unsupported_one_is_told_which_are_tested():
    assert pylock.lock_for() == REPO / "requirements.lock"
    assert f"{sys.version_info[0]}.{sys.version_info[1]}" in pylock.PYTHONS
    with pytest.raises(pylock.LockError, match=r"no tested set for Python 3\.9: requirements.lock is resolved for 3\."):
        pylock.lock_for((3, 9))


def test_the_check_finds_a_pin_outside_setup_cfgs_range_a_missing_pin_and_a_pin_without_hashes(tmp_path,
                                                                                             monkeypatch):
    shutil.copytree(REPO / "lock", tmp_path / "lock")
    lock = tmp_path / "requirements.lock"
    monkeypatch.setattr(pylock, "LOCK_DIR", tmp_path / "lock")
    monkeypatch.setattr(pylock, "LOCK", lock)
    text = (REPO / "requirements.lock").read_text()
    text = re.sub(r"^confluent-kafka==\S+", "confluent-kafka==3.0.0", text, flags=re.MULTILINE)
    text = re.sub(r"^kazoo==\S+ \\\n(    --hash=\S+( \\)?\n)+", "kazoo==2.11.0\n", text, flags=re.MULTILINE)
    text = re.sub(r"^flask==.*?(?=^\S)", "", text, flags=re.MULTILINE | re.DOTALL)
    lock.write_text(text)
    problems = pylock.check()
    assert "requirements.lock (Python 3.11): confluent-kafka==3.0.0 is outside setup.cfg's <3,>=2.6" in problems
    assert "requirements.lock (Python 3.10): flask (setup.cfg) is not pinned" in problems
    assert any("every pin must carry its hashes" in p for p in problems)
    # and the images' subsets must pin what requirements.lock pins for their Python
    assert any(p.startswith("image-runtime.txt: confluent-kafka==") for p in problems)


def test_make_install_and_the_images_install_only_from_the_lock():
    makefile = (REPO / "Makefile").read_text()
    venv = makefile[makefile.index("\nvenv:"):makefile.index("\nlock:")]
    assert "--require-hashes --no-deps -r $(LOCK)" in venv
    assert "--no-deps --no-build-isolation" in venv  # the package itself resolves nothing
    assert "LOCK := requirements.lock" in makefile
    assert "$(LOCK)" in venv.split("sum=")[1].split("\n")[0], "a new lock reinstalls the venv"
    dockerfile = (REPO / "Dockerfile").read_text()
    assert not re.search(r"pip install (?!.*(--require-hashes|--no-deps))", dockerfile)
