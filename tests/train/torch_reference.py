"""PyTorch reference for the known-answer training tests: writes a
transformer's weights as safetensors (Hugging Face Llama names) and computes
the first step's loss exactly as the .sect contract defines it
(cross_entropy, kl(temperature) over text positions whose next position is
text, normalised by the global batch's count of them). Run with
/usr/bin/python3 (torch 1.13, CPU, fp32)."""
import json
import math
import struct

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


def first_loss(samples, student, teacher=None, kl_weight=0.0, temperature=1.0):
    """samples: token lists; student/teacher: (weights, layers, heads, kv_heads)."""
    n_global = sum(len(s) - 1 for s in samples)
    ce, kl = 0.0, 0.0
    for s in samples:
        logits = llama_logits(student[0], s, *student[1:])[:-1]
        ce += torch.nn.functional.cross_entropy(logits, torch.tensor(s[1:]), reduction="sum").item()
        if teacher is not None:
            t_logits = llama_logits(teacher[0], s, *teacher[1:])[:-1]
            log_p_t = torch.log_softmax(t_logits / temperature, -1)
            log_p_s = torch.log_softmax(logits / temperature, -1)
            kl += (temperature ** 2) * (log_p_t.exp() * (log_p_t - log_p_s)).sum().item()
    return ce / n_global + kl_weight * kl / n_global
