"""The soak's fault script: one seed, one schedule (the replay the soak prints at its start)."""

from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace

from bench import soak


def drawn(seed: int, monkeypatch, faults: int = 15) -> list[str]:
    """The names of the first ``faults`` steps the soak draws for ``seed``, with its pauses drawn in between."""
    monkeypatch.setattr(soak.stack, "status", lambda root: {"destination": {"pid": 1}})
    proc = SimpleNamespace(pid=1)
    pipeline = SimpleNamespace(workers=dict.fromkeys(soak.WORKERS, proc), controllers={"c1": proc, "c2": proc},
                               settled=lambda topics: True)
    runner = SimpleNamespace(pipeline=pipeline, root=Path("stack"), topics={}, leader=lambda: "c1")
    rng = random.Random(seed)
    steps = soak.schedule(runner, rng, minutes=60)
    names = []
    for _ in range(faults):
        names.append(next(steps).name)
        rng.uniform(2, 10)  # the runner's pause after each step
    return names


def test_the_same_seed_draws_the_same_faults_and_another_seed_others(monkeypatch):
    assert drawn(1234, monkeypatch) == drawn(1234, monkeypatch)
    assert drawn(1234, monkeypatch) != drawn(4321, monkeypatch)


def test_every_drawn_fault_recovers_once_the_assignment_settled(monkeypatch):
    monkeypatch.setattr(soak.stack, "status", lambda root: {"destination": {"pid": 1}})
    proc = SimpleNamespace(pid=1)
    settled: list[dict] = []
    pipeline = SimpleNamespace(workers=dict.fromkeys(soak.WORKERS, proc), controllers={"c1": proc},
                               settled=lambda topics: settled.append(topics) or True)
    runner = SimpleNamespace(pipeline=pipeline, root=Path("stack"), topics={"t": 16}, leader=lambda: "c1")
    step = next(soak.schedule(runner, random.Random(7), minutes=1))
    assert step.recovered is not None and step.recovered() and settled == [{"t": 16}]


def test_a_process_that_exited_on_its_own_is_started_again_and_fails_the_verdict():
    """A worker that crashed between steps (2026-11-29: nothing noticed for three steps) is named and restarted."""
    from bench import scenario

    class Proc:
        def __init__(self, code):
            self.popen = SimpleNamespace(returncode=code)
            self.log = Path("w2.log")

        def alive(self):
            return self.popen.returncode is None

    started = []
    pipeline = SimpleNamespace(workers={"w1": Proc(None), "w2": Proc(1)}, controllers={"c1": Proc(None)},
                               start_worker=lambda label: started.append(label) or Proc(None),
                               start_controller=lambda label: started.append(label))
    runner = SimpleNamespace(pipeline=pipeline, crashed=[])
    scenario.Runner.check_processes(runner, "step 68")
    assert started == ["w2"]
    assert runner.crashed == [{"process": "w2", "role": "worker", "exit_status": 1, "before": "step 68"}]
    out = {"comparison": {"lost": 0, "reordered": 0, "duplicated": 0}, "acknowledged": {"missing_on_destination": 0},
           "verifier": {"exit_status": 0}, "crashed": runner.crashed}
    status, text = scenario.verdict(out)
    assert status == 1 and "worker w2 (status 1) before step 68" in text
    assert soak.judge({**out, "steps": []})[0] == 1
    assert scenario.verdict({**out, "crashed": []}) == (0, "OK")
