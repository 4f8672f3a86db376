"""PyTorch eager peer of `npm run bench -- train-step` (run by the bench when Debian's python3-torch is installed).

One training step — forward, token-mean cross-entropy, backward, AdamW — of the same tiny Qwen3 dense and
Qwen3-MoE models (examples/models/tiny-*/config.json), batch 64 x 32 tokens, fp32, ONE thread. The model is
written plainly from the Hugging Face architecture: RMSNorm, q/k RMSNorm per head, RoPE, GQA causal attention,
SwiGLU MLP; for MoE a softmax router with top-k (renormalised when norm_topk_prob) over SwiGLU experts.
Qwen3.5 / Qwen3.5-MoE configs (model_type qwen3_5*; bench/tiny-qwen35.ts, passed inline) train the model of
bench/torch_qwen35.py (Gated DeltaNet in its plain recurrent form, gated full attention, shared expert).

Also: the per-op dispatch overhead of eager PyTorch (a 1-element add, issued back to back).

Prints one JSON object: {"torch": version, "threads": 1, "rows": [{"model", "msPerStep"}], "opOverheadUs"}.
"""
import json
import math
import sys
import time

import torch
import torch.nn.functional as F

from torch_qwen35 import Qwen35Model, is_qwen35

torch.set_num_threads(1)
torch.manual_seed(0)


class RMSNorm(torch.nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope(x, theta):
    # x [B, H, S, D]; rotate-half convention of Hugging Face Qwen3.
    S, D = x.shape[-2], x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
    ang = torch.arange(S, dtype=torch.float32)[:, None] * inv[None, :]
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)
    x1, x2 = x[..., : D // 2], x[..., D // 2 :]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class Attention(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        H, nH, nKV, D = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        self.nH, self.nKV, self.D = nH, nKV, D
        self.theta = c.get("rope_theta") or (c.get("rope_parameters") or {}).get("rope_theta", 10000)
        self.q_proj = torch.nn.Linear(H, nH * D, bias=False)
        self.k_proj = torch.nn.Linear(H, nKV * D, bias=False)
        self.v_proj = torch.nn.Linear(H, nKV * D, bias=False)
        self.o_proj = torch.nn.Linear(nH * D, H, bias=False)
        self.q_norm = RMSNorm(D, c["rms_norm_eps"])
        self.k_norm = RMSNorm(D, c["rms_norm_eps"])

    def forward(self, x):
        B, S, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(B, S, self.nH, self.D)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(B, S, self.nKV, self.D)).transpose(1, 2)
        v = self.v_proj(x).view(B, S, self.nKV, self.D).transpose(1, 2)
        q, k = rope(q, self.theta), rope(k, self.theta)
        rep = self.nH // self.nKV
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        # torch 1.13 (Debian's) has no scaled_dot_product_attention: the plain causal form.
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(self.D)
        scores = scores.masked_fill(torch.ones(S, S, dtype=torch.bool).triu(1), float("-inf"))
        o = F.softmax(scores, -1) @ v
        return self.o_proj(o.transpose(1, 2).reshape(B, S, self.nH * self.D))


class Mlp(torch.nn.Module):
    def __init__(self, H, I):
        super().__init__()
        self.gate_proj = torch.nn.Linear(H, I, bias=False)
        self.up_proj = torch.nn.Linear(H, I, bias=False)
        self.down_proj = torch.nn.Linear(I, H, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Moe(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        H, E = c["hidden_size"], c["num_experts"]
        self.k, self.norm = c["num_experts_per_tok"], c.get("norm_topk_prob", True)
        self.gate = torch.nn.Linear(H, E, bias=False)
        self.experts = torch.nn.ModuleList(Mlp(H, c["moe_intermediate_size"]) for _ in range(E))

    def forward(self, x):
        B, S, H = x.shape
        t = x.reshape(-1, H)
        probs = F.softmax(self.gate(t), -1)
        w, idx = probs.topk(self.k, -1)
        if self.norm:
            w = w / w.sum(-1, keepdim=True)
        out = torch.zeros_like(t)
        for e, expert in enumerate(self.experts):
            rows, slot = (idx == e).nonzero(as_tuple=True)
            if rows.numel():
                out.index_add_(0, rows, expert(t[rows]) * w[rows, slot, None])
        return out.view(B, S, H)


class Layer(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.mlp = Moe(c) if "num_experts" in c else Mlp(c["hidden_size"], c["intermediate_size"])

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class Model(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = torch.nn.ModuleList(Layer(c) for _ in range(c["num_hidden_layers"]))
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.lm_head = None if c.get("tie_word_embeddings") else torch.nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)

    def forward(self, ids):
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x)
        x = self.norm(x)
        return x @ self.embed_tokens.weight.t() if self.lm_head is None else self.lm_head(x)


def train_step_ms(cfg, batch, seq, steps):
    model = Qwen35Model(cfg) if is_qwen35(cfg) else Model(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, cfg["vocab_size"], (batch, seq), generator=g)
    targets = torch.randint(0, cfg["vocab_size"], (batch, seq), generator=g)
    targets[:, : seq // 2] = -100  # the prompt half takes no loss, as in the synthetic task
    def step():
        opt.zero_grad(set_to_none=True)
        logits = model(ids)
        loss = F.cross_entropy(logits.reshape(-1, cfg["vocab_size"]), targets.reshape(-1), ignore_index=-100)
        loss.backward()
        opt.step()
        return loss
    for _ in range(3):
        step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    times.sort()
    return 1e3 * times[len(times) // 2]


def op_overhead_us(n=20000):
    a, b = torch.ones(1), torch.ones(1)
    for _ in range(1000):
        torch.add(a, b)
    t0 = time.perf_counter()
    for _ in range(n):
        torch.add(a, b)
    return 1e6 * (time.perf_counter() - t0) / n


def main():
    args = json.loads(sys.argv[1])
    rows = []
    for name, path in args["models"].items():
        # A config file's path, or the config itself.
        if isinstance(path, dict):
            cfg = path
        else:
            with open(path) as f:
                cfg = json.load(f)
        rows.append({"model": name, "msPerStep": train_step_ms(cfg, args["batch"], args["seq"], args["steps"])})
    print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(), "rows": rows, "opOverheadUs": op_overhead_us()}))


if __name__ == "__main__":
    main()
