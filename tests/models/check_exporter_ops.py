#!/usr/bin/python3
"""The torch exporter's op map against kiln's op registry (ctest `models.exporter_ops`).

    tests/models/check_exporter_ops.py PYTHON_MODULE_DIR

1. Exports tests/models/op_zoo.py (every module, function and method tools/torch2kiln.py maps) and
   tests/models/tiny_vit.py with every kiln node the exporter writes recorded, and checks each node against
   kiln.ops(), the registry: the op exists, each input port it fills is one of the op's, each attribute it
   sets is one of the op's and of the right kind, and no required port or attribute is left out.
2. Reads the exporter's sources: every op named by a literal in a `.op("name", ...)` call is in the registry
   (a mapping the zoo does not reach is still spelled rightly).
Exit status 0 when everything agrees, 1 with every disagreement printed."""
import ast
import glob
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "python"))

import kiln  # noqa: E402
import torch2kiln  # noqa: E402
import torch2kiln_graph  # noqa: E402

REGISTRY = {o["name"]: o for o in kiln.ops()}
KINDS = {"int": (int,), "float": (int, float), "bool": (bool,), "string": (str,), "int list": (list, tuple),
         "float list": (list, tuple)}


def problems_of(op, inputs, attrs):
    spec = REGISTRY.get(op)
    if spec is None:
        return [f"'{op}' is no kiln op"]
    out = []
    ports = {p["name"]: p for p in spec["inputs"]}
    for port in inputs:
        if port not in ports:
            out.append(f"{op}: input port '{port}' is none of {sorted(ports)}")
    specs = {a["name"]: a for a in spec["attrs"]}
    for name, value in (attrs or {}).items():
        if name in ports and ports[name]["scalar_attr"]:
            continue  # a binary op's operand given as a number
        a = specs.get(name)
        if a is None:
            out.append(f"{op}: attribute '{name}' is none of {sorted(specs)}")
        elif not isinstance(value, KINDS[a["type"]]) or (a["type"] != "bool" and isinstance(value, bool)):
            out.append(f"{op}: attribute '{name}' = {value!r} is no {a['type']}")
        elif a["choices"] and value not in a["choices"]:
            out.append(f"{op}: attribute '{name}' = {value!r} is none of {a['choices']}")
    for p in spec["inputs"]:
        given = p["name"] in inputs or (p["scalar_attr"] and p["name"] in (attrs or {}))
        if not p["optional"] and not given:
            out.append(f"{op}: required input '{p['name']}' not given")
    for a in spec["attrs"]:
        if a["default"] is None and not a["optional"] and a["name"] not in (attrs or {}):
            out.append(f"{op}: required attribute '{a['name']}' not given")
    return out


def exported_nodes():
    recorded = []
    original = torch2kiln_graph.Builder.op

    def recording(self, op, name, inputs, attrs=None, out=None):
        recorded.append((op, dict(inputs), dict(attrs or {})))
        return original(self, op, name, inputs, attrs, out)

    torch2kiln_graph.Builder.op = recording
    try:
        for spec in ("op_zoo.py:build", "tiny_vit.py:build"):
            model = torch2kiln.build_model(os.path.join(ROOT, "tests", "models", spec))
            torch2kiln.export(model, (1, 3, 32, 32))
    finally:
        torch2kiln_graph.Builder.op = original
    return recorded


def literal_ops():
    found = []
    for path in sorted(glob.glob(os.path.join(ROOT, "tools", "torch2kiln*.py"))):
        tree = ast.parse(open(path).read(), path)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "op"
                    and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                found.append((os.path.basename(path), node.lineno, node.args[0].value))
    return found


def main():
    bad = []
    nodes = exported_nodes()
    for op, inputs, attrs in nodes:
        bad += problems_of(op, inputs, attrs)
    literals = literal_ops()
    for path, line, op in literals:
        if op not in REGISTRY:
            bad.append(f"{path}:{line}: '{op}' is no kiln op")
    used = sorted({op for op, _, _ in nodes})
    print(f"exporter: {len(nodes)} nodes of {len(used)} kiln ops checked against the registry ({len(REGISTRY)} ops); "
          f"{len(literals)} literal op names in tools/torch2kiln*.py")
    for b in sorted(set(bad)):
        print("error:", b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
