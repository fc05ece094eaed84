"""Tests of the Python module (python/, docs/python.md). ctest runs them (label `python`) with PYTHONPATH at the
build tree's python/ and KILN_CLI at the kiln program; by hand:

    PYTHONPATH=build/python KILN_CLI=build/kiln /usr/bin/python3 -m pytest -q tests/python

Generated code (emu) is checked against the reference on random, non-zero inputs with kiln's tolerances
(f32: rtol 1e-4, atol 1e-5; f16: rtol 1e-2, atol 1e-2; bf16: rtol 6e-2, atol 6e-2: include/kiln/compare.h).
The module and the kiln program running the same graph on emu run the same compiled kernels on the same
inputs: their outputs must agree to rtol 1e-6, atol 1e-6 (in practice they are identical).
"""

import contextlib
import json
import os
import pathlib
import shutil
import subprocess
import tempfile
import threading
import unittest

import numpy as np

import kiln

SOURCE_DIR = pathlib.Path(os.environ.get("KILN_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
BOTTLENECK = SOURCE_DIR / "samples" / "graphs" / "resnet50_bottleneck.json"
KILN_CLI = os.environ.get("KILN_CLI")
ONNX_CONV = pathlib.Path("/usr/share/libonnx-testdata/data/node/test_basic_conv_with_padding/model.onnx")

TOLERANCE = {"f32": (1e-4, 1e-5), "f16": (1e-2, 1e-2), "bf16": (6e-2, 6e-2)}
SAME_KERNELS = dict(rtol=1e-6, atol=1e-6)

_saved_cache_dir = None
_cache_dir = None


def setUpModule():
    # A kernel cache of the tests' own: the first emu compile of each graph really runs the host compiler, and
    # the kiln program run by the tests finds the kernels the module compiled (same cache, same kernels).
    global _saved_cache_dir, _cache_dir
    _saved_cache_dir = os.environ.get("KILN_CACHE_DIR")
    _cache_dir = tempfile.mkdtemp(prefix="kiln-python-cache-")
    os.environ["KILN_CACHE_DIR"] = _cache_dir


def tearDownModule():
    if _saved_cache_dir is None:
        os.environ.pop("KILN_CACHE_DIR", None)
    else:
        os.environ["KILN_CACHE_DIR"] = _saved_cache_dir
    shutil.rmtree(_cache_dir, ignore_errors=True)


@contextlib.contextmanager
def environ(**values):
    """Sets environment variables for the block (kiln reads the cache's settings at each prewarm)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def assert_close_to_reference(test, got, want, dtypes):
    test.assertEqual(sorted(got), sorted(want))
    for name in want:
        rtol, atol = TOLERANCE[dtypes[name]]
        test.assertEqual(got[name].dtype, want[name].dtype, name)
        np.testing.assert_allclose(got[name].astype(np.float64), want[name].astype(np.float64), rtol=rtol, atol=atol,
                                   err_msg=f"output '{name}'")


def run_cli(graph_path, inputs, workdir):
    """Runs `kiln run GRAPH --device emu` on `inputs` (saved as .npy with numpy) and reads its outputs."""
    in_dir, out_dir = pathlib.Path(workdir, "in"), pathlib.Path(workdir, "out")
    in_dir.mkdir()
    for name, array in inputs.items():
        np.save(in_dir / f"{name}.npy", array)
    proc = subprocess.run([KILN_CLI, "run", str(graph_path), "--device", "emu", "--inputs", str(in_dir),
                           "--save-outputs", str(out_dir)], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise AssertionError(f"kiln run failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return {p.stem: np.load(p) for p in out_dir.glob("*.npy")}


def conv_block(dtype="f32", name="conv_block"):
    """A small conv + bias + batch norm + relu + residual add + max pool graph."""
    g = kiln.Graph(name)
    x = g.input("x", (1, 8, 8, 8), dtype)
    w = g.parameter("w", (8, 8, 3, 3), dtype)
    b = g.parameter("b", (8,), dtype)
    bn = [g.parameter(f"bn.{p}", (8,), dtype) for p in ("scale", "shift", "mean", "var")]
    c = g.conv2d(x, w, b, stride=(1, 1), padding=(1, 1), name="conv")
    y = g.relu(g.batch_norm(c, *bn, name="bn"), name="act") + x
    g.output(g.max_pool2d(y, kernel=(2, 2)), "y")
    return g


def bottleneck_from_builders():
    """samples/graphs/resnet50_bottleneck.json, written with the builder methods."""
    g = kiln.Graph("resnet50_bottleneck_py")
    x = g.input("x", (1, 256, 56, 56))

    def conv_bn(t, i, k, c, r, relu, padding=(0, 0)):
        w = g.parameter(f"conv{i}.weight", (k, c, r, r))
        bn = [g.parameter(f"bn{i}.{p}", (k,)) for p in ("scale", "shift", "mean", "var")]
        t = g.batch_norm(g.conv2d(t, w, padding=padding, name=f"conv{i}"), *bn, epsilon=1e-5, name=f"bn{i}")
        return g.relu(t, name=f"relu{i}") if relu else t

    t = conv_bn(x, 1, 64, 256, 1, True)
    t = conv_bn(t, 2, 64, 64, 3, True, padding=(1, 1))
    t = conv_bn(t, 3, 256, 64, 1, False)
    g.output(g.relu(g.add(t, x, name="residual"), name="relu3"), "y")
    return g


class BottleneckTest(unittest.TestCase):
    """The module on emu equals the C++ program on emu, and both equal the reference."""

    @unittest.skipUnless(KILN_CLI, "KILN_CLI (the kiln program) is not set")
    def test_json_bottleneck_matches_kiln_run(self):
        g = kiln.load(BOTTLENECK)
        inputs = kiln.random_inputs(g, seed=1)
        exe = kiln.compile(g, device="emu")
        self.assertEqual(exe.device, "emu")
        got = exe.run(inputs)
        with tempfile.TemporaryDirectory() as tmp:
            cli = run_cli(BOTTLENECK, inputs, tmp)
        self.assertEqual(sorted(cli), ["y"])
        np.testing.assert_allclose(got["y"], cli["y"], **SAME_KERNELS)
        self.assertGreater(float(np.abs(got["y"]).max()), 0.1)  # not a run of zeros
        assert_close_to_reference(self, got, kiln.run_reference(g, inputs), {"y": "f32"})

    @unittest.skipUnless(KILN_CLI, "KILN_CLI (the kiln program) is not set")
    def test_builder_bottleneck_matches_kiln_run(self):
        g = bottleneck_from_builders()
        g.verify()
        loaded = kiln.load(BOTTLENECK)
        self.assertEqual([n.op for n in g.nodes], [n.op for n in loaded.nodes])
        self.assertEqual([t.shape for t in g.parameters], [t.shape for t in loaded.parameters])
        inputs = kiln.random_inputs(g, seed=2)
        got = kiln.compile(g, device="emu").run(inputs)
        with tempfile.TemporaryDirectory() as tmp:
            path = pathlib.Path(tmp, "bottleneck.json")
            g.save(path)
            self.assertEqual(kiln.load(path), g)
            cli = run_cli(path, inputs, tmp)
        np.testing.assert_allclose(got["y"], cli["y"], **SAME_KERNELS)
        assert_close_to_reference(self, got, kiln.run_reference(g, inputs), {"y": "f32"})


class RunTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.graph = conv_block()
        cls.exe = kiln.compile(cls.graph, device="emu")
        cls.inputs = kiln.random_inputs(cls.graph, seed=3)

    def test_emu_matches_reference(self):
        got = self.exe.run(self.inputs)
        self.assertEqual(got["y"].shape, (1, 8, 4, 4))
        self.assertEqual(got["y"].dtype, np.float32)
        assert_close_to_reference(self, got, kiln.run_reference(self.graph, self.inputs), {"y": "f32"})

    def test_numpy_random_inputs(self):
        rng = np.random.default_rng(7)
        inputs = {t.name: rng.uniform(0.5, 1.5, t.shape).astype(np.float32) for t in self.graph.inputs + self.graph.parameters}
        assert_close_to_reference(self, self.exe.run(inputs), kiln.run_reference(self.graph, inputs), {"y": "f32"})

    def test_non_contiguous_and_byte_swapped_arrays_are_copied(self):
        want = self.exe.run(self.inputs)["y"]
        inputs = dict(self.inputs)
        inputs["x"] = np.asfortranarray(inputs["x"])
        inputs["w"] = inputs["w"].astype(">f4")
        big = np.zeros((1, 8, 8, 16), np.float32)
        big[..., ::2] = self.inputs["x"]
        inputs["x"] = big[..., ::2]  # a strided view
        self.assertFalse(inputs["x"].flags.c_contiguous)
        np.testing.assert_array_equal(self.exe.run(inputs)["y"], want)

    def test_report_and_plan(self):
        r = self.exe.report
        self.assertEqual(r.device, "emu")
        self.assertEqual(r.arch, "host")
        self.assertGreaterEqual(r.launches, 1)
        self.assertEqual(len(r.entries), r.launches + r.weight_transforms)
        self.assertEqual(self.exe.plan.kernel_count, sum(g.is_kernel for g in self.exe.plan.groups))

    def test_parameter_values_need_not_be_given(self):
        g = conv_block(name="with_values")
        for t in g.parameters:
            g.set_value(t, self.inputs[t.name])
        np.testing.assert_array_equal(g.value("w"), self.inputs["w"])
        self.assertIsNone(g.value("x"))
        ref = kiln.compile(g, device="ref")
        self.assertEqual(ref.device, "ref")
        got = ref.run({"x": self.inputs["x"]})
        assert_close_to_reference(self, got, kiln.run_reference(self.graph, self.inputs), {"y": "f32"})

    def test_runs_from_threads(self):
        want = self.exe.run(self.inputs)["y"]
        results = []
        threads = [threading.Thread(target=lambda: results.append(self.exe.run(self.inputs)["y"])) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(len(results), 3)
        for r in results:
            np.testing.assert_array_equal(r, want)


class HalfTest(unittest.TestCase):
    def test_f16_graph_on_emu(self):
        g = conv_block("f16", "conv_block_f16")
        inputs = kiln.random_inputs(g, seed=4)
        self.assertEqual(inputs["x"].dtype, np.float16)
        got = kiln.compile(g, device="emu").run(inputs)
        self.assertEqual(got["y"].dtype, np.float16)
        assert_close_to_reference(self, got, kiln.run_reference(g, inputs), {"y": "f16"})

    def test_bf16_travels_as_float32_rounded_to_nearest_even(self):
        g = kiln.Graph("bf16_identity")
        g.output(g.identity(g.input("x", (4,), "bf16")), "y")
        x = np.array([1.0, 1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8, -3.0 + 2.0**-9], np.float32)
        y = kiln.run_reference(g, {"x": x})["y"]
        self.assertEqual(y.dtype, np.float32)
        # bf16 keeps 8 significant bits: a tie goes to the even neighbour.
        np.testing.assert_array_equal(y, np.array([1.0, 1.0, 1.0 + 2 * 2.0**-7, -3.0], np.float32))
        with self.assertRaisesRegex(kiln.Error, r"tensor 'x': dtype mismatch: expected float32 \(kiln bf16"):
            kiln.run_reference(g, {"x": x.astype(np.float16)})


class ErrorTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.graph = kiln.Graph("tiny")
        x = cls.graph.input("x", (2, 3))
        cls.graph.output(cls.graph.relu(x) * 2.0, "y")
        cls.exe = kiln.compile(cls.graph, device="ref")
        cls.x = np.ones((2, 3), np.float32)

    def test_kiln_error_is_a_runtime_error_with_a_code(self):
        with self.assertRaises(RuntimeError) as e:
            self.exe.run({"x": np.ones((3, 2), np.float32)})
        self.assertIsInstance(e.exception, kiln.Error)
        self.assertEqual(e.exception.code, "invalid_argument")

    def test_wrong_shape_names_the_tensor(self):
        with self.assertRaisesRegex(kiln.Error, r"tensor 'x': shape mismatch: expected \[2, 3\], got \[2, 3, 1\]"):
            self.exe.run({"x": np.ones((2, 3, 1), np.float32)})

    def test_wrong_dtype(self):
        with self.assertRaisesRegex(kiln.Error, r"tensor 'x': dtype mismatch: expected float32 \(kiln f32\), got float64"):
            self.exe.run({"x": np.ones((2, 3))})
        with self.assertRaisesRegex(kiln.Error, r"tensor 'x': expected a numpy.ndarray .*, got list"):
            self.exe.run({"x": [[1.0] * 3] * 2})

    def test_missing_and_unknown_inputs(self):
        with self.assertRaisesRegex(kiln.Error, r"missing input x \(input, f32 \[2, 3\]\)"):
            self.exe.run({})
        with self.assertRaisesRegex(kiln.Error, r"has no input or parameter 'z' \(it has x\)"):
            self.exe.run({"x": self.x, "z": self.x})

    def test_unknown_device_layout_target(self):
        with self.assertRaisesRegex(kiln.Error, r"unknown device 'tpu': expected auto, cuda, emu or ref"):
            kiln.compile(self.graph, device="tpu")
        with self.assertRaisesRegex(kiln.Error, r"unknown layout 'chwn'"):
            kiln.plan(self.graph, layout="chwn")
        with self.assertRaisesRegex(kiln.Error, r"h900"):
            kiln.plan(self.graph, target="h900")

    def test_graph_that_fails_verify_names_the_node(self):
        g = kiln.Graph("bad")
        x = g.input("x", (1, 3, 8, 8))
        w = g.parameter("w", (4, 3, 3))
        g.output(g.conv2d(x, w, name="conv1"), "y")
        with self.assertRaisesRegex(kiln.Error, r"node 'conv1' \(conv2d\) input 'w'"):
            g.verify()
        self.assertTrue(any("conv1" in p for p in g.problems()))
        with self.assertRaisesRegex(kiln.Error, r"node 'conv1'"):
            kiln.compile(g, device="ref")

    def test_builder_misuse(self):
        g = kiln.Graph("g")
        x = g.input("x", (1, 3, 8, 8))
        w = g.parameter("w", (3, 3, 3, 3))
        with self.assertRaises(TypeError):
            g.conv2d(x, w, strides=(1, 1))  # the keyword is stride
        with self.assertRaisesRegex(kiln.Error, r"tensor 'x' belongs to graph 'tiny', not to graph 'g'"):
            g.relu(self.graph.inputs[0])
        with self.assertRaisesRegex(TypeError, r"attribute 'alpha'"):
            g.unary("leaky_relu", x, {"alpha": object()})
        with self.assertRaisesRegex(kiln.Error, r"unknown dtype 'f64'"):
            g.input("z", (1,), "f64")
        with self.assertRaisesRegex(TypeError, r"input 'x': expected a kiln.Tensor or a list of them, got 3"):
            g.add_node("relu", {"x": 3})
        # A node that makes no tensor at all raises at once (C++ returns an invalid handle for verify to report).
        with self.assertRaisesRegex(kiln.Error, r"node 'nope_\d+' \(nope\): unknown op 'nope'"):
            g.unary("nope", x)

    def test_load_reports_the_json_path(self):
        with tempfile.TemporaryDirectory() as tmp:
            doc = json.loads(BOTTLENECK.read_text())
            doc["nodes"][0]["attrs"] = {"stride": 1.5}
            path = pathlib.Path(tmp, "bad.json")
            path.write_text(json.dumps(doc))
            with self.assertRaisesRegex(kiln.Error, r"/nodes/0/attrs/stride: node 'conv1' \(conv2d\)"):
                kiln.load(path)
            with self.assertRaises(kiln.Error) as e:
                kiln.load(pathlib.Path(tmp, "missing.json"))
            self.assertEqual(e.exception.code, "not_found")
            with self.assertRaisesRegex(kiln.Error, r"shapes= applies to ONNX models"):
                kiln.load(BOTTLENECK, shapes={"x": (1, 256, 56, 56)})


class GraphTest(unittest.TestCase):
    def test_tensors_and_nodes(self):
        g = conv_block()
        x = g.tensor("x")
        self.assertEqual((x.name, x.shape, x.dtype, x.kind, x.layout), ("x", (1, 8, 8, 8), "f32", "input", "NCHW"))
        self.assertEqual([t.name for t in g.outputs], ["y"])
        self.assertEqual(g.outputs[0].shape, (1, 8, 4, 4))
        self.assertEqual(g.nodes[0].op, "conv2d")
        self.assertEqual(g.nodes[0].attrs["padding"], [1, 1])
        self.assertEqual(g.nodes[0].inputs, ["x", "w", "b"])
        with self.assertRaises(KeyError):
            g.tensor("nope")
        self.assertEqual(json.loads(g.to_json())["name"], "conv_block")

    def test_every_op_of_the_registry_has_a_builder_taking_its_ports_and_attributes(self):
        # kiln.ops() is the registry, and each op's builder method is made from its row: the required ports,
        # the required attributes, then the optional ports and the other attributes, each by its registry
        # name (the signature is the docstring's first line). Derived here from the rows independently.
        ops = kiln.ops()
        self.assertEqual(len(ops), len({o["name"] for o in ops}))
        for op in ops:
            method = getattr(kiln.Graph, op["name"], None)
            self.assertIsNotNone(method, f"no builder for '{op['name']}'")
            ports = {p["name"] for p in op["inputs"]}
            required = [p["name"] for p in op["inputs"] if not p["optional"]]
            rest = [p["name"] + "=None" for p in op["inputs"] if p["optional"]]
            for a in op["attrs"]:
                if a["name"] in ports:  # the number form of a port (binary ops)
                    continue
                if a["default"] is None and not a["optional"]:
                    required.append(a["name"])
                else:
                    rest.append(f"{a['name']}={a['default']!r}")
            want = f"{op['name']}({', '.join(required + rest + ['*', 'name=' + repr('')])})"
            self.assertEqual(method.__doc__.splitlines()[0], want)

    def test_builders_bind_arguments_as_python_functions_do(self):
        g = kiln.Graph("g")
        x = g.input("x", (1, 4, 8, 8))
        w = g.parameter("w", (4, 4, 3, 3))
        b = g.parameter("b", (4,))
        # By position or keyword, in the signature's order; an int where a float attribute is wanted.
        y = g.conv2d(x, w, b, (1, 1), (1, 1), name="c")
        self.assertEqual((y.name, y.shape), ("c", (1, 4, 8, 8)))
        self.assertEqual(g.nodes[-1].attrs["padding"], [1, 1])
        self.assertEqual(g.nodes[-1].inputs, ["x", "w", "b"])
        g.clamp(y, 0, 6, name="c6")
        self.assertEqual((g.nodes[-1].attrs["min"], g.nodes[-1].attrs["max"]), (0.0, 6.0))
        self.assertIsInstance(g.nodes[-1].attrs["max"], float)
        self.assertEqual(g.group_norm(x, 2, shift=b).shape, (1, 4, 8, 8))
        self.assertEqual(g.slice(x, [0, 0, 0, 0], [1, 2, 8, 8]).shape, (1, 2, 8, 8))
        self.assertEqual(g.upsample2d(x, scale=(2, 2)).shape, (1, 4, 16, 16))  # ints as a float list
        self.assertEqual(g.cast(x, np.float16).dtype, "f16")
        g.output(g.sub(1, x), "d")  # a number for a port that may be one
        # NumPy scalars and arrays where numbers and lists go; dtype names NumPy's way for cast.
        self.assertEqual(g.clamp(x, np.float32(0), np.float32(6)).shape, (1, 4, 8, 8))
        self.assertEqual(g.add(x, np.float32(2)).shape, (1, 4, 8, 8))
        self.assertEqual(g.reshape(x, np.array([1, 256])).shape, (1, 256))
        self.assertEqual(g.conv2d(x, w, stride=np.array([2, 2])).shape, (1, 4, 3, 3))
        self.assertEqual(g.upsample2d(x, scale=[np.float32(2)] * 2).shape, (1, 4, 16, 16))
        self.assertEqual(g.cast(x, "float16").dtype, "f16")
        g.verify()
        # What Python refuses for any function: TypeErrors naming the builder and the argument.
        with self.assertRaisesRegex(TypeError, r"conv2d\(\) got an unexpected keyword argument 'pad'; it takes "
                                    r"conv2d\(x, w, bias=None, stride="):
            g.conv2d(x, w, pad=(1, 1))
        with self.assertRaisesRegex(TypeError, r"conv2d\(\) got multiple values for argument 'w'"):
            g.conv2d(x, w, w=w)
        with self.assertRaisesRegex(TypeError, r"slice\(\) missing required argument 'ends'"):
            g.slice(x, [0, 0, 0, 0])
        with self.assertRaisesRegex(TypeError, r"relu\(\) takes at most 1 positional arguments \(2 given\)"):
            g.relu(x, x)
        with self.assertRaisesRegex(TypeError, r"relu\(\): input 'x': expected a kiln.Tensor, got 3"):
            g.relu(3)
        with self.assertRaisesRegex(TypeError, r"concat\(\): input 'xs': expected a kiln.Tensor or a list of them"):
            g.concat([x, 3])
        with self.assertRaisesRegex(TypeError, r"conv2d\(\): attribute 'stride': expected a value of type int list"):
            g.conv2d(x, w, stride=object())
        with self.assertRaisesRegex(TypeError, r"conv2d\(\): attribute 'stride': expected a value of type int list, "
                                    r"got \[1.5, 1\]"):
            g.conv2d(x, w, stride=[1.5, 1])
        with self.assertRaisesRegex(TypeError, r"layout_convert\(\): attribute 'to': expected a str, got 3"):
            g.layout_convert(x, 3)
        with self.assertRaisesRegex(TypeError, r"softmax\(\): attribute 'axis': expected a value of type int, got True"):
            g.softmax(x, True)
        with self.assertRaisesRegex(TypeError, r"add\(\): input 'b': expected a kiln.Tensor or a number, got 'a'"):
            g.add(x, "a")
        with self.assertRaisesRegex(TypeError, r"relu\(\): name: expected a str, got None"):
            g.relu(x, name=None)
        # A value of the right type that the op cannot take is the node's problem, reported by verify().
        g.conv2d(x, w, stride=(0, 1), name="bad")
        with self.assertRaisesRegex(kiln.Error, r"node 'bad' \(conv2d\)"):
            g.verify()

    def test_every_builder(self):
        g = kiln.Graph("all")
        x = g.input("x", (1, 4, 8, 8))
        m = g.input("m", (2, 8))
        v = g.parameter("v", (4,))
        t = g.layer_norm(x, normalized_ndim=2)
        t = g.group_norm(t, 2, scale=v, shift=v)
        t = g.instance_norm(t)
        t = g.rms_norm(t, scale=g.parameter("s", (8,)))
        t = g.softmax(g.bias_add(t, v), axis=1)
        for op in ("relu", "relu6", "sigmoid", "tanh", "gelu", "gelu_tanh", "silu", "hardswish", "hardsigmoid",
                   "mish", "softsign", "exp", "abs", "neg", "identity", "reciprocal"):
            t = getattr(g, op)(t)
        t = g.sqrt(g.log(g.exp(g.abs(t)) + 1.0))
        t = g.rsqrt(g.maximum(t, 0.5))
        t = g.clamp(g.leaky_relu(g.elu(g.softplus(t), 0.5), 0.1), -1.0, 1.0)
        t = g.minimum(g.pow(g.div(g.sub(g.mul(t, 2.0), 1.0), 3.0), 2.0), t)
        t = 1.0 - (2.0 * t) / 4.0 + t ** 2.0 - (-t)
        p = g.avg_pool2d(g.max_pool2d(t, kernel=(2, 2), stride=(1, 1), padding=(1, 1)), kernel=(3, 3),
                         count_include_pad=False)
        u = g.upsample2d(p, scale=(2.0, 2.0))
        s = g.slice(g.concat([u, u], axis=1), [0, 0, 0, 0], [1, 4, 8, 8])
        self.assertEqual(s.shape, (1, 4, 6, 6))
        r = g.reshape(g.transpose(g.layout_convert(s, "NHWC"), (0, 2, 3, 1)), (1, 144))
        g.output(g.cast(r, "f16"), "r")
        g.output(g.global_avg_pool(s) + g.global_max_pool(s), "pooled")
        g.output(g.matmul(m, m, transpose_b=True), "mm")
        (n,) = g.add_node("relu", {"x": m}, name="generic", outputs={"y": "gy"})
        g.output(n)
        g.verify()
        self.assertEqual(g.tensor("r").dtype, "f16")
        self.assertEqual(g.tensor("mm").shape, (2, 2))
        out = kiln.run_reference(g, kiln.random_inputs(g, seed=5))
        self.assertEqual(sorted(out), ["gy", "mm", "pooled", "r"])
        self.assertEqual(out["r"].dtype, np.float16)

    def test_random_inputs_are_deterministic_and_non_zero(self):
        g = conv_block()
        a, b = kiln.random_inputs(g, 9), kiln.random_inputs(g, 9)
        self.assertEqual(sorted(a), sorted(t.name for t in g.inputs + g.parameters))
        for name in a:
            np.testing.assert_array_equal(a[name], b[name])
            self.assertTrue(np.all(a[name] != 0) or name == "x", name)
        self.assertTrue(np.all(a["bn.var"] > 0))

    @unittest.skipUnless(kiln.onnx_available() and ONNX_CONV.exists(), "no ONNX front end or no libonnx-testdata")
    def test_load_onnx(self):
        g = kiln.load(ONNX_CONV)
        self.assertEqual([t.shape for t in g.inputs], [(1, 1, 5, 5), (1, 1, 3, 3)])
        x, w = (np.arange(25, dtype=np.float32).reshape(1, 1, 5, 5), np.ones((1, 1, 3, 3), np.float32))
        names = [t.name for t in g.inputs]
        y = kiln.run_reference(g, dict(zip(names, (x, w))))[g.outputs[0].name]
        padded = np.pad(x[0, 0], 1)
        want = np.array([[padded[i:i + 3, j:j + 3].sum() for j in range(5)] for i in range(5)], np.float32)
        np.testing.assert_allclose(y[0, 0], want, rtol=1e-6)

    @unittest.skipIf(kiln.onnx_available(), "this build reads ONNX")
    def test_load_onnx_without_the_front_end(self):
        with self.assertRaisesRegex(kiln.Error, r"ONNX"):
            kiln.load("model.onnx")


class SymbolicTest(unittest.TestCase):
    def test_a_symbolic_batch_is_verified_bound_and_run(self):
        g = kiln.Graph("sym")
        g.dim("N", 1, 8)
        x = g.input("x", ["N", 3, 6, 6])
        w = g.parameter("w", (4, 3, 3, 3))
        g.output(g.relu(g.conv2d(x, w, padding=[1, 1])), "y")
        g.verify()
        self.assertTrue(g.is_symbolic)
        self.assertEqual(g.dims, {"N": (1, 8)})
        exe = kiln.compile(g, device="emu")  # one dynamic Executable: each run's arrays give N
        self.assertTrue(exe.dynamic)
        with self.assertRaises(kiln.Error) as e:
            exe.report
        self.assertIn("has symbolic dims", str(e.exception))
        for n in (2, 5, 2):
            b = g.bind({"N": n})
            self.assertFalse(b.is_symbolic)
            inputs = kiln.random_inputs(b, seed=n)
            got = exe.run(inputs)
            self.assertEqual(got["y"].shape, (n, 4, 6, 6))
            assert_close_to_reference(self, got, kiln.run_reference(b, inputs), {"y": "f32"})
            self.assertEqual(kiln.compile(b, device="emu").run(inputs)["y"].shape, (n, 4, 6, 6))
        self.assertEqual(exe.bindings_prepared, 2)
        bad = kiln.random_inputs(g.bind({"N": 8}), seed=1)
        bad["x"] = np.zeros((9, 3, 6, 6), np.float32)
        with self.assertRaises(kiln.Error) as e:
            exe.run(bad)
        self.assertIn("dim 'N' = 9 is outside its range [1, 8]", str(e.exception))

    def test_bad_dims_and_bindings_are_named(self):
        g = kiln.Graph("bad")
        g.dim("N", 1, 8)
        g.output(g.relu(g.input("x", ["N", 4])), "y")
        with self.assertRaises(kiln.Error) as e:
            g.bind({"N": 9})
        self.assertIn("dim 'N' = 9 is outside its range [1, 8]", str(e.exception))
        with self.assertRaises(kiln.Error) as e:
            g.input("z", ["N +", 4])
        self.assertIn("dim expression 'N +'", str(e.exception))
        self.assertEqual(g.dims_from_shapes({"x": (6, 4)}), {"N": 6})
        with self.assertRaises(kiln.Error) as e:
            g.dims_from_shapes({"x": (6, 5)})
        self.assertIn("input 'x' dim 1 is 5, but the graph fixes it at 4", str(e.exception))
        g.dim("M", 5, 2)
        with self.assertRaises(kiln.Error) as e:
            g.verify()
        self.assertIn("dim 'M': expected a range [min, max] with 1 <= min <= max, got [5, 2]", str(e.exception))


class PlanTest(unittest.TestCase):
    def test_bottleneck_groups(self):
        g = kiln.load(BOTTLENECK)
        p = kiln.plan(g, target="h200")
        self.assertEqual((p.target, p.arch), ("h200", "sm_90"))
        kernels = [grp for grp in p.groups if grp.is_kernel]
        self.assertEqual(p.kernel_count, len(kernels))
        convs = [grp for grp in kernels if grp.kind == "conv"]
        self.assertEqual(len(convs), 3)
        self.assertTrue(all(grp.family == "conv2d" for grp in convs))
        self.assertTrue(all(grp.kind == "layout" for grp in kernels if grp.kind != "conv"))  # NCHW <-> NHWC
        # Every node of the sample runs in exactly one group; the last kernel fuses bn3 + residual + relu3 and
        # the conversion back to the output's NCHW into conv3.
        ran = [n for grp in p.groups for n in grp.nodes]
        for node in g.nodes:
            self.assertEqual(ran.count(node.name), 1, node.name)
        self.assertEqual(convs[-1].ops, ["conv2d", "batch_norm", "add", "relu", "layout_convert"])
        self.assertEqual(convs[-1].outputs, ["y"])
        self.assertIn("x", [t for grp in kernels for t in grp.inputs])
        self.assertLess(p.bytes_moved, p.unfused_bytes_moved)
        doc = json.loads(p.to_json())
        self.assertEqual(doc["format"], "kiln.plan")
        self.assertEqual(len(doc["groups"]), len(p.groups))
        self.assertEqual(doc["totals"]["kernels"], p.kernel_count)
        self.assertIn("conv1", p.to_text())
        self.assertEqual(kiln.plan(g, target="sm_80").arch, "sm_80")


class PrewarmTest(unittest.TestCase):
    def test_second_call_finds_everything_cached(self):
        g = kiln.Graph("prewarm_small")
        x = g.input("x", (1, 8, 8, 8))
        g.output(g.relu(g.conv2d(x, g.parameter("w", (8, 8, 1, 1)))), "y")
        with tempfile.TemporaryDirectory() as tmp, environ(KILN_CACHE_DIR=tmp):
            path = pathlib.Path(tmp, "small.json")
            conv_block().save(path)
            try:
                first = kiln.prewarm([g, path], arch=["sm_80"], jobs=2)
            except kiln.Error as e:
                if "NVRTC" in str(e) or "nvrtc" in str(e):
                    self.skipTest(f"no NVRTC here: {e}")
                raise
            self.assertEqual(first.archs, ["sm_80"])
            self.assertEqual([(r.name, r.arch) for r in first.graphs], [("prewarm_small", "sm_80"), (str(path), "sm_80")])
            self.assertGreater(first.total, 0)
            self.assertEqual((first.compiled, first.failed, first.not_kept), (first.total, 0, 0))
            self.assertTrue(pathlib.Path(first.cache_dir).resolve().is_relative_to(pathlib.Path(tmp).resolve()))
            second = kiln.prewarm([g, str(path)], arch="sm_80")
            self.assertEqual((second.cached, second.compiled, second.total), (first.total, 0, first.total))

    def test_a_cache_that_keeps_nothing_is_an_error_unless_allowed(self):
        g = kiln.Graph("prewarm_readonly")
        g.output(g.gelu(g.input("x", (4, 32))), "y")
        with tempfile.TemporaryDirectory() as tmp, environ(KILN_CACHE_DIR=tmp, KILN_CACHE_READONLY="1"):
            with self.assertRaisesRegex(kiln.Error, r"not in the kernel cache\n.*read-only") as e:
                kiln.prewarm(g, arch="sm_80")
            self.assertEqual(e.exception.code, "io_error")
            self.assertEqual(e.exception.report.not_kept, e.exception.report.total)
            r = kiln.prewarm(g, arch="sm_80", allow_uncached=True)
            self.assertEqual((r.failed, r.not_kept), (0, r.total))

    def test_bad_arguments(self):
        with self.assertRaisesRegex(kiln.Error, r"sm_1"):
            kiln.prewarm([conv_block()], arch="sm_1")
        with self.assertRaises(kiln.Error) as e:
            kiln.prewarm(["/nonexistent/graph.json"], arch="sm_80")
        self.assertEqual(e.exception.code, "not_found")


class BackwardTest(unittest.TestCase):
    """kiln.backward: the training graph of a perceptron with a mean-squared error (docs/training.md)."""

    def test_gradients_run_on_emu_as_on_ref_and_match_finite_differences(self):
        g = kiln.Graph("mlp")
        x, target = g.input("x", (4, 5)), g.input("target", (4, 2))
        h = g.gelu(g.matmul(x, g.parameter("w1", (5, 8)), g.parameter("b1", (8,))))
        d = g.matmul(h, g.parameter("w2", (8, 2))) - target
        g.output(g.reduce_mean(d * d), "loss")
        g.output(g.relu(g.parameter("unused", (3,))), "side")
        train, warnings = kiln.backward(g, "loss")
        self.assertEqual(len(warnings), 1)
        self.assertIn("parameter 'unused' does not reach the loss 'loss'", warnings[0])
        self.assertEqual(sorted(t.name for t in train.outputs),
                         ["grad/b1", "grad/unused", "grad/w1", "grad/w2", "loss", "side"])
        inputs = kiln.random_inputs(g, seed=5)
        want = kiln.run_reference(train, inputs)
        assert_close_to_reference(self, kiln.compile(train, device="emu").run(inputs), want,
                                  {name: "f32" for name in want})
        # dL/dw2[0, 0] by a central difference (f32: a step of 1e-2, a tolerance of 2e-3).
        step = 1e-2
        loss = lambda w: float(kiln.run_reference(g, {**inputs, "w2": w})["loss"])
        up, down = inputs["w2"].copy(), inputs["w2"].copy()
        up[0, 0] += step
        down[0, 0] -= step
        self.assertAlmostEqual(float(want["grad/w2"][0, 0]), (loss(up) - loss(down)) / (2 * step), delta=2e-3)

    def test_a_loss_that_is_no_scalar_is_refused(self):
        g = kiln.Graph("not_scalar")
        g.output(g.relu(g.parameter("p", (2, 3))), "y")
        with self.assertRaisesRegex(kiln.Error, "the loss 'y' is \\[2, 3\\], expected a scalar"):
            kiln.backward(g, "y")


if __name__ == "__main__":
    unittest.main()
