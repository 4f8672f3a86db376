"""Logits-parity fixtures: tiny Qwen3 dense and Qwen3-MoE checkpoints in BF16 and F32, written as Hugging
Face model folders (config.json + model.safetensors, per-expert names), and the logits of a plain PyTorch
forward written from the HF architecture (bench/torch_train_step.py's Model) for fixed inputs.

Needs torch (Debian: apt-get install python3-torch; run with /usr/bin/python3). Not needed to run the tests:
the fixtures are committed under test/fixtures/parity/.

    /usr/bin/python3 scripts/make-parity-fixtures.py            # Qwen3 / Qwen3-MoE
    /usr/bin/python3 scripts/make-parity-fixtures.py --qwen35   # Qwen3.5 (qwen3_5-f32/, qwen3_5-logits.json)
    /usr/bin/python3 scripts/make-parity-fixtures.py --qwen35-moe   # Qwen3.5-MoE (qwen3_5_moe-*/, qwen3_5_moe-logits.json)

The Qwen3.5 fixture is a Qwen3_5ForConditionalGeneration-style folder (nested text_config, text weights
under model.language_model.*, plus a vision and an MTP tensor the trainer must skip); its reference
forward is scripts/parity_qwen35.py. The Qwen3.5-MoE fixture is the same kind of folder twice over the same
weights: experts fused (mlp.experts.gate_up_proj / down_proj, as the hub writes them) and per-expert
(mlp.experts.{e}.gate_proj / up_proj / down_proj), with per-expert MTP experts to skip.
"""
import json
import os
import struct
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bench"))
from torch_train_step import Model  # noqa: E402  (the bench's plain Qwen3 / Qwen3-MoE)
sys.path.insert(0, HERE)
import parity_qwen35  # noqa: E402  (plain Qwen3.5 forward)

OUT = os.path.join(HERE, "..", "test", "fixtures", "parity")

BASE = {
    "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 8, "hidden_act": "silu", "attention_bias": False, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
    "max_position_embeddings": 64, "vocab_size": 48, "bos_token_id": 1, "eos_token_id": 2,
}
CONFIGS = {
    "dense": {**BASE, "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "tie_word_embeddings": True},
    "moe": {**BASE, "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "tie_word_embeddings": False,
            "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16, "norm_topk_prob": True,
            "decoder_sparse_step": 1, "mlp_only_layers": []},
}
INPUTS = [[1, 5, 9, 14, 7, 3, 30, 2], [1, 40, 41, 8, 8, 8, 12, 19]]


def hf_name(name):
    return name if name.startswith("lm_head") else "model." + name


def write_safetensors(path, tensors, dtype):
    """tensors: name -> fp32 torch tensor; dtype 'F32' or 'BF16' (round to nearest even, as torch does)."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous()
        raw = t.to(torch.bfloat16).view(torch.int16).numpy().tobytes() if dtype == "BF16" else t.float().numpy().tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def main():
    torch.manual_seed(0)
    fixtures = {"inputs": INPUTS, "cases": []}
    for kind, cfg in CONFIGS.items():
        model = Model(cfg)
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(torch.randn_like(p) * (0.3 if "norm" not in name else 0.1) + (1.0 if name.endswith("norm.weight") else 0.0))
        for dtype in ("F32", "BF16"):
            folder = f"{kind}-{dtype.lower()}"
            os.makedirs(os.path.join(OUT, folder), exist_ok=True)
            state = {hf_name(n): p for n, p in model.named_parameters()}
            write_safetensors(os.path.join(OUT, folder, "model.safetensors"), state, dtype)
            with open(os.path.join(OUT, folder, "config.json"), "w") as f:
                json.dump({**cfg, "torch_dtype": "float32" if dtype == "F32" else "bfloat16"}, f, indent=2)
            # The reference forward runs on exactly the stored values, in fp32.
            ref = Model(cfg)
            with torch.no_grad():
                for (n, p), (_, q) in zip(ref.named_parameters(), model.named_parameters()):
                    p.copy_(q.to(torch.bfloat16).float() if dtype == "BF16" else q)
                logits = ref(torch.tensor(INPUTS)).float()
            fixtures["cases"].append({"folder": folder, "logits": [round(float(x), 7) for x in logits.flatten()], "shape": list(logits.shape)})
    with open(os.path.join(OUT, "logits.json"), "w") as f:
        json.dump(fixtures, f)
    print("wrote", OUT)


QWEN35_TEXT = {
    "model_type": "qwen3_5_text", "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 3,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "hidden_act": "silu", "attention_bias": False,
    "rms_norm_eps": 1e-6, "vocab_size": 48, "max_position_embeddings": 64,
    "layer_types": ["linear_attention", "full_attention", "linear_attention"],
    "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 8, "linear_value_head_dim": 8,
    "linear_conv_kernel_dim": 4,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                        "mrope_section": [1, 1, 0], "mrope_interleaved": True},
    "bos_token_id": 1, "eos_token_id": 2,
}


def main_qwen35():
    gen = torch.Generator().manual_seed(35)
    W = parity_qwen35.random_weights(QWEN35_TEXT, False, gen)
    logits = parity_qwen35.forward(QWEN35_TEXT, W, torch.tensor(INPUTS), False).float()
    folder = "qwen3_5-f32"
    os.makedirs(os.path.join(OUT, folder), exist_ok=True)
    # As the hub stores a Qwen3.5 checkpoint: the text model under model.language_model.*.
    state = {("model.language_model." + n[len("model."):] if n.startswith("model.") else n): t for n, t in W.items()}
    state["model.visual.patch_embed.proj.weight"] = torch.zeros(2, 3)
    state["mtp.fc.weight"] = torch.zeros(2, 2)
    write_safetensors(os.path.join(OUT, folder, "model.safetensors"), state, "F32")
    config = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5", "tie_word_embeddings": False,
              "text_config": QWEN35_TEXT, "vision_config": {"model_type": "qwen3_5", "depth": 1}, "image_token_id": 44,
              "torch_dtype": "float32"}
    with open(os.path.join(OUT, folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    fixtures = {"inputs": INPUTS, "cases": [{"folder": folder, "logits": [round(float(x), 7) for x in logits.flatten()], "shape": list(logits.shape)}]}
    with open(os.path.join(OUT, "qwen3_5-logits.json"), "w") as f:
        json.dump(fixtures, f)
    print("wrote", os.path.join(OUT, folder))


QWEN35_MOE_TEXT = {
    **{k: v for k, v in QWEN35_TEXT.items() if k != "intermediate_size"}, "model_type": "qwen3_5_moe_text",
    "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16, "shared_expert_intermediate_size": 24,
    "router_aux_loss_coef": 0.001, "output_router_logits": False,
}


def per_expert(state, E):
    """The same tensors with each fused expert pair split into HF's per-expert Linear weights."""
    out = {}
    for name, t in state.items():
        if name.endswith("mlp.experts.gate_up_proj"):
            base = name[: -len("gate_up_proj")]
            for e in range(E):
                g, u = t[e].chunk(2)
                out[f"{base}{e}.gate_proj.weight"], out[f"{base}{e}.up_proj.weight"] = g, u
        elif name.endswith("mlp.experts.down_proj"):
            base = name[: -len("down_proj")]
            for e in range(E):
                out[f"{base}{e}.down_proj.weight"] = t[e]
        else:
            out[name] = t
    return out


def main_qwen35_moe():
    text = QWEN35_MOE_TEXT
    gen = torch.Generator().manual_seed(3505)
    W = parity_qwen35.random_weights(text, False, gen)
    ids = torch.tensor(INPUTS)
    margin = parity_qwen35.router_margin(text, W, ids, False)
    assert margin > 1e-3, f"router top-k margin {margin} is too small for an fp32 parity check; change the seed"
    logits = parity_qwen35.forward(text, W, ids, False).float()
    state = {("model.language_model." + n[len("model."):] if n.startswith("model.") else n): t for n, t in W.items()}
    state["model.visual.patch_embed.proj.weight"] = torch.zeros(2, 3)
    state["mtp.layers.0.mlp.experts.0.gate_proj.weight"] = torch.zeros(2, 2)
    config = {"architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe", "tie_word_embeddings": False,
              "text_config": text, "vision_config": {"model_type": "qwen3_5_moe", "depth": 1}, "image_token_id": 44,
              "torch_dtype": "float32"}
    cases = []
    for folder, tensors in (("qwen3_5_moe-f32", state), ("qwen3_5_moe-per-expert-f32", per_expert(state, text["num_experts"]))):
        os.makedirs(os.path.join(OUT, folder), exist_ok=True)
        write_safetensors(os.path.join(OUT, folder, "model.safetensors"), tensors, "F32")
        with open(os.path.join(OUT, folder, "config.json"), "w") as f:
            json.dump(config, f, indent=2)
        cases.append({"folder": folder, "logits": [round(float(x), 7) for x in logits.flatten()], "shape": list(logits.shape)})
    with open(os.path.join(OUT, "qwen3_5_moe-logits.json"), "w") as f:
        json.dump({"inputs": INPUTS, "cases": cases, "router_margin": margin}, f)
    print("wrote", [c["folder"] for c in cases], "router margin", margin)


if __name__ == "__main__":
    if "--qwen35-moe" in sys.argv:
        main_qwen35_moe()
    elif "--qwen35" in sys.argv:
        main_qwen35()
    else:
        main()
