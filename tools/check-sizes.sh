#!/usr/bin/env bash
# Lists every .cpp/.h file under src/ and codegen/ over 500 lines and every function there over 100 lines
# (issue 13: small files, short functions). Exit status 1 when anything is over and not allowed, else 0.
#
# Usage: tools/check-sizes.sh [--all] [--root DIR] [--allow FILE]
#   --all         ignore the allow list (report everything that is over, e.g. for a before/after list)
#   --root DIR    the repository root (default: the folder above this script)
#   --allow FILE  the allow list (default: tools/check-sizes.allow)
#   --list        also print every function found with its length (to check the heuristic)
#
# Allow list: one entry per line, `PATH` (a file over 500 lines) or `PATH:FUNCTION` (a function over 100
# lines, FUNCTION as this script prints it, e.g. `src/x.cpp:Graph::verify`), then `# owner: ...`. Entries
# are for parts other engineers still have to split; the list is meant to end empty. An entry that is no
# longer over is reported as stale (a note, not a failure).
#
# The heuristic (C++ is not parsed, only brace-matched):
#   - Comments, string and character literals (raw strings included) and preprocessor lines (with their
#     continuations) are blanked out first, keeping line breaks, so braces inside them do not count.
#   - Braces are matched. A `{` opened at namespace or class scope starts a function when the text before
#     it (since the last `;`, `{` or `}` at that scope) ends in `)` followed only by qualifiers (`const`,
#     `noexcept[(...)]`, `override`, `final`, `mutable`, `&`, `&&`, `-> type`, `requires ...`), or has a
#     constructor initializer list (`) : member(...), member{...}`). `namespace`, `class`, `struct`,
#     `union`, `enum` and `extern "C"` heads open scopes that are searched further; any other brace there
#     (an initializer such as `const T table[] = {...};`) is neither.
#   - Everything inside a function (lambdas, local classes, blocks) counts as part of it.
#   - A function's length is the lines from its signature's first line to its closing brace, inclusive.
#   - Its name is the (qualified) identifier before the parameter list's `(`.
set -euo pipefail
exec python3 - "$(cd "$(dirname "$0")/.." && pwd)" "$@" <<'PYTHON'
import os
import re
import sys

FILE_LIMIT = 500
FUNCTION_LIMIT = 100
ROOTS = ("src", "codegen")


def blank(text, start, end):
    """Replaces text[start:end] by spaces, keeping line breaks (so line numbers stay)."""
    return "".join(c if c == "\n" else " " for c in text[start:end])


def strip_code(text):
    """Blanks comments, literals and preprocessor lines; returns text of the same length and lines."""
    out = []
    i, n = 0, len(text)
    line_start = True  # only whitespace since the last line break: a `#` here starts a directive
    while i < n:
        c = text[i]
        if line_start and c == "#":
            j = i
            while j < n and text[j] != "\n":
                if text[j] == "\\" and j + 1 < n and text[j + 1] == "\n":
                    j += 2
                    continue
                if text.startswith("/*", j):  # a block comment may run past the directive's line
                    k = text.find("*/", j + 2)
                    j = n if k < 0 else k + 2
                    continue
                j += 1
            out.append(blank(text, i, j))
            i = j
            continue
        if c == "\n":
            line_start = True
            out.append(c)
            i += 1
            continue
        if not c.isspace():
            line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(blank(text, i, j))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(blank(text, i, j))
            i = j
        elif c == "R" and i + 1 < n and text[i + 1] == '"' and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_") or text[i - 1] in "u8LU"):
            m = re.match(r'R"([^()\\ \n]{0,16})\(', text[i:])
            if m:
                close = ")" + m.group(1) + '"'
                j = text.find(close, i + m.end())
                j = n if j < 0 else j + len(close)
                out.append("R" + blank(text, i + 1, j))
                i = j
            else:
                out.append(c)
                i += 1
        elif c in "\"'":
            # A digit separator (1'000'000) is not a character literal.
            if c == "'" and i > 0 and text[i - 1].isalnum() and re.match(r"[0-9a-fA-F]", text[i + 1:i + 2] or " ") and re.search(r"\b[0-9][0-9a-fA-FxXbB']*$", text[max(0, i - 40):i]):
                out.append(c)
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + blank(text, i + 1, j - 1) + (c if j - 1 > i else ""))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


QUALIFIERS = re.compile(
    r"""\)\s*(?:(?:const|volatile|noexcept(?:\s*\([^()]*(?:\([^()]*\)[^()]*)*\))?|override|final|mutable|&&|&
                |->\s*[^;{}=]+?|requires\b[^;{}]*|try)\s*)*$""", re.X)
SCOPE = re.compile(r"(?:^|[\s;])(?:namespace|class|struct|union|enum|extern)\b")
INIT_LIST = re.compile(r"\)\s*(?:const\s*|noexcept\s*)*:(?!:)")


def strip_template_prefix(head):
    """Removes a leading `template <...>` (nested angle brackets included) and `[[...]]` attributes."""
    head = head.strip()
    while True:
        m = re.match(r"template\s*<", head)
        if m:
            depth, i = 1, m.end()
            while i < len(head) and depth:
                depth += {"<": 1, ">": -1}.get(head[i], 0)
                i += 1
            head = head[i:].strip()
            continue
        m = re.match(r"\[\[.*?\]\]", head, re.S)
        if m:
            head = head[m.end():].strip()
            continue
        return head


def classify(head):
    """'function', 'scope', 'init' (a member's brace initializer in a constructor's initializer list) or
    'other' for the text before a `{` at namespace or class scope."""
    h = strip_template_prefix(head)
    flat = re.sub(r"\s+", " ", h)
    if not flat:
        return "other"
    before_init = flat.split("=", 1)[0] if "=" in flat and "operator" not in flat else flat
    if QUALIFIERS.search(flat) and "(" in flat:
        if "=" in flat and "operator" not in flat and not re.search(r"=\s*\[", flat):
            return "other"  # `auto x = f(y) {`: not valid C++ anyway; `= [...](...) {` is a lambda
        return "function"
    if INIT_LIST.search(before_init) and not SCOPE.match(" " + flat):
        # `S() : a_{1}, b_(2) {`: the brace after a member name initializes it; the head goes on.
        return "init" if re.search(r"[\w>]\s*$", flat) else "function"
    if SCOPE.search(" " + flat):
        return "scope"
    return "other"


def function_name(head):
    h = strip_template_prefix(head)
    h = re.sub(r"\s+", " ", h)
    m = re.search(r"((?:[A-Za-z_]\w*\s*::\s*)*)\boperator\s*(\(\)|[^\s(]+)\s*\(", h)
    if m:
        return re.sub(r"\s+", "", m.group(1)) + "operator" + m.group(2)
    depth = 0
    for i, c in enumerate(h):
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif c == "(" and depth <= 0:
            m = re.search(r"([~A-Za-z_][\w]*(?:\s*<[^()]*>)?(?:\s*::\s*~?[A-Za-z_]\w*)*)\s*$", h[:i])
            if m and m.group(1) not in ("decltype", "alignas", "__attribute__", "noexcept"):
                return re.sub(r"\s+", "", m.group(1))
    return "?"


def functions(code):
    """Yields (name, first line, last line) for every function definition in blanked code."""
    stack = []  # kinds of the open braces: 'scope', 'function', 'other'
    head_start = 0  # where the text before the next `{` at namespace/class scope begins
    func_start = None
    for i, c in enumerate(code):
        in_function = "function" in stack
        if c == "{":
            if in_function or (stack and stack[-1] in ("other", "init")):
                stack.append("inner")
                continue
            head = code[head_start:i]
            kind = classify(head)
            stack.append(kind)
            if kind == "function":
                first = head_start + (len(head) - len(head.lstrip()))
                func_start = (function_name(head), code.count("\n", 0, first) + 1)
            if kind not in ("other", "init"):
                head_start = i + 1
        elif c == "}":
            if not stack:
                continue
            kind = stack.pop()
            if kind == "function" and func_start:
                yield func_start[0], func_start[1], code.count("\n", 0, i) + 1
                func_start = None
            if kind in ("function", "scope"):
                head_start = i + 1
        elif c == ";" and not in_function and not (stack and stack[-1] in ("other", "init", "inner")):
            head_start = i + 1


def main(argv):
    root = argv[0]
    args = argv[1:]
    use_allow, allow_path, list_all = True, None, False
    while args:
        a = args.pop(0)
        if a == "--all":
            use_allow = False
        elif a == "--root":
            root = args.pop(0)
        elif a == "--list":
            list_all = True
        elif a == "--allow":
            allow_path = args.pop(0)
        else:
            print(f"check-sizes: unknown argument {a!r}", file=sys.stderr)
            return 2
    allow_path = allow_path or os.path.join(root, "tools", "check-sizes.allow")
    allowed = {}
    if use_allow and os.path.exists(allow_path):
        with open(allow_path, encoding="utf-8") as f:
            for line in f:
                entry, _, note = line.partition("#")
                entry = entry.strip()
                if entry:
                    allowed[entry] = note.strip()

    over, seen = [], set()
    for top in ROOTS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames.sort()
            for name in sorted(filenames):
                if not name.endswith((".cpp", ".h")):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
                if lines > FILE_LIMIT:
                    over.append((rel, f"{rel}: file has {lines} lines (limit {FILE_LIMIT})"))
                for fname, first, last in functions(strip_code(text)):
                    length = last - first + 1
                    if list_all:
                        print(f"{rel}:{first}: {fname} {length}")
                    if length > FUNCTION_LIMIT:
                        over.append((f"{rel}:{fname}",
                                     f"{rel}:{first}: function {fname} has {length} lines (limit {FUNCTION_LIMIT})"))

    failed = 0
    for key, message in over:
        seen.add(key)
        if key in allowed:
            print(f"allowed: {message} [{allowed[key] or 'no owner given'}]")
        else:
            print(message)
            failed += 1
    for key, note in allowed.items():
        if key not in seen:
            print(f"note: stale allow-list entry (no longer over): {key} [{note}]")
    if failed:
        print(f"check-sizes: {failed} over the limits (files > {FILE_LIMIT} lines, functions > {FUNCTION_LIMIT} lines)")
        return 1
    print(f"check-sizes: nothing over the limits outside the allow list ({len(over)} allowed)")
    return 0


sys.exit(main(sys.argv[1:]))
PYTHON
