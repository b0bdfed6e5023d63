"""Real-binary training tests: run maestro-run on models and check what it
reports. Usage: /usr/bin/python3 train_tests.py CASE MAESTRO_RUN (from the
repository root). Each CASE is one ctest (train.CASE). The known_answer_*
cases need the PyTorch oracle (torch_reference.py, run with
$MAESTRO_ORACLE_PYTHON, default /usr/bin/python3): ctest runs them under
tests/oracle/require_torch.sh, which reports them Skipped when it can't run;
every other case needs only the standard library."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile


RUN = None
TMP = None


def maestro(*args, expect=0):
    p = subprocess.run([RUN, *args], capture_output=True, text=True, timeout=600)
    if p.returncode != expect:
        raise AssertionError(f"maestro-run {' '.join(args)}: exit {p.returncode}, expected {expect}\n"
                             f"stdout:\n{p.stdout[-3000:]}\nstderr:\n{p.stderr[-3000:]}")
    return p


def train_json(*args):
    p = maestro(*args, "--json", "--quiet")
    return json.loads(p.stdout.strip().splitlines()[-1])


def variant(src, name, subs):
    """A copy of a .sect file with regex substitutions, in TMP (imports stay valid: none here)."""
    text = open(src).read()
    for pattern, repl in subs:
        text, n = re.subn(pattern, repl, text, flags=re.S)
        assert n > 0, f"{pattern} not found in {src}"
    path = os.path.join(TMP, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def write_config(name, checkpoint_dir):
    path = os.path.join(TMP, name)
    with open(path, "w") as f:
        f.write(f'[checkpoint]\ndir = "{checkpoint_dir}"\n')
    return path


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def assert_same_checkpoint(a, b):
    """Two checkpoint folders hold bitwise-identical parameters and AdamW state."""
    files = sorted(n for n in os.listdir(a) if n.endswith(".safetensors"))
    assert files and files == sorted(n for n in os.listdir(b) if n.endswith(".safetensors")), (os.listdir(a), os.listdir(b))
    for name in files:
        assert read_bytes(os.path.join(a, name)) == read_bytes(os.path.join(b, name)), f"{name} differs: {a} vs {b}"
    state_a, state_b = (json.load(open(os.path.join(d, "state.json"))) for d in (a, b))
    assert state_a["losses"] == state_b["losses"] and state_a["step"] == state_b["step"], (state_a, state_b)


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-12)


def assert_close(xs, ys, tol, what):
    assert len(xs) == len(ys), f"{what}: {len(xs)} vs {len(ys)} losses"
    for i, (x, y) in enumerate(zip(xs, ys)):
        assert rel(x, y) <= tol, f"{what}: step {i}: {x!r} vs {y!r} (rel {rel(x, y):.2e})"


# --------------------------------------------------------------------- cases
def case_tiny_mllm():
    s = train_json("models/tiny_mllm.sect")
    assert s["mode"] == "train" and s["steps"] == 40 and s["samples"] == 40 * 32, s
    assert len(s["losses"]) == 40
    assert s["final_loss"] < 0.85 * s["first_loss"], (s["first_loss"], s["final_loss"])
    assert s["backend"] == "cpu" and s["transport"] == "local" and s["checkpoint"] is None


def case_tiny_kd():
    s = train_json("models/tiny_kd.sect")
    assert s["steps"] == 40 and len(s["losses"]) == 40
    assert s["final_loss"] < 0.85 * s["first_loss"], (s["first_loss"], s["final_loss"])


def case_order_independence():
    steps = ["--steps", "4"]
    base = train_json("models/tiny_mllm.sect", *steps)
    again = train_json("models/tiny_mllm.sect", *steps)
    assert base["losses"] == again["losses"], "the same run twice must give bitwise-identical losses"
    mono = train_json("models/tiny_mllm.sect", *steps, "--schedule", "monolithic")
    assert_close(mono["losses"], base["losses"], 1e-5, "monolithic vs wavefront")
    other = variant("models/tiny_mllm.sect", "mb.sect", [
        (r"(section vision \{.*?)micro_batch = 8;", r"\1micro_batch = 3;"),
        (r"(section llm \{.*?)parallel \{ dp = auto; \}", r"\1parallel { dp = 2; }\n  micro_batch = 5;"),
        (r"(section audio \{.*?)micro_batch = auto;", r"\1micro_batch = 2;\n  parallel { dp = 2; }"),
    ])
    alt = train_json(other, *steps)
    assert_close(alt["losses"], base["losses"], 1e-5, "micro_batch/dp variant vs default")
    kd = variant("models/tiny_kd.sect", "kd_mb.sect", [
        (r"micro_batch = 16;", "micro_batch = 5;"),
        (r"micro_batch = 4;", "micro_batch = 7;\n  parallel { dp = 2; }"),
    ])
    kd_base = train_json("models/tiny_kd.sect", *steps)
    kd_alt = train_json(kd, *steps, "--schedule", "monolithic")
    assert_close(kd_alt["losses"], kd_base["losses"], 1e-5, "KD variant vs default")


def case_resume():
    """--stop-after K with a warm-up + cosine schedule, then --resume: the
    losses and the final parameters (the checkpoint's safetensors, AdamW
    state included) are bitwise those of one uninterrupted run."""
    model = variant("models/tiny_mllm.sect", "cosine.sect", [
        (r"steps = 40;", "steps = 6;\n  schedule = cosine(warmup: 2);"),
        (r"global_batch = 32;", "global_batch = 12;"),
    ])
    whole_dir, split_dir = os.path.join(TMP, "whole"), os.path.join(TMP, "split")
    full = train_json(model, "--config", write_config("whole.toml", whole_dir))
    assert full["steps"] == 6 and full["checkpoint"].endswith("step-00000006"), full
    cfg = write_config("split.toml", split_dir)
    first = train_json(model, "--stop-after", "3", "--config", cfg)
    assert first["steps"] == 3 and first["checkpoint"].endswith("step-00000003"), first
    assert not [n for n in os.listdir(split_dir) if n.startswith(".tmp")], os.listdir(split_dir)
    assert first["losses"] == full["losses"][:3], (first["losses"], full["losses"])
    rest = train_json(model, "--resume", split_dir, "--config", cfg)
    assert rest["steps"] == 3 and rest["checkpoint"].endswith("step-00000006"), rest
    assert rest["losses"] == full["losses"][3:], (rest["losses"], full["losses"])
    assert_same_checkpoint(full["checkpoint"], rest["checkpoint"])
    # --steps is the schedule's length: a 5-step cosine decays faster, so the
    # loss after step 3's update differs from the 6-step run's.
    short = train_json(model, "--steps", "5")
    assert short["losses"][:4] == full["losses"][:4] and short["losses"][4] != full["losses"][4], (short, full)
    p = maestro(model, "--stop-after", "2", expect=2)
    assert "--stop-after 2" in p.stderr and "checkpoint" in p.stderr and p.stdout == "", p.stderr


def case_pipeline():
    """Sections split into pipeline stages (one actor per stage and replica)
    compute the same losses as unsplit ones; checkpoints hold one file per
    stage and resume exactly; resuming under another split is a clear error."""
    steps = ["--steps", "4"]
    base = train_json("models/tiny_mllm.sect", *steps)
    split = variant("models/tiny_mllm.sect", "split.sect", [
        (r"(section vision \{.*?)parallel \{ dp = 1; \}", r"\1parallel { dp = 1; pp = 2; }"),
        (r"(section audio \{.*?)micro_batch = auto;", r"\1micro_batch = 3;\n  parallel { pp = 2; }"),
        (r"(section llm \{.*?)parallel \{ dp = auto; \}", r"\1parallel { dp = 2; pp = 2; }\n  micro_batch = 5;"),
    ])
    for schedule in ["wavefront", "monolithic"]:
        s = train_json(split, *steps, "--schedule", schedule)
        assert_close(s["losses"], base["losses"], 1e-5, f"pp = 2 ({schedule}) vs pp = 1")
    ckpt = os.path.join(TMP, "pp-ckpt")
    cfg = write_config("pp-ckpt.toml", ckpt)
    full = train_json(split, *steps)
    first = train_json(split, *steps, "--stop-after", "2", "--config", cfg)
    files = sorted(os.listdir(first["checkpoint"]))
    assert "llm.stage0.safetensors" in files and "llm.stage1.safetensors" in files and "llm.safetensors" not in files, files
    rest = train_json(split, *steps, "--resume", ckpt)
    assert rest["losses"] == full["losses"][2:], ("resumed pipeline vs uninterrupted", rest["losses"], full["losses"])
    p = maestro("models/tiny_mllm.sect", *steps, "--resume", ckpt, expect=2)
    assert "no 'vision'" in p.stderr and "same pipeline stages" in p.stderr, p.stderr


def case_zero1():
    """ZeRO-1 (adamw(shard: true) or [runtime] shard_optimizer): each dp
    replica keeps 1/dp of the AdamW state; the losses are those of the
    unsharded run (bitwise here: the reduced gradients are the same rank-order
    sums and AdamW is elementwise; only the global norm is summed per shard),
    the memory saved is reported, and a sharded dp=2 checkpoint holds the
    whole (gathered) state: it resumes at dp=2 sharded and at dp=1 unsharded."""
    steps = ["--steps", "4"]
    dp2 = variant("models/tiny_mllm.sect", "dp2.sect", [
        (r"(section llm \{.*?)parallel \{ dp = auto; \}", r"\1parallel { dp = 2; }\n  micro_batch = 5;"),
        (r"(section audio \{.*?)micro_batch = auto;", r"\1micro_batch = 2;\n  parallel { dp = 2; }"),
    ])
    sharded = variant(dp2, "dp2_shard.sect", [(r"weight_decay: 0.01\)", "weight_decay: 0.01, shard: true)")])
    off = train_json(dp2, *steps)
    on = train_json(sharded, *steps)
    assert_close(on["losses"], off["losses"], 1e-5, "tiny_mllm dp=2: sharded vs unsharded")
    assert on["losses"] == off["losses"], ("bitwise expected", on["losses"], off["losses"])
    for part in ["llm", "audio"]:
        m, u = on["optimizer_state"][part], off["optimizer_state"][part]
        assert m["sharded"] and m["dp"] == 2 and not u["sharded"], (m, u)
        assert m["unsharded_bytes"] == u["bytes_per_replica"] == u["unsharded_bytes"], (m, u)
        assert abs(m["bytes_per_replica"] - m["unsharded_bytes"] / 2) <= 8, m  # 1/dp (the odd float to rank 0)
    assert not on["optimizer_state"]["vision"]["sharded"]  # dp = 1: nothing to shard
    # The TOML switch wins over the .sect, both ways.
    toml_on = os.path.join(TMP, "shard_on.toml")
    with open(toml_on, "w") as f:
        f.write("[runtime]\nshard_optimizer = true\n")
    toml_off = os.path.join(TMP, "shard_off.toml")
    with open(toml_off, "w") as f:
        f.write("[runtime]\nshard_optimizer = false\n")
    assert train_json(dp2, *steps, "--config", toml_on)["optimizer_state"]["llm"]["sharded"]
    assert not train_json(sharded, *steps, "--config", toml_off)["optimizer_state"]["llm"]["sharded"]
    # tiny_kd: the student (the only train section) at dp = 2.
    kd = variant("models/tiny_kd.sect", "kd_dp2.sect", [(r"micro_batch = 4;", "micro_batch = 4;\n  parallel { dp = 2; }")])
    kd_shard = variant(kd, "kd_dp2_shard.sect", [(r"adamw\(lr: 5e-4\)", "adamw(lr: 5e-4, shard: true)")])
    kd_off, kd_on = train_json(kd, *steps), train_json(kd_shard, *steps)
    assert_close(kd_on["losses"], kd_off["losses"], 1e-5, "tiny_kd dp=2: sharded vs unsharded")
    assert kd_on["losses"] == kd_off["losses"], ("bitwise expected", kd_on["losses"], kd_off["losses"])
    assert kd_on["optimizer_state"]["student"]["sharded"] and "teacher" not in kd_on["optimizer_state"]
    # Checkpoints: gathered, so the same files as the unsharded run's.
    ck_on, ck_off = os.path.join(TMP, "ck-on"), os.path.join(TMP, "ck-off")
    first = train_json(sharded, *steps, "--stop-after", "2", "--config", write_config("on.toml", ck_on))
    ref = train_json(dp2, *steps, "--stop-after", "2", "--config", write_config("off.toml", ck_off))
    assert_same_checkpoint(first["checkpoint"], ref["checkpoint"])
    # Resume the sharded dp=2 checkpoint at dp=2 sharded and at dp=1 unsharded.
    again = train_json(sharded, *steps, "--resume", ck_on)
    assert again["losses"] == on["losses"][2:], ("resumed dp=2 sharded vs uninterrupted", again["losses"], on["losses"])
    dp1 = variant("models/tiny_mllm.sect", "dp1.sect", [
        (r"(section llm \{.*?)parallel \{ dp = auto; \}", r"\1parallel { dp = 1; }\n  micro_batch = 5;"),
        (r"(section audio \{.*?)micro_batch = auto;", r"\1micro_batch = 2;\n  parallel { dp = 1; }"),
    ])
    at_dp1 = train_json(dp1, *steps, "--resume", ck_on)
    assert not at_dp1["optimizer_state"]["llm"]["sharded"]
    assert_close(at_dp1["losses"], on["losses"][2:], 1e-5, "resumed at dp=1 unsharded vs dp=2 sharded")
    resumed_off = train_json(dp1, *steps, "--resume", ck_off)
    assert at_dp1["losses"] == resumed_off["losses"], (at_dp1["losses"], resumed_off["losses"])


def case_tensor_parallel():
    """Megatron tensor parallelism in the runtime (tp rank actors, one compute
    worker each): tiny_mllm with tp = 2 on the LLM, tiny_kd with tp = 2 on
    teacher and student and with a tp = 2 teacher over a dp = 2 student (host
    groups), and tp = 2 x pp = 2 x dp = 2 on the LLM train with
    the tp = 1 losses (1e-5); a tp = 2 checkpoint resumes at tp = 1 with the
    losses the tp = 2 run goes on to have; an unsplittable tp is a located error."""
    steps = ["--steps", "4"]
    base = train_json("models/tiny_mllm.sect", *steps)
    for name, parallel in [("tp2", "tp = 2; dp = auto;"), ("tp2pp2dp2", "tp = 2; pp = 2; dp = 2;")]:
        model = variant("models/tiny_mllm.sect", name + ".sect",
                        [(r"(section llm \{.*?)parallel \{ dp = auto; \}", r"\1parallel { " + parallel + " }")])
        assert_close(train_json(model, *steps)["losses"], base["losses"], 1e-5, f"tiny_mllm llm {parallel} vs tp 1")
    # tp x ZeRO-1: each tp rank's dp group shards that rank's flat buffer; the
    # losses and the gathered checkpoint are the unsharded run's.
    composed = os.path.join(TMP, "tp2pp2dp2.sect")
    sharded = variant(composed, "tp2pp2dp2_shard.sect", [(r"weight_decay: 0.01\)", "weight_decay: 0.01, shard: true)")])
    ck_on, ck_off = os.path.join(TMP, "tp-ck-on"), os.path.join(TMP, "tp-ck-off")
    on = train_json(sharded, *steps, "--stop-after", "2", "--config", write_config("tp-on.toml", ck_on))
    off = train_json(composed, *steps, "--stop-after", "2", "--config", write_config("tp-off.toml", ck_off))
    assert on["optimizer_state"]["llm.stage0"]["sharded"], on["optimizer_state"]
    assert_close(on["losses"], off["losses"], 1e-5, "tp 2 x pp 2 x dp 2: sharded vs unsharded")
    assert_same_checkpoint(on["checkpoint"], off["checkpoint"])
    kd = variant("models/tiny_kd.sect", "kd_tp2.sect", [
        (r"micro_batch = 16;", "micro_batch = 16;\n  parallel { tp = 2; }"),
        (r"micro_batch = 4;", "micro_batch = 4;\n  parallel { tp = 2; }"),
    ])
    kd_base = train_json("models/tiny_kd.sect", *steps)["losses"]
    assert_close(train_json(kd, *steps)["losses"], kd_base, 1e-5, "tiny_kd teacher and student at tp = 2 vs tp = 1")
    # Host groups (docs/scheduler.md step 4): the teacher at tp = 2 spans the
    # student's two dp replicas on the same two slots, so the student is
    # dealt its samples by the teacher's replica and the teacher runs each
    # sample in the group of the student replica that consumes it.
    host = variant("models/tiny_kd.sect", "kd_host.sect", [
        (r"micro_batch = 16;", "micro_batch = 16;\n  parallel { tp = 2; dp = 1; }"),
        (r"micro_batch = 4;", "micro_batch = 4;\n  parallel { dp = 2; }"),
    ])
    assert_close(train_json(host, *steps)["losses"], kd_base, 1e-5, "tiny_kd teacher tp = 2 over student dp = 2 vs tp = 1")
    # A checkpoint written at tp = 2 holds whole tensors: it resumes at tp = 1.
    tp2 = os.path.join(TMP, "tp2.sect")
    full = train_json(tp2, *steps)
    ckpt = os.path.join(TMP, "tp-ckpt")
    first = train_json(tp2, *steps, "--stop-after", "2", "--config", write_config("tp-ckpt.toml", ckpt))
    assert first["losses"] == full["losses"][:2], (first["losses"], full["losses"])
    rest = train_json("models/tiny_mllm.sect", *steps, "--resume", ckpt)
    assert_close(rest["losses"], full["losses"][2:], 1e-5, "tp 2 checkpoint resumed at tp 1")
    # --print plan shows each rank's shards, and the planner's tp all-reduce
    # volume of step 0 is what the runtime counts in step 0 (within 5 %).
    recompute = variant(tp2, "tp2_recompute.sect", [(r"(section llm \{.*?)loss", r"\1recompute = true;\n  loss")])
    assert_close(train_json(recompute, *steps)["losses"], base["losses"], 1e-5, "tiny_mllm llm tp 2 recomputed vs tp 1")
    for model in [tp2, os.path.join(TMP, "tp2pp2dp2.sect"), kd, recompute]:
        plan = maestro(model, "--print", "plan").stdout
        assert "llm per tp rank (tp 2):" in plan or "student per tp rank (tp 2):" in plan, plan
        planned = sum(int(b) for b in re.findall(r"tp all-reduce per step \(step 0[^)]*\): (\d+) bytes", plan))
        counted = train_json(model, "--steps", "1")["tp_all_reduce_bytes"]
        assert planned > 0 and abs(counted - planned) <= 0.05 * planned, (model, planned, counted)
    assert "self_attn.q_proj.weight [64, 128]" in maestro(tp2, "--print", "plan").stdout
    bad = variant("models/tiny_mllm.sect", "tp3.sect", [(r"(section llm \{.*?)parallel \{ dp = auto; \}",
                                                         r"\1parallel { tp = 3; }")])
    p = maestro(bad, *steps, expect=2)
    assert "tp3.sect:31:" in p.stderr and "'heads' (4) must be a multiple of tp (3)" in p.stderr, p.stderr


KAT_TRAIN = {"global_batch": 4, "steps": 3, "lr": 1e-2, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.1,
             "grad_clip": 0.25}


def write_kat_model(kd, parallel=""):
    """A student (+ frozen teacher) model on a 6-line manifest, its weights
    written by the oracle, and the oracle's losses for KAT_TRAIN's steps."""
    samples = [[(7 * i + 3 * j * j + 1) % 64 for j in range(5 + 3 * i)] for i in range(6)]
    with open(os.path.join(TMP, "train.jsonl"), "w") as f:
        for s in samples:
            f.write(json.dumps({"tokens": s}) + "\n")
    spec = {"dir": TMP, "samples": samples, "train": KAT_TRAIN,
            "student": {"layers": 2, "hidden": 32, "heads": 4, "kv_heads": 2, "ffn": 48, "vocab": 64, "seed": 1}}
    if kd:
        spec.update(kl_weight=0.5, temperature=2.0,
                    teacher={"layers": 3, "hidden": 48, "heads": 4, "kv_heads": 4, "ffn": 64, "vocab": 64, "seed": 2})
    with open(os.path.join(TMP, "spec.json"), "w") as f:
        json.dump(spec, f)
    out = os.path.join(TMP, "oracle.json")
    python = os.environ.get("MAESTRO_ORACLE_PYTHON") or "/usr/bin/python3"
    ref = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_reference.py")
    p = subprocess.run([python, ref, os.path.join(TMP, "spec.json"), out], capture_output=True, text=True)
    assert p.returncode == 0, f"the oracle failed ({python}):\n{p.stderr[-3000:]}"
    expect = json.load(open(out))["losses"]
    sect = """
section student {
  model = transformer(layers: 2, hidden: 32, heads: 4, kv_heads: 2, ffn: 48, vocab: 64, max_seq: 64);
  consumes = [text];
  micro_batch = 4;%s
  weights = "student.safetensors";
  loss = %s;
}
""" % (parallel, "cross_entropy + 0.5 * kl(temperature: 2.0)" if kd else "cross_entropy")
    if kd:
        sect += """
section teacher {
  model = transformer(layers: 3, hidden: 48, heads: 4, ffn: 64, vocab: 64, max_seq: 64);
  mode = frozen;
  consumes = [text];
  micro_batch = 3;
  weights = "teacher.safetensors";
}
flow teacher -> student : logits;
"""
    t = KAT_TRAIN
    sect += """
data { source = files(manifest: "train.jsonl"); }
train {
  global_batch = %d; steps = %d; precision = fp32; grad_clip = %r;
  optimizer = adamw(lr: %r, betas: [%r, %r], eps: %r, weight_decay: %r);
}
""" % (t["global_batch"], t["steps"], t["grad_clip"], t["lr"], *t["betas"], t["eps"], t["weight_decay"])
    path = os.path.join(TMP, "kd.sect" if kd else "llm.sect")
    with open(path, "w") as f:
        f.write(sect)
    return path, expect


def assert_known_answer(path, expect, *args):
    s = train_json(path, *args)
    assert s["steps"] == len(expect) == KAT_TRAIN["steps"], (s, expect)
    assert_close(s["losses"], expect, 1e-5, f"{' '.join(args) or 'default'} vs the PyTorch oracle")
    print(f"{' '.join(args) or 'default'}: losses {s['losses']}, max rel err "
          f"{max(rel(x, y) for x, y in zip(s['losses'], expect)):.1e}")


def case_known_answer_llm():
    """Every step's loss of 3 clipped AdamW steps equals PyTorch's, also with
    the section split into pipeline stages and replicas (the global norm then
    sums over parts)."""
    path, expect = write_kat_model(kd=False)
    for schedule in ("wavefront", "monolithic"):
        assert_known_answer(path, expect, "--schedule", schedule)
    path, expect = write_kat_model(kd=False, parallel="\n  parallel { dp = 2; pp = 2; }")
    assert_known_answer(path, expect)


def case_known_answer_kd():
    path, expect = write_kat_model(kd=True)
    for schedule in ("wavefront", "monolithic"):
        assert_known_answer(path, expect, "--schedule", schedule)


def case_errors():
    missing = variant("models/tiny_kd.sect", "missing.sect",
                      [(r"mode     = frozen;", 'mode = frozen;\n  weights = "nope.safetensors";')])
    p = maestro(missing, "--steps", "1", expect=1)
    assert "teacher" in p.stderr and "nope.safetensors" in p.stderr, p.stderr
    tp = variant("models/tiny_mllm.sect", "tp.sect", [(r"parallel \{ dp = 1; \}", "parallel { dp = 1; tp = 3; }")])
    p = maestro(tp, "--steps", "1", expect=2)
    assert "vision" in p.stderr and "must be a multiple of tp (3)" in p.stderr, p.stderr
    pp = variant("models/tiny_mllm.sect", "pp.sect", [(r"parallel \{ dp = auto; \}", "parallel { dp = auto; pp = 3; }")])
    p = maestro(pp, "--steps", "1", expect=2)
    assert "'llm': pp = 3: 2 layers cannot be split into 3 pipeline stages" in p.stderr, p.stderr
    with open(os.path.join(TMP, "img.jsonl"), "w") as f:
        f.write('{"tokens": [1, 2, 3]}\n{"text": "a cat", "images": ["cat.png"]}\n')
    img = variant("models/tiny_kd.sect", "img.sect",
                  [(r"source = synthetic\(seed: 3\);", 'source = files(manifest: "img.jsonl");')])
    p = maestro(img, "--steps", "1", expect=2)
    assert "img.jsonl:2: " in p.stderr and "cat.png: no such file" in p.stderr, p.stderr
    p = maestro("models/tiny_kd.sect", "--resume", os.path.join(TMP, "no-such-ckpt"), expect=2)
    assert "no-such-ckpt" in p.stderr, p.stderr


def case_trace():
    trace = os.path.join(TMP, "trace.json")
    s = train_json("models/tiny_mllm.sect", "--steps", "2", "--trace", trace)
    t = json.load(open(trace))
    names = {e["args"]["name"] for e in t["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    assert any("llm/0" in n for n in names) and "scheduler" in names and "data loader" in names, names
    slices = [e for e in t["traceEvents"] if e["ph"] == "X"]
    assert any(e["cat"] == "task" and e["name"].startswith("forward") for e in slices)
    assert any(e["cat"] == "task" and e["name"].startswith("backward") for e in slices)
    assert any(e["cat"] == "transfer" for e in slices)
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in slices)
    assert s["steps"] == 2


if __name__ == "__main__":
    case, RUN = sys.argv[1], os.path.abspath(sys.argv[2])
    TMP = tempfile.mkdtemp(prefix=f"maestro-train-{case}-")
    try:
        globals()["case_" + case]()
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
    print(f"train.{case}: ok")
