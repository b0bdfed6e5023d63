"""PyTorch reference for the known-answer training tests (train_tests.py,
known_answer_*): writes a student (and a frozen teacher) transformer's
weights as safetensors (Hugging Face Llama names), then trains the student
for a few steps exactly as the .sect contract defines a step: the global
batch of step k is samples k*global_batch + i (modulo the manifest), the loss
is cross_entropy (+ w * kl(temperature) against the teacher) over text
positions, normalised by the global batch's count of them; then
clip_grad_norm_ over every trainable parameter (one global norm) and one
torch.optim.AdamW step (one parameter group). Writes each step's loss and
gradient norm. Asserts the norm is above the clipping threshold at every
step, so the run checks clipping, not a no-op.

Usage: ORACLE_PYTHON torch_reference.py SPEC.json OUT.json (torch 1.13, CPU,
fp32); SPEC names the folder for the weights, the samples, the models and
the train block (train_tests.py, write_kat_model)."""
import json
import math
import struct
import sys

import torch


def llama_weights(layers, hidden, heads, kv_heads, ffn, vocab, seed):
    g = torch.Generator().manual_seed(seed)
    hd = hidden // heads

    def rnd(*shape, scale=0.2):
        return (torch.randn(*shape, generator=g) * scale).float()

    w = {"model.embed_tokens.weight": rnd(vocab, hidden, scale=1.0)}
    for i in range(layers):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = 1 + rnd(hidden, scale=0.1)
        w[p + "self_attn.q_proj.weight"] = rnd(heads * hd, hidden)
        w[p + "self_attn.k_proj.weight"] = rnd(kv_heads * hd, hidden)
        w[p + "self_attn.v_proj.weight"] = rnd(kv_heads * hd, hidden)
        w[p + "self_attn.o_proj.weight"] = rnd(hidden, heads * hd)
        w[p + "post_attention_layernorm.weight"] = 1 + rnd(hidden, scale=0.1)
        w[p + "mlp.gate_proj.weight"] = rnd(ffn, hidden)
        w[p + "mlp.up_proj.weight"] = rnd(ffn, hidden)
        w[p + "mlp.down_proj.weight"] = rnd(hidden, ffn)
    w["model.norm.weight"] = 1 + rnd(hidden, scale=0.1)
    w["lm_head.weight"] = rnd(vocab, hidden)
    return w


def save_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name in sorted(tensors):
        t = tensors[name].contiguous().float()
        data = t.numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x, theta):  # x: [heads, T, hd], rotate-half form
    hd, T = x.shape[-1], x.shape[-2]
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    cos = torch.cat([ang.cos(), ang.cos()], -1).float()
    sin = torch.cat([ang.sin(), ang.sin()], -1).float()
    x1, x2 = x[..., : hd // 2], x[..., hd // 2 :]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def llama_logits(w, tokens, layers, heads, kv_heads, eps=1e-5, theta=10000.0):
    x = w["model.embed_tokens.weight"][torch.tensor(tokens)]
    T, hidden = x.shape
    hd = hidden // heads
    mask = torch.full((T, T), float("-inf")).triu(1)
    for i in range(layers):
        p = f"model.layers.{i}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = (h @ w[p + "self_attn.q_proj.weight"].T).view(T, heads, hd).transpose(0, 1)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).view(T, kv_heads, hd).transpose(0, 1)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).view(T, kv_heads, hd).transpose(0, 1)
        q, k = rope(q, theta), rope(k, theta)
        k = k.repeat_interleave(heads // kv_heads, 0)
        v = v.repeat_interleave(heads // kv_heads, 0)
        att = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(hd) + mask, -1)
        o = (att @ v).transpose(0, 1).reshape(T, hidden)
        x = x + o @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        m = torch.nn.functional.silu(h @ w[p + "mlp.gate_proj.weight"].T) * (h @ w[p + "mlp.up_proj.weight"].T)
        x = x + m @ w[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, w["model.norm.weight"], eps)
    return x @ w["lm_head.weight"].T


def train_losses(spec):
    """Writes the weights into spec["dir"]; returns (losses, grad norms) per step."""
    st, te = spec["student"], spec.get("teacher")
    student = llama_weights(st["layers"], st["hidden"], st["heads"], st["kv_heads"], st["ffn"], st["vocab"], st["seed"])
    save_safetensors(f"{spec['dir']}/student.safetensors", student)
    teacher = None
    if te:
        teacher = llama_weights(te["layers"], te["hidden"], te["heads"], te["kv_heads"], te["ffn"], te["vocab"], te["seed"])
        save_safetensors(f"{spec['dir']}/teacher.safetensors", teacher)
    params = {n: t.clone().requires_grad_(True) for n, t in student.items()}
    t = spec["train"]
    opt = torch.optim.AdamW(list(params.values()), lr=t["lr"], betas=tuple(t["betas"]), eps=t["eps"],
                            weight_decay=t["weight_decay"])
    samples, gb, temp, w_kl = spec["samples"], t["global_batch"], spec.get("temperature", 1.0), spec.get("kl_weight", 0.0)
    losses, norms = [], []
    for step in range(t["steps"]):
        batch = [samples[(step * gb + i) % len(samples)] for i in range(gb)]
        n_global = sum(len(s) - 1 for s in batch)
        loss = torch.zeros(())
        for s in batch:
            logits = llama_logits(params, s, st["layers"], st["heads"], st["kv_heads"])[:-1]
            loss = loss + torch.nn.functional.cross_entropy(logits, torch.tensor(s[1:]), reduction="sum") / n_global
            if teacher is not None:
                with torch.no_grad():
                    t_logits = llama_logits(teacher, s, te["layers"], te["heads"], te["kv_heads"])[:-1]
                log_p_t = torch.log_softmax(t_logits / temp, -1)
                log_p_s = torch.log_softmax(logits / temp, -1)
                kl = (temp ** 2) * (log_p_t.exp() * (log_p_t - log_p_s)).sum()
                loss = loss + w_kl * kl / n_global
        opt.zero_grad()
        loss.backward()
        norm = float(torch.nn.utils.clip_grad_norm_(list(params.values()), t["grad_clip"]))
        assert norm > t["grad_clip"], f"step {step}: gradient norm {norm} is not above grad_clip {t['grad_clip']}"
        opt.step()
        losses.append(loss.item())
        norms.append(norm)
    return losses, norms


if __name__ == "__main__":
    spec = json.load(open(sys.argv[1]))
    losses, norms = train_losses(spec)
    json.dump({"losses": losses, "grad_norms": norms}, open(sys.argv[2], "w"))
