#!/usr/bin/env python3
"""Fails on a function longer than MAX_FUNCTION_LINES or a class with more than MAX_FIELDS data
members in the library's layers, unless sizes_allowed.txt names it with the reason it must be.

Sizes are found by brace matching on the source with comments and literals blanked: a function
runs from the line of its name to its closing brace (lambdas count toward the function that holds
them); a class's fields are the non-static data members declared directly in its body.

Usage: check_sizes.py SOURCE_ROOT [--report] [--allowed FILE]
  --report   print every function and class over the limits, largest first, and the totals
             (the figures an issue's before/after quotes), and exit 0.
"""

import argparse
import os
import re
import sys

MAX_FUNCTION_LINES = 80
MAX_FIELDS = 20
SUFFIXES = (".h", ".cc", ".cu", ".cuh")
# The library's layers; tools, tests and bench sit above them and are not held to this.
SCANNED_ROOTS = ("lib", "kernels", "transports", "engine", "collectives", "zero", "device")

CLASS_HEAD = re.compile(r"\b(class|struct|union)\s+(\w+(?:::\w+)*)[^;()]*$")
NAMESPACE_HEAD = re.compile(r"\bnamespace\b|\bextern\s*\"C\"|\benum\b")
FUNCTION_NAME = re.compile(r"([~\w:]+(?:<[^<>]*>)?|operator\s*[^\s(]+)\s*\($")


def blank_comments_and_literals(text):
    """The text with comments, string and char literals replaced by spaces (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"' and text[max(0, i - 1)] == "R" and text.startswith('"(', i):
            j = text.find(')"', i)
            j = n if j < 0 else j + 2
            out.append('"' + re.sub(r"[^\n]", " ", text[i + 1:j - 1]) + '"')
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (j - i - 1) + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def strip_preprocessor(text):
    return re.sub(r"(?m)^[ \t]*#.*(?:\\\n.*)*$", lambda m: re.sub(r"[^\n]", " ", m.group()), text)


def matching_paren_start(head):
    """Index of the '(' that opens the last balanced (...) of head, or -1."""
    depth = 0
    for i in range(len(head) - 1, -1, -1):
        if head[i] == ")":
            depth += 1
        elif head[i] == "(":
            depth -= 1
            if depth == 0:
                return i
    return -1


def function_name(head):
    """The name of the function whose body the '{' after head opens, or None."""
    head = " ".join(head.split())  # comments were blanked: long runs of spaces slow the regexes
    # A constructor's initializer list: cut at the ':' that follows the parameter list.
    for _ in range(8):
        m = re.search(r"\)( ?(const|noexcept|override|final|mutable|&&|&))*"
                      r"( ?->[\w:<>, *&]+)? ?$", head)
        if not m:
            return None
        start = matching_paren_start(head[:m.start() + 1])
        if start < 0:
            return None
        before = head[:start].rstrip()
        name = FUNCTION_NAME.search(before + "(")
        if not name:
            return None
        word = name.group(1)
        if word in ("if", "for", "while", "switch", "catch", "return", "sizeof", "decltype",
                    "alignas", "requires", "noexcept", "static_assert"):
            return None
        # An initializer `member(args)` after the list's ':' or ',': step back over it.
        stripped = before[:name.start()].rstrip()
        if stripped.endswith(",") or (stripped.endswith(":") and not stripped.endswith("::")
                                       and ")" in stripped):
            head = stripped[:-1].rstrip()
            continue
        return word
    return None


def statement_is_field(statement):
    s = " ".join(statement.split())
    if not s or s.endswith(":") or re.match(r"(using|typedef|friend|static|template|"
                                            r"public|private|protected|enum|class|struct|"
                                            r"static_assert|constexpr static|inline static)\b", s):
        return False
    s = re.sub(r"\{[^{}]*\}$", "", s)                         # brace initializer
    s = s.split("=", 1)[0] if "operator" not in s else s     # = initializer
    s = re.sub(r"<[^<>]*(<[^<>]*>[^<>]*)*>", "<>", s)        # template arguments
    if "(" in s:
        return False                                          # a method declaration
    return bool(re.search(r"\w\s*(\[[^\]]*\])?\s*$", s))


def scan(path, text):
    """Yields ('function', name, line, lines) and ('class', name, line, fields)."""
    code = strip_preprocessor(blank_comments_and_literals(text))
    stack = []                # (kind, name, start_line, fields, statement_start)
    last_cut = 0
    line = 1
    line_at = []
    for ch in code:
        line_at.append(line)
        if ch == "\n":
            line += 1
    for i, ch in enumerate(code):
        if ch == "{":
            head = code[last_cut:i]
            inside_function = any(kind in ("function", "block") for kind, *_ in stack)
            if inside_function:
                kind, name = "block", None
            elif (m := CLASS_HEAD.search(" ".join(head.split()))) and "(" not in head:
                kind, name = "class", m.group(2)
            elif NAMESPACE_HEAD.search(head) and "(" not in head:
                kind, name = "namespace", None
            elif (fname := function_name(head)) is not None:
                kind, name = "function", fname
            elif stack and stack[-1][0] == "class":
                kind, name = "init", None                # a member's brace initializer
            else:
                kind, name = "block", None
            first = line_at[last_cut + len(head) - len(head.lstrip())] if head.strip() \
                else line_at[i]
            stack.append([kind, name, first, 0])
            last_cut = i + 1
        elif ch == "}":
            if not stack:
                continue
            kind, name, first, fields = stack.pop()
            if kind == "function":
                yield ("function", name, first, line_at[i] - first + 1)
            elif kind == "class":
                yield ("class", name, first, fields)
            elif kind == "init" and stack and stack[-1][0] == "class":
                # `Type member{...};` : the statement goes on until the ';'
                continue
            last_cut = i + 1
        elif ch == ";":
            if stack and stack[-1][0] == "class" and statement_is_field(code[last_cut:i]):
                stack[-1][3] += 1
            last_cut = i + 1


def measure(root):
    found = []
    for top in SCANNED_ROOTS:
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith(SUFFIXES):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                for kind, what, first, size in scan(path, text):
                    found.append((kind, rel, what, first, size))
    return found


def read_allowed(path):
    allowed = {}
    if not os.path.exists(path):
        return allowed
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            parts = line.split(None, 2)
            if len(parts) < 3:
                raise SystemExit(f"{path}:{number}: expected 'FILE NAME reason...'")
            allowed[(parts[0], parts[1])] = parts[2].strip()
    return allowed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("--report", action="store_true")
    parser.add_argument("--allowed")
    args = parser.parse_args()
    allowed_path = args.allowed or os.path.join(os.path.dirname(__file__), "sizes_allowed.txt")
    allowed = read_allowed(allowed_path)
    found = measure(args.root)
    functions = sorted((f for f in found if f[0] == "function"), key=lambda f: -f[4])
    classes = sorted((f for f in found if f[0] == "class"), key=lambda f: -f[4])
    long_functions = [f for f in functions if f[4] > MAX_FUNCTION_LINES]
    big_classes = [c for c in classes if c[4] > MAX_FIELDS]
    if args.report:
        print(f"functions over {MAX_FUNCTION_LINES} lines: {len(long_functions)} "
              f"of {len(functions)}")
        for _, rel, name, first, size in long_functions:
            print(f"  {size:5d}  {rel}:{first}  {name}")
        print(f"classes over {MAX_FIELDS} fields: {len(big_classes)} of {len(classes)}")
        for _, rel, name, first, size in big_classes:
            print(f"  {size:5d}  {rel}:{first}  {name}")
        return 0
    failures = []
    used = set()
    for kind, rel, name, first, size in long_functions + big_classes:
        key = (rel, name)
        if key in allowed:
            used.add(key)
            continue
        unit = "lines" if kind == "function" else "fields"
        limit = MAX_FUNCTION_LINES if kind == "function" else MAX_FIELDS
        failures.append(f"{rel}:{first}: {kind} {name} has {size} {unit} (limit {limit}): split "
                        f"it into named phases or sub-objects, or name it in "
                        f"{os.path.basename(allowed_path)} with the reason it must be")
    for key in sorted(set(allowed) - used):
        failures.append(f"{os.path.basename(allowed_path)}: {key[0]} {key[1]} is within the "
                        f"limits now (or gone): remove its line")
    for failure in failures:
        print(failure)
    print(f"{len(functions)} functions, {len(classes)} classes checked; "
          f"{len(failures)} problems")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
