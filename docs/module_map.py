"""The module map of a mor checkout (docs/architecture.md, "Module map"): per folder its
modules, lines and largest function, the functions over 100 lines, and the import arrows
between folders (import statements, by the folder they point to).

    python3 docs/module_map.py .            # this checkout
    git worktree add /tmp/old <rev> && python3 docs/module_map.py /tmp/old
"""

from __future__ import annotations

import ast
import collections
import pathlib
import sys

TOPS = ("planner", "rules", "physical", "writer", "mor")


def folder_of(root: pathlib.Path, module: str) -> str | None:
    """The source folder an imported module lives in (`mor.physical.scan.reads` ->
    physical/scan), None for another distribution's."""
    parts = module.split(".")
    if parts[0] != "mor":
        return None
    if len(parts) < 2 or parts[1] not in TOPS[:4]:
        return "mor"
    if len(parts) > 2 and (root / parts[1] / parts[2]).is_dir():
        return f"{parts[1]}/{parts[2]}"
    return parts[1]


def main(root: pathlib.Path) -> None:
    folders: dict[str, list] = collections.defaultdict(lambda: [0, 0, (0, "")])
    arrows: collections.Counter[tuple[str, str]] = collections.Counter()
    funcs = []
    for top in TOPS:
        for f in sorted((root / top).rglob("*.py")):
            rel = f.relative_to(root)
            folder = str(rel.parent)
            text = f.read_text()
            folders[folder][0] += 1
            folders[folder][1] += len(text.splitlines())
            for n in ast.walk(ast.parse(text)):
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    size = n.end_lineno - n.lineno + 1
                    funcs.append((size, f"{rel}:{n.name}"))
                    if size > folders[folder][2][0]:
                        folders[folder][2] = (size, f"{rel.name}:{n.name}")
                    continue
                if isinstance(n, ast.ImportFrom) and n.module:
                    names = [n.module]
                elif isinstance(n, ast.Import):
                    names = [a.name for a in n.names]
                else:
                    continue
                for m in names:
                    to = folder_of(root, m)
                    if to is not None and to != folder:
                        arrows[(folder, to)] += 1
    print("| folder | modules | lines | largest function |")
    print("|---|---:|---:|---|")
    for k in sorted(folders):
        n, lines, (size, name) = folders[k]
        print(f"| `{k}/` | {n} | {lines:,} | {name} ({size}) |")
    funcs.sort(reverse=True)
    over = ", ".join(f"{n} ({s})" for s, n in funcs if s > 100) or "none"
    print(f"\nfunctions over 100 lines: {over}; the largest: {funcs[0][1]} ({funcs[0][0]})")
    print("\nimport arrows (from -> to: import statements)")
    for (a, b), n in sorted(arrows.items()):
        print(f"  {a} -> {b}: {n}")


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve())
