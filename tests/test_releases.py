"""The torch releases the hook supports: any other keeps the hook off with one line, and the API keeps working."""

import json
import logging
import os
import subprocess
import sys

import pytest
import torch
from helpers import FIGURES, GRAPH_NAMES, GRAPHS, RELEASE

import reorder.inductor as hook
from reorder.inductor.releases import SUPPORTED_RELEASES, hook_refusal, running_release


def test_a_release_is_its_major_and_minor_number():
    assert running_release("2.15.0+cu132") == "2.15"
    assert running_release("2.13.0+cpu") == "2.13"
    assert running_release("2.16.0.dev20261101+cpu") == "2.16"
    assert running_release() == running_release(torch.__version__) in SUPPORTED_RELEASES  # the suite runs on one


@pytest.mark.parametrize("version", ["2.13.0+cpu", "2.14.1+cu130", "2.15.0", "2.15.1+cu132"])
def test_the_supported_releases_run_the_hook(version):
    assert hook_refusal(version) is None


@pytest.mark.parametrize("version", ["2.12.1", "2.16.0", "2.16.0.dev20261101+cpu", "3.0.0"])
def test_another_release_gets_one_sentence_naming_it_and_the_supported_ones(version, monkeypatch):
    monkeypatch.delenv("REORDER_ANY_TORCH", raising=False)
    assert hook_refusal(version) == (f"the Inductor hook is off: torch {version} is not a supported release "
                                     f"(2.13, 2.14, 2.15); torch.compile runs as stock. Install one of those, or set "
                                     f"REORDER_ANY_TORCH=1 to try it anyway")


def test_the_variable_runs_the_hook_under_another_release_with_a_warning(monkeypatch, caplog):
    monkeypatch.setenv("REORDER_ANY_TORCH", "1")
    with caplog.at_level(logging.WARNING, logger="reorder"):
        assert hook_refusal("2.16.0") is None
    assert [r.getMessage() for r in caplog.records] == [
        "reorder: torch 2.16.0 is not a release the hook is tested with (2.13, 2.14, 2.15); it runs anyway because "
        "REORDER_ANY_TORCH=1 is set"]


def test_use_under_an_unsupported_release_changes_nothing_and_says_why_once(monkeypatch, caplog):
    import torch._inductor.config as config

    monkeypatch.delenv("REORDER_ANY_TORCH", raising=False)
    monkeypatch.setattr(torch, "__version__", "2.12.0")
    settings = ("_post_fusion_custom_pass", "reorder_for_peak_memory", "custom_partitioner_fn",
                "inductor_choices_class", "joint_custom_post_pass")
    before = [getattr(config, key) for key in settings]
    with caplog.at_level(logging.WARNING, logger="reorder"):
        with hook.use(memory_budget=0.5, slab=True) as outer:
            assert [getattr(config, key) for key in settings] == before  # Inductor as stock
            with hook.use() as inner:
                pass
            assert not inner.live and outer.live  # the inner block undid only itself
    assert [getattr(config, key) for key in settings] == before
    refusal = hook_refusal("2.12.0")
    assert [r.getMessage() for r in caplog.records] == [f"reorder: {refusal}"] * 2  # one line per use()
    assert [(r.graph, r.stage, r.reason) for r in outer.fallbacks] == [("every graph", "install", refusal)]
    assert outer.summary() == f"fallback (install) in every graph: {refusal}"


def test_importing_the_hook_under_an_unsupported_release_says_so_in_one_line_and_the_cli_works():
    environment = {**os.environ, "REORDER_ANY_TORCH": "0"}
    faked = "import torch; torch.__version__ = '2.16.0'; "
    imported = subprocess.run([sys.executable, "-c", faked + "import reorder.inductor"], capture_output=True,
                              text=True, env=environment, check=True)
    assert imported.stderr.splitlines() == [f"reorder: {hook_refusal('2.16.0')}"]
    graph = os.path.join(os.path.dirname(hook.__file__), "..", "data", "graphs", "mlp_infer_0.json")
    estimated = subprocess.run([sys.executable, "-c", faked + f"from reorder.cli import main; main(['estimate', "
                                f"{graph!r}])"], capture_output=True, text=True, env=environment)
    assert estimated.returncode == 0 and estimated.stderr == ""
    assert estimated.stdout == subprocess.run([sys.executable, "-m", "reorder", "estimate", graph],
                                              capture_output=True, text=True, check=True).stdout


def test_a_release_without_the_hooks_base_classes_imports_the_hook_and_keeps_it_off():
    """torch 2.11 has no ``CustomSchedulerPass``: ``import reorder.inductor`` raised ImportError there; now it
    imports, and ``use()`` runs stock with one line naming the missing class, even with REORDER_ANY_TORCH=1."""
    older = ("import torch, torch._inductor.codecache, torch._inductor.choices; torch.__version__ = '2.11.0+cu130'; "
             "import torch._inductor.custom_graph_pass as c; del c.CustomSchedulerPass; ")
    script = older + ("import reorder.inductor as hook\n"
                      "with hook.use(memory_budget=0.5) as session:\n"
                      "    f = torch.compile(lambda x: (x.sin() + 1).cos())\n"
                      "    x = torch.randn(8)\n"
                      "    torch.testing.assert_close(f(x), (x.sin() + 1).cos())\n"
                      "print(session.summary())")
    ran = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env={**os.environ, "REORDER_ANY_TORCH": "1"}, timeout=300)
    refusal = ("the Inductor hook is off: torch 2.11.0+cu130 has no CustomSchedulerPass, which the hook plugs into; "
               "torch.compile runs as stock. Install one of 2.13, 2.14, 2.15")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == f"fallback (install) in every graph: {refusal}"


def strip_version(figures: dict) -> dict:
    return {name: {key: value for key, value in record.items() if key != "torch_version"}
            for name, record in figures.items()}


def test_the_running_releases_memory_py_gives_its_recorded_figures():
    """torch's own functions, run now on the bundled graphs, give the running release's recorded file to the
    byte (a release that changes a rule fails here). That our estimators and ports give the same figures is
    checked against the same file (``helpers.FIGURES``) by tests/test_timeline.py and tests/test_schedulers.py."""
    from benchmarks.release_figures import release_figures

    live = release_figures()
    assert strip_version(live) == strip_version(FIGURES) and set(live) == set(GRAPH_NAMES)
    assert {running_release(record["torch_version"]) for record in FIGURES.values()} == {RELEASE}


def test_every_supported_release_has_its_figures_and_none_changed_a_rule():
    """2.14 turned memory.py's assertions into raised errors and 2.15 split out ``estimate_region_memory``: no
    rule changed, so every release's figures are 2.13's."""
    recorded = {release: json.loads((GRAPHS / f"torch-{release}-figures.json").read_text())
                for release in SUPPORTED_RELEASES}
    first = strip_version(recorded[SUPPORTED_RELEASES[0]])
    assert all(strip_version(figures) == first for figures in recorded.values())
    assert [running_release(next(iter(figures.values()))["torch_version"]) for figures in recorded.values()] == list(
        SUPPORTED_RELEASES)
