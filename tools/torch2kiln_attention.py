"""nn.MultiheadAttention for tools/torch2kiln.py, as kiln matmuls, a softmax and layout ops (inference:
no masks, no bias_k/bias_v, no attention weights), following F.multi_head_attention_forward: per-head
q / sqrt(head_dim) @ k^T, softmax over the keys, @ v, heads joined, out_proj."""
import math
import operator

from torch2kiln_graph import KT, Unsupported


def check(m, node, kwargs):
    if kwargs.get("key_padding_mask") is not None or kwargs.get("attn_mask") is not None:
        raise Unsupported("attention masks")
    if m.bias_k is not None or m.add_zero_attn:
        raise Unsupported("add_bias_kv / add_zero_attn")
    if any(u.target is operator.getitem and u.args[1] == 1 and u.users for u in node.users):
        raise Unsupported("the attention weights (output 1) are used")


def projections(c, m):
    """(weight, bias) per q, k, v: slices of in_proj_weight, or the separate q/k/v_proj_weight."""
    E = m.embed_dim
    out = []
    for i, name in enumerate(("q", "k", "v")):
        if m._qkv_same_embed_dim:
            w = c.const(f"{name}_proj_weight", m.in_proj_weight[i * E:(i + 1) * E])
        else:
            w = c.param(m, f"{name}_proj_weight")
        b = c.const(f"{name}_proj_bias", m.in_proj_bias[i * E:(i + 1) * E]) if m.in_proj_bias is not None else None
        out.append((w, b))
    return out


def heads(c, x, w, b, n, length, h, d, name):
    """x [n, length, e] -> projected, [n, h, length, d]."""
    inputs = {"a": x, "b": w}
    if b is not None:
        inputs["bias"] = b
    y = c.op("matmul", inputs, {"transpose_b": True}, suffix=f"{name}_proj")
    y = c.op("reshape", {"x": y}, {"shape": [n, length, h, d]}, suffix=f"{name}_heads")
    return c.op("transpose", {"x": y}, {"perm": [0, 2, 1, 3]}, suffix=f"{name}_t")


def batch_major(c, x, batch_first, suffix):
    return x if batch_first else c.op("transpose", {"x": x}, {"perm": [1, 0, 2]}, suffix=suffix)


def multihead_attention(c, m, args, kwargs):
    names = ["query", "key", "value", "key_padding_mask", "need_weights", "attn_mask"]
    p = {**dict(zip(names, args)), **kwargs}
    check(m, c.node, p)
    q, k, v = (p.get(n) for n in names[:3])
    if not all(isinstance(t, KT) and len(c.shape(t)) == 3 for t in (q, k, v)):
        raise Unsupported("query, key and value must be batched 3-D tensors")
    q, k, v = (batch_major(c, t, m.batch_first, f"{n}_in") for t, n in zip((q, k, v), "qkv"))
    n, lq = c.shape(p["query"])[0:2] if m.batch_first else c.shape(p["query"])[1::-1]
    lk = c.shape(p["key"])[1] if m.batch_first else c.shape(p["key"])[0]
    h, d = m.num_heads, m.head_dim
    (wq, bq), (wk, bk), (wv, bv) = projections(c, m)
    qh = heads(c, q, wq, bq, n, lq, h, d, "q")
    kh, vh = heads(c, k, wk, bk, n, lk, h, d, "k"), heads(c, v, wv, bv, n, lk, h, d, "v")
    qh = c.op("div", {"a": qh}, {"b": math.sqrt(d)}, suffix="q_scaled")
    scores = c.op("matmul", {"a": qh, "b": kh}, {"transpose_b": True}, suffix="scores")
    attn = c.op("softmax", {"x": scores}, {"axis": -1}, suffix="softmax")
    y = c.op("matmul", {"a": attn, "b": vh}, suffix="context")
    y = c.op("transpose", {"x": y}, {"perm": [0, 2, 1, 3]}, suffix="context_t")
    y = c.op("reshape", {"x": y}, {"shape": [n, lq, h * d]}, suffix="joined")
    inputs = {"a": y, "b": c.param(m.out_proj, "weight", "out_proj.weight")}
    if m.out_proj.bias is not None:
        inputs["bias"] = c.param(m.out_proj, "bias", "out_proj.bias")
    y = c.op("matmul", inputs, {"transpose_b": True}, suffix="out_proj")
    y = y if m.batch_first else c.op("transpose", {"x": y}, {"perm": [1, 0, 2]}, suffix="out")
    c.b.shapes[y] = [n, lq, m.embed_dim] if m.batch_first else [lq, n, m.embed_dim]
    return (y, None)
