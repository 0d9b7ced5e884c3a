"""A Python function as the job (``orchestrator.run``): its source, written into a folder with an entry script that
calls it, runs as a ``--script`` on every replica; what each replica returned, or the traceback of what it raised,
comes back through a file in the replica's own folder.

Source, not pickled bytes: the image's Python may differ from the notebook's, and the source is readable and hashed
with the run's snapshot (run.json's ``source``), so a run says what it ran. Hence the function must stand alone: no
closure, no decorator, and every name it uses imported or defined inside it, as the Kubeflow SDK asks of its
``CustomTrainer``'s function.
"""
from __future__ import annotations

import ast
import builtins
import inspect
import json
import textwrap
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from orchestrator import contract
from orchestrator.errors import FunctionFailed, InvalidSpec, OrchError, WorkerTraceback
from orchestrator.run.stdout import FUNCTION_RETURN_FILE, MAX_PARTS
from orchestrator.safeio import read_json_bounded
from orchestrator.safetext import one_line, printable

ENTRY_FILE = "orch_function_main.py"  # the script a function job runs; its name marks a run as a function's
FUNCTION_FILE = "orch_function.py"  # the function's source
ARGS_FILE = "orch_function_args.json"  # {"function": name, "args": [...], "kwargs": {...}}
RETURN_FILE = FUNCTION_RETURN_FILE  # in each replica's own folder, and on its stdout where no folder is shared
RETURN_VERSION = 1
RETURN_LIMIT = 16 << 20  # bytes of one replica's return file; a larger value belongs in a file of its folder
TRACEBACK_LIMIT = 64 << 10  # characters of a traceback kept
# Where a replica reports on its standard output (Swarm, Kubernetes), the record goes as report lines too, of at most
# STDOUT_LINE_LIMIT bytes each and MAX_PARTS lines (run/stdout.py): about 2 MB.
STDOUT_ROOM = contract.STDOUT_LINE_LIMIT - len(contract.STDOUT_PREFIX) - len(RETURN_FILE) - 32


def _refuse(fn: Any, why: str) -> InvalidSpec:
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    return InvalidSpec(one_line(f"function: {name} {why}", 400))


def source(fn: Callable[..., Any]) -> str:
    """The dedented source of ``fn``, checked to stand alone; InvalidSpec (one line) saying why it cannot travel."""
    if not inspect.isfunction(fn):
        raise _refuse(fn, "is not a Python function defined with def (a builtin, method, class or callable object "
                          "has no source orch can send); wrap the call in a def of its own")
    if fn.__name__ == "<lambda>":
        raise _refuse(fn, "is a lambda; define it with def, its imports inside it")
    if inspect.iscoroutinefunction(fn) or inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        raise _refuse(fn, "is a coroutine or generator; the job calls it once and returns what it returns: make it "
                          "a plain def")
    if fn.__closure__:
        free = ", ".join(fn.__code__.co_freevars)
        raise _refuse(fn, f"is a closure over {free} from the function around it; pass them as args or kwargs")
    try:
        text = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as exc:
        raise _refuse(fn, f"has no source Python can find ({exc}); define it in a file or a notebook cell") from None
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        raise _refuse(fn, f"has source Python cannot parse alone: {exc.msg}") from None
    node = tree.body[0] if len(tree.body) == 1 else None
    if not isinstance(node, ast.FunctionDef) or node.name != fn.__name__:
        raise _refuse(fn, "is not one def statement in its source")
    if node.decorator_list:
        raise _refuse(fn, "is decorated; the decorator would not be there in the containers: leave it out")
    outside = sorted(_free_names(node) - set(dir(builtins)) - {fn.__name__})
    if outside:
        raise _refuse(fn, f"uses {', '.join(outside)} from outside it; the function runs alone on every replica: "
                          "import or define them inside it, or pass values as args or kwargs")
    return text


def _free_names(node: ast.FunctionDef) -> set[str]:
    """Names ``node`` reads that nothing in it binds: what it takes from its module (leniently: a name bound
    anywhere inside counts as bound everywhere)."""
    bound: set[str] = set()
    read: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            (read if isinstance(sub.ctx, ast.Load) else bound).add(sub.id)
        elif isinstance(sub, ast.arg):
            bound.add(sub.arg)
        elif isinstance(sub, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in sub.names)
        elif isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(sub.name)
        elif isinstance(sub, ast.ExceptHandler) and sub.name:
            bound.add(sub.name)
        elif isinstance(sub, (ast.Global, ast.Nonlocal)):
            bound.update(sub.names)
    return read - bound


def arguments(name: str, args: Sequence[Any], kwargs: Optional[Mapping[str, Any]]) -> str:
    """The call, ``args`` and ``kwargs``, as the strict JSON the entry script reads; InvalidSpec (one line) if they
    are not JSON."""
    call: dict[str, Any] = {"function": name, "args": list(args), "kwargs": dict(kwargs or {})}
    if not all(isinstance(k, str) for k in call["kwargs"]):
        raise InvalidSpec("kwargs: every key must be a string (they become the function's keyword arguments)")
    try:
        return json.dumps(call, allow_nan=False, indent=1) + "\n"
    except (TypeError, ValueError) as exc:
        raise InvalidSpec(one_line(f"args: the function's arguments travel as JSON, and {exc}; pass numbers, "
                                   "strings, lists and dicts (a path, not an array)", 400)) from None


def entry_script(name: str) -> str:
    """The script every replica runs: call ``name`` from FUNCTION_FILE with ARGS_FILE's arguments, and write what it
    returned (strict JSON) or the traceback of what it raised into the replica's own folder (``ORCH_OUTPUT_DIR``);
    exit 1 if it raised. It carries contract.finite, so that an image without orch's trainer runs it too."""
    finite = textwrap.dedent(inspect.getsource(contract._finite)) + "\n\n" + textwrap.dedent(
        inspect.getsource(contract.finite))
    return f'''"""Written by orch: runs {name}() from {FUNCTION_FILE} with the arguments in {ARGS_FILE}, and writes
what it returned, or the traceback of what it raised, into {RETURN_FILE} in this replica's own folder."""
from __future__ import annotations

import json
import math
import os
import sys
import traceback
from typing import Any, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
INVALID_SUFFIX = {contract.INVALID_SUFFIX!r}
LIMIT = {RETURN_LIMIT}
TRACEBACK_LIMIT = {TRACEBACK_LIMIT}
TO_STDOUT = os.environ.get({contract.ENV_REPORT!r}) == {contract.REPORT_STDOUT!r}
ROOM = {STDOUT_ROOM}
PARTS = {MAX_PARTS}


{finite}


def plain(value: Any) -> Any:
    """An array (NumPy, PyTorch, TensorFlow) or a NumPy scalar as the list or number it holds; a TensorFlow tensor
    has neither method, and its numpy() array is made a list in turn."""
    for method in ("tolist", "item", "numpy"):
        if callable(getattr(value, method, None)):
            return getattr(value, method)()
    raise TypeError(f"{{type(value).__name__}} is not JSON: return numbers, strings, lists and dicts")


def load() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("orch_function", os.path.join(HERE, {FUNCTION_FILE!r}))
    module = importlib.util.module_from_spec(spec)
    sys.modules["orch_function"] = module  # what pickle (a DataLoader's workers, say) imports it as
    spec.loader.exec_module(module)
    return getattr(module, {name!r})


def write(folder: str, record: dict) -> None:
    text = json.dumps(record, allow_nan=False).encode("ascii", "backslashreplace").decode("ascii")
    limit = min(LIMIT, ROOM * PARTS) if TO_STDOUT else LIMIT
    if len(text) > limit:
        raise ValueError(f"the return value is {{len(text)}} bytes of JSON, over orch's limit of {{limit}}: "
                         "write it to a file in ORCH_OUTPUT_DIR and return its name")
    temporary = os.path.join(folder, {RETURN_FILE!r} + ".tmp")
    with open(temporary, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(temporary, os.path.join(folder, {RETURN_FILE!r}))
    if TO_STDOUT:  # no folder shared with orch: the record as report lines, which orch copies into the run's
        parts = [text[i:i + ROOM] for i in range(0, len(text), ROOM)] or [""]
        for i, part in enumerate(parts, 1):
            sys.stdout.write(f"{contract.STDOUT_PREFIX} {RETURN_FILE} {{i}}/{{len(parts)}} {{part}}\\n")
        sys.stdout.flush()


def main() -> int:
    folder = os.environ.get({contract.ENV_OUTPUT_DIR!r}) or os.getcwd()
    with open(os.path.join(HERE, {ARGS_FILE!r}), encoding="utf-8") as f:
        call = json.load(f)
    try:
        value = load()(*call["args"], **call["kwargs"])
        write(folder, {{"v": {RETURN_VERSION}, "ok": True,
                       "value": finite(json.loads(json.dumps(value, default=plain)))}})
        return 0
    except Exception:
        text = traceback.format_exc()[-TRACEBACK_LIMIT:]
        sys.stderr.write(text)
        write(folder, {{"v": {RETURN_VERSION}, "ok": False, "traceback": text}})
        return 1


if __name__ == "__main__":
    sys.exit(main())
'''


def write_folder(fn: Callable[..., Any], args: Sequence[Any], kwargs: Optional[Mapping[str, Any]],
                 folder: Path) -> Path:
    """Write the function's source, its arguments and the entry script into ``folder``; return the entry script."""
    text, call = source(fn), arguments(fn.__name__, args, kwargs)
    (folder / FUNCTION_FILE).write_text(text)
    (folder / ARGS_FILE).write_text(call)
    entry = folder / ENTRY_FILE
    entry.write_text(entry_script(fn.__name__))
    return entry


def is_function_run(spec: Any) -> bool:
    """Whether a run's job is a function (its script is the entry script ``run`` writes)."""
    return spec is not None and spec.script is not None and Path(spec.script).name == ENTRY_FILE


def _read(folder: Path) -> Optional[dict[str, Any]]:
    record = read_json_bounded(folder / RETURN_FILE, RETURN_LIMIT + 1024)
    if not isinstance(record, dict) or record.get("v") != RETURN_VERSION or not isinstance(record.get("ok"), bool):
        return None
    if not record["ok"] and not isinstance(record.get("traceback"), str):
        return None
    return record


def _raised(record: dict[str, Any], key: tuple[str, int], name: str, exit_code: Optional[int]) -> FunctionFailed:
    text = printable(str(record["traceback"])[-TRACEBACK_LIMIT:])
    last = next((line for line in reversed(text.splitlines()) if line.strip()), "an exception")
    message = one_line(f"{key[0]}-{key[1]}: {name}() raised {last}", 400)
    failed = FunctionFailed(key[1], exit_code, message, traceback=text, role=key[0])
    failed.__cause__ = WorkerTraceback(f"{key[0]}-{key[1]}", text)  # shown under the error, as its cause
    return failed


def failure(run_dir: Path, keys: Sequence[tuple[str, int]], name: str,
            exit_codes: Optional[Mapping[tuple[str, int], Optional[int]]] = None,
            first: Optional[tuple[str, int]] = None) -> Optional[FunctionFailed]:
    """FunctionFailed naming the replica whose function raised (``first`` if it did, else the first in ``keys``'
    order), with its traceback; None if none did."""
    records = {key: _read(run_dir / contract.replica_dir(*key)) for key in keys}
    raised = [key for key in keys if (r := records[key]) is not None and not r["ok"]]
    if not raised:
        return None
    key = first if first in raised else raised[0]
    record = records[key]
    assert record is not None
    return _raised(record, key, name, (exit_codes or {}).get(key))


def returns(run_dir: Path, keys: Sequence[tuple[str, int]], name: str) -> list[Any]:
    """Each replica's return value, in ``keys``' order, read from its folder as untrusted input. FunctionFailed if a
    replica's function raised; OrchError if a replica left no return value."""
    error = failure(run_dir, keys, name)
    if error is not None:
        raise error
    records = [_read(run_dir / contract.replica_dir(*key)) for key in keys]
    for key, record in zip(keys, records):
        if record is None:
            raise OrchError(f"{key[0]}-{key[1]}: {name}() left no return value in its folder ({RETURN_FILE}: missing, "
                            f"over {RETURN_LIMIT >> 20} MiB or not orch's); its log (`orch logs`) says why")
    return [record["value"] for record in records if record is not None]


def name_of(source_dir: Path) -> str:
    """The function's name as a run's snapshot records it (ARGS_FILE), for messages."""
    call = read_json_bounded(source_dir / ARGS_FILE, RETURN_LIMIT)
    name = call.get("function") if isinstance(call, dict) else None
    return name if isinstance(name, str) and name.isidentifier() else "the function"
