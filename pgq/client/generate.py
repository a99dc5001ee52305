"""Generate the blocking client (pgq/client/queue.py) from the asyncio one (pgq/client/async_queue.py).

    python3 pgq/client/generate.py          write queue.py
    python3 pgq/client/generate.py --check  exit 1 if queue.py is not what this would write

One source for both clients: every change is written once, in async_queue.py. The rules, applied
line by line (comments and docstrings included, so the generated file reads like the source):

- a line ending in `# async-only` is left out; when it opens a function (`def`), so is its body;
- a line ending in `# sync: CODE` becomes CODE, at the line's indentation;
- `async def` / `async with` / `async for` lose `async`; `await asyncio.to_thread(F)` becomes `F()`,
  and every other `await ` goes (but not right after a backquote: docstrings may quote them);
- asyncio names become their blocking twins (RENAMES), except inside backquotes, where the
  docstrings name both classes on purpose.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "async_queue.py"
TARGET = HERE / "queue.py"

RENAMES = {
    "AsyncConnectionPool": "ConnectionPool",
    "AsyncConnection": "Connection",
    "AsyncCursor": "Cursor",
    "AsyncQueue": "Queue",
    "AsyncWakeup": "Wakeup",
    "AsyncRetrying": "Retrying",
    "SpareFlag": "SpareLock",
    "AsyncWatchdog": "Watchdog",
    "configure_connection_async": "configure_connection",
    "run_async": "run_sync",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
}
_RENAME = re.compile(r"(?<![`\w])(" + "|".join(sorted(RENAMES, key=len, reverse=True)) + r")(?![`\w])")
_DIRECTIVE = re.compile(r"^(?P<indent>\s*)(?P<code>.*?)\s+# sync: (?P<sync>.*)$")
_TO_THREAD = re.compile(r"await asyncio\.to_thread\(([^()]*)\)")

HEADER = ('"""`Queue`, the blocking pgq client. GENERATED from async_queue.py by generate.py: do not edit;\n'
          'edit async_queue.py and run `python3 pgq/client/generate.py`."""\n')


def render(source: str) -> str:
    """The blocking client's source, from the asyncio client's `source`."""
    out: list[str] = []
    skip_deeper_than: int | None = None
    lines = source.splitlines()
    body_start = _after_module_docstring(lines)
    for line in lines[body_start:]:
        indent = len(line) - len(line.lstrip())
        if skip_deeper_than is not None:
            if not line.strip() or indent > skip_deeper_than:
                continue
            skip_deeper_than = None
        if line.rstrip().endswith("# async-only"):
            if re.match(r"\s*(async\s+)?def\s", line):
                skip_deeper_than = indent
            continue
        directive = _DIRECTIVE.match(line)
        if directive is not None:
            line = directive["indent"] + directive["sync"]
        line = re.sub(r"(?<!`)\basync (def|with|for)\b", r"\1", line)
        line = _TO_THREAD.sub(r"\1()", line)
        line = re.sub(r"(?<!`)\bawait ", "", line)
        line = _RENAME.sub(lambda m: RENAMES[m.group(1)], line)
        out.append(line)
    text = HEADER + "\n".join(out).rstrip() + "\n"
    return re.sub(r"\n{3,}(?=\S)", lambda m: m.group(0) if m.group(0).count("\n") <= 3 else "\n\n\n", text)


def _after_module_docstring(lines: list[str]) -> int:
    """The index of the first line after the module docstring of `lines`."""
    if not lines or not lines[0].startswith('"""'):
        return 0
    if lines[0].count('"""') >= 2:
        return 1
    return next(i for i, line in enumerate(lines[1:], 1) if '"""' in line) + 1


def main(argv: list[str]) -> int:
    """Write queue.py, or with --check compare it; returns the exit status."""
    wanted = render(SOURCE.read_text())
    if "--check" in argv:
        if TARGET.read_text() != wanted:
            print(f"{TARGET} is stale: run python3 pgq/client/generate.py", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
