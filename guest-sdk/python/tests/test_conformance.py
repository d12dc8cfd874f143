"""The state conformance script (``tests/conformance/state.txt``) through the Python SDK's
harness and the Python state probe (``tests/guests/python/state_probe.py``); the end-to-end
tests run the same probe through the host (``tests/e2e/state.rs``)."""

import importlib.util
import pathlib

import pytest

from weir.testing import Harness

REPO = pathlib.Path(__file__).resolve().parents[3]


def load_probe():
    path = REPO / "tests" / "guests" / "python" / "state_probe.py"
    spec = importlib.util.spec_from_file_location("state_probe", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.StateProbe


def parse(text):
    """The scripts (lists of (key, command, expected)) and the lines checked at the end."""
    scripts, at_end, script = [], [], []
    for line in text.splitlines():
        if not line.strip():
            if script:
                scripts.append(script)
                script = []
            continue
        if line.startswith("#"):
            continue
        key, command, expect = line.split("\t", 2)
        if command == "@end":
            at_end.append((key, expect))
        else:
            script.append((key, command, expect))
    if script:
        scripts.append(script)
    return scripts, at_end


@pytest.mark.parametrize("batch", [1, 7, 64, 100_000])
def test_the_conformance_script_gives_exact_results(batch):
    scripts, at_end = parse((REPO / "tests" / "conformance" / "state.txt").read_text())
    steps = []
    for round in range(max(len(s) for s in scripts)):
        steps.extend(s[round] for s in scripts if round < len(s))
    h = Harness(load_probe())
    for start in range(0, len(steps), batch):
        chunk = steps[start : start + batch]
        out = h.process([(key, command) for key, command, _ in chunk])
        got = [(o.key_str, o.value_str) for o in out]
        assert got == [(key, expect) for key, _, expect in chunk], f"steps from {start}"
        if start % (3 * batch) == 0:
            h.restart()
    fired = h.fire_event_timers_up_to(2**62)
    assert [(o.key_str, o.value_str) for o in fired] == at_end
