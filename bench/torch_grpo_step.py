"""A plain single-process PyTorch GRPO loop: the peer of the quickstart's GRPO step (`npm run bench -- grpo-step`).

The same task (reverse a string of 4-8 digits, partial credit per digit, 1 for an exact answer), model
(examples/models/tiny-dense, bench/torch_train_step.py's Qwen3), settings (SFT warm-up, then promptsPerStep
prompts x numGenerations samples of at most maxNewTokens tokens at temperature 1, group-normalised advantages,
the clipped surrogate with DAPO's token mean, one AdamW step per rollout) on ONE thread. Generation is batched
with a KV cache over left-padded prompts. Prints one JSON object: the seconds of every GRPO step, seconds per step (median and mean over the
timed steps, and per phase), and the reward curve.

Optional knobs (absent: the quickstart's defaults), so the loop can also check whether a GRPO variant learns the task
outside Ascent: "temperature" (sampling; the training log-probs stay at temperature 1, as Ascent's default),
"numIterations" (mu updates per rollout, the old log-probs taken once before the first) and "scaleRewards"
("group", "batch" or "none", as Ascent's scaleRewards).
"""
import json
import math
import random
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from torch_train_step import Model, rope

torch.set_num_threads(1)

BOS, EOS, SEP, PAD, DIGIT_BASE = 1, 2, 3, 0, 4


def problem(rng):
    digits = [DIGIT_BASE + rng.randrange(10) for _ in range(rng.randint(4, 8))]
    return [BOS, *digits, SEP], [*reversed(digits), EOS]


def reward(prompt, completion):
    expected = list(reversed(prompt[1:-1]))
    got = completion[: completion.index(EOS)] if EOS in completion else completion
    matches = sum(1 for a, b in zip(got, expected) if a == b)
    if EOS in completion and matches == len(expected) and len(got) == len(expected):
        return 1.0
    return 0.9 * matches / max(len(expected), len(got))


def attn_step(layer, x, cache, pos, mask):
    """One attention layer over new positions `pos` [B, S] with a growing KV cache (lists of [B, nKV, T, D])."""
    a = layer.self_attn
    B, S, _ = x.shape
    h = layer.input_layernorm(x)
    q = a.q_norm(a.q_proj(h).view(B, S, a.nH, a.D)).transpose(1, 2)
    k = a.k_norm(a.k_proj(h).view(B, S, a.nKV, a.D)).transpose(1, 2)
    v = a.v_proj(h).view(B, S, a.nKV, a.D).transpose(1, 2)
    q, k = rope_at(q, pos, a.theta), rope_at(k, pos, a.theta)
    if cache[0] is not None:
        k, v = torch.cat([cache[0], k], 2), torch.cat([cache[1], v], 2)
    cache[0], cache[1] = k, v
    rep = a.nH // a.nKV
    kk, vv = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    scores = (q @ kk.transpose(-1, -2)) / math.sqrt(a.D) + mask
    o = F.softmax(scores, -1) @ vv
    x = x + a.o_proj(o.transpose(1, 2).reshape(B, S, a.nH * a.D))
    return x + layer.mlp(layer.post_attention_layernorm(x))


def rope_at(x, pos, theta):
    D = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
    ang = pos[:, None, :, None].float() * inv  # [B, 1, S, D/2]
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)
    x1, x2 = x[..., : D // 2], x[..., D // 2 :]
    return x * cos + torch.cat([-x2, x1], -1) * sin


@torch.no_grad()
def generate(model, prompts, max_new, gen, temperature=1.0):
    """Left-padded batch, KV cache, multinomial sampling at `temperature`; stops a row after EOS."""
    B, L = len(prompts), max(len(p) for p in prompts)
    ids = torch.tensor([[PAD] * (L - len(p)) + p for p in prompts])
    valid = torch.tensor([[0] * (L - len(p)) + [1] * len(p) for p in prompts], dtype=torch.bool)
    pos = (valid.long().cumsum(1) - 1).clamp(min=0)
    caches = [[None, None] for _ in model.layers]
    keys_valid = valid
    out = [[] for _ in range(B)]
    done = torch.zeros(B, dtype=torch.bool)
    x_ids, x_pos = ids, pos
    for t in range(max_new):
        S = x_ids.shape[1]
        T = keys_valid.shape[1]
        causal = torch.ones(S, T, dtype=torch.bool).tril(T - S)
        mask = torch.where(causal[None, None] & keys_valid[:, None, None, :], 0.0, -1e9)  # finite: a pad row attends uniformly, never NaN
        x = model.embed_tokens(x_ids)
        for layer, cache in zip(model.layers, caches):
            x = attn_step(layer, x, cache, x_pos, mask)
        logits = model.norm(x[:, -1]) @ model.embed_tokens.weight.t()
        tok = torch.multinomial(F.softmax(logits / temperature, -1), 1, generator=gen)[:, 0]
        for b in range(B):
            if not done[b]:
                out[b].append(int(tok[b]))
        done |= tok == EOS
        if bool(done.all()):
            break
        x_ids, x_pos = tok[:, None], x_pos[:, -1:] + 1
        keys_valid = torch.cat([keys_valid, torch.ones(B, 1, dtype=torch.bool)], 1)
    return out


def batch_of(prompts, completions):
    """Right-padded prompt || completion rows; targets (next tokens) over the completion only."""
    S = max(len(p) + len(c) for p, c in zip(prompts, completions))
    ids = torch.full((len(prompts), S), PAD)
    tgt = torch.full((len(prompts), S), -100)
    for i, (p, c) in enumerate(zip(prompts, completions)):
        ids[i, : len(p) + len(c)] = torch.tensor(p + c)
        tgt[i, len(p) - 1 : len(p) - 1 + len(c)] = torch.tensor(c)
    return ids, tgt


def main():
    a = json.loads(sys.argv[1])
    with open(a["model"]) as f:
        cfg = json.load(f)
    torch.manual_seed(a["seed"])
    rng = random.Random(a["seed"])
    gen = torch.Generator().manual_seed(a["seed"])
    model = Model(cfg)
    with torch.no_grad():  # Ascent's initialisation: N(0, 0.02) weights, unit norms
        for name, p in model.named_parameters():
            if not name.endswith("norm.weight"):
                p.normal_(0.0, 0.02)
    opt = torch.optim.AdamW(model.parameters(), lr=a["sftLr"], weight_decay=0.01)  # Ascent's AdamW defaults
    for _ in range(a["sftSteps"]):  # supervised warm-up on reference answers
        probs = [problem(rng) for _ in range(a["sftBatch"])]
        ids, tgt = batch_of([p for p, _ in probs], [c for _, c in probs])
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(ids).reshape(-1, cfg["vocab_size"]), tgt.reshape(-1), ignore_index=-100).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    for g in opt.param_groups:
        g["lr"] = a["lr"]
    P, G = a["promptsPerStep"], a["numGenerations"]
    times, every, phases, curve = [], [], {"generate": 0.0, "reward": 0.0, "train": 0.0}, []
    for step in range(a["steps"]):
        t0 = time.perf_counter()
        prompts = [p for p, _ in (problem(rng) for _ in range(P)) for _ in range(G)]
        completions = generate(model, prompts, a["maxNewTokens"], gen, a.get("temperature", 1.0))
        t1 = time.perf_counter()
        rewards = torch.tensor([reward(p, c) for p, c in zip(prompts, completions)])
        r = rewards.view(P, G)
        centred = r - r.mean(1, keepdim=True)
        scale = a.get("scaleRewards", "group")
        std = r.std(1, keepdim=True) if scale == "group" else r.std() if scale == "batch" else torch.tensor(1.0)
        adv = (centred / (std + 1e-4) if scale != "none" else centred).view(-1)
        t2 = time.perf_counter()
        ids, tgt = batch_of(prompts, completions)
        mask = tgt != -100
        A = adv[:, None]
        for it in range(a.get("numIterations", 1)):
            opt.zero_grad(set_to_none=True)
            logp = -F.cross_entropy(model(ids).transpose(1, 2), tgt.clamp(min=0), reduction="none")
            if it == 0:
                old = logp.detach()  # the rollout policy's log-probs, reused by every update of this rollout
            ratio = torch.exp(logp - old)
            surr = -torch.min(ratio * A, ratio.clamp(1 - a["clipLow"], 1 + a["clipHigh"]) * A)
            loss = (surr * mask).sum() / mask.sum()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        t3 = time.perf_counter()
        curve.append(float(rewards.mean()))
        every.append(t3 - t0)
        if step >= a["skip"]:
            times.append(t3 - t0)
            phases["generate"] += t1 - t0
            phases["reward"] += t2 - t1
            phases["train"] += t3 - t2
    n = len(times)
    print(json.dumps({
        "torch": torch.__version__, "threads": torch.get_num_threads(),
        "secondsPerStep": statistics.median(times), "meanSecondsPerStep": sum(times) / n,
        "phases": {k: v / n for k, v in phases.items()}, "rewardCurve": curve, "stepSeconds": every,
    }))


if __name__ == "__main__":
    main()
