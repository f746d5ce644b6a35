#!/usr/bin/env python3
"""Checks a GGUF written by `turbospark convert --type f32` against the Hugging Face checkpoint it
came from, tensor by tensor and value by value, by re-applying every documented transform
(docs/MODEL.md §4.7) independently of the C converter, in numpy:

  (1+w) on every zero-centred RMSNorm (hc norms, mixer norm, q/k norms, indexer norms, PLE norms),
  but not on linear_attn.norm; ssm_a = -exp(A_log) (exp in float64, rounded to float32);
  dt_bias -> ssm_dt.bias; the GDN value-head reorder (file head j = nk*rho + kappa holds HF head
  G*kappa + rho) on the V rows of in_proj_qkv, in_proj_z, in_proj_b/a, A_log, dt_bias, the V
  channels of conv1d and the input columns of out_proj; conv [C,1,K] -> [C,K]; experts
  gate_up_proj split (gate first) or per-expert tensors; index_qk_proj split (q rows first);
  shared_expert_gate [1,H] -> [H]; hyper_connection_mixer -> output_hc_*; the PLE table from its
  shards in numeric order.

Every tensor must match exactly (bf16 -> f32 is exact; 1+w is one fp32 addition in both). The
metadata the converter derives from config.json is checked too (PLE multipliers, prime head sizes,
offsets, layer kinds, rope, ...), computed here from transformers' own formulas.

    python3 tools/check_convert.py HF_DIR OUT.gguf      (python3 + numpy only)

Exit status 0 when everything matches; otherwise it prints every mismatch and exits 1.

Second mode: the numpy oracle (tools/oracle/np_forward.py) runs OUT.gguf on the first N prompt
tokens and its logits must equal transformers' (REF_LOGITS[:N], the fixture's fp32 logits; the
model is causal, so a prefix is exact) to TOL * max|logit|:

    python3 tools/check_convert.py --oracle OUT.gguf TOKENS.npy REF_LOGITS.npy [N] [TOL]

Top-k ties: where the indexer's block scores (often exactly 0 after the ReLU) or the router's
probabilities tie across the top-k boundary, transformers' torch.topk and the oracle may keep
different members (docs/MODEL.md §5.7: the order is unspecified), a legitimate difference that is not a
conversion error. The oracle is run with its `sorted` watched: a position whose selection has a
boundary tie is excluded, and so is every later position when the tie is in a layer before the last
(its residual feeds later positions through GDN and attention). The counts are printed.
"""
import json
import math
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "oracle"))
from mini_gguf import Reader  # noqa: E402


# ---- safetensors ------------------------------------------------------------------------------

def read_safetensors(path):
    buf = open(path, "rb").read()
    (n,) = struct.unpack_from("<Q", buf, 0)
    hdr = json.loads(buf[8:8 + n])
    base = 8 + n
    out = {}
    for name, e in hdr.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        raw = buf[base + b:base + end]
        dt = e["dtype"]
        if dt == "BF16":
            a = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
        elif dt == "F16":
            a = np.frombuffer(raw, np.float16).astype(np.float32)
        elif dt == "F32":
            a = np.frombuffer(raw, np.float32)
        elif dt == "I64":
            a = np.frombuffer(raw, np.int64)
        else:
            raise SystemExit(f"{path}: {name} has dtype {dt}, not handled by this checker")
        out[name] = a.reshape(e["shape"])
    return out


def read_checkpoint(d):
    idx = os.path.join(d, "model.safetensors.index.json")
    files = sorted(set(json.load(open(idx))["weight_map"].values())) if os.path.exists(idx) else ["model.safetensors"]
    ck = {}
    for f in files:
        ck.update(read_safetensors(os.path.join(d, f)))
    return ck


# ---- transformers' PLE constants ---------------------------------------------------------------

M64 = (1 << 64) - 1


def splitmix64(v):
    v = (v + 0x9E3779B97F4A7C15) & M64
    v = ((v ^ (v >> 30)) * 0xBF58476D1CE4E5B9) & M64
    v = ((v ^ (v >> 27)) * 0x94D049BB133111EB) & M64
    return (v ^ (v >> 31)) & M64


def multipliers(vocab, n, ple_index, seed):
    half = max(1, ((1 << 63) - 1) // max(vocab, 1) // 2)
    base = seed + 10007 * ple_index
    return [2 * (splitmix64((base + 0x9E3779B97F4A7C15 * (i + 1)) & M64) % half) + 1 for i in range(n)]


def is_prime(v):
    if v < 2:
        return False
    if v % 2 == 0:
        return v == 2
    return all(v % d for d in range(3, math.isqrt(v) + 1, 2))


def nth_prime_after(start, count):
    p = start
    for _ in range(count):
        p += 1
        while not is_prime(p):
            p += 1
    return p


# ---- expected tensors --------------------------------------------------------------------------

def expected_tensors(cfg_path, ck, mtp=False):
    cfg = json.load(open(cfg_path))
    multimodal = cfg.get("model_type") == "qwen4_exp"
    tc = cfg["text_config"] if multimodal else cfg
    P = "model.language_model." if multimodal else "model."
    g = lambda k, d=None: tc.get(k, d) if tc.get(k) is not None else d  # noqa: E731
    L = g("num_hidden_layers", 40)
    kinds = g("layer_types") or ["linear_attention" if (i + 1) % g("full_attention_interval", 4) else "qsa"
                                 for i in range(L)]
    qsa = [k != "linear_attention" for k in kinds]
    H, C = g("hidden_size", 2048), g("hc_count", 4)
    nk, nv = g("linear_num_key_heads", 16), g("linear_num_value_heads", 32)
    dk, dv = g("linear_key_head_dim", 128), g("linear_value_head_dim", 128)
    G, kd = nv // nk, nk * dk
    F = g("moe_intermediate_size", 512)
    ni, di = g("indexer_n_heads"), g("indexer_head_dim")
    perm = np.array([G * (j % nk) + j // nk for j in range(nv)])
    ple_ids = sorted(set(g("ple_layer_ids") or []))
    tied = cfg.get("tie_word_embeddings", False)
    f32 = lambda a: np.asarray(a, dtype=np.float32)  # noqa: E731
    plus1 = lambda a: np.float32(1.0) + f32(a)  # noqa: E731

    E = {}
    E["token_embd.weight"] = ck[P + "embed_tokens.weight"]
    if not tied:
        E["output.weight"] = ck["lm_head.weight"]
    mx = P + "hyper_connection_mixer."
    E["output_hc_norm.weight"] = plus1(ck[mx + "hc_norm.weight"])
    E["output_hc_down.weight"] = ck[mx + "input_mix_weight_down.weight"]
    E["output_hc_up.weight"] = ck[mx + "input_mix_weight_up.weight"]
    def layer(b, s, is_qsa, has_ple, ple_layer):
        for gg, hf in (("hc_attn", "attn_hyper_connection"), ("hc_ffn", "mlp_hyper_connection")):
            E[b + gg + "_norm.weight"] = plus1(ck[f"{s}{hf}.hc_norm.weight"])
            E[b + gg + "_down.weight"] = ck[f"{s}{hf}.input_mix_weight_down.weight"]
            E[b + gg + "_up.weight"] = ck[f"{s}{hf}.input_mix_weight_up.weight"]
            E[b + gg + "_inject.weight"] = ck[f"{s}{hf}.block_inject_weight.weight"]
        if has_ple:
            p = s + "ple."
            E[b + "ple_key.weight"] = ck[p + "key_proj.weight"]
            E[b + "ple_value.weight"] = ck[p + "value_proj.weight"]
            for k in ("key", "query", "conv"):
                E[b + f"ple_norm_{k}.weight"] = plus1(ck[p + f"norm_{k}.weight"])
            E[b + "ple_conv1d.weight"] = ck[p + "conv1d.weight"][:, 0, :]
            pre = p + "ple_embedding.ngram_embedding."  # noqa: F841
            if pre + "weight" in ck:
                E["per_layer_token_embd.weight"] = ck[pre + "weight"]
            else:
                n = sum(1 for k in ck if k.startswith(pre + "shard_"))
                E["per_layer_token_embd.weight"] = np.concatenate([ck[f"{pre}shard_{i}.weight"] for i in range(n)])
        if not is_qsa:
            a = s + "linear_attn."
            w = ck[a + "in_proj_qkv.weight"]
            E[b + "attn_qkv.weight"] = np.concatenate([w[:2 * kd], w[2 * kd:].reshape(nv, dv, H)[perm].reshape(-1, H)])
            E[b + "attn_gate.weight"] = ck[a + "in_proj_z.weight"].reshape(nv, dv, H)[perm].reshape(-1, H)
            E[b + "ssm_beta.weight"] = ck[a + "in_proj_b.weight"][perm]
            E[b + "ssm_alpha.weight"] = ck[a + "in_proj_a.weight"][perm]
            E[b + "ssm_a"] = (-np.exp(ck[a + "A_log"].astype(np.float64))).astype(np.float32)[perm]
            E[b + "ssm_dt.bias"] = ck[a + "dt_bias"][perm]
            cw = ck[a + "conv1d.weight"][:, 0, :]
            E[b + "ssm_conv1d.weight"] = np.concatenate([cw[:2 * kd], cw[2 * kd:].reshape(nv, dv, -1)[perm].reshape(nv * dv, -1)])
            E[b + "ssm_norm.weight"] = ck[a + "norm.weight"]  # plain gamma, no +1
            E[b + "ssm_out.weight"] = ck[a + "out_proj.weight"].reshape(H, nv, dv)[:, perm].reshape(H, -1)
        else:
            a = s + "self_attn."
            for gn, hn in (("attn_q", "q_proj"), ("attn_k", "k_proj"), ("attn_v", "v_proj"), ("attn_output", "o_proj")):
                E[b + gn + ".weight"] = ck[a + hn + ".weight"]
            E[b + "attn_q_norm.weight"] = plus1(ck[a + "q_norm.weight"])
            E[b + "attn_k_norm.weight"] = plus1(ck[a + "k_norm.weight"])
            if a + "indexer.index_qk_proj.weight" in ck:
                qk = ck[a + "indexer.index_qk_proj.weight"]
                E[b + "indexer.q_proj.weight"] = qk[:ni * di]
                E[b + "indexer.k_proj.weight"] = qk[ni * di:]
                E[b + "indexer.q_norm.weight"] = plus1(ck[a + "indexer.q_layernorm.weight"])
                E[b + "indexer.k_norm.weight"] = plus1(ck[a + "indexer.k_layernorm.weight"])
        m = s + "mlp."
        E[b + "ffn_gate_inp.weight"] = ck[m + "gate.weight"]
        if m + "experts.gate_up_proj" in ck:
            gu = ck[m + "experts.gate_up_proj"]
            E[b + "ffn_gate_exps.weight"], E[b + "ffn_up_exps.weight"] = gu[:, :F], gu[:, F:]
        else:
            ne = g("num_experts", 512)
            E[b + "ffn_gate_exps.weight"] = np.stack([ck[f"{m}experts.{e}.gate_proj.weight"] for e in range(ne)])
            E[b + "ffn_up_exps.weight"] = np.stack([ck[f"{m}experts.{e}.up_proj.weight"] for e in range(ne)])
        if m + "experts.down_proj" in ck:
            E[b + "ffn_down_exps.weight"] = ck[m + "experts.down_proj"]
        else:
            E[b + "ffn_down_exps.weight"] = np.stack([ck[f"{m}experts.{e}.down_proj.weight"]
                                                      for e in range(g("num_experts", 512))])
        E[b + "ffn_gate_inp_shexp.weight"] = ck[m + "shared_expert_gate.weight"][0]
        for gn, hn in (("gate", "gate_proj"), ("up", "up_proj"), ("down", "down_proj")):
            E[b + f"ffn_{gn}_shexp.weight"] = ck[f"{m}shared_expert.{hn}.weight"]

    for l in range(L):
        layer(f"blk.{l}.", f"{P}layers.{l}.", qsa[l], l + 1 in ple_ids, l)
    if mtp:  # docs/MODEL.md §4.6: the MTP block as blk.L, QSA-shaped, plus the nextn head
        b = f"blk.{L}."
        layer(b, "mtp.layers.0.", True, False, L)
        E[b + "nextn.eh_proj.weight"] = np.concatenate([ck["mtp.fc_embedding.weight"], ck["mtp.fc_hidden.weight"]], 1)
        E[b + "nextn.enorm.weight"] = plus1(ck["mtp.pre_fc_norm_embedding.weight"])
        E[b + "nextn.hnorm.weight"] = plus1(ck["mtp.pre_fc_norm_hidden.weight"])
        E[b + "nextn.hc_head_norm.weight"] = plus1(ck["mtp.hyper_connection_mixer.hc_norm.weight"])
        E[b + "nextn.hc_head_down.weight"] = ck["mtp.hyper_connection_mixer.input_mix_weight_down.weight"]
        E[b + "nextn.hc_head_up.weight"] = ck["mtp.hyper_connection_mixer.input_mix_weight_up.weight"]

    # metadata derived from the config
    meta = {"block_count": L + mtp, "embedding_length": H, "hyper_connection.count": C,
            "attention.compress_ratios": [g("indexer_compress_ratio") if q else 0 for q in qsa] + [0] * mtp}
    if mtp:
        meta["nextn_predict_layers"] = 1
    rp = g("rope_parameters") or {}
    meta["rope.dimension_count"] = int(g("head_dim", 256) * rp.get("partial_rotary_factor", 1.0))
    meta["rope.freq_base"] = float(np.float32(rp.get("rope_theta", 10000.0)))
    if ple_ids:
        n, Pn = g("ngram_size", 3), g("heads_per_ngram", 8)
        nh = (n - 1) * Pn
        eos = g("eos_token_id")
        sizes, offs, tot, p = [], [], 0, g("ngram_vocab_size_base", 20000000) - 1
        for _ in range(nh):
            p = nth_prime_after(p, 1)
            sizes.append(p)
            offs.append(tot)
            tot += p
        meta.update({"ple.layers": [ple_ids[0] - 1], "ple.ngram_size": n, "ple.heads_per_ngram": Pn,
                     "ple.eos_token_id": eos[0] if isinstance(eos, list) else eos,
                     "ple.layer_multipliers": multipliers(g("vocab_size", 248320), n, 0, g("seed", 1234)),
                     "ple.head_vocab_sizes": sizes, "ple.head_offsets": offs,
                     "embedding_length_per_layer_input": g("ple_embed_dim", H) // nh})
        div = g("make_ngram_vocab_size_divisible_by", 128)
        assert E["per_layer_token_embd.weight"].shape[0] == (tot + div - 1) // div * div
        pre = f"{P}layers.{ple_ids[0] - 1}.ple.ple_embedding."
        for bn, key in (("layer_multipliers", "ple.layer_multipliers"), ("ngram_heads_vocab_sizes", "ple.head_vocab_sizes"),
                        ("ngram_heads_offsets", "ple.head_offsets")):
            if pre + bn in ck and [int(x) for x in ck[pre + bn]] != meta[key]:
                raise SystemExit(f"checker: checkpoint buffer {bn} differs from the config-derived values")
    return E, meta


def oracle_check(gguf, tokens, ref_path, n, tol):
    import builtins
    import runpy
    tmp_dir = os.environ.get("TMPDIR", "/tmp")
    toks = np.load(tokens)[:n].astype(np.int32)
    tok_path = os.path.join(tmp_dir, f"check_convert_{os.getpid()}_tokens.npy")
    out_path = os.path.join(tmp_dir, f"check_convert_{os.getpid()}_logits.npy")
    np.save(tok_path, toks)
    T = len(toks)
    ties = []  # (layer, position)

    def watched_sorted(it, key=None, reverse=False):
        res = builtins.sorted(it, key=key, reverse=reverse)
        if key is None:
            return res
        f = sys._getframe(1)
        fn, loc = f.f_code.co_name, f.f_locals
        if fn == "qsa":
            cut, pos = loc["kb_top"], loc["p"]
        elif fn == "moe":
            cut, pos = f.f_globals["topk"], loc["t"]
        else:
            raise SystemExit(f"check_convert: the oracle sorts with a key in {fn}(); update oracle_check")
        layer = int(loc["b"].split(".")[1])
        if len(res) > cut and key(res[cut - 1])[0] == key(res[cut])[0]:
            ties.append((layer, pos))
        return res

    oracle = os.path.join(os.path.dirname(os.path.abspath(__file__)), "oracle", "np_forward.py")
    argv = sys.argv
    sys.argv = [oracle, gguf, tok_path, "--logits", out_path]
    try:
        g = runpy.run_path(oracle, init_globals={"sorted": watched_sorted}, run_name="__main__")
    finally:
        sys.argv = argv
    got = np.load(out_path).astype(np.float64)
    os.remove(tok_path), os.remove(out_path)
    ref = np.load(ref_path)[:T].astype(np.float64)
    if got.shape != ref.shape:
        raise SystemExit(f"oracle logits {got.shape} vs reference {ref.shape}")
    n_layers = g["L"]
    keep = np.ones(T, bool)
    for layer, pos in ties:
        if layer < n_layers - 1:
            keep[pos:] = False
        else:
            keep[pos] = False
    scale = np.abs(ref).max()
    err = np.abs(got - ref).max(-1)
    worst = err[keep].max() if keep.any() else float("nan")
    excluded = T - int(keep.sum())
    ratios = [r for r in g["ratios"] if r]
    first_sparse = g["budget"] + ratios[0] - 1 if ratios else T
    n_sparse = int(keep[first_sparse:].sum())
    print(f"oracle on {T} tokens: max|d| = {worst:.3g} = {worst / scale:.2e} of max|logit| at {int(keep.sum())} "
          f"positions ({n_sparse} past the QSA budget); {excluded} excluded for top-k ties (ties at layer,position {ties[:6]}"
          f"{'...' if len(ties) > 6 else ''}; max|d| there {err[~keep].max() / scale if excluded else 0:.2e})")
    return bool(keep.any() and worst <= tol * scale)


def main():
    if len(sys.argv) >= 5 and sys.argv[1] == "--oracle":
        n = int(sys.argv[5]) if len(sys.argv) > 5 else 96
        tol = float(sys.argv[6]) if len(sys.argv) > 6 else 1e-4
        sys.exit(0 if oracle_check(sys.argv[2], sys.argv[3], sys.argv[4], n, tol) else 1)
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    hf, gguf = sys.argv[1], sys.argv[2]
    ck = read_checkpoint(hf)
    r = Reader(gguf)
    exp, meta = expected_tensors(os.path.join(hf, "config.json"), ck, "qwen4exp.nextn_predict_layers" in r.kv)
    bad = []
    missing, extra = sorted(set(exp) - set(r.tensors)), sorted(set(r.tensors) - set(exp))
    bad += [f"missing tensor {n}" for n in missing] + [f"unexpected tensor {n}" for n in extra]
    n_values = 0
    for name in sorted(set(exp) & set(r.tensors)):
        want = np.ascontiguousarray(exp[name], dtype=np.float32)
        have = r.tensors[name]
        if have.shape != want.shape:
            bad.append(f"{name}: shape {have.shape}, expected {want.shape}")
            continue
        diff = have.view(np.uint32) != want.view(np.uint32)
        n_values += want.size
        if diff.any():
            i = np.flatnonzero(diff.reshape(-1))[0]
            bad.append(f"{name}: {int(diff.sum())} of {want.size} values differ (first at flat index {i}: "
                       f"{have.reshape(-1)[i]!r} vs {want.reshape(-1)[i]!r})")
    for k, v in meta.items():
        have = r.kv.get("qwen4exp." + k)
        if isinstance(v, float):
            ok = have is not None and abs(have - v) <= 1e-6 * abs(v)
        else:
            ok = have == v
        if not ok:
            bad.append(f"metadata qwen4exp.{k} = {have!r}, expected {v!r}")
    for b in bad:
        print("MISMATCH", b)
    print(f"check_convert: {len(exp)} tensors, {n_values} values, {len(meta)} metadata keys: "
          f"{'OK' if not bad else f'{len(bad)} problems'}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
