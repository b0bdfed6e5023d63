"""One training step of the same Llama-style transformer in PyTorch 1.13 (the
CPU peer of bench_engine_step): RMSNorm, rotary (rotate half), causal
attention written out (torch 1.13 has no scaled_dot_product_attention),
SwiGLU, untied LM head, mean cross-entropy over next-token targets,
torch.optim.AdamW. Prints one JSON line. Run with /usr/bin/python3.
--device cuda --bf16: the same step on a GPU under bf16 autocast (the GPU
peer of bench/gpu's `bench_gpu step`), timed with torch.cuda.synchronize.
--sdpa --fused-adamw: PyTorch's own best on a GPU, torch >= 2.0 — attention
by scaled_dot_product_attention (flash attention where torch has it),
AdamW(fused=True) — the peer with the freedom our side lacks."""
import argparse, json, math, time
import torch

p = argparse.ArgumentParser()
for name, default in [("layers", 2), ("hidden", 128), ("heads", 4), ("ffn", 384), ("vocab", 256),
                      ("samples", 32), ("tokens", 48), ("threads", 2), ("steps", 5), ("warmup", 2)]:
    p.add_argument("--" + name, type=int, default=default)
p.add_argument("--device", default="cpu")
p.add_argument("--bf16", action="store_true", help="bf16 autocast (GPU)")
p.add_argument("--sdpa", action="store_true", help="attention by torch's scaled_dot_product_attention (torch >= 2.0)")
p.add_argument("--fused-adamw", action="store_true", help="AdamW(fused=True) (torch >= 2.0)")
a = p.parse_args()
if a.sdpa and not hasattr(torch.nn.functional, "scaled_dot_product_attention"):
    raise SystemExit("torch_step.py: error: --sdpa needs torch >= 2.0 (this is torch %s)" % torch.__version__)
dev = torch.device(a.device)
torch.set_num_threads(a.threads)
torch.manual_seed(0)
D = a.hidden // a.heads


class RMSNorm(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(n))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.weight


def rope(x, cos, sin):  # x [B, H, T, D]
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        h = a.hidden
        self.n1, self.n2 = RMSNorm(h), RMSNorm(h)
        self.q, self.k, self.v, self.o = (torch.nn.Linear(h, h, bias=False) for _ in range(4))
        self.gate, self.up = torch.nn.Linear(h, a.ffn, bias=False), torch.nn.Linear(h, a.ffn, bias=False)
        self.down = torch.nn.Linear(a.ffn, h, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        y = self.n1(x)
        q, k, v = (m(y).view(B, T, a.heads, D).transpose(1, 2) for m in (self.q, self.k, self.v))
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        if a.sdpa:
            att = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            s = (q @ k.transpose(-1, -2)) / math.sqrt(D) + mask
            att = torch.softmax(s, dim=-1) @ v
        x = x + self.o(att.transpose(1, 2).reshape(B, T, a.hidden))
        y = self.n2(x)
        return x + self.down(torch.nn.functional.silu(self.gate(y)) * self.up(y))


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(a.vocab, a.hidden)
        self.layers = torch.nn.ModuleList(Layer() for _ in range(a.layers))
        self.norm = RMSNorm(a.hidden)
        self.head = torch.nn.Linear(a.hidden, a.vocab, bias=False)

    def forward(self, ids):
        T = ids.shape[1]
        inv = 10000.0 ** (-torch.arange(0, D // 2, dtype=torch.float32, device=dev) * 2 / D)
        ang = torch.arange(T, dtype=torch.float32, device=dev)[:, None] * inv[None, :]
        cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
        mask = torch.full((T, T), float("-inf"), device=dev).triu(1)
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return self.head(self.norm(x))


model = Model().to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, **({"fused": True} if a.fused_adamw else {}))
ids = torch.tensor([[(s * 7919 + t * 104729) % a.vocab for t in range(a.tokens)] for s in range(a.samples)], device=dev)
sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
times = []
for i in range(a.warmup + a.steps):
    t0 = time.perf_counter()
    opt.zero_grad()
    with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=a.bf16):
        logits = model(ids)
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, a.vocab).float(), ids[:, 1:].reshape(-1))
    loss.backward()
    opt.step()
    sync()
    if i >= a.warmup:
        times.append(time.perf_counter() - t0)
median = sorted(times)[len(times) // 2]
print(json.dumps({"impl": "torch", "threads": torch.get_num_threads(), "step_s": times, "median_s": median,
                  "device": a.device, "bf16": a.bf16, "sdpa": a.sdpa, "fused_adamw": a.fused_adamw, "tokens_per_s": a.samples * a.tokens / median}))
