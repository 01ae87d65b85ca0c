#!/usr/bin/env python3
"""Fails when a file includes a header of a higher layer, or a library below serving/ uses CLI11.

Layers, bottom to top: runtime -> cache -> jit -> autotune -> model -> serving. A file may include headers
of its own layer and of the layers below it. templates/common/ (kernel parameter structs) is data of the
JIT: jit/ and everything above may include it as "common/<family>_params.h". tests/ is above everything and
may include anything; of the libraries only serving/ (the `kiln bench op` command) may include tests/ops/
and tests/common/. Usage: check_layering.py SOURCE_ROOT
"""
import os
import re
import sys

LAYERS = ["runtime", "cache", "jit", "autotune", "model", "serving"]
RANK = {name: i for i, name in enumerate(LAYERS)}
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
SOURCES = (".cpp", ".hpp", ".h")


def target_rank(path):
    top = path.split("/", 1)[0]
    if top in RANK:
        return RANK[top], top
    if top == "common":  # templates/common parameter headers
        return RANK["jit"], "templates/common"
    if top == "tests":
        return len(LAYERS), "tests"
    return None, top


def main(root):
    problems = []
    for layer in LAYERS:
        base = os.path.join(root, layer)
        for dirpath, _, files in os.walk(base):
            for f in files:
                if not f.endswith(SOURCES):
                    continue
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, root)
                with open(path, encoding="utf-8", errors="replace") as fh:
                    for n, line in enumerate(fh, 1):
                        if layer != "serving" and re.match(r"^\s*#\s*include\s*<CLI/", line):
                            problems.append(f"{rel}:{n}: CLI11 below serving/ (command-line code lives in serving/cli/)")
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        inc = m.group(1)
                        rank, what = target_rank(inc)
                        if rank is None:
                            continue  # kiln_config.h, system-like quoted headers
                        allowed = RANK[layer]
                        if what == "tests" and layer == "serving" and (inc.startswith("tests/ops/") or inc.startswith("tests/common/")):
                            continue
                        if rank > allowed:
                            problems.append(f"{rel}:{n}: {layer}/ includes {inc} ({what} is above {layer})")
    for p in problems:
        print(p)
    print(f"{len(problems)} layering problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else os.getcwd()))
