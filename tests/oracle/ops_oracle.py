"""PyTorch oracle for the CPU backend's ops (tests/cpu/oracle_test.cpp): every
op of src/nn/backend.h written independently in torch 1.13, autograd for the
backward.

    /usr/bin/python3 tests/oracle/ops_oracle.py CASE_DIR

CASE_DIR/cases.json is a list of cases {"name", "op", "params", "inputs"},
each input {"file", "dtype": "f32"|"i32", "shape"} a raw little-endian file
in CASE_DIR. For every case it writes the op's forward outputs and the
gradients of objective = Σ output · dy (dy: the "dy" input) as raw float32
files <name>.<output>.bin in CASE_DIR, and lists them in CASE_DIR/outputs.json
as {case: {output: file}}. Losses are scalars: the gradient is of the loss
itself, times params.scale (the backend's convention).
"""
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float32)


def load(case_dir, spec):
    dtype = {"f32": np.float32, "i32": np.int32}[spec["dtype"]]
    a = np.fromfile(os.path.join(case_dir, spec["file"]), dtype=dtype).reshape(spec["shape"])
    return torch.from_numpy(a.astype(np.int64) if dtype == np.int32 else a.copy())


def leaf(t):
    return t.clone().requires_grad_(True)


def objective(out, dy):
    return (out * dy).sum()


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def rope(x, pos, theta):  # x [N, H, D], pos [N]
    D = x.shape[-1]
    inv = theta ** (-torch.arange(0, D // 2, dtype=torch.float64) * 2 / D)
    ang = pos.to(torch.float64)[:, None] * inv[None, :]
    cos = torch.cat([ang.cos()] * 2, -1).to(torch.float32)[:, None, :]
    sin = torch.cat([ang.sin()] * 2, -1).to(torch.float32)[:, None, :]
    return x * cos + rotate_half(x) * sin


def attention(q, k, v, cu, H, KV, D, causal):
    """Written out per sequence: q [N, H*D], k, v [N, KV*D] -> out [N, H*D], lse [N, H]."""
    outs, lses = [], []
    for s in range(len(cu) - 1):
        a, b = int(cu[s]), int(cu[s + 1])
        L = b - a
        qs = q[a:b].view(L, H, D).transpose(0, 1)                      # [H, L, D]
        ks = k[a:b].view(L, KV, D).transpose(0, 1).repeat_interleave(H // KV, dim=0)
        vs = v[a:b].view(L, KV, D).transpose(0, 1).repeat_interleave(H // KV, dim=0)
        scores = qs @ ks.transpose(-1, -2) / math.sqrt(D)              # [H, L, L]
        if causal:
            scores = scores.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1), float("-inf"))
        lses.append(torch.logsumexp(scores, dim=-1).transpose(0, 1))  # [L, H]
        outs.append((torch.softmax(scores, dim=-1) @ vs).transpose(0, 1).reshape(L, H * D))
    return torch.cat(outs), torch.cat(lses)


def run_case(case_dir, case):
    op, p = case["op"], case["params"]
    x = {n: load(case_dir, s) for n, s in case["inputs"].items()}
    dy = x.get("dy")
    r = {}
    if op == "linear":
        inp, w, b = leaf(x["inp"]), leaf(x["w"]), leaf(x["bias"])
        out = F.linear(inp, w, b)
        objective(out, dy).backward()
        r = {"out": out, "dinp": inp.grad, "dw": w.grad, "dbias": b.grad}
    elif op == "embedding":
        table = leaf(x["table"])
        out = F.embedding(x["tokens"], table)
        objective(out, dy).backward()
        r = {"out": out, "dtable": table.grad}
    elif op == "rmsnorm":
        inp, w = leaf(x["inp"]), leaf(x["w"])
        rstd = torch.rsqrt(inp.pow(2).mean(-1, keepdim=True) + p["eps"])
        out = inp * rstd * w
        objective(out, dy).backward()
        r = {"out": out, "rstd": rstd.squeeze(-1), "dinp": inp.grad, "dw": w.grad}
    elif op == "layernorm":
        inp, w, b = leaf(x["inp"]), leaf(x["w"]), leaf(x["b"])
        out = F.layer_norm(inp, (inp.shape[-1],), w, b, p["eps"])
        objective(out, dy).backward()
        r = {"out": out, "dinp": inp.grad, "dw": w.grad, "db": b.grad}
    elif op == "rope":
        inp = leaf(x["inp"])
        out = rope(inp, x["pos"], p["theta"])
        objective(out, dy).backward()
        r = {"out": out, "dinp": inp.grad}
    elif op == "attention":
        q, k, v = leaf(x["q"]), leaf(x["k"]), leaf(x["v"])
        out, lse = attention(q, k, v, x["cu_seqlens"].tolist(), p["H"], p["KV"], p["D"], p["causal"])
        objective(out, dy).backward()
        r = {"out": out, "lse": lse, "dq": q.grad, "dk": k.grad, "dv": v.grad}
    elif op == "swiglu":
        gate, up = leaf(x["gate"]), leaf(x["up"])
        out = F.silu(gate) * up
        objective(out, dy).backward()
        r = {"out": out, "dgate": gate.grad, "dup": up.grad}
    elif op == "gelu":
        inp = leaf(x["inp"])
        out = F.gelu(inp, approximate="tanh")
        objective(out, dy).backward()
        r = {"out": out, "dinp": inp.grad}
    elif op == "im2col":
        P = p["p"]
        cols = F.unfold(x["pixels"], kernel_size=P, stride=P)          # [I, Ch*p*p, patches]
        r = {"out": cols.transpose(1, 2).reshape(-1, cols.shape[1])}
    elif op == "cross_entropy":
        logits, t = leaf(x["logits"]), x["targets"]
        loss = F.cross_entropy(logits, t, ignore_index=-1, reduction="sum")
        (loss * p["scale"]).backward()
        r = {"loss": loss.reshape(1), "dlogits": logits.grad}
    elif op == "kl":
        s, T = leaf(x["student"]), p["T"]
        keep = x["targets"] >= 0
        log_ps = F.log_softmax(s[keep] / T, dim=-1)
        log_pt = F.log_softmax(x["teacher"][keep] / T, dim=-1)
        loss = T * T * F.kl_div(log_ps, log_pt, log_target=True, reduction="sum")
        (loss * p["scale"]).backward()
        r = {"loss": loss.reshape(1), "dstudent": s.grad}
    elif op == "adamw":
        param = torch.nn.Parameter(x["p"].clone())
        opt = torch.optim.AdamW([param], lr=p["lr"], betas=(p["beta1"], p["beta2"]), eps=p["eps"],
                                weight_decay=p["weight_decay"])
        for g in x["grads"]:
            param.grad = g.clone()
            opt.step()
        st = opt.state[param]
        r = {"p": param.detach(), "m": st["exp_avg"], "v": st["exp_avg_sq"]}
    else:
        raise SystemExit(f"ops_oracle: unknown op {op!r} in case {case['name']!r}")
    files = {}
    for name, t in r.items():
        f = f"{case['name']}.{name}.bin"
        t.detach().to(torch.float32).contiguous().numpy().tofile(os.path.join(case_dir, f))
        files[name] = f
    return files


def main():
    case_dir = sys.argv[1]
    with open(os.path.join(case_dir, "cases.json")) as f:
        cases = json.load(f)
    outputs = {c["name"]: run_case(case_dir, c) for c in cases}
    with open(os.path.join(case_dir, "outputs.json"), "w") as f:
        json.dump(outputs, f)


if __name__ == "__main__":
    main()
