"""The house rules of amso-runtime, checked from the code's own imports (plain Python, no tool).

`amso-runtime/floors.txt` gives every file of `amso-runtime/src/` a floor. This script reads
every `use crate::…`, `use super::…` and every path written out in code (`crate::cuda::driver::x`),
resolves each to the file that defines the module, and fails when:

- an import points up, to a file of a higher floor (unless the two files are a declared pair);
- files of one floor import each other in a circle, other than a declared pair of two;
- a file is over the line limit (600), or a file is missing from the table.

    python3 scripts/floors.py            # check; exit status 1 with one line per violation
    python3 scripts/floors.py --edges    # print every import arrow, file -> file, with its floors

The test command runs the check (`tests/python/test_floors.py`), with a violation planted in a
copy of the tree to see it fail.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINE_LIMIT = 600


@dataclass
class Table:
    """The floors table: file or folder prefixes by floor, and the declared pairs."""

    floors: list[tuple[str, int]] = field(default_factory=list)
    pairs: set[frozenset[str]] = field(default_factory=set)

    @classmethod
    def read(cls, path: Path) -> Table:
        table = cls()
        for number, raw in enumerate(path.read_text().splitlines(), 1):
            line = raw.split("#", 1)[0].split()
            if not line:
                continue
            if line[0] == "pair" and len(line) == 3:
                table.pairs.add(frozenset(line[1:]))
            elif line[0].isdigit() and len(line) > 1:
                table.floors += [(entry, int(line[0])) for entry in line[1:]]
            else:
                raise SystemExit(f"{path}:{number}: expected 'FLOOR PATH...' or 'pair A B', found {raw!r}")
        return table

    def floor(self, file: str) -> int | None:
        """The floor of `file` (relative to src/): its own entry, else its longest folder entry."""
        best: tuple[int, int] | None = None
        for entry, floor in self.floors:
            if file == entry or (entry.endswith("/") and file.startswith(entry)):
                if best is None or len(entry) > best[0]:
                    best = (len(entry), floor)
        return None if best is None else best[1]


def strip_source(text: str) -> str:
    """The code without comments, string literals and `#[cfg(test)]` modules (whose `super` is the file itself)."""
    text = re.sub(r"\bpub\s*\(\s*in\s+[\w:]+\s*\)", "pub", blank_literals(text))
    while (found := re.search(r"#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*mod\s+\w+\s*\{", text)) is not None:
        depth, at = 1, found.end()
        while depth and at < len(text):
            depth += {"{": 1, "}": -1}.get(text[at], 0)
            at += 1
        text = text[: found.start()] + text[at:]
    return inline_modules(text)


def blank_literals(text: str) -> str:
    """`text` with comments dropped, and string and character literals emptied (a lexer's pass:
    a brace or a path inside one is not code)."""
    out: list[str] = []
    at, n = 0, len(text)
    while at < n:
        char = text[at]
        if text.startswith("//", at):
            at = text.find("\n", at)
            at = n if at < 0 else at
        elif text.startswith("/*", at):
            depth, at = 1, at + 2
            while depth and at < n:
                if text.startswith("/*", at):
                    depth, at = depth + 1, at + 2
                elif text.startswith("*/", at):
                    depth, at = depth - 1, at + 2
                else:
                    at += 1
        elif (raw := re.match(r'b?r(#*)"', text[at:])) and (at == 0 or not (text[at - 1].isalnum() or text[at - 1] == "_")):
            close = '"' + raw.group(1)
            end = text.find(close, at + raw.end())
            out.append('""')
            at = n if end < 0 else end + len(close)
        elif char == '"':
            at += 1
            while at < n and text[at] != '"':
                at += 2 if text[at] == "\\" else 1
            out.append('""')
            at += 1
        elif char == "'" and (literal := re.match(r"'(?:\\[^']*|[^'\\])'", text[at:])):
            out.append("' '")
            at += literal.end()
        else:
            out.append(char)
            at += 1
    return "".join(out)


def inline_modules(text: str) -> str:
    """Inside an inline `mod name { … }`, `super` is the file itself: rewrite its paths one level
    up (`super::x` -> `self::x`, `super::super::x` -> `super::x`), innermost blocks first."""
    while (found := re.search(r"\bmod\s+\w+\s*\{", text)) is not None:
        depth, at = 1, found.end()
        while depth and at < len(text):
            depth += {"{": 1, "}": -1}.get(text[at], 0)
            at += 1
        body = inline_modules(text[found.end() : at - 1])
        body = re.sub(r"\bsuper::super\b", "super", re.sub(r"\bsuper\b(?!::super)", "self", body))
        text = text[: found.start()] + body + text[at:]
    return text


def expand_use(tree: str) -> list[str]:
    """`a::{b, c::{d, e}}` -> ['a::b', 'a::c::d', 'a::c::e'] (renames and globs dropped to their path)."""
    tree = re.sub(r"\s+", "", tree)
    depth, start = 0, None
    for at, char in enumerate(tree):
        if char == "{":
            if depth == 0:
                start = at
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0 and start is not None:
                prefix, inner, rest = tree[:start], tree[start + 1 : at], tree[at + 1 :]
                parts, level, last = [], 0, 0
                for i, c in enumerate(inner):
                    level += {"{": 1, "}": -1}.get(c, 0)
                    if c == "," and level == 0:
                        parts.append(inner[last:i])
                        last = i + 1
                parts.append(inner[last:])
                paths = []
                for part in filter(None, parts):
                    for path in expand_use(part + rest):
                        paths.append(prefix.rstrip(":") if path == "self" else prefix + path)
                return paths
    return [re.sub(r"(::\*|as\w+)$", "", tree.replace(" as ", "as"))]


class Tree:
    """The runtime's files and their module paths."""

    def __init__(self, src: Path):
        self.src = src
        self.files = sorted(str(p.relative_to(src)) for p in src.rglob("*.rs") if not p.name.endswith(("_tests.rs", "/tests.rs")) and p.name != "tests.rs")

    def module_of(self, file: str) -> list[str]:
        parts = file[:-3].split("/")
        if parts[-1] in ("mod", "lib"):
            parts = parts[:-1]
        return parts

    def file_of(self, module: list[str]) -> str | None:
        if not module:
            return "lib.rs"
        for candidate in ("/".join(module) + ".rs", "/".join(module) + "/mod.rs"):
            if candidate in self.files:
                return candidate
        return None

    def resolve(self, file: str, path: str) -> str | None:
        """The file defining the deepest module `path` (written in `file`) names."""
        segments = [s for s in path.split("::") if s]
        if not segments:
            return None
        here = self.module_of(file)
        if segments[0] in ("crate", "$crate"):
            module, segments = [], segments[1:]
        elif segments[0] == "super":
            module = here
            while segments and segments[0] == "super":
                module, segments = module[:-1], segments[1:]
        elif segments[0] == "self":
            module, segments = here, segments[1:]
        else:
            return None
        target = self.file_of(module)
        for segment in segments:
            deeper = self.file_of([*module, segment])
            if deeper is None:
                break
            module, target = [*module, segment], deeper
        return target

    def imports(self, file: str) -> set[str]:
        code = strip_source((self.src / file).read_text())
        paths: list[str] = []
        for statement in re.findall(r"\buse\s+([^;]+);", code):
            paths += expand_use(statement)
        paths += re.findall(r"(?<![\w:])\$?(?:crate|super|self)(?:::(?:super|\w+))+", re.sub(r"\buse\s+[^;]+;", "", code))
        targets = {self.resolve(file, path) for path in paths}
        return {t for t in targets if t is not None and t != file}


def strongly_connected(nodes: list[str], edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components of more than one file."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10000)
    for node in nodes:
        if node not in index:
            visit(node)
    return found


def check(src: Path, table: Table) -> tuple[list[str], dict[str, set[str]]]:
    """The violations, one line each, and the import arrows."""
    tree = Tree(src)
    problems: list[str] = []
    edges = {file: tree.imports(file) for file in tree.files}
    for file in tree.files:
        lines = (src / file).read_text().count("\n")
        if lines > LINE_LIMIT:
            problems.append(f"{file}: {lines} lines, over the limit of {LINE_LIMIT}: split it by what it holds")
        if table.floor(file) is None:
            problems.append(f"{file}: not in the floors table: give it a floor in amso-runtime/floors.txt")
    for file, targets in edges.items():
        for target in sorted(targets):
            low, high = table.floor(file), table.floor(target)
            if low is None or high is None or frozenset((file, target)) in table.pairs:
                continue
            if high > low:
                problems.append(f"{file} (floor {low}) imports {target} (floor {high}): an import must point down; "
                                "move what it uses to a lower floor")
    for component in strongly_connected(tree.files, edges):
        if len(component) == 2 and frozenset(component) in table.pairs:
            continue
        problems.append(f"circle of {len(component)} files: {', '.join(component)}: break it (only declared pairs "
                        "of two files may import each other)")
    return problems, edges


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", type=Path, default=ROOT / "amso-runtime" / "src")
    parser.add_argument("--table", type=Path, default=ROOT / "amso-runtime" / "floors.txt")
    parser.add_argument("--edges", action="store_true", help="print every import arrow")
    args = parser.parse_args(argv)
    table = Table.read(args.table)
    problems, edges = check(args.src, table)
    if args.edges:
        for file, targets in sorted(edges.items()):
            for target in sorted(targets):
                print(f"{file} ({table.floor(file)}) -> {target} ({table.floor(target)})")
        return 0
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} violation(s) of the floors in {args.table.relative_to(ROOT) if args.table.is_relative_to(ROOT) else args.table}")
        return 1
    print(f"floors: {len(edges)} files, {sum(map(len, edges.values()))} imports, every one pointing down or within a declared pair")
    return 0


if __name__ == "__main__":
    sys.exit(main())
