"""PyTorch oracle for the engine's models (tests/nn): an independent
implementation of the four built-in models and the losses straight from
sect-language.md ("Built-in models", "What a section computes"), one sample
at a time, unpacked, autograd for the backward.

    /usr/bin/python3 tests/oracle/models_oracle.py CASE_DIR

CASE_DIR/case.json describes the models and samples; CASE_DIR holds
weights.safetensors ("<model>.<HF name>") and inputs.safetensors (float
inputs by key). Writes CASE_DIR/reference.safetensors:
  out.<model>.<sample>   each model's output per sample (what an activations
                         flow carries: a transformer's final-normed text rows)
  logits.<model>.<sample>  a transformer's text logits per sample
  loss                   [1] the loss (when case.json has "loss")
  grad.<model>.<name>    d(objective)/d(parameter) of every train model
  dinput.<key>           d(objective)/d(input) for float inputs
objective = loss + Σ (output · out_grads[model][sample]).
With "train" in case.json it instead runs AdamW steps (warmup-cosine or
constant schedule, global-norm clipping) and writes losses [steps] and
final.<model>.<name>.
"""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

torch.set_default_dtype(torch.float32)
torch.set_num_threads(1)  # tiny shapes: threads only contend with the test


# ------------------------------------------------------------------- layers
def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def layer_norm(x, w, b, eps):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps)


def rotate_half(x):
    d = x.shape[-1] // 2
    return torch.cat([-x[..., d:], x[..., :d]], dim=-1)


def rope(x, theta):  # x [T, heads, D]
    T, _, D = x.shape
    inv = theta ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    ang = torch.cat([ang, ang], dim=-1)
    cos, sin = ang.cos().float()[:, None, :], ang.sin().float()[:, None, :]
    return x * cos + rotate_half(x) * sin


def attention(q, k, v, causal):  # q [T, H, D], k, v [T, KV, D]
    T, H, D = q.shape
    rep = H // k.shape[1]
    k = k.repeat_interleave(rep, dim=1)
    v = v.repeat_interleave(rep, dim=1)
    s = torch.einsum("thd,shd->hts", q, k) / math.sqrt(D)
    if causal:
        s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
    return torch.einsum("hts,shd->thd", s.softmax(-1), v).reshape(T, H * D)


def gelu(x):
    return F.gelu(x, approximate="tanh")


# ------------------------------------------------------------------- models
def transformer(w, c, tokens, spliced):
    """Llama: the sequence is spliced blocks then text cut to max_seq; returns the final-normed
    hidden states of the text positions, their logits and the kept tokens."""
    spliced = [b.reshape(-1, c["hidden"]) for b in spliced]
    S = sum(b.shape[0] for b in spliced)
    tokens = tokens[: c["max_seq"] - S]
    x = torch.cat(list(spliced) + [w["model.embed_tokens.weight"][tokens]], dim=0)
    T, C, H, KV = x.shape[0], c["hidden"], c["heads"], c["kv_heads"]
    D = C // H
    for i in range(c["layers"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], c["norm_eps"])
        q = (h @ w[p + "self_attn.q_proj.weight"].T).view(T, H, D)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).view(T, KV, D)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).view(T, KV, D)
        q, k = rope(q, c["rope_theta"]), rope(k, c["rope_theta"])
        x = x + attention(q, k, v, c["causal"]) @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], c["norm_eps"])
        m = F.silu(h @ w[p + "mlp.gate_proj.weight"].T) * (h @ w[p + "mlp.up_proj.weight"].T)
        x = x + m @ w[p + "mlp.down_proj.weight"].T
    x = rms_norm(x[S:], w["model.norm.weight"], c["norm_eps"])
    return x, x @ w["lm_head.weight"].T, tokens


def encoder_layer(x, w, p, H, eps, names):
    """Pre-norm encoder layer on one sequence x [T, C]; `names` maps CLIP's or Whisper's naming."""
    T, C = x.shape
    D = C // H
    h = layer_norm(x, w[p + names["ln1"] + ".weight"], w[p + names["ln1"] + ".bias"], eps)
    a = p + "self_attn."

    def proj(n):
        bias = w.get(a + n + ".bias")
        y = h @ w[a + n + ".weight"].T
        return (y + bias if bias is not None else y).view(T, H, D)

    o = attention(proj("q_proj"), proj("k_proj"), proj("v_proj"), False)
    x = x + o @ w[a + "out_proj.weight"].T + w[a + "out_proj.bias"]
    h = layer_norm(x, w[p + names["ln2"] + ".weight"], w[p + names["ln2"] + ".bias"], eps)
    f = gelu(h @ w[p + names["fc1"] + ".weight"].T + w[p + names["fc1"] + ".bias"])
    return x + f @ w[p + names["fc2"] + ".weight"].T + w[p + names["fc2"] + ".bias"]


CLIP = {"ln1": "layer_norm1", "ln2": "layer_norm2", "fc1": "mlp.fc1", "fc2": "mlp.fc2"}
WHISPER = {"ln1": "self_attn_layer_norm", "ln2": "final_layer_norm", "fc1": "fc1", "fc2": "fc2"}


def vit(w, c, pixels):
    """CLIP vision: pixels [I, Ch, S, S] -> patch embeddings [I * P, C] (class rows dropped)."""
    S, p, Ch = c["image"], c["patch"], c["channels"]
    pixels = pixels.reshape(-1, Ch, S, S)
    I = pixels.shape[0]
    e = F.conv2d(pixels, w["vision_model.embeddings.patch_embedding.weight"], stride=p)  # [I, C, S/p, S/p]
    e = e.flatten(2).transpose(1, 2)  # [I, P, C]
    cls = w["vision_model.embeddings.class_embedding"].expand(I, 1, -1)
    x = torch.cat([cls, e], dim=1) + w["vision_model.embeddings.position_embedding.weight"]
    x = layer_norm(x, w["vision_model.pre_layrnorm.weight"], w["vision_model.pre_layrnorm.bias"], c["norm_eps"])
    outs = []
    for img in range(I):
        h = x[img]
        for i in range(c["layers"]):
            h = encoder_layer(h, w, f"vision_model.encoder.layers.{i}.", c["heads"], c["norm_eps"], CLIP)
        outs.append(h[1:])
    y = torch.cat(outs, dim=0)
    y = layer_norm(y, w["vision_model.post_layernorm.weight"], w["vision_model.post_layernorm.bias"], c["norm_eps"])
    if c.get("merge", 1) > 1:
        G = S // p
        y = pixel_shuffle(y.reshape(I, G, G, -1), 1.0 / c["merge"]).reshape(-1, y.shape[-1] * c["merge"] ** 2)
    return y


def pixel_shuffle(x, scale_factor):
    """InternVL's pixel_shuffle (ps_version 'v2'), as in modeling_internvl_chat.py."""
    n, w, h, c = x.size()
    x = x.view(n, w, int(h * scale_factor), int(c / scale_factor))
    x = x.permute(0, 2, 1, 3).contiguous()
    x = x.view(n, int(h * scale_factor), int(w * scale_factor), int(c / (scale_factor * scale_factor)))
    return x.permute(0, 2, 1, 3).contiguous()


def sinusoids(length, channels):  # Whisper's
    inc = math.log(10000) / (channels // 2 - 1)
    inv = torch.exp(-inc * torch.arange(channels // 2, dtype=torch.float64))
    t = torch.arange(length, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cat([t.sin(), t.cos()], dim=1).float()


def audio_encoder(w, c, mel):
    """Whisper-style: mel [F, M] -> [F // fpt, C]."""
    M, fpt = c["mel_bins"], c["frames_per_token"]
    mel = mel.reshape(-1, M)
    T = mel.shape[0] // fpt
    x = mel[: T * fpt].reshape(T, fpt * M) @ w["encoder.embed_frames.weight"].T + w["encoder.embed_frames.bias"]
    x = x + sinusoids(T, c["hidden"])
    for i in range(c["layers"]):
        x = encoder_layer(x, w, f"encoder.layers.{i}.", c["heads"], c["norm_eps"], WHISPER)
    return layer_norm(x, w["encoder.layer_norm.weight"], w["encoder.layer_norm.bias"], c["norm_eps"])


def mlp(w, c, x):
    x = x.reshape(-1, c["in"])
    act = {"gelu": gelu, "relu": F.relu, "silu": F.silu}[c["act"]]
    for i in range(c["layers"]):
        x = x @ w[f"layers.{i}.weight"].T + w[f"layers.{i}.bias"]
        if i + 1 < c["layers"]:
            x = act(x)
    return x


# ------------------------------------------------------------------- a case
def run_samples(case, weights, inputs, samples):
    """Forward of every model on every sample in case order; returns
    outputs[model][i], and the logits and kept text tokens of each transformer."""
    outputs = {m: {} for m in case["models"]}
    logits = {m: {} for m in case["models"]}
    kept = {m: {} for m in case["models"]}
    for i, s in enumerate(samples):
        for m in case["order"]:
            if m not in s:
                continue
            spec = case["models"][m]
            c, w, src = spec["spec"], weights[m], s[m]

            def fetch(ref):
                return outputs[ref["model"]][i] if "model" in ref else inputs[ref["input"]]

            if spec["kind"] == "transformer":
                tokens = torch.tensor(src["tokens"], dtype=torch.long)
                out, logits[m][i], kept[m][i] = transformer(w, c, tokens, [fetch(r) for r in src.get("splice", [])])
            elif spec["kind"] == "vit":
                out = vit(w, c, fetch(src))
            elif spec["kind"] == "audio_encoder":
                out = audio_encoder(w, c, fetch(src))
            else:
                out = mlp(w, c, fetch(src))
            outputs[m][i] = out
    return outputs, logits, kept


def loss_of(spec, logits_of, kept, n_global):
    """The loss from the transformers' text logits logits_of[model][i]."""
    total = 0.0
    for i, student in logits_of[spec["model"]].items():
        tokens = kept[spec["model"]][i]
        if tokens.shape[0] < 2:
            continue
        logits, targets = student[:-1], tokens[1:]
        for term in spec["terms"]:
            if term["kind"] == "ce":
                v = F.cross_entropy(logits, targets, reduction="sum")
            else:
                T = term["temperature"]
                teacher = logits_of[spec["teacher"]][i][: logits.shape[0]].detach()
                pt = F.softmax(teacher / T, -1)
                v = T * T * (pt * (F.log_softmax(teacher / T, -1) - F.log_softmax(logits / T, -1))).sum()
            total = total + term["weight"] * v / n_global
    return total


def lr_at(t, step):
    if t["schedule"] == "constant":
        return t["lr"]
    if step < t["warmup"]:
        return t["lr"] * step / t["warmup"]
    progress = (step - t["warmup"]) / max(1, t["total_steps"] - t["warmup"])
    return t["lr"] * max(0.0, 0.5 * (1 + math.cos(math.pi * progress)))


def main(case_dir):
    with open(os.path.join(case_dir, "case.json")) as f:
        case = json.load(f)
    flat = safetensors_io.load(os.path.join(case_dir, "weights.safetensors"))
    frozen = set(case.get("frozen", []))
    weights = {m: {} for m in case["models"]}
    params = []
    for name, t in flat.items():
        m, hf = name.split(".", 1)
        t = t.float().requires_grad_(m not in frozen)
        weights[m][hf] = t
        if m not in frozen:
            params.append((name, t))
    in_path = os.path.join(case_dir, "inputs.safetensors")
    inputs = {k: v.float().requires_grad_(True) for k, v in safetensors_io.load(in_path).items()} \
        if os.path.exists(in_path) else {}
    result = {}

    if "train" in case:
        t = case["train"]
        opt = torch.optim.AdamW([p for _, p in params], lr=t["lr"], betas=tuple(t["betas"]), eps=t["eps"],
                                weight_decay=t["weight_decay"])
        losses = []
        for step, (samples, n_global) in enumerate(zip(t["steps"], t["n_global"])):
            opt.zero_grad()
            _, logits, kept = run_samples(case, weights, inputs, samples)
            loss = loss_of(case["loss"], logits, kept, n_global)
            loss.backward()
            if t["clip"] > 0:
                torch.nn.utils.clip_grad_norm_([p for _, p in params], t["clip"])
            for g in opt.param_groups:
                g["lr"] = lr_at(t, step)
            opt.step()
            losses.append(float(loss))
        result["losses"] = torch.tensor(losses, dtype=torch.float32)
        for name, p in params:
            result["final." + name] = p.detach()
    else:
        outputs, logits, kept = run_samples(case, weights, inputs, case["samples"])
        objective = 0.0
        if "loss" in case:
            loss = loss_of(case["loss"], logits, kept, case["loss"]["n_global"])
            result["loss"] = torch.tensor([float(loss)])
            objective = objective + loss
        for m, grads in case.get("out_grads", {}).items():
            for i, key in grads.items():
                objective = objective + (outputs[m][int(i)] * inputs[key].detach().reshape(outputs[m][int(i)].shape)).sum()
        for m, per_sample in outputs.items():
            for i, out in per_sample.items():
                result[f"out.{m}.{i}"] = out.detach()
        for m, per_sample in logits.items():
            for i, out in per_sample.items():
                result[f"logits.{m}.{i}"] = out.detach()
        if torch.is_tensor(objective) and objective.requires_grad:
            objective.backward()
        for name, p in params:
            result["grad." + name] = p.grad if p.grad is not None else torch.zeros_like(p)
        for key, x in inputs.items():
            if x.grad is not None:
                result["dinput." + key] = x.grad
    safetensors_io.save(os.path.join(case_dir, "reference.safetensors"), result)


if __name__ == "__main__":
    main(sys.argv[1])
