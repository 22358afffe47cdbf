"""The command line: JSON contracts other tools rely on, tables, and errors."""

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
from helpers import FIGURES, GRAPHS

from reorder.cli import COMMANDS, build_parser, main
from reorder.script import ScriptError, run_script
from reorder.report import Progress


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
    (["plan", str(GRAPHS / "mlp_infer_0.json"), "--alignment", "0"], "--alignment 0: must be a power of two"),
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


# ---------------------------------------------------------------------------------------------------------------
# The command line as a user runs it: a subprocess, its exact lines and exit status.

ROOT = GRAPHS.parent.parent.parent


def reorder(*argv, cwd=None):
    """``python -m reorder ARGV...`` with this checkout first on the path; stdout, stderr piped."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "reorder", *map(str, argv)], capture_output=True, text=True,
                          env=env, cwd=cwd)


def one_error_line(result):
    """The single stderr line of a failed command (exit 2, nothing on stdout)."""
    assert (result.returncode, result.stdout) == (2, ""), result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("reorder: error: ")
    return lines[0]


def graph_folder(tmp_path, *names):
    folder = tmp_path / "graphs"
    folder.mkdir()
    for name in names:
        shutil.copy(GRAPHS / f"{name}.json", folder)
    return folder


def instance_folder(tmp_path):
    folder = tmp_path / "instances"
    folder.mkdir()
    (folder / "two.csv").write_text("id,lower,upper,size\na,0,2,64\nb,1,3,32\n")
    (folder / "three.csv").write_text("id,lower,upper,size\na,0,1,16\nb,1,2,16\nc,0,2,8\n")
    return folder


def test_exact_packing_of_an_instance_of_empty_buffers_prints_its_line(tmp_path):
    (tmp_path / "empty.csv").write_text("id,lower,upper,size\na,0,2,0\nb,1,3,0\n")
    result = reorder("pack", tmp_path / "empty.csv", "--exact")
    assert result.returncode == 0, result.stderr
    assert "slab 0 B (ratio 1.0000); valid, lower bound 0 B" in result.stdout


def test_every_command_is_declared_once_with_json_where_the_readme_says():
    parser = build_parser()
    subcommands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert list(subcommands) == list(COMMANDS) == ["estimate", "optimize", "plan", "pack", "capture", "compare", "plot", "demo"]
    takes_json = {name for name, p in subcommands.items() if any("--json" in a.option_strings for a in p._actions)}
    assert takes_json == {"estimate", "optimize", "plan", "pack", "compare"} == {c.name for c in COMMANDS.values() if c.json}


def test_pack_takes_a_folder_of_instances(tmp_path):
    folder = instance_folder(tmp_path)
    result = reorder("pack", folder, "--strategy", "greedy_by_size")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["three.csv", "two.csv"]
    assert lines[1].startswith("two.csv: 2 buffers, slab 96 B, lower bound 96 B, ratio 1.0000, ")
    data = json.loads(reorder("pack", folder, "--json", "--strategy", "greedy_by_size").stdout)
    assert [(d["instance"], d["slab_bytes"]) for d in data] == [("three.csv", 24), ("two.csv", 96)]
    single = json.loads(reorder("pack", folder / "two.csv", "--json", "--strategy", "greedy_by_size").stdout)
    assert single["offsets"] == data[1]["offsets"] == {"a": 0, "b": 64}


def test_pack_search_progress_is_one_line_per_improvement_when_piped(tmp_path):
    result = reorder("pack", instance_folder(tmp_path), "--restarts", "5")
    assert result.returncode == 0 and "\r" not in result.stderr
    assert result.stderr.splitlines() and all(
        line.startswith(("three.csv: ", "two.csv: ")) and " best slab " in line for line in result.stderr.splitlines())


def test_plan_takes_a_folder_of_graphs(tmp_path):
    folder = graph_folder(tmp_path, "mlp_infer_0", "mlp_train_0")
    data = json.loads(reorder("plan", folder, "--json", "--order", "baseline").stdout)
    assert [d["graph"] for d in data] == ["mlp_infer_0", "mlp_train_0"]
    assert [d["slab_bytes"] for d in data] == [262144, 1572864]
    text = reorder("plan", folder, "--order", "baseline").stdout.splitlines()
    assert [line for line in text if line.startswith("mlp")] == [
        "mlp_infer_0: 12 storages, order from baseline, strategy search, alignment 64",
        "mlp_train_0: 12 storages, order from baseline, strategy search, alignment 64"]


def test_plot_of_a_folder_writes_one_png_per_graph_into_a_folder(tmp_path):
    pytest.importorskip("matplotlib")
    folder = graph_folder(tmp_path, "mlp_infer_0", "mlp_train_0")
    out = tmp_path / "plots"
    result = reorder("plot", folder, "--out", out)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"wrote {out / 'mlp_infer_0.png'}: peak 262.14 kB -> 262.14 kB (baseline), slab 262.14 kB (order of baseline)",
        f"wrote {out / 'mlp_train_0.png'}: peak 1.57 MB -> 1.57 MB (baseline), slab 1.57 MB (order of baseline)"]
    assert sorted(p.name for p in out.iterdir()) == ["mlp_infer_0.png", "mlp_train_0.png"]


def test_plot_of_a_folder_refuses_a_png_name(tmp_path):
    folder = graph_folder(tmp_path, "mlp_infer_0", "mlp_train_0")
    line = one_error_line(reorder("plot", folder, "--out", tmp_path / "x.png"))
    assert line == (f"reorder: error: --out {tmp_path / 'x.png'}: {folder} is a folder of 2 graph files, so --out "
                    f"must be a folder (one NAME.png per graph)")
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize("command", ["estimate", "optimize", "plan", "plot", "demo"])
def test_a_folder_with_one_bad_file_reports_it_finishes_the_rest_and_exits_2(tmp_path, capsys, command):
    folder = graph_folder(tmp_path, "mlp_infer_0", "mlp_train_0")
    (folder / "broken.json").write_text('{"nodes": [')
    extra = ["--out", str(tmp_path / "out")] if command in ("plot", "demo") else []
    code, out, err = run(capsys, command, str(folder), *extra)
    assert code == 2
    errors = [line for line in err.splitlines() if line.startswith("reorder: error: ")]
    assert errors == [
        f"reorder: error: {folder / 'broken.json'}: not valid JSON (Expecting value: line 1 column 12 (char 11))",
        "reorder: error: 1 of 3 files failed (listed above); the others were done"]
    assert err.splitlines()[-1] == errors[-1]
    assert "mlp_infer_0" in out and "mlp_train_0" in out  # the files after the bad one were done too


def test_a_folder_with_a_bad_file_gives_its_error_in_place_in_the_json_list(tmp_path, capsys):
    folder = graph_folder(tmp_path, "mlp_infer_0", "mlp_train_0")
    (folder / "b_broken.json").write_text("not json")
    code, out, _ = run(capsys, "estimate", str(folder), "--json")
    records = json.loads(out)
    assert code == 2
    assert [r.get("graph") or r["file"] for r in records] == ["b_broken.json" and str(folder / "b_broken.json"),
                                                              "mlp_infer_0", "mlp_train_0"]
    assert records[0]["error"].startswith(f"{folder / 'b_broken.json'}: not valid JSON")


def test_a_folder_of_instances_with_a_bad_one_packs_the_rest(tmp_path, capsys):
    folder = instance_folder(tmp_path)
    (folder / "bad.csv").write_text("id,lower,upper,size\na,0,x,64\n")
    code, out, err = run(capsys, "pack", str(folder))
    assert code == 2
    assert [line.split(":")[0] for line in out.splitlines()] == ["three.csv", "two.csv"]
    assert err.splitlines()[0].startswith(f"reorder: error: {folder / 'bad.csv'}")


def test_a_single_bad_file_is_still_one_line(tmp_path):
    bad = tmp_path / "broken.json"
    bad.write_text('{"nodes": [')
    assert one_error_line(reorder("estimate", bad)) == (
        f"reorder: error: {bad}: not valid JSON (Expecting value: line 1 column 12 (char 11))")


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help_is_plain_text_and_states_every_default(command):
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    text = sub.format_help()
    assert "``" not in text and ":class:" not in text and ":func:" not in text
    for action in sub._actions:
        if action.help and action.default not in (None, False, argparse.SUPPRESS):
            assert "default" in action.help, (command, action.dest)


def test_compare_help_names_its_default_variants():
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices["compare"]
    assert "(default: stock,hook,slab,guard)" in " ".join(sub.format_help().split())


@pytest.mark.parametrize("command", ["estimate", "optimize", "plan", "plot", "pack"])
def test_a_folder_without_inputs_is_one_line(tmp_path, command):
    empty = tmp_path / "empty"
    empty.mkdir()
    what = "packing instances (*.csv)" if command == "pack" else "graph files (*.json)"
    extra = ["--out", tmp_path / "plots"] if command == "plot" else []
    assert one_error_line(reorder(command, empty, *extra)) == f"reorder: error: no {what} in {empty}"


@pytest.mark.parametrize("argv, line", [
    (["plan", GRAPHS / "mlp_infer_0.json", "--alignment", "abc"],
     "reorder: error: argument --alignment: invalid int value: 'abc' (see 'reorder plan --help')"),
    (["plan", GRAPHS / "mlp_infer_0.json", "--seconds", "soon"],
     "reorder: error: argument --seconds: invalid float value: 'soon' (see 'reorder plan --help')"),
    (["pack", "x.csv", "--strategy", "magic"],
     "reorder: error: argument --strategy: invalid choice: 'magic' (choose from 'naive', 'linear_scan', "
     "'greedy_by_size', 'greedy_by_breadth', 'peak_stack', 'skyline', 'search') (see 'reorder pack --help')"),
    (["plot", GRAPHS / "mlp_infer_0.json", "--out", "x.png", "--json"],
     "reorder: error: unrecognized arguments: --json (see 'reorder --help')"),
    ([], "reorder: error: the following arguments are required: command (see 'reorder --help')"),
    (["pack", "x.csv", "--capacity", "4"], "reorder: error: --capacity needs --exact (got --capacity 4 without it)"),
    (["pack", "x.csv", "--exact", "--capacity", "-5"],
     "reorder: error: argument --capacity: expected a whole number of bytes >= 0, got '-5' (see 'reorder pack --help')"),
    (["optimize", GRAPHS / "mlp_infer_0.json", "--methods", "magic"],
     "reorder: error: --methods 'magic': unknown method 'magic'; known: baseline, bfs, dfs, exact, lpmf, optimal, "
     "refine"),
])
def test_bad_options_are_one_line_naming_option_and_value(argv, line):
    assert one_error_line(reorder(*argv)) == line


#: Checked by the method registry (reorder.schedulers) and the planning options (reorder.planning): the
#: command line prints their message as one line after the flag and its value, exit 2.
@pytest.mark.parametrize("argv, line", [
    (["optimize", GRAPHS / "mlp_infer_0.json", "--methods", "exact:max_state=10"],
     "reorder: error: --methods 'exact:max_state=10': method 'exact': unknown option 'max_state'; options: "
     "max_states (int >= 1), max_nodes (int >= 1), max_bytes (int >= 1)"),
    (["optimize", GRAPHS / "mlp_infer_0.json", "--methods", ""],
     "reorder: error: --methods '': methods '': name at least one method; known: baseline, bfs, dfs, exact, lpmf, "
     "optimal, refine"),
    (["optimize", GRAPHS / "mlp_infer_0.json", "--methods", "exact:max_states=-1"],
     "reorder: error: --methods 'exact:max_states=-1': method 'exact': option max_states=-1: expected int >= 1"),
    (["plan", GRAPHS / "mlp_infer_0.json", "--seconds", "-1"],
     "reorder: error: --seconds -1.0: must be a positive number of seconds, or None for no cap"),
    (["plan", GRAPHS / "mlp_infer_0.json", "--alignment", "3"],
     "reorder: error: --alignment 3: must be a power of two (1, 2, 4, ..., 64, ...)"),
    (["plan", GRAPHS / "mlp_infer_0.json", "--restarts", "-2"],
     "reorder: error: --restarts -2: must be a positive integer"),
])
def test_option_values_checked_by_the_library_are_one_line(argv, line):
    assert one_error_line(reorder(*argv)) == line


def test_demo_progress_is_one_line_per_graph_when_piped(tmp_path):
    pytest.importorskip("matplotlib")
    folder = graph_folder(tmp_path, "mlp_infer_0", "mlp_train_0")
    result = reorder("demo", folder, "--out", tmp_path / "out")
    assert result.returncode == 0
    assert result.stderr.splitlines() == ["[1/2] mlp_infer_0", "[2/2] mlp_train_0"] and "\r" not in result.stderr


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_rewrites_its_line_on_a_terminal_and_ends_it():
    stream = Terminal()
    with Progress(stream) as progress:
        progress.show("[1/2] a_long_name")
        progress.show("[2/2] b")
    assert stream.getvalue() == "\r[1/2] a_long_name\r[2/2] b          \n"


# ---------------------------------------------------------------------------------------------------------------
# Running a script as python would.


def write_script(folder, body, helper=None):
    folder.mkdir(exist_ok=True)
    if helper is not None:
        (folder / f"{helper}.py").write_text("VALUE = 42\n")
    script = folder / "train.py"
    script.write_text(textwrap.dedent(body))
    return script


def test_run_script_runs_it_as_python_would_and_restores_argv_and_path(tmp_path):
    helper = f"helper_{tmp_path.name.replace('-', '_')}"
    script = write_script(tmp_path / "project", f"""\
        import json, sys
        from {helper} import VALUE
        assert __name__ == "__main__"
        json.dump({{"value": VALUE, "file": __file__, "argv": sys.argv, "path0": sys.path[0]}},
                  open(sys.argv[2], "w"))
        """, helper)
    argv, path, main_module = list(sys.argv), list(sys.path), sys.modules["__main__"]
    seen = tmp_path / "seen.json"
    try:
        run_script(script, ["--flag", str(seen)])
    finally:
        sys.modules.pop(helper, None)
    assert (sys.argv, sys.path, sys.modules["__main__"]) == (argv, path, main_module)
    assert json.loads(seen.read_text()) == {"value": 42, "file": str(script), "argv": [str(script), "--flag", str(seen)],
                                            "path0": str(script.parent)}


def test_run_script_reports_the_scripts_exception_and_restores_argv_and_path(tmp_path):
    script = write_script(tmp_path, "x = 1\nraise ValueError('bad input')\n")
    argv, path = list(sys.argv), list(sys.path)
    with pytest.raises(ScriptError) as caught:
        run_script(script, ["--flag"])
    assert str(caught.value) == f"{script} raised ValueError: bad input (line 2 of {script})"
    assert (sys.argv, sys.path) == (argv, path)


@pytest.mark.parametrize("code, message", [("sys.exit()", None), ("sys.exit(0)", None),
                                           ("sys.exit(3)", "exited with status 3$"),
                                           ("sys.exit('boom')", r"exited with status 1: sys.exit\('boom'\)$")])
def test_run_script_treats_exit_zero_as_success(tmp_path, code, message):
    script = write_script(tmp_path, f"import sys\n{code}\n")
    if message is None:
        run_script(script)
    else:
        with pytest.raises(ScriptError, match=message):
            run_script(script)


def test_a_syntax_error_is_placed_in_the_script(tmp_path):
    script = write_script(tmp_path, "x = 1\ndef f(:\n    pass\n")
    with pytest.raises(ScriptError) as caught:
        run_script(script)
    assert str(caught.value) == f"{script} raised SyntaxError: invalid syntax (line 2 of {script})"


def test_capture_of_a_failing_script_is_one_line(tmp_path):
    script = write_script(tmp_path / "project", "import torch\nfrom no_such_module_here import CNN\n")
    line = one_error_line(reorder("capture", script, "--out", tmp_path / "graphs", cwd=tmp_path))
    assert line == (f"reorder: error: {script} raised ModuleNotFoundError: No module named 'no_such_module_here' "
                    f"(line 2 of {script})")
