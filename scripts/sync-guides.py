#!/usr/bin/env python3
"""Copies each example region over the ```rust block that README.md or a page of docs/guide/
marks with <!-- example: FILE REGION --> (FILE in crates/fencelock/examples/). tests/guides.rs
fails when a block and its region differ; this makes them the same again."""
import pathlib
import re
import sys

root = pathlib.Path(__file__).resolve().parent.parent
examples = root / "crates/fencelock/examples"


def region(example, name):
    lines, inside = [], False
    for line in (examples / f"{example}.rs").read_text().splitlines():
        t = line.strip()
        if t == f"// region: {name}":
            inside = True
        elif t == f"// endregion: {name}":
            break
        elif inside and not t.startswith(("// region: ", "// endregion: ")):
            lines.append(line)
    else:
        sys.exit(f"examples/{example}.rs has no complete region {name}")
    indent = min((len(l) - len(l.lstrip()) for l in lines if l.strip()), default=0)
    return [l[indent:] if len(l) >= indent else "" for l in lines]


def sync(page):
    out, lines, i, changed = [], page.read_text().splitlines(), 0, False
    marker = None
    while i < len(lines):
        line = lines[i]
        m = re.fullmatch(r"\s*<!-- example: (\S+) (\S+) -->\s*", line)
        if m:
            marker = m.groups()
        if line.strip() == "```rust" and marker:
            end = i + 1
            while lines[end].strip() != "```":
                end += 1
            body = region(*marker)
            changed |= body != lines[i + 1 : end]
            out += [line] + body + ["```"]
            i, marker = end + 1, None
            continue
        if line.strip():
            marker = marker if m else None
        out.append(line)
        i += 1
    if changed:
        page.write_text("\n".join(out) + "\n")
        print(f"updated {page.relative_to(root)}")


for page in [
    root / "README.md",
    root / "crates/fencelock/README.md",
    *sorted((root / "docs/guide").glob("*.md")),
]:
    sync(page)
