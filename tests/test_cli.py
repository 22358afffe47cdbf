"""The command line: JSON contracts other tools rely on, tables, and errors."""

import json
import subprocess
import sys

import pytest
from helpers import FIGURES, GRAPHS

from reorder.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_estimate_json_contract(capsys):
    code, out, _ = run(capsys, "estimate", str(GRAPHS / "resnet18_train_1.json"), "--json")
    data = json.loads(out)
    assert code == 0
    assert data["peak"] == FIGURES["resnet18_train_1"]["peak"]["baseline"]
    assert data["peak_allocfree"] == FIGURES["resnet18_train_1"]["peak_allocfree_baseline"]
    assert data["nodes"] == 106 and 0 < data["lower_bound"] <= data["peak"]


def test_estimate_folder_prints_a_table(capsys):
    code, out, _ = run(capsys, "estimate", str(GRAPHS))
    assert code == 0
    assert out.splitlines()[0].split()[:3] == ["graph", "nodes", "buffers"]
    assert sum(1 for line in out.splitlines() if line.startswith(("alexnet", "gpt", "mlp", "resnet", "vgg"))) == 15


def test_optimize_json_contract(capsys):
    name = "gpt_train_1"
    code, out, _ = run(capsys, "optimize", str(GRAPHS / f"{name}.json"), "--json")
    data = json.loads(out)
    assert code == 0
    assert {"baseline", "lpmf", "bfs", "dfs", "refine", "exact"} <= set(data["methods"])
    assert data["methods"]["lpmf"] == FIGURES[name]["peak"]["topological_sort_lpmf"]
    assert data["best"]["peak"] == min(data["methods"].values()) <= min(FIGURES[name]["peak"].values())
    assert data["best"]["method"] in data["methods"]
    assert sorted(data["order"]) == sorted(n["name"] for n in json.loads((GRAPHS / f"{name}.json").read_text())["nodes"])
    assert set(data["seconds"]) == set(data["methods"]) and data["lower_bound"] <= data["best"]["peak"]


def test_optimize_with_methods(capsys):
    code, out, _ = run(capsys, "optimize", str(GRAPHS / "mlp_train_1.json"), "--json", "--methods", "bfs,exact:max_states=100")
    assert code == 0 and set(json.loads(out)["methods"]) == {"baseline", "bfs", "exact"}


def test_optimize_table(capsys):
    code, out, _ = run(capsys, "optimize", str(GRAPHS / "vgg16_train_1.json"))
    assert code == 0 and "best: exact" in out and "(optimal)" in out and "method" in out.splitlines()[1]


@pytest.mark.parametrize("argv, message", [
    (["estimate", "missing.json"], "no such file or folder: missing.json"),
    (["optimize", str(GRAPHS / "mlp_infer_0.json"), "--methods", "magic"], "unknown method 'magic'"),
    (["plan", str(GRAPHS / "mlp_infer_0.json"), "--alignment", "0"], "alignment=0: must be a power of two"),
    (["plan", str(GRAPHS.parent.parent.parent / "README.md")], "not valid JSON"),
])
def test_errors_are_one_line_and_exit_2(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.startswith("reorder: error: ") and message in err


def test_python_dash_m_entry_point():
    result = subprocess.run([sys.executable, "-m", "reorder", "estimate", str(GRAPHS / "mlp_infer_0.json"), "--json"],
                            capture_output=True, text=True, check=True)
    assert json.loads(result.stdout)["peak"] == FIGURES["mlp_infer_0"]["peak"]["baseline"]
