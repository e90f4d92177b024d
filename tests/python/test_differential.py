"""The differential corpus (tests/differential) as one pytest test per scenario.

Each scenario runs on a fresh memcached and a fresh server under test and
the normalised replies must match; see tests/differential/README.md.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from mcserver import REPO_ROOT, server_command_from_env

_RUN_PY = REPO_ROOT / "tests" / "differential" / "run.py"


def _load_runner():
    # run.py is a script, not a package module: load it by path.
    spec = importlib.util.spec_from_file_location("differential_run", _RUN_PY)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


runner = _load_runner()
SCENARIOS = runner.load_scenarios()
KNOWN = runner.load_known_differences()


def test_corpus_is_not_empty():
    assert len(SCENARIOS) >= 50, f"only {len(SCENARIOS)} scenarios in {runner.CORPUS_DIR}"


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_scenario_matches_memcached(scenario, memcached_command):
    if scenario.name in KNOWN:
        pytest.skip(f"known difference: {KNOWN[scenario.name]}")
    outcome = runner.run_scenario(scenario, server_command_from_env(), memcached_command)
    if outcome.status == "error":
        pytest.fail(outcome.detail, pytrace=False)
    assert outcome.status == "pass", f"{Path(scenario.path).name} differs from memcached:\n{outcome.detail}"


def test_runner_detects_a_difference(memcached_command, tmp_path):
    # Guards the harness itself: two servers that really differ (different
    # item size limits) must be reported as a mismatch.
    scenario_file = tmp_path / "limit.txt"
    scenario_file.write_text("set big 0 0 1500000\n@bytes 1500000\n@raw \\r\\n\n")
    scenario = runner.parse_scenario(scenario_file)
    outcome = runner.run_scenario(scenario, memcached_command + ["-I", "2m"], memcached_command)
    assert outcome.status == "fail"
    assert "-   SERVER_ERROR object too large for cache" in outcome.detail
    assert "+   STORED" in outcome.detail


def test_normalisation_rules():
    # Guards the normaliser: it must hide only what README.md says it hides.
    cas = runner.CasMap()
    reply = (
        b"VALUE k 0 1 77\r\nv\r\nEND\r\n"
        b"VA 1 c77 t100 kk\r\nv\r\n"
        b"HD c78\r\n"
        b"STAT pid 5\r\nSTAT rusage_user 0.1\r\nSTAT cmd_get 3\r\nEND\r\n"
        b"VERSION 1.6.18\r\n"
        b"ME k exp=-1 la=3 cas=78 fetch=no cls=1 size=63\r\n"
    )
    assert runner.normalise(reply, cas) == [
        "VALUE k 0 1 <CAS1>",
        "v",
        "END",
        "VA 1 c<CAS1> t~{100} kk",
        "v",
        "HD c<CAS2>",
        "STAT cmd_get <value>",
        "STAT pid <value>",
        "END",
        "VERSION <version>",
        "ME k exp=-1 la=~{3} cas=<CAS2> fetch=no cls=<impl> size=<impl>",
    ]
    assert cas.substitute(b"cas k 0 0 1 {{CAS2}} {{CAS1+1}} {{CAS9}}") == b"cas k 0 0 1 78 78 0"
    assert runner.lines_match(["HD t~{100}"], ["HD t~{99}"])
    assert not runner.lines_match(["HD t~{100}"], ["HD t~{98}"])
    assert not runner.lines_match(["VALUE k 0 1 <CAS1>"], ["VALUE k 0 1 <CAS2>"])
    assert not runner.lines_match(["END"], ["END", "END"])
