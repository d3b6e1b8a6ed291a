"""``schedkit contract``: a policy, with its options and compositions, through every
contract scenario on every engine installed here, as a policy author runs it (#37)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from schedkit.testing.contract import SCENARIOS

SITE = Path(__file__).resolve().parent / "data" / "contract_site"  # schedkit-ratio-demo, installed
HRRN = ["ratio-demo+keep-priority", "--options", '{"ratio-demo": {"max_prompt_tokens": 300}}']


def contract(*args: str, path: Path | None = None) -> subprocess.CompletedProcess[str]:
    paths = [str(SITE), *([str(path)] if path else []), os.environ.get("PYTHONPATH", "")]
    return subprocess.run(
        [sys.executable, "-m", "schedkit", "contract", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(paths), "COLUMNS": "200"},
    )


def test_a_third_party_composition_with_options_keeps_the_contract() -> None:
    proc = contract(*HRRN)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"ratio-demo+keep-priority: {len(SCENARIOS)} scenarios on sim" in proc.stdout
    for scenario in SCENARIOS:
        assert f"{scenario.name} " in proc.stdout
    assert "DIFFERS" not in proc.stdout


# An adapter as the contract sees it: an entry point in schedkit.contract. This one runs
# the simulator with one running request at a time, so it decides otherwise.
ENGINE = """
from dataclasses import replace
from schedkit.testing.contract import run_sim
from schedkit.testing.contract_run import ContractEngine, fresh

def one_at_a_time(scenario, config):
    narrow = replace(scenario, config=scenario.config.model_copy(update={"max_num_seqs": 1}))
    outcome = run_sim(narrow, fresh(config))
    outcome.engine = "narrow"
    return outcome

def engines(model):
    return [ContractEngine("narrow", one_at_a_time, "sim", same_batches=True)]

def broken(model):
    import schedkit_no_such_engine  # an adapter whose engine is not installed here
"""


def _engine_site(root: Path, broken: bool = True) -> Path:
    dist = root / "schedkit_narrow-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: schedkit-narrow\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[schedkit.contract]\nnarrow = narrow_engine:engines\n"
        + ("broken = narrow_engine:broken\n" if broken else "")
    )
    (root / "narrow_engine.py").write_text(textwrap.dedent(ENGINE))
    return root


def test_an_engine_that_decides_otherwise_fails_naming_the_first_difference(
    tmp_path: Path,
) -> None:
    proc = contract(*HRRN, path=_engine_site(tmp_path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "scenarios on sim, narrow" in proc.stdout
    assert "DIFFERS" in proc.stdout
    assert (
        "narrow, arrival-order: plan_batch: step 0 differs: {'o0': 200, 'o1': 40} preempting []"
        " vs {'o0': 200} preempting []" in proc.stdout
    ), proc.stdout
    # a registered engine that cannot be loaded here is named, not silently skipped
    assert "not run: broken: ModuleNotFoundError" in proc.stdout
    alone = contract(*HRRN, "--engine", "sim", path=tmp_path)
    assert alone.returncode == 0, alone.stdout + alone.stderr


def test_bad_input_is_refused_with_a_clear_error() -> None:
    for args, message in [
        (["no-such-policy"], "unknown policy 'no-such-policy'"),
        (["fcfs", "--engine", "tpu"], "engine 'tpu' is not installed here; installed: sim"),
        (["fcfs", "--scenario", "nope"], "unknown scenario 'nope'; scenarios: arrival-order"),
        (["ratio-demo", "--options", "{"], "--options is not valid JSON"),
        (
            ["ratio-demo", "--options", '{"ratio-demo": {"cap": 1}}'],
            "error: policy 'ratio-demo': unknown option 'cap'; valid options: ",
        ),
        (
            ["ratio-demo", "--options", '{"ratio-demo": {"max_prompt_tokens": "many"}}'],
            "error: policy 'ratio-demo' option max_prompt_tokens: 'many' is not accepted; it takes an"
            " integer",
        ),
    ]:
        proc = contract(*args)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert message in " ".join(proc.stderr.split()), (args, proc.stderr)
        assert "Traceback" not in proc.stderr


AUTHOR_TEST = """
from schedkit.testing import contract_test

test_ratio_demo = contract_test("ratio-demo+keep-priority", {"ratio-demo": {"max_prompt_tokens": 300}})

def test_rows(schedkit_contract):
    rows = schedkit_contract("ratio-demo+least-progress", scenarios=["victims"])
    assert [(r.scenario, r.engine) for r in rows][:1] == [("victims", "sim")]
"""


def author_suite(tmp_path: Path, site: Path | None) -> subprocess.CompletedProcess[str]:
    """An author's test file using the fixture, run by pytest as the author runs it."""
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "test_author.py").write_text(AUTHOR_TEST)
    paths = [str(SITE), *([str(site)] if site else []), os.environ.get("PYTHONPATH", "")]
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(paths)},
    )


def test_the_fixture_runs_an_authors_policy_through_the_contract(tmp_path: Path) -> None:
    proc = author_suite(tmp_path, None)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 passed" in proc.stdout


def test_the_fixture_fails_listing_every_difference(tmp_path: Path) -> None:
    proc = author_suite(tmp_path / "a", _engine_site(tmp_path / "narrow", broken=False))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "the contract failed:" in proc.stdout
    assert "narrow, arrival-order: plan_batch: step 0 differs" in proc.stdout
    assert "narrow, victims: plan_batch: step 1 differs" in proc.stdout  # the second test


def test_the_fixture_fails_loudly_when_an_installed_engine_cannot_load(tmp_path: Path) -> None:
    proc = author_suite(tmp_path / "a", _engine_site(tmp_path / "both"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "contract engines installed here that cannot load" in proc.stdout
    assert "broken: ModuleNotFoundError" in proc.stdout
