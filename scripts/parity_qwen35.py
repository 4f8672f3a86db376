"""A plain PyTorch forward of the Qwen3.5 text model, written from the Transformers architecture
(Qwen3_5TextModel: zero-centred RMSNorm (1 + w), Gated DeltaNet layers in their token-by-token recurrent
form, gated full attention with partial RoPE), for the logits-parity fixtures. Text-only positions, so the
multimodal rope is plain RoPE over the first head_dim * partial_rotary_factor channels. Runs in float64.
A text config with num_experts is Qwen3.5-MoE: every layer's MLP is Qwen3_5MoeSparseMoeBlock (softmax
router, top-k renormalised, fused experts gate_up_proj [E, 2I, H] / down_proj [E, H, I], plus a shared
expert scaled by sigmoid(shared_expert_gate)), computed token by token and expert by expert.

Weights are HF text-model names (model.layers.{i}...); `text` is the text config (Qwen3_5TextConfig fields).
"""
import torch
import torch.nn.functional as F


def rms(x, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def centred_norm(x, w, eps):
    return rms(x, eps) * (1.0 + w)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def l2norm(x, eps=1e-6):
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def attention(text, W, p, h, cos, sin):
    B, S, _ = h.shape
    nH, nKV, D = text["num_attention_heads"], text["num_key_value_heads"], text["head_dim"]
    eps = text["rms_norm_eps"]
    q, gate = F.linear(h, W[p + "q_proj.weight"]).view(B, S, nH, 2 * D).chunk(2, dim=-1)
    gate = gate.reshape(B, S, nH * D)
    q = centred_norm(q, W[p + "q_norm.weight"], eps).transpose(1, 2)
    k = centred_norm(F.linear(h, W[p + "k_proj.weight"]).view(B, S, nKV, D), W[p + "k_norm.weight"], eps).transpose(1, 2)
    v = F.linear(h, W[p + "v_proj.weight"]).view(B, S, nKV, D).transpose(1, 2)
    rot = cos.shape[-1]
    q = torch.cat([q[..., :rot] * cos + rotate_half(q[..., :rot]) * sin, q[..., rot:]], dim=-1)
    k = torch.cat([k[..., :rot] * cos + rotate_half(k[..., :rot]) * sin, k[..., rot:]], dim=-1)
    k = k.repeat_interleave(nH // nKV, dim=1)
    v = v.repeat_interleave(nH // nKV, dim=1)
    scores = (q @ k.transpose(-1, -2)) * D ** -0.5
    scores = scores.masked_fill(torch.ones(S, S, dtype=torch.bool).triu(1), float("-inf"))
    o = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, S, nH * D)
    return F.linear(o * torch.sigmoid(gate), W[p + "o_proj.weight"])


def gated_delta_net(text, W, p, h):
    B, S, _ = h.shape
    Hk, Hv = text["linear_num_key_heads"], text["linear_num_value_heads"]
    Dk, Dv = text["linear_key_head_dim"], text["linear_value_head_dim"]
    K = text["linear_conv_kernel_dim"]
    qkv = F.linear(h, W[p + "in_proj_qkv.weight"]).transpose(1, 2)  # B, C, S
    C = qkv.shape[1]
    qkv = F.silu(F.conv1d(qkv, W[p + "conv1d.weight"], padding=K - 1, groups=C)[..., :S]).transpose(1, 2)
    q, k, v = torch.split(qkv, [Hk * Dk, Hk * Dk, Hv * Dv], dim=-1)
    q = q.reshape(B, S, Hk, Dk).repeat_interleave(Hv // Hk, dim=2)
    k = k.reshape(B, S, Hk, Dk).repeat_interleave(Hv // Hk, dim=2)
    v = v.reshape(B, S, Hv, Dv)
    z = F.linear(h, W[p + "in_proj_z.weight"]).reshape(B, S, Hv, Dv)
    beta = torch.sigmoid(F.linear(h, W[p + "in_proj_b.weight"]))
    g = -W[p + "A_log"].exp() * F.softplus(F.linear(h, W[p + "in_proj_a.weight"]) + W[p + "dt_bias"])
    q = l2norm(q) * Dk ** -0.5
    k = l2norm(k)
    state = torch.zeros(B, Hv, Dk, Dv, dtype=h.dtype)
    out = torch.zeros(B, S, Hv, Dv, dtype=h.dtype)
    for t in range(S):
        state = state * g[:, t].exp()[..., None, None]
        kv_mem = (state * k[:, t, :, :, None]).sum(-2)
        delta = (v[:, t] - kv_mem) * beta[:, t, :, None]
        state = state + k[:, t, :, :, None] * delta[:, :, None, :]
        out[:, t] = (state * q[:, t, :, :, None]).sum(-2)
    normed = rms(out, text["rms_norm_eps"]) * W[p + "norm.weight"] * F.silu(z)
    return F.linear(normed.reshape(B, S, Hv * Dv), W[p + "out_proj.weight"])


def sparse_moe_block(text, W, p, h):
    B, S, H = h.shape
    x = h.reshape(B * S, H)
    probs = F.softmax(F.linear(x, W[p + "gate.weight"]), dim=-1)
    top, idx = torch.topk(probs, text["num_experts_per_tok"], dim=-1)
    top = top / top.sum(-1, keepdim=True)
    gate_up, down = W[p + "experts.gate_up_proj"], W[p + "experts.down_proj"]
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for j in range(idx.shape[1]):
            e = int(idx[t, j])
            g, u = F.linear(x[t], gate_up[e]).chunk(2)
            out[t] += top[t, j] * F.linear(F.silu(g) * u, down[e])
    s = p + "shared_expert."
    shared = F.linear(F.silu(F.linear(x, W[s + "gate_proj.weight"])) * F.linear(x, W[s + "up_proj.weight"]), W[s + "down_proj.weight"])
    out = out + torch.sigmoid(F.linear(x, W[p + "shared_expert_gate.weight"])) * shared
    return out.reshape(B, S, H)


def router_margin(text, W, ids, tie):
    """The smallest gap between the k-th and (k+1)-th router probability over all tokens and layers: a tiny
    gap would let fp32 and float64 pick different experts, so the fixture maker refuses it."""
    gaps = []
    forward(text, W, ids, tie, on_router=lambda probs: gaps.append(
        (probs.sort(-1, descending=True).values[:, text["num_experts_per_tok"] - 1] -
         probs.sort(-1, descending=True).values[:, text["num_experts_per_tok"]]).min().item()))
    return min(gaps)


def forward(text, W, ids, tie, on_router=None):
    """Logits [B, S, V] (float64) of token ids [B, S]."""
    W = {n: t.double() for n, t in W.items()}
    B, S = ids.shape
    eps = text["rms_norm_eps"]
    rope = text["rope_parameters"]
    rot = int(text["head_dim"] * rope["partial_rotary_factor"])
    inv_freq = 1.0 / (rope["rope_theta"] ** (torch.arange(0, rot, 2, dtype=torch.float64) / rot))
    freqs = torch.arange(S, dtype=torch.float64)[:, None] * inv_freq[None]
    emb = torch.cat([freqs, freqs], dim=-1)
    cos, sin = emb.cos(), emb.sin()
    x = W["model.embed_tokens.weight"][ids]
    for i, kind in enumerate(text["layer_types"]):
        p = f"model.layers.{i}."
        h = centred_norm(x, W[p + "input_layernorm.weight"], eps)
        if kind == "linear_attention":
            x = x + gated_delta_net(text, W, p + "linear_attn.", h)
        else:
            x = x + attention(text, W, p + "self_attn.", h, cos, sin)
        h = centred_norm(x, W[p + "post_attention_layernorm.weight"], eps)
        if "num_experts" in text:
            if on_router:
                on_router(F.softmax(F.linear(h.reshape(-1, h.shape[-1]), W[p + "mlp.gate.weight"]), dim=-1))
            h = sparse_moe_block(text, W, p + "mlp.", h)
        else:
            h = F.linear(F.silu(F.linear(h, W[p + "mlp.gate_proj.weight"])) * F.linear(h, W[p + "mlp.up_proj.weight"]), W[p + "mlp.down_proj.weight"])
        x = x + h
    x = centred_norm(x, W["model.norm.weight"], eps)
    return F.linear(x, W["model.embed_tokens.weight"] if tie else W["lm_head.weight"])


def text_param_shapes(text, tie):
    """HF text-model parameter names and shapes (Qwen3_5ForCausalLM's module tree)."""
    H, I, V = text["hidden_size"], text.get("intermediate_size"), text["vocab_size"]
    nH, nKV, D = text["num_attention_heads"], text["num_key_value_heads"], text["head_dim"]
    Hk, Hv = text["linear_num_key_heads"], text["linear_num_value_heads"]
    Dk, Dv, K = text["linear_key_head_dim"], text["linear_value_head_dim"], text["linear_conv_kernel_dim"]
    C = 2 * Hk * Dk + Hv * Dv
    shapes = {"model.embed_tokens.weight": (V, H), "model.norm.weight": (H,)}
    for i, kind in enumerate(text["layer_types"]):
        p = f"model.layers.{i}."
        if kind == "linear_attention":
            a = p + "linear_attn."
            shapes.update({a + "in_proj_qkv.weight": (C, H), a + "in_proj_z.weight": (Hv * Dv, H), a + "in_proj_b.weight": (Hv, H),
                           a + "in_proj_a.weight": (Hv, H), a + "conv1d.weight": (C, 1, K), a + "dt_bias": (Hv,), a + "A_log": (Hv,),
                           a + "norm.weight": (Dv,), a + "out_proj.weight": (H, Hv * Dv)})
        else:
            a = p + "self_attn."
            shapes.update({a + "q_proj.weight": (2 * nH * D, H), a + "k_proj.weight": (nKV * D, H), a + "v_proj.weight": (nKV * D, H),
                           a + "o_proj.weight": (H, nH * D), a + "q_norm.weight": (D,), a + "k_norm.weight": (D,)})
        if "num_experts" in text:
            E, Ie, Is, m = text["num_experts"], text["moe_intermediate_size"], text["shared_expert_intermediate_size"], p + "mlp."
            shapes.update({m + "gate.weight": (E, H), m + "experts.gate_up_proj": (E, 2 * Ie, H), m + "experts.down_proj": (E, H, Ie),
                           m + "shared_expert.gate_proj.weight": (Is, H), m + "shared_expert.up_proj.weight": (Is, H),
                           m + "shared_expert.down_proj.weight": (H, Is), m + "shared_expert_gate.weight": (1, H)})
        else:
            shapes.update({p + "mlp.gate_proj.weight": (I, H), p + "mlp.up_proj.weight": (I, H), p + "mlp.down_proj.weight": (H, I)})
        shapes.update({p + "input_layernorm.weight": (H,), p + "post_attention_layernorm.weight": (H,)})
    if not tie:
        shapes["lm_head.weight"] = (V, H)
    return shapes


def random_weights(text, tie, gen):
    """Values in the ranges a trained model has: centred norms near 0, gated norm near 1, A in (1, 16)."""
    W = {}
    for name, shape in text_param_shapes(text, tie).items():
        if name.endswith("A_log"):
            W[name] = (1 + 15 * torch.rand(shape, generator=gen)).log()
        elif name.endswith("dt_bias") or name.endswith("linear_attn.norm.weight"):
            W[name] = 1 + 0.1 * torch.randn(shape, generator=gen)
        elif name.endswith("norm.weight"):
            W[name] = 0.1 * torch.randn(shape, generator=gen)
        elif name.endswith("conv1d.weight"):
            W[name] = 0.4 * torch.randn(shape, generator=gen)
        else:
            W[name] = 0.3 * torch.randn(shape, generator=gen)
    return W
