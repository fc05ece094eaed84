"""Data-movement mappings of tools/torch2kiln.py (reshape, permute, concat, split, indexing, expand) and
the argument helpers the other mappings share; a handler's conventions are in torch2kiln_ops.py."""
from torch2kiln_graph import KT, Unsupported


def pair(v):
    return [int(v), int(v)] if isinstance(v, (int, float)) else [int(x) for x in v]


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def axis(d, rank):
    return d + rank if d < 0 else d


# ---- data movement ----

def reshape(c, x, *_, **__):
    return x if c.out_shape == c.shape(x) else c.op("reshape", {"x": x}, {"shape": c.out_shape})


def permute(c, x, dims):
    perm = [axis(int(d), len(c.shape(x))) for d in dims]
    return x if perm == sorted(perm) else c.op("transpose", {"x": x}, {"perm": perm})


def transpose(c, p):
    perm = list(range(len(c.shape(p["input"]))))
    a, b = axis(p["dim0"], len(perm)), axis(p["dim1"], len(perm))
    perm[a], perm[b] = perm[b], perm[a]
    return permute(c, p["input"], perm)


def method_permute(c, x, *dims):
    return permute(c, x, dims[0] if len(dims) == 1 and not is_number(dims[0]) else dims)


def concat(c, p):
    xs = list(p["tensors"])
    if not all(isinstance(t, KT) for t in xs):
        raise Unsupported("concatenates a non-tensor")
    if len(xs) == 1:
        return xs[0]
    return c.op("concat", {"xs": xs}, {"axis": axis(int(p["dim"]), len(c.shape(xs[0])))})


def size(c, x, dim=None):
    shape = c.shape(x)
    return tuple(shape) if dim is None else shape[dim]


def slice_op(c, x, starts, ends, steps, suffix=None):
    """kiln's slice; records the result's shape (its node's meta describes the whole tuple or indexing)."""
    attrs = {"starts": starts, "ends": ends}
    if any(s != 1 for s in steps):
        attrs["steps"] = steps
    y = c.op("slice", {"x": x}, attrs, suffix=suffix)
    c.b.shapes[y] = [-(-(e - b) // s) for b, e, s in zip(starts, ends, steps)]
    return y


def split_at(c, x, dim, bounds):
    """The pieces of x between consecutive bounds along dim, as a tuple (chunk, split)."""
    shape = c.shape(x)
    pieces = []
    for i, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        starts, ends = [0] * len(shape), list(shape)
        starts[dim], ends[dim] = lo, hi
        pieces.append(slice_op(c, x, starts, ends, [1] * len(shape), suffix=str(i)))
    return tuple(pieces)


def chunk(c, p):
    shape = c.shape(p["input"])
    dim = axis(p["dim"], len(shape))
    step = -(-shape[dim] // p["chunks"])
    return split_at(c, p["input"], dim, list(range(0, shape[dim], step)) + [shape[dim]])


def split(c, p):
    shape = c.shape(p["input"])
    dim, sizes = axis(p["dim"], len(shape)), p["split_size_or_sections"]
    if is_number(sizes):
        sizes = [min(sizes, shape[dim] - b) for b in range(0, shape[dim], sizes)]
    bounds = [0]
    for s in sizes:
        bounds.append(bounds[-1] + s)
    return split_at(c, p["input"], dim, bounds)


def getitem(c, p):
    """An element of a tuple (from chunk, split, size), or a tensor indexed by integers and slices."""
    x, index = p["input"], p["index"]
    if not isinstance(x, KT):
        return x[index]
    shape = c.shape(x)
    index = index if isinstance(index, tuple) else (index,)
    if len(index) > len(shape) or not all(is_number(i) or isinstance(i, slice) for i in index):
        raise Unsupported(f"indexing by {index}: the exporter has integers and slices")
    starts, ends, steps = [0] * len(shape), list(shape), [1] * len(shape)
    for d, i in enumerate(index):
        if isinstance(i, slice):
            starts[d], ends[d], steps[d] = i.indices(shape[d])
        else:
            starts[d] = i + shape[d] if i < 0 else i
            ends[d] = starts[d] + 1
    if steps[0] < 1 or any(s < 1 for s in steps):
        raise Unsupported("a negative slice step")
    needs_reshape = any(is_number(i) for i in index)
    y = slice_op(c, x, starts, ends, steps, suffix="slice" if needs_reshape else None)
    return c.op("reshape", {"x": y}, {"shape": c.out_shape}) if needs_reshape else y


def expand(c, x, *sizes):
    """Broadcast to the output shape: the input concatenated with itself along each expanded dim."""
    shape, out = list(c.shape(x)), c.out_shape
    if len(shape) != len(out):
        raise Unsupported("expand adding dims")
    for d, (s, o) in enumerate(zip(shape, out)):
        if s != o:
            x = c.op("concat", {"xs": [x] * o}, {"axis": d}, suffix=f"expand{d}")
    return x
