#!/usr/bin/env python3
"""Fails on an #include that points up the layer order of layers.txt.

Every #include "..." of the layers' folders (SCANNED) is resolved to a file of the tree and
to the layer that holds it (the longest layer folder that contains it). A layer may include its
own files and those of layers listed before it in layers.txt, except a layer marked
"private-to X", which only X may include; an include of a later layer, of a private layer from
elsewhere, or of something in no layer (tools, bench, examples, tests sit above every layer) is
reported with file and line. include/zrt/zrt.h, the public header, includes nothing of the tree at all.

The build says the same: each layer's meson.build declares zrt_<name>_dep, whose dependencies
must name exactly the layers the layer includes (its zrt_<other>_dep objects), no more, no less.

Usage: check_layers.py SOURCE_ROOT [LAYERS_FILE]
"""

import os
import re
import sys

SCANNED = ("lib", "kernels", "transports", "engine", "device", "collectives", "zero")
SUFFIXES = (".h", ".hpp", ".c", ".cc", ".cpp", ".cu", ".cuh")
PUBLIC_HEADER = "include/zrt/zrt.h"
# Written by the top-level meson.build into the build folder: build switches, no code.
GENERATED = {"zrt_build_config.h"}
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def read_layers(path):
    """The layers in order, and for each private layer the layers that may include it."""
    layers = []
    private = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            words = line.split()
            if not words or words[0].startswith("#"):
                continue
            layer = words[0].rstrip("/")
            layers.append(layer)
            if len(words) == 1:
                continue
            if words[1] != "private-to" or len(words) < 3:
                raise SystemExit(f"{path}:{number}: expected 'LAYER' or 'LAYER private-to X...'")
            private[layer] = [word.rstrip("/") for word in words[2:]]
    return layers, private


def layer_of(path, layers):
    """The longest layer folder that contains `path` (relative to the root), or None."""
    best = None
    for layer in layers:
        if path.startswith(layer + "/") and (best is None or len(layer) > len(best)):
            best = layer
    return best


def resolve(root, including, target):
    """The tree path an include names: from the root (zrt_inc), include/ for zrt/..., or next
    to the including file; None when it names no file of the tree."""
    candidates = [target, os.path.join("include", target),
                  os.path.normpath(os.path.join(os.path.dirname(including), target))]
    for candidate in candidates:
        if os.path.isfile(os.path.join(root, candidate)):
            return candidate.replace(os.sep, "/")
    return None


def sources(root):
    for top in SCANNED:
        for folder, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if name.endswith(SUFFIXES):
                    yield os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/")


def includes(root, path):
    with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            match = INCLUDE.match(line)
            if match:
                yield number, match.group(1)


DECLARE = re.compile(r"^(zrt_\w+_dep)\s*=\s*declare_dependency\(", re.M)
LIBRARY = re.compile(r"^(zrt_\w+_lib)\s*=\s*static_library\(", re.M)
DEP_NAME = re.compile(r"\bzrt_\w+_dep\b")


def balanced(text, start):
    """text[start:] up to the bracket that closes the one just before `start`."""
    depth = 1
    for index in range(start, len(text)):
        if text[index] in "([":
            depth += 1
        elif text[index] in ")]":
            depth -= 1
            if depth == 0:
                return text[start:index]
    return text[start:]


def declared_deps(root, layer):
    """(the layer's dependency object, the dependency objects its static library names, or for
    a header-only layer its dependency object names), or None for a layer without one."""
    path = os.path.join(root, layer, "meson.build")
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        text = re.sub(r"#.*", "", f.read())
    match = DECLARE.search(text)
    if match is None:
        return None
    library = LIBRARY.search(text)
    call = balanced(text, (library or match).end())
    deps = re.search(r"dependencies\s*:\s*(\[|\w+)", call)
    named = ""
    if deps is not None and deps.group(1) == "[":
        named = balanced(call, deps.end())
    elif deps is not None:
        assigned = re.search(r"^" + deps.group(1) + r"\s*=\s*\[", text, re.M)
        named = balanced(text, assigned.end()) if assigned else ""
    return match.group(1), set(DEP_NAME.findall(named))


def check_build(root, layers, included):
    """Each layer's declared dependencies against the layers it includes."""
    problems = []
    declared = {layer: declared_deps(root, layer) for layer in layers}
    dep_of = {found[0]: layer for layer, found in declared.items() if found is not None}
    for layer in layers:
        if declared[layer] is None:
            continue
        own, names = declared[layer]
        named = {dep_of[name] for name in names if name in dep_of}
        needed = {other for other in included.get(layer, {}) if other in dep_of.values()}
        for other in sorted(needed - named, key=layers.index):
            where = included[layer][other]
            problems.append(f"{layer}/meson.build: {own} does not depend on {other}, but "
                            f"{where} includes it")
        for other in sorted(named - needed, key=layers.index):
            problems.append(f"{layer}/meson.build: {own} depends on {other}, which no file of "
                            f"{layer} includes")
    return problems


def check(root, layers, private):
    rank = {layer: index for index, layer in enumerate(layers)}
    problems = []
    included = {}  # layer -> {layer it includes: "file:line" of the first such include}
    for number, target in includes(root, PUBLIC_HEADER):
        problems.append(f'{PUBLIC_HEADER}:{number}: #include "{target}": the public header '
                        "includes nothing of the tree")
    for path in sources(root):
        mine = layer_of(path, layers)
        if mine is None:
            problems.append(f"{path}: in no layer of layers.txt (add its folder there)")
            continue
        for number, target in includes(root, path):
            if target in GENERATED:
                continue
            resolved = resolve(root, path, target)
            if resolved is None:
                problems.append(f'{path}:{number}: #include "{target}" names no file of the tree')
                continue
            theirs = layer_of(resolved, layers)
            if theirs is not None and theirs != mine:
                included.setdefault(mine, {}).setdefault(theirs, f"{path}:{number}")
            if theirs is None:
                problems.append(f'{path}:{number}: #include "{target}" points up: {mine} '
                                f"includes {resolved}, which is in no layer (above them all)")
            elif rank[theirs] > rank[mine]:
                problems.append(f'{path}:{number}: #include "{target}" points up: {mine} '
                                f"(layer {rank[mine]}) includes {theirs} (layer {rank[theirs]})")
            elif theirs != mine and theirs in private and mine not in private[theirs]:
                problems.append(f'{path}:{number}: #include "{target}": {theirs} may be '
                                f"included only by {', '.join(private[theirs])}, not by {mine}")
    return problems + check_build(root, layers, included)


def main(argv):
    if len(argv) not in (2, 3):
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    root = argv[1]
    layers, private = read_layers(argv[2] if len(argv) == 3 else os.path.join(root, "layers.txt"))
    for layer in layers + [x for users in private.values() for x in users]:
        if not os.path.isdir(os.path.join(root, layer)):
            print(f"layers.txt: {layer} is not a folder of the tree", file=sys.stderr)
            return 1
    problems = check(root, layers, private)
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} problem(s) against the layer order of layers.txt", file=sys.stderr)
        return 1
    print(f"{len(layers)} layers: every include points down or stays in its layer, and every "
          "layer's Meson dependencies are the layers it includes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
