"""The line to edit: where in the user's source a pipeline stage (or `compile`) is written.

A dataset keeps no record of where it was made, so the call is found in the source files by
what it must look like: `.map(slow_decode)` is a call of a `map` attribute whose function
argument names the user's function (or is the lambda defined on that line); a stage without a
function (`.batch(64)`) is matched by its literal arguments. The files searched are those of
the pipeline's functions, then the script's. The edit is the call as written, with keyword
arguments set or a call appended, on one line.
"""

import ast
import os
import sys
from dataclasses import dataclass
from functools import cache
from typing import Any

from trainer_agent.tune.chain import METHODS, Link

MAX_SOURCE_BYTES = 2_000_000
MAX_TEXT = 300

# Keyword names of a function argument, by method.
_FUNCTION_KEYWORDS = ("map_func", "predicate")
# The attribute holding a stage's first literal argument, to tell `.batch(64)` from
# `.batch(256)` when a stage runs no function.
_FIRST_ARGUMENTS = {
    "Batch": "_batch_size",
    "ParallelBatch": "_batch_size",
    "PaddedBatch": "_batch_size",
    "Prefetch": "_buffer_size",
    "Shuffle": "_buffer_size",
    "Repeat": "_count",
    "Take": "_count",
    "Skip": "_count",
}


@dataclass(frozen=True)
class CallSite:
    """A call as the user wrote it, and that call changed."""

    path: str
    line: int
    before: str
    after: str

    @property
    def where(self) -> str:
        return f"{shown_path(self.path)}:{self.line}"

    def as_dict(self) -> dict[str, Any]:
        return {"where": self.where, "path": self.path, "line": self.line,
                "before": self.before, "after": self.after}  # fmt: skip


def shown_path(path: str) -> str:
    """`path` relative to the working directory when it lies under it."""
    try:
        relative = os.path.relpath(path)
    except ValueError:
        return path
    return path if relative.startswith("..") else relative


def search_files(chain: list[Link]) -> list[str]:
    """The files of the pipeline's functions, then the script's (`__main__`), each once."""
    files: list[str] = []
    for link in chain:
        code = getattr(_unwrapped(link.function), "__code__", None)
        if code is not None:
            files.append(code.co_filename)
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    if main:
        files.append(main)
    return [f for f in dict.fromkeys(os.path.abspath(f) for f in files) if os.path.isfile(f)]


def _unwrapped(function: Any) -> Any:
    while hasattr(function, "func") and not hasattr(function, "__code__"):
        function = function.func
    return function


@cache
def _parsed(path: str) -> tuple[str, ast.Module] | None:
    try:
        if os.path.getsize(path) > MAX_SOURCE_BYTES:
            return None
        with open(path, encoding="utf-8") as file:
            source = file.read()
        return source, ast.parse(source, filename=path)
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return None


def _names_function(argument: ast.expr, name: str, line: int | None) -> bool:
    if isinstance(argument, ast.Name):
        return argument.id == name
    if isinstance(argument, ast.Attribute):
        return argument.attr == name
    if isinstance(argument, ast.Lambda):
        return name == "<lambda>" and argument.lineno == line
    if isinstance(argument, ast.Call) and argument.args:  # functools.partial(f, ...)
        return _names_function(argument.args[0], name, line)
    return False


def _function_argument(call: ast.Call) -> ast.expr | None:
    if call.args:
        return call.args[0]
    return next((k.value for k in call.keywords if k.arg in _FUNCTION_KEYWORDS), None)


def _literal(node: ast.expr | None) -> Any:
    try:
        return ast.literal_eval(node) if node is not None else None
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def _first_argument(link: Link) -> int | None:
    attribute = _FIRST_ARGUMENTS.get(link.kind)
    if attribute is None:
        return None
    try:
        return int(getattr(link.node, attribute))
    except Exception:
        return None


def _matches(call: ast.Call, link: Link) -> bool:
    if link.function is not None:
        argument = _function_argument(call)
        code = getattr(_unwrapped(link.function), "__code__", None)
        line = code.co_firstlineno if code is not None else None
        return argument is not None and _names_function(argument, link.function_name, line)
    expected = _first_argument(link)
    if expected is None:
        return True
    value = _literal(call.args[0] if call.args else None)
    if value is None:  # written as a variable: cannot tell, so it may be this one
        return True
    return value == expected or (expected == -1 and value is None)


def _calls(tree: ast.Module, method: str) -> list[ast.Call]:
    found = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == method
    ]
    return sorted(found, key=lambda node: (node.lineno, node.col_offset))


def find_call(link: Link, files: list[str]) -> tuple[str, str, ast.Call] | None:
    """(path, source, call) of the call that made `link`, or None when none matches."""
    method = METHODS.get(link.kind)
    if method is None:
        return None
    for path in files:
        parsed = _parsed(path)
        if parsed is None:
            continue
        source, tree = parsed
        matching = [call for call in _calls(tree, method) if _matches(call, link)]
        if matching:
            return path, source, matching[0]
    return None


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _segment(source: str, node: ast.AST) -> str:
    return _one_line(ast.get_source_segment(source, node) or "")


def _written(source: str, call: ast.Call) -> str:
    """`.map(slow_decode)`: the call as written, without what it is called on."""
    assert isinstance(call.func, ast.Attribute)
    arguments = [_segment(source, argument) for argument in call.args]
    arguments += [_keyword(source, keyword) for keyword in call.keywords]
    return f".{call.func.attr}({', '.join(arguments)})"


def _keyword(source: str, keyword: ast.keyword) -> str:
    value = _segment(source, keyword.value)
    return f"{keyword.arg}={value}" if keyword.arg else f"**{value}"


def _with_keywords(source: str, call: ast.Call, keywords: dict[str, str]) -> str:
    assert isinstance(call.func, ast.Attribute)
    arguments = [_segment(source, argument) for argument in call.args]
    arguments += [_keyword(source, k) for k in call.keywords if k.arg not in keywords]
    arguments += [f"{name}={value}" for name, value in keywords.items()]
    return f".{call.func.attr}({', '.join(arguments)})"


def _line(call: ast.Call) -> int:
    """The line of `.map(`: in a chain written over several lines, the attribute's own."""
    if isinstance(call.func, ast.Attribute) and call.func.end_lineno:
        return call.func.end_lineno
    return call.lineno


def _site(path: str, line: int, before: str, after: str) -> CallSite:
    return CallSite(path=path, line=line, before=before[:MAX_TEXT], after=after[:MAX_TEXT])


def tf_name(source: str) -> str:
    """What the file calls TensorFlow (`import tensorflow as tf`), for the edits' text."""
    parsed = ast.parse(source) if len(source) < MAX_SOURCE_BYTES else None
    for node in ast.walk(parsed) if parsed is not None else []:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "tensorflow":
                    return alias.asname or "tensorflow"
    return "tf"


def keyword_edit(link: Link, files: list[str], keywords: dict[str, str]) -> CallSite | None:
    """The link's call with `keywords` set (`{TF}` in a value is the file's name for
    TensorFlow), or None when the call is not found."""
    found = find_call(link, files)
    if found is None:
        return None
    path, source, call = found
    tf = tf_name(source)
    values = {name: value.replace("{TF}", tf) for name, value in keywords.items()}
    return _site(path, _line(call), _written(source, call), _with_keywords(source, call, values))


def appended_edit(link: Link, files: list[str], appended: str) -> CallSite | None:
    """The link's call with `appended` (`.cache()`) written after it, or None."""
    found = find_call(link, files)
    if found is None:
        return None
    path, source, call = found
    written = _written(source, call)
    text = appended.replace("{TF}", tf_name(source))
    return _site(path, _line(call), written, written + text)


def compile_edit(files: list[str], keywords: dict[str, str]) -> CallSite | None:
    """The script's `compile(...)` call with `keywords` set, when exactly one file has
    exactly one such call (else the edit cannot be placed for sure: None)."""
    for path in files[::-1]:  # the script first
        parsed = _parsed(path)
        if parsed is None:
            continue
        source, tree = parsed
        calls = _calls(tree, "compile")
        if len(calls) == 1:
            call = calls[0]
            return _site(
                path, _line(call), _written(source, call), _with_keywords(source, call, keywords)
            )
    return None


def option_edits(files: list[str], settings: dict[str, str]) -> list[CallSite]:
    """The assignments `<x>.autotune.enabled = False` (for each `autotune.enabled` in
    `settings`, keyed by the option's path), rewritten with the setting's value."""
    sites = []
    for path in files[::-1]:
        parsed = _parsed(path)
        if parsed is None:
            continue
        source, tree = parsed
        for node in ast.walk(tree):
            if not isinstance(node, ast.Assign) or len(node.targets) != 1:
                continue
            target = _segment(source, node.targets[0])
            for option, value in settings.items():
                if target.endswith("." + option):
                    before = _segment(source, node)
                    sites.append(_site(path, node.lineno, before, f"{target} = {value}"))
    return sites


def function_where(function: Any) -> str | None:
    """`train.py:30`: where the user's function is defined."""
    code = getattr(_unwrapped(function), "__code__", None)
    if code is None or not os.path.isfile(code.co_filename):
        return None
    return f"{shown_path(code.co_filename)}:{code.co_firstlineno}"
