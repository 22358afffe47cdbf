"""Running a user's script as ``python SCRIPT.py ARGS`` would, inside this process, and putting everything back.

``reorder capture`` and ``reorder compare`` run a person's own, unmodified
script with the hook around every ``torch.compile`` it makes. For the script
that must look exactly like ``python SCRIPT.py``: its ``__name__`` is
``"__main__"``, ``__file__`` is its path, ``sys.argv`` is the script and its
arguments, and the script's folder comes first on ``sys.path`` (so ``from
models import CNN`` finds the ``models.py`` beside it). Afterwards
``sys.argv``, ``sys.path`` and the ``__main__`` module are restored, whether
the script returned, raised or called ``sys.exit``; modules it imported stay
imported.
"""

from __future__ import annotations

import logging
import runpy
import sys
import traceback
from pathlib import Path
from typing import Sequence

from .errors import ReorderError

__all__ = ["ScriptError", "exit_text", "run_script", "script_path", "split_script_args"]

log = logging.getLogger("reorder")


class ScriptError(ReorderError):
    """The script itself raised (or exited with a non-zero status); the message names the script, the error
    and the line of the script it came from."""


def run_script(script: str | Path, argv: Sequence[str] = ()) -> None:
    """Run ``script`` as ``python SCRIPT ARGV...`` would, in this process (see the module docstring).

    ``sys.exit()`` or ``sys.exit(0)`` in the script ends it normally. Raises
    :class:`ScriptError` naming the script, its exception and the line of the
    script it came from when the script raises, or its status when it exits
    with another one (the script's traceback is logged at INFO: ``reorder
    -v``); :class:`~reorder.errors.ReorderError` when ``script`` is no file.
    """
    path = script_path(script)
    saved_argv, saved_path, saved_main = sys.argv, list(sys.path), sys.modules.get("__main__")
    sys.argv = [str(path), *argv]
    sys.path.insert(0, str(path.resolve().parent))
    try:
        runpy.run_path(str(path.absolute()), run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (None, 0):
            raise ScriptError(f"{path} {exit_text(exc.code)}") from None
    except Exception as exc:  # noqa: BLE001 - the script's own error, reported as one line
        log.info("%s", "".join(traceback.format_exception(exc)).rstrip())
        what = exc.msg if isinstance(exc, SyntaxError) else exc
        raise ScriptError(f"{path} raised {type(exc).__name__}: {what}{where_raised(exc, path)}") from exc
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path
        if saved_main is not None:
            sys.modules["__main__"] = saved_main


def script_path(script: str | Path) -> Path:
    """``script`` as a path to run; :class:`~reorder.errors.ReorderError` (one line) when it is a folder or
    does not exist."""
    path = Path(script)
    if path.is_dir():
        raise ReorderError(f"{path} is a folder; name the Python file to run (as 'python SCRIPT.py' would)")
    if not path.is_file():
        raise ReorderError(f"no such script: {path}")
    return path


def exit_text(code: object) -> str:
    """How a script's ``sys.exit(code)`` ended it, as Python itself would: an integer is the exit status, any
    other value is printed and the status is 1."""
    if isinstance(code, int):
        return f"exited with status {code}"
    return f"exited with status 1: sys.exit({code!r})"


def where_raised(exc: BaseException, path: Path) -> str:
    """`` (line N of FILE)``: where in the script ``exc`` came from; a syntax error is placed where the
    compiler found it (the script, or a module it imports), any other error at the script's deepest frame, or
    else the deepest frame that is a real file (never frozen import machinery); empty when there is none."""
    if isinstance(exc, SyntaxError) and exc.filename and exc.lineno:
        return f" (line {exc.lineno} of {exc.filename})"
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if Path(f.filename).resolve() == path.resolve()]
    real = own or [f for f in frames if not f.filename.startswith("<")]
    return f" (line {real[-1].lineno} of {real[-1].filename})" if real else ""


def split_script_args(rest: Sequence[str], options: dict[str, bool]) -> tuple[dict[str, str | bool], list[str]]:
    """Our ``options`` (name -> takes a value) found among a script's arguments, and the script's own arguments.

    ``reorder capture`` and ``reorder compare`` accept their own options after
    the script too; everything after a ``--`` belongs to the script, so a
    script option spelled like ours can still reach it.
    """
    ours: dict[str, str | bool] = {}
    script_args: list[str] = []
    items = list(rest)
    while items:
        item = items.pop(0)
        if item == "--":
            script_args += items
            break
        name, equals, value = item.partition("=")
        if name in options:
            if not options[name]:
                ours[name] = True
            elif equals:
                ours[name] = value
            elif items:
                ours[name] = items.pop(0)
            else:
                raise ReorderError(f"{name} needs a value")
        else:
            script_args.append(item)
    return ours, script_args
