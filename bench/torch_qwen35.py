"""The Qwen3.5 / Qwen3.5-MoE model of the PyTorch train-step peer (bench/torch_train_step.py), fp32 modules
written plainly from the Hugging Face architecture (the same math as scripts/parity_qwen35.py, there a float64
functional forward): zero-centred RMSNorm (1 + w); Gated DeltaNet layers (in_proj_qkv -> causal depthwise
conv1d + SiLU -> q, k, v; beta = sigmoid(b), g = -exp(A_log) * softplus(a + dt_bias); the gated delta rule
in its plain token-by-token recurrent form with L2-normalised q / k; gated RMSNorm with SiLU(z); out_proj);
gated full attention (q_proj per head [query | gate], q / k centred norm, RoPE on the first
head_dim * partial_rotary_factor channels, output * sigmoid(gate)); a SwiGLU MLP, or for Qwen3.5-MoE a
softmax router with renormalised top-k over fused experts (gate_up_proj [E, 2I, H], down_proj [E, H, I],
expert by expert) plus the shared expert scaled by sigmoid(shared_expert_gate).

`text` is a Qwen3.5 text config in the hub's field spelling (bench/tiny-qwen35.ts).
"""
import math

import torch
import torch.nn.functional as F


def rms(x, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def l2norm(x, eps=1e-6):
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


class CentredNorm(torch.nn.Module):
    """Qwen3.5's RMSNorm: weights stored centred on zero, the scale is 1 + w."""

    def __init__(self, dim, eps):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(dim))
        self.eps = eps

    def forward(self, x):
        return rms(x, self.eps) * (1.0 + self.weight)


def linear(i, o):
    return torch.nn.Linear(i, o, bias=False)


class GatedAttention(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        H, self.nH, self.nKV, self.D = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        self.q_proj = linear(H, 2 * self.nH * self.D)
        self.k_proj = linear(H, self.nKV * self.D)
        self.v_proj = linear(H, self.nKV * self.D)
        self.o_proj = linear(self.nH * self.D, H)
        self.q_norm = CentredNorm(self.D, c["rms_norm_eps"])
        self.k_norm = CentredNorm(self.D, c["rms_norm_eps"])

    def forward(self, h, cos, sin):
        B, S, _ = h.shape
        nH, nKV, D = self.nH, self.nKV, self.D
        q, gate = self.q_proj(h).view(B, S, nH, 2 * D).chunk(2, dim=-1)
        q = self.q_norm(q).transpose(1, 2)
        k = self.k_norm(self.k_proj(h).view(B, S, nKV, D)).transpose(1, 2)
        v = self.v_proj(h).view(B, S, nKV, D).transpose(1, 2)
        rot = cos.shape[-1]
        q = torch.cat([q[..., :rot] * cos + rotate_half(q[..., :rot]) * sin, q[..., rot:]], dim=-1)
        k = torch.cat([k[..., :rot] * cos + rotate_half(k[..., :rot]) * sin, k[..., rot:]], dim=-1)
        k, v = k.repeat_interleave(nH // nKV, 1), v.repeat_interleave(nH // nKV, 1)
        # torch 1.13 (Debian's) has no scaled_dot_product_attention: the plain causal form.
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(D)
        scores = scores.masked_fill(torch.ones(S, S, dtype=torch.bool).triu(1), float("-inf"))
        o = (F.softmax(scores, -1) @ v).transpose(1, 2).reshape(B, S, nH * D)
        return self.o_proj(o * torch.sigmoid(gate.reshape(B, S, nH * D)))


class GatedDeltaNet(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        H = c["hidden_size"]
        self.Hk, self.Hv = c["linear_num_key_heads"], c["linear_num_value_heads"]
        self.Dk, self.Dv, self.K = c["linear_key_head_dim"], c["linear_value_head_dim"], c["linear_conv_kernel_dim"]
        self.eps = c["rms_norm_eps"]
        C = 2 * self.Hk * self.Dk + self.Hv * self.Dv
        self.in_proj_qkv = linear(H, C)
        self.in_proj_z = linear(H, self.Hv * self.Dv)
        self.in_proj_b = linear(H, self.Hv)
        self.in_proj_a = linear(H, self.Hv)
        self.conv1d = torch.nn.Conv1d(C, C, self.K, groups=C, padding=self.K - 1, bias=False)
        self.dt_bias = torch.nn.Parameter(torch.ones(self.Hv))
        self.A_log = torch.nn.Parameter(torch.empty(self.Hv).uniform_(1, 16).log())
        self.norm_weight = torch.nn.Parameter(torch.ones(self.Dv))
        self.out_proj = linear(self.Hv * self.Dv, H)

    def forward(self, h):
        B, S, _ = h.shape
        Hk, Hv, Dk, Dv = self.Hk, self.Hv, self.Dk, self.Dv
        qkv = F.silu(self.conv1d(self.in_proj_qkv(h).transpose(1, 2))[..., :S]).transpose(1, 2)
        q, k, v = torch.split(qkv, [Hk * Dk, Hk * Dk, Hv * Dv], dim=-1)
        q = l2norm(q.reshape(B, S, Hk, Dk).repeat_interleave(Hv // Hk, dim=2)) * Dk**-0.5
        k = l2norm(k.reshape(B, S, Hk, Dk).repeat_interleave(Hv // Hk, dim=2))
        v = v.reshape(B, S, Hv, Dv)
        beta = torch.sigmoid(self.in_proj_b(h))
        decay = (-self.A_log.exp() * F.softplus(self.in_proj_a(h) + self.dt_bias)).exp()
        state = h.new_zeros(B, Hv, Dk, Dv)
        outs = []
        for t in range(S):
            state = state * decay[:, t, :, None, None]
            kt = k[:, t, :, :, None]
            delta = (v[:, t] - (state * kt).sum(-2)) * beta[:, t, :, None]
            state = state + kt * delta[:, :, None, :]
            outs.append((state * q[:, t, :, :, None]).sum(-2))
        o = torch.stack(outs, 1)
        z = self.in_proj_z(h).reshape(B, S, Hv, Dv)
        normed = rms(o, self.eps) * self.norm_weight * F.silu(z)
        return self.out_proj(normed.reshape(B, S, Hv * Dv))


class Mlp(torch.nn.Module):
    def __init__(self, H, I):
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = linear(H, I), linear(H, I), linear(I, H)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class SparseMoe(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        H, E, I = c["hidden_size"], c["num_experts"], c["moe_intermediate_size"]
        self.k = c["num_experts_per_tok"]
        self.gate = linear(H, E)
        self.gate_up_proj = torch.nn.Parameter(torch.randn(E, 2 * I, H) / math.sqrt(H))
        self.down_proj = torch.nn.Parameter(torch.randn(E, H, I) / math.sqrt(I))
        self.shared_expert = Mlp(H, c["shared_expert_intermediate_size"])
        self.shared_expert_gate = linear(H, 1)

    def forward(self, h):
        B, S, H = h.shape
        x = h.reshape(-1, H)
        w, idx = F.softmax(self.gate(x), -1).topk(self.k, -1)
        w = w / w.sum(-1, keepdim=True)
        out = torch.zeros_like(x)
        for e in range(self.gate_up_proj.shape[0]):
            rows, slot = (idx == e).nonzero(as_tuple=True)
            if rows.numel():
                g, u = F.linear(x[rows], self.gate_up_proj[e]).chunk(2, -1)
                out = out.index_add(0, rows, F.linear(F.silu(g) * u, self.down_proj[e]) * w[rows, slot, None])
        out = out + torch.sigmoid(self.shared_expert_gate(x)) * self.shared_expert(x)
        return out.view(B, S, H)


class Layer(torch.nn.Module):
    def __init__(self, c, kind):
        super().__init__()
        eps, H = c["rms_norm_eps"], c["hidden_size"]
        self.input_layernorm = CentredNorm(H, eps)
        self.mixer = GatedDeltaNet(c) if kind == "linear_attention" else GatedAttention(c)
        self.post_attention_layernorm = CentredNorm(H, eps)
        self.mlp = SparseMoe(c) if "num_experts" in c else Mlp(H, c["intermediate_size"])

    def forward(self, x, cos, sin):
        h = self.input_layernorm(x)
        x = x + (self.mixer(h) if isinstance(self.mixer, GatedDeltaNet) else self.mixer(h, cos, sin))
        return x + self.mlp(self.post_attention_layernorm(x))


class Qwen35Model(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed_tokens = torch.nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = torch.nn.ModuleList(Layer(c, kind) for kind in c["layer_types"])
        self.norm = CentredNorm(c["hidden_size"], c["rms_norm_eps"])
        self.lm_head = None if c.get("tie_word_embeddings") else linear(c["hidden_size"], c["vocab_size"])

    def forward(self, ids):
        S = ids.shape[1]
        rope = self.c["rope_parameters"]
        rot = int(self.c["head_dim"] * rope["partial_rotary_factor"])
        inv = 1.0 / (rope["rope_theta"] ** (torch.arange(0, rot, 2, dtype=torch.float32) / rot))
        ang = torch.arange(S, dtype=torch.float32)[:, None] * inv[None]
        emb = torch.cat([ang, ang], -1)
        cos, sin = emb.cos(), emb.sin()
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x, cos, sin)
        x = self.norm(x)
        return x @ self.embed_tokens.weight.t() if self.lm_head is None else self.lm_head(x)


def is_qwen35(cfg):
    return cfg.get("model_type", "").startswith("qwen3_5")
