#!/usr/bin/env python3
"""Trains turbospark's demo model and writes the tokenizer / chat / perplexity fixtures.

One run on the GPU machine (torch, transformers 5.17 with qwen4_exp, tokenizers 0.23):

    PYTHONUNBUFFERED=1 python3 tools/demo/train_demo.py --out "$OUT/work"

Stages (each one logs; a failing stage is reported and the later ones still run where they can):
  1. corpus   tools/demo/kjv.txt.gz (prepare_corpus.py) split by chapter: chapter i goes to the
              held-out TEST split when i % 50 == 25, to VALIDATION when i % 50 == 0, else TRAIN.
  2. tokenizer byte-level BPE trained with `tokenizers` on TRAIN: NFC normalizer, the Qwen3.5 split
              regex (docs/MODEL.md §9) + ByteLevel, 4091 merges-vocabulary entries, then the added
              tokens <|endoftext|> <|im_start|> <|im_end|> (special) and <think> </think> (not
              special, as in Qwen3) = 4096 tokens. tokenizer.json + a hand-written
              tokenizer_config.json (Qwen-style: eos <|im_end|>, pad <|endoftext|>, no bos,
              add_bos_token false, chat_template = tools/demo/chat_template.jinja).
  3. fixtures  tests/fixtures/tokenizer/parity.json (ids, pre-tokenizer pieces for the qwen35 and
              qwen2 regexes, NFC output, decode) and tests/fixtures/chat/chat.json
              (apply_chat_template renderings).
  4. model    Qwen4ExpForCausalLM, every feature on (see CONFIG), trained on TRAIN chapters joined
              with <|endoftext|> (the PLE EOS) in random windows of --seq tokens; AdamW; fp32
              weights with TF32 matmuls; early stopping on VALIDATION loss; saved in bf16.
              The QSA indexer's per-query Python loop is replaced by an equivalent vectorized form
              for TRAINING only (checked against the original at the start); every reference
              number below comes from the unmodified transformers code.
  5. perplexity tests/fixtures/demo/perplexity.json on TEST text (heldout.txt), llama.cpp's method.

The output folder mirrors the repository (models/demo, tests/fixtures/...), plus log and summary.json.
"""
import argparse
import gzip
import json
import math
import os
import platform
import random
import sys
import time
import traceback

T_START = time.time()
HERE = os.path.dirname(os.path.abspath(__file__))

QWEN35_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
                  r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
NON_SPECIAL = ["<think>", "</think>"]
N_TOKENIZER = 4096          # tokens in tokenizer.json (BPE vocabulary + 5 added)
N_VOCAB_MODEL = 4160        # the model's vocab_size: padded to a multiple of 64 like Qwen's (converters pad with [PADn])

LOGF = None


def log(msg):
    line = f"[{time.time() - T_START:7.1f}s] {msg}"
    print(line, flush=True)
    if LOGF:
        LOGF.write(line + "\n")
        LOGF.flush()


def stage(name, fn, summary):
    t = time.time()
    log(f"== {name}")
    try:
        r = fn()
        summary["stages"][name] = f"ok {time.time() - t:.1f}s"
        return r
    except Exception as e:  # noqa: BLE001
        summary["stages"][name] = f"FAILED: {e!r}"
        log(f"{name} FAILED: {e!r}\n{traceback.format_exc()}")
        return None


# ------------------------------------------------------------------------------------------------
# 1. corpus
# ------------------------------------------------------------------------------------------------
def load_corpus(path):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        text = f.read()
    chapters = [c for c in text.split("\n\n") if c.strip()]
    split = {"train": [], "valid": [], "test": []}
    for i, c in enumerate(chapters):
        key = "test" if i % 50 == 25 else "valid" if i % 50 == 0 else "train"
        split[key].append(c.strip("\n"))
    return chapters, split


# ------------------------------------------------------------------------------------------------
# 2. tokenizer
# ------------------------------------------------------------------------------------------------
def train_tokenizer(train_docs, out_dir, chat_template):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN35_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    n_bpe = N_TOKENIZER - len(SPECIAL) - len(NON_SPECIAL)
    trainer = trainers.BpeTrainer(vocab_size=n_bpe, min_frequency=2, show_progress=False, special_tokens=[],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(train_docs, trainer=trainer)
    got = tok.get_vocab_size(with_added_tokens=False)
    if got != n_bpe:
        log(f"WARNING: BPE vocabulary has {got} entries, asked {n_bpe}")
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIAL])
    tok.add_tokens([AddedToken(s, special=False, normalized=False) for s in NON_SPECIAL])
    os.makedirs(out_dir, exist_ok=True)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    ids = {s: tok.token_to_id(s) for s in SPECIAL + NON_SPECIAL}
    added = {}
    for s in SPECIAL + NON_SPECIAL:
        added[str(ids[s])] = dict(content=s, lstrip=False, normalized=False, rstrip=False, single_word=False,
                                  special=s in SPECIAL)
    cfg = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": added,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": None,
        "chat_template": chat_template,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 4096,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": None,
    }
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False)
        f.write("\n")
    log(f"tokenizer: {tok.get_vocab_size(with_added_tokens=True)} tokens, ids {ids}")
    return tok, ids


# ------------------------------------------------------------------------------------------------
# 3a. tokenizer parity fixture
# ------------------------------------------------------------------------------------------------
POOLS = [
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "aeiounst ",
    "0123456789",
    " \t\n\r",
    "   \n\n",
    "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
    "'sStTdDmMlLrReEvV",
    "\u00a0\u3000\u2028\u2029\u0085\u200b\u180e\u2009\u202f\u205f\u1680\u000b\u000c\u001c",
    "\u00e9\u00e8\u00fc\u00f1\u00c5\u00df\u0153\u00c9",
    "\u0301\u0300\u0308\u0327\u030a\u0303\u20dd\u0488\u0323",
    "\u4e2d\u6587\u5b57\u65e5\u672c\u8a9e\u3042\u30a2\u30fc\u3002\u3001\uff01\uff1f",
    "\ud55c\uad6d\uc5b4\u1100\u1161\u11a8\u3131",
    "\u0928\u092e\u0938\u094d\u0924\u0947\u093e\u093f\u0902",
    "\u0627\u0644\u0639\u0631\u0628\u064a\u0629\u064b\u200f",
    "\u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22\u0e31",
    "\u0661\u0662\u0663\uff11\uff12\u00b2\u2167\u00bd\u0f33",
    "\U0001F600\U0001F44D\U0001F3FD\u200d\u2764\ufe0f\U0001F1FA\U0001F1F8\U0001F468\U0001F469",
    "\u017f\u212a\u0130\u0131\u1e9e",
    "\ufb01\u212b\u2126\u1e9b\u0344\u0958\u2000",
    "<|im_start|><|im_end|><|endoftext|><think></think>",
]

FIXED_CASES = [
    ("empty", ""),
    ("space", " "),
    ("english", "The quick brown fox jumps over the lazy dog. It's 5 o'clock; we'll see!"),
    ("contractions", "I'M HERE, you'RE there, it'S fine, we'Ve, they'lL, he'D, don't, DON'T, 'tis"),
    ("contraction_folding", "x'\u017f y'\u212a z'\u0130 it'\u017f"),
    ("kjv", "And God said, Let there be light: and there was light.\nAnd God saw the light, that it was good."),
    ("cjk", "\u4e2d\u6587\u6d4b\u8bd5\uff1a\u4f60\u597d\uff0c\u4e16\u754c\uff01\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3002\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8"),
    ("code_py", "def f(x):\n\tif x > 10:\n\t\treturn x ** 2  # square\n    return [i for i in range(x)]\n"),
    ("code_c", "int main(void) {\r\n    printf(\"%d\\n\", a[i++]);\r\n    return 0;\r\n}\r\n"),
    ("emoji", "I \u2764\ufe0f emoji \U0001F600\U0001F44D\U0001F3FD \U0001F468\u200d\U0001F469\u200d\U0001F467 \U0001F1FA\U0001F1F8!"),
    ("whitespace", "a  b   c    d\t\te \n\n\n f   \n  \r\n\r\n   \t \u00a0\u00a0x\u3000y\u2028z\u0085w\u200bv\u180eu   "),
    ("trailing_spaces", "word     "),
    ("only_newlines", "\n\n\n\n"),
    ("digits", "12345 3.14159 1,000,000 2024-01-01 0x1F \u0661\u0662\u0663 \uff11\uff12\uff13 x\u00b2 \u2167 \u00bd"),
    ("decomposed", "Cafe\u0301 e\u0301te\u0301 A\u030angstro\u0308m \u1100\u1161\u11a8 \u212b \u2126 \ufb01 \u1e9b\u0323"),
    ("marks_leading", "\u0301abc \u0301 x\u0301\u0302\u0303 \u0928\u092e\u0938\u094d\u0924\u0947 \u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22"),
    ("arabic", "\u0627\u0644\u0639\u064e\u0631\u064e\u0628\u0650\u064a\u0651\u064e\u0629\u200f 123"),
    ("special_tokens", "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nhi<|im_end|><|endoftext|>"),
    ("special_partial", "<|im_start <|im_end|x <|endoftext|><|endoftext|> <<|im_end|>> <think<think>>"),
    ("long_run", "a" * 3000),
    ("long_spaces", " " * 2000 + "x"),
    ("long_digits", "9" * 500),
]

INVALID_CASES = [
    ("invalid_ff", b"\xff"),
    ("invalid_mid", b"abc\x80def"),
    ("invalid_truncated3", b"x\xe2\x82"),
    ("invalid_truncated4", b"\xf0\x9f\x98A"),
    ("invalid_surrogate", b"\xed\xa0\x80z"),
    ("invalid_overlong", b"\xc0\xaf\xe0\x80\xaf"),
    ("invalid_above_max", b"\xf4\x90\x80\x80 \xf5\x80"),
    ("invalid_mixed", "h\u00e9llo ".encode() + b"\xfe\xfe" + " w\u00f6rld \U0001F600".encode() + b"\xf0\x9f" + b"\n"),
    ("invalid_cont_run", b"\x80\x81\x82\xbf"),
    ("invalid_special_near", b"<|im_end|>\xff<|endoftext|>"),
]


def random_cases(n, seed):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        length = rng.randint(1, 48)
        s = "".join(rng.choice(rng.choice(POOLS)) for _ in range(length))
        out.append((f"random_{i:03d}", s))
    return out


def make_parity(tok, test_docs, out_path, tokenizers_version):
    from tokenizers import Regex, pre_tokenizers

    splitters = {name: pre_tokenizers.Split(Regex(p), behavior="isolated", invert=False)
                 for name, p in (("qwen35", QWEN35_PATTERN), ("qwen2", QWEN2_PATTERN))}
    cases_in = [(n, s.encode("utf-8")) for n, s in FIXED_CASES]
    cases_in += [("kjv_chapter", test_docs[0].encode("utf-8"))]
    cases_in += INVALID_CASES
    cases_in += [(n, s.encode("utf-8")) for n, s in random_cases(400, 1234)]
    probe = {}
    for name, s in (("lone_surrogate", "a\udcffb"),):
        try:
            probe[name] = dict(accepted=True, ids=tok.encode(s, add_special_tokens=False).ids)
        except Exception as e:  # noqa: BLE001
            probe[name] = dict(accepted=False, error=repr(e))
    cases = []
    for name, raw in cases_in:
        text = raw.decode("utf-8", errors="replace")
        ids = tok.encode(text, add_special_tokens=False).ids
        ids_ns = None
        try:
            tok.encode_special_tokens = True
            ids_ns = tok.encode(text, add_special_tokens=False).ids
        except Exception as e:  # noqa: BLE001
            if name == "empty":
                log(f"encode_special_tokens unavailable: {e!r}")
        finally:
            try:
                tok.encode_special_tokens = False
            except Exception:  # noqa: BLE001
                pass
        c = dict(
            name=name,
            bytes_hex=raw.hex(),
            sanitized_hex=text.encode("utf-8").hex(),
            nfc_hex=tok.normalizer.normalize_str(text).encode("utf-8").hex(),
            ids=ids,
            ids_no_special=ids_ns,
            decoded_hex=tok.decode(ids, skip_special_tokens=False).encode("utf-8").hex(),
            decoded_skip_special_hex=tok.decode(ids, skip_special_tokens=True).encode("utf-8").hex(),
        )
        for pname, sp in splitters.items():
            c[f"pieces_{pname}_hex"] = [p.encode("utf-8").hex() for p, _ in sp.pre_tokenize_str(text)]
        cases.append(c)
    doc = dict(
        what="Hugging Face tokenizers ids for tests/fixtures/tokenizer/tokenizer.json (a copy of models/demo's)",
        tokenizers_version=tokenizers_version,
        encode="Tokenizer.encode(text, add_special_tokens=False).ids; ids_no_special with encode_special_tokens=True "
               "(special added tokens are not matched; non-special added tokens such as <think> still are)",
        input="bytes_hex is the input; text = bytes.decode('utf-8', errors='replace') (sanitized_hex): the Python "
              "API takes str only, so invalid UTF-8 reaches HF as U+FFFD per maximal invalid subpart",
        pieces="pre_tokenizers.Split(Regex(pattern), behavior='isolated').pre_tokenize_str(text) on the sanitized, "
               "NOT normalized text, for each pattern",
        patterns=dict(qwen35=QWEN35_PATTERN, qwen2=QWEN2_PATTERN),
        probes=probe,
        cases=cases,
    )
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=0, ensure_ascii=True)
        f.write("\n")
    log(f"parity: {len(cases)} cases; probes {probe}")


# ------------------------------------------------------------------------------------------------
# 3b. chat fixture
# ------------------------------------------------------------------------------------------------
CHATML_TEMPLATE = ("{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + "
                   "'<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
                   "{%- endif %}")


def think_open_template(demo):
    old = "{{- '<think>\\n\\n</think>\\n\\n' }}\n    {%- endif %}"
    new = "{{- '<think>\\n\\n</think>\\n\\n' }}\n    {%- else %}\n        {{- '<think>\\n' }}\n    {%- endif %}"
    if old not in demo:
        raise ValueError("demo template tail not found")
    return demo.replace(old, new)


U = {"role": "user"}
CONVERSATIONS = {
    "user_only": [dict(U, content="Who begat Enos?")],
    "system_user": [{"role": "system", "content": "You are a scribe."}, dict(U, content="Write a verse.")],
    "multi_turn": [{"role": "system", "content": "You are a scribe."}, dict(U, content="Begin."),
                   {"role": "assistant", "content": "In the beginning God created the heaven and the earth."},
                   dict(U, content="And then?")],
    "think_history": [dict(U, content="Who begat Enos?"),
                      {"role": "assistant", "content": "<think>\nLet me recall.\n</think>\n\nSeth begat Enos."},
                      dict(U, content="And Enos?")],
    "think_last": [dict(U, content="Who begat Enos?"),
                   {"role": "assistant", "content": "<think>\n\nGenesis four.\n\n</think>\n\n\nSeth."}],
    "no_think_last": [dict(U, content="Who begat Enos?"), {"role": "assistant", "content": "\nSeth."}],
    "reasoning_field": [dict(U, content="Who?"),
                        {"role": "assistant", "content": "Seth.", "reasoning_content": "\nGenesis 4:26\n"}],
    "reasoning_field_history": [dict(U, content="Who?"),
                                {"role": "assistant", "content": "Seth.", "reasoning_content": "Genesis 4:26"},
                                dict(U, content="Sure?")],
    "system_middle": [dict(U, content="Hi"), {"role": "assistant", "content": "Peace be with you."},
                      {"role": "system", "content": "Be brief."}, dict(U, content="Bye")],
    "tool_results": [dict(U, content="Count the tribes."),
                     {"role": "assistant", "content": "<think>need a tool</think>Counting."},
                     {"role": "tool", "content": "12"}, {"role": "tool", "content": "twelve"}],
    "tool_response_user": [dict(U, content="Q1"), {"role": "assistant", "content": "<think>a</think>A1"},
                           dict(U, content="<tool_response>\nx\n</tool_response>")],
    "unicode": [dict(U, content="h\u00e9llo \u4e16\u754c \U0001F642\n\n  spaced  \t")],
    "empty_content": [dict(U, content="")],
    "nested_think": [dict(U, content="x"),
                     {"role": "assistant", "content": "<think>a<think>b</think>c</think>\n\nd"}],
}


def render_like_transformers(template, messages, add_generation_prompt, extra):
    """The environment transformers' apply_chat_template builds (used only if transformers fails)."""
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = lambda x, indent=None, **kw: json.dumps(x, ensure_ascii=False, indent=indent)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template).render(messages=messages, add_generation_prompt=add_generation_prompt, **extra)


def make_chat(model_dir, demo_template, out_path, tok_raw, transformers_version):
    templates = {"demo": demo_template, "chatml": CHATML_TEMPLATE, "think_open": think_open_template(demo_template)}
    renderer = "transformers AutoTokenizer.apply_chat_template(tokenize=False, chat_template=...)"
    hf = None
    try:
        from transformers import AutoTokenizer
        hf = AutoTokenizer.from_pretrained(model_dir)
    except Exception as e:  # noqa: BLE001
        log(f"chat: AutoTokenizer failed ({e!r}); trying PreTrainedTokenizerFast")
        try:
            from transformers import PreTrainedTokenizerFast
            hf = PreTrainedTokenizerFast(tokenizer_file=os.path.join(model_dir, "tokenizer.json"))
            renderer = "transformers PreTrainedTokenizerFast(tokenizer_file).apply_chat_template(tokenize=False)"
        except Exception as e2:  # noqa: BLE001
            log(f"chat: PreTrainedTokenizerFast failed too ({e2!r}); rendering with jinja2 like transformers")
            renderer = "jinja2 ImmutableSandboxedEnvironment(trim_blocks, lstrip_blocks) (transformers failed)"
    hf_ids_agree = None
    if hf is not None:
        try:
            probe = "Hello <|im_start|>x<|im_end|> w\u00f6rld \U0001F600  \n\n e\u0301"
            a = hf.encode(probe, add_special_tokens=False)
            b = tok_raw.encode(probe, add_special_tokens=False).ids
            hf_ids_agree = list(a) == list(b)
        except Exception as e:  # noqa: BLE001
            hf_ids_agree = f"error {e!r}"
    cases = []
    for tname, tmpl in templates.items():
        for cname, msgs in CONVERSATIONS.items():
            for gen in (False, True):
                for think in (None, True, False):
                    if tname == "chatml" and think is not None:
                        continue
                    extra = {} if think is None else {"enable_thinking": think}
                    if hf is not None:
                        out = hf.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen,
                                                     chat_template=tmpl, **extra)
                        if not isinstance(out, str):
                            raise TypeError(f"apply_chat_template returned {type(out)}")
                    else:
                        out = render_like_transformers(tmpl, msgs, gen, extra)
                    cases.append(dict(template=tname, conversation=cname, add_generation_prompt=gen,
                                      enable_thinking=think, expected=out,
                                      ids=tok_raw.encode(out, add_special_tokens=False).ids))
    doc = dict(what="chat renderings of tests/fixtures/chat: templates x conversations x options",
               renderer=renderer, transformers_version=transformers_version, hf_tokenizer_ids_agree=hf_ids_agree,
               ids="tokenizers ids of the rendering (specials parsed), for tests/fixtures/tokenizer/tokenizer.json",
               templates=templates, conversations=CONVERSATIONS, cases=cases)
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, ensure_ascii=True)
        f.write("\n")
    log(f"chat: {len(cases)} cases via {renderer}; hf ids agree: {hf_ids_agree}")


# ------------------------------------------------------------------------------------------------
# 4. model
# ------------------------------------------------------------------------------------------------
def model_config(ids):
    eot = ids["<|endoftext|>"]
    return dict(
        vocab_size=N_VOCAB_MODEL,
        hidden_size=256,
        num_hidden_layers=6,
        layer_types=["linear_attention" if (i + 1) % 3 else "qwen_sparse_attention" for i in range(6)],
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        rope_parameters=dict(rope_type="default", rope_theta=1000000.0, partial_rotary_factor=0.25,
                             mrope_section=[3, 3, 2], mrope_interleaved=True),
        linear_conv_kernel_dim=4,
        linear_key_head_dim=64,
        linear_value_head_dim=64,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        moe_intermediate_size=64,
        shared_expert_intermediate_size=192,
        num_experts=16,
        num_experts_per_tok=2,
        hc_count=4,
        hc_lowrank=32,
        ple_layer_ids=[2],
        ple_embed_dim=128,
        ple_conv_kernel_size=4,
        ngram_size=3,
        heads_per_ngram=8,
        ngram_vocab_size_base=8192,
        make_ngram_vocab_size_divisible_by=128,
        split_ngram_parts=1,
        seed=1234,
        indexer_n_heads=2,
        indexer_kv_heads=1,
        indexer_head_dim=32,
        indexer_budget=64,
        indexer_compress_ratio=4,
        eos_token_id=eot,
        bos_token_id=eot,
        hidden_act="silu",
        output_gate_type="sigmoid",
        rms_norm_eps=1e-6,
        max_position_embeddings=4096,
        attention_bias=False,
        attention_dropout=0.0,
        norm_topk_prob=True,
        tie_word_embeddings=False,
        use_cache=True,
        initializer_range=0.02,
    )


def make_fast_indexer(mq, torch):
    """Vectorized Qwen4ExpTextQSAIndexer.forward for causal, uncached, unpadded batches (training).
    Same selection as the reference loop: per query t, the complete blocks j < (t+1)//B ranked by
    sum_h relu(q_h . k_j)/sqrt(d) (mean-pooled raw keys, k_layernorm, RoPE at the block start), the
    top Kb of them, plus the incomplete tail [(t+1)//B*B, t]."""
    orig = mq.Qwen4ExpTextQSAIndexer.forward

    def forward(self, hidden_states, position_embeddings, attention_mask, past_key_values):
        B, T, _ = hidden_states.shape
        if past_key_values is not None or attention_mask is None or attention_mask.shape[-1] != T:
            return orig(self, hidden_states, position_embeddings, attention_mask, past_key_values)
        R, D = self.compress_ratio, self.index_head_dim
        full_cos, full_sin = position_embeddings
        cos, sin = full_cos[:, -T:, :], full_sin[:, -T:, :]
        qk = self.index_qk_proj(hidden_states)
        q, k = torch.split(qk, [self.index_n_heads * D, self.index_kv_heads * D], dim=-1)
        q = self.q_layernorm(q.reshape(B, T, -1, D))
        q = mq.apply_rotary_pos_emb(q, cos=cos, sin=sin, unsqueeze_dim=2)
        k = k.reshape(B, T, D)
        dev = hidden_states.device
        t = torch.arange(T, device=dev)
        nvalid = (t + 1) // R                                  # complete blocks visible to query t
        nb = T // R
        s = t
        tail = (s[None, :] >= (nvalid * R)[:, None]) & (s[None, :] <= t[:, None])   # [T, T]
        if nb == 0:
            sel = tail.expand(B, T, T)
        else:
            kb = k[:, : nb * R].reshape(B, nb, R, D).float().mean(dim=2).to(k.dtype)
            kb = self.k_layernorm(kb)
            starts = torch.arange(nb, device=dev) * R
            kb = mq.apply_rotary_pos_emb(kb.unsqueeze(2), cos=full_cos[:, starts, :], sin=full_sin[:, starts, :],
                                         unsqueeze_dim=2).squeeze(2)
            scores = torch.relu(torch.einsum("bthd,bnd->bthn", q.float(), kb.float())).sum(dim=2) / math.sqrt(D)
            j = torch.arange(nb, device=dev)
            valid = j[None, :] < nvalid[:, None]                 # [T, nb]
            scores = scores.masked_fill(~valid[None], float("-inf"))
            kk = min(self.block_topk, nb)
            top = scores.topk(kk, dim=-1).indices                  # [B, T, kk]
            rank_ok = torch.arange(kk, device=dev)[None, :] < nvalid[:, None]          # [T, kk]
            blocks = torch.zeros(B, T, nb + 1, dtype=torch.bool, device=dev)
            top = torch.where(rank_ok[None], top, torch.full_like(top, nb))
            blocks.scatter_(-1, top, True)
            blocks = blocks[..., :nb]
            blk_of_s = torch.clamp(s // R, max=nb - 1)
            from_blocks = blocks[:, :, blk_of_s] & (s[None, :] < (nvalid * R)[:, None])[None]
            sel = from_blocks | tail[None]
        sel = sel.unsqueeze(1)
        if attention_mask.is_floating_point():
            return torch.where(sel, attention_mask.new_zeros(()), torch.finfo(attention_mask.dtype).min)
        return sel

    return orig, forward


def train_model(args, ids, tok, split, model_dir, summary):
    import numpy as np
    import torch
    import transformers
    from transformers.models.qwen4_exp import configuration_qwen4_exp as cq
    from transformers.models.qwen4_exp import modeling_qwen4_exp as mq

    summary["versions"] = dict(torch=torch.__version__, transformers=transformers.__version__,
                               python=platform.python_version())
    dev = torch.device("cuda" if torch.cuda.is_available() and not args.cpu else "cpu")
    log(f"device {dev} {torch.cuda.get_device_name(0) if dev.type == 'cuda' else ''}")
    torch.manual_seed(args.seed)
    eot = ids["<|endoftext|>"]

    def stream(docs):
        out = []
        for enc in tok.encode_batch(docs, add_special_tokens=False):
            out.extend(enc.ids)
            out.append(eot)
        return np.array(out, dtype=np.int64)

    train = stream(split["train"])
    valid = stream(split["valid"])
    log(f"tokens: train {len(train)} valid {len(valid)} ({sum(map(len, split['train'])) / len(train):.2f} chars/token)")
    summary["tokens"] = dict(train=int(len(train)), valid=int(len(valid)))

    cfg = cq.Qwen4ExpTextConfig(**model_config(ids))
    model = mq.Qwen4ExpForCausalLM(cfg).to(torch.float32)
    try:
        model.set_experts_implementation("eager")
    except Exception as e:  # noqa: BLE001
        log(f"set_experts_implementation failed ({e!r}); setting the config field")
        model.config._experts_implementation = "eager"
    try:
        model.set_attn_implementation("sdpa")
    except Exception as e:  # noqa: BLE001
        log(f"set_attn_implementation(sdpa) failed ({e!r}); keeping {model.config._attn_implementation}")
    model.to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: {n_params / 1e6:.2f} M parameters ({2 * n_params / 1e6:.1f} MB in bf16); "
        f"attn {model.config._attn_implementation} experts {model.config._experts_implementation}")
    summary["parameters"] = int(n_params)

    orig_forward, fast_forward = make_fast_indexer(mq, torch)
    tdev_train = torch.from_numpy(train).to(dev)
    tdev_valid = torch.from_numpy(valid).to(dev)
    T = args.seq
    gen = torch.Generator(device=dev).manual_seed(args.seed)

    def batch(src, n, g=None):
        offs = torch.randint(0, len(src) - T - 1, (n,), device=dev, generator=g)
        return src[offs[:, None] + torch.arange(T, device=dev)[None, :]]

    # The vectorized indexer must select what the reference loop selects: compare the two masks on
    # the inputs one QSA layer really gets (fp32, TF32 off), then train with TF32 matmuls.
    def check_indexer(tag):
        torch.backends.cuda.matmul.allow_tf32 = False
        model.eval()
        idx_mod = next(m for m in model.modules() if isinstance(m, mq.Qwen4ExpTextQSAIndexer))
        cap = {}

        def grab(mod, a):  # keeps the first call's inputs; returns None so the inputs are unchanged
            cap.setdefault("args", a)

        hook = idx_mod.register_forward_pre_hook(grab)
        with torch.no_grad():
            mq.Qwen4ExpTextQSAIndexer.forward = orig_forward
            xb = batch(tdev_valid, 2, torch.Generator(device=dev).manual_seed(7))
            ref = model(input_ids=xb, use_cache=False).logits.float()
            hook.remove()
            m_ref = orig_forward(idx_mod, *cap["args"])
            m_fast = fast_forward(idx_mod, *cap["args"])
            rows = (m_ref != m_fast).flatten(2).any(-1) if m_ref.dim() == 3 else (m_ref != m_fast).any(-1)
            mq.Qwen4ExpTextQSAIndexer.forward = fast_forward
            got = model(input_ids=xb, use_cache=False).logits.float()
        frac = rows.float().mean().item()
        d = (ref - got).abs().max().item()
        log(f"fast indexer vs reference ({tag}): {frac * 100:.3f}% of query rows select differently, "
            f"max |dlogit| {d:.3e}")
        summary[f"fast_indexer_check_{tag}"] = dict(rows_differ=frac, max_abs_dlogit=d)
        torch.backends.cuda.matmul.allow_tf32 = True
        return frac

    if not check_indexer("init") <= 0.005:
        log("WARNING: the vectorized indexer differs; training with the reference loop instead (slow)")
        mq.Qwen4ExpTextQSAIndexer.forward = orig_forward

    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if p.ndim < 2 else decay).append(p)
    opt = torch.optim.AdamW([dict(params=decay, weight_decay=0.1), dict(params=no_decay, weight_decay=0.0)],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    model.router_aux_loss_coef = 0.01
    use_aux = True
    vg = torch.Generator(device=dev).manual_seed(11)
    valid_batches = [batch(tdev_valid, 16, vg) for _ in range(4)]

    def valid_loss():
        model.eval()
        tot = 0.0
        with torch.no_grad():
            for vb in valid_batches:
                tot += model(input_ids=vb, labels=vb, use_cache=False).loss.float().item()
        model.train()
        return tot / len(valid_batches)

    deadline = T_START + args.total_seconds - args.reserve_seconds
    budget = min(args.train_seconds, deadline - time.time())
    log(f"training: batch {args.batch} x {T}, lr {args.lr}, budget {budget:.0f}s")
    model.train()
    t0 = time.time()
    step, best, best_step, best_state, losses = 0, float("inf"), -1, None, []
    history = []
    while True:
        el = time.time() - t0
        if el >= budget:
            break
        frac = el / budget
        lr = args.lr * min(1.0, (step + 1) / args.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for gr in opt.param_groups:
            gr["lr"] = lr
        xb = batch(tdev_train, args.batch, gen)
        if use_aux:
            try:
                out = model(input_ids=xb, labels=xb, use_cache=False, output_router_logits=True)
            except Exception as e:  # noqa: BLE001
                log(f"output_router_logits failed ({e!r}); training without the load-balancing loss")
                use_aux = False
                out = model(input_ids=xb, labels=xb, use_cache=False)
        else:
            out = model(input_ids=xb, labels=xb, use_cache=False)
        loss = out.loss
        if step == 0:
            try:
                loss.backward()
            except Exception as e:  # noqa: BLE001
                log(f"first backward failed ({e!r}) with attention {model.config._attn_implementation}; "
                    f"retrying with eager attention\n{traceback.format_exc()}")
                opt.zero_grad(set_to_none=True)
                model.set_attn_implementation("eager")
                out = model(input_ids=xb, labels=xb, use_cache=False, output_router_logits=use_aux)
                loss = out.loss
                loss.backward()
        else:
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        if step % 25 == 0:
            losses.append(loss.item())
        if step % args.log_every == 0 or step == 1:
            aux = getattr(out, "aux_loss", None)
            log(f"step {step} t={el:.0f}s lr {lr:.2e} loss {loss.item():.4f} aux {float(aux) if aux is not None else 0:.3f}")
        if step % args.eval_every == 0:
            vl = valid_loss()
            history.append(dict(step=step, seconds=round(time.time() - t0, 1), train_loss=float(loss.item()),
                                valid_loss=vl))
            log(f"step {step}: valid loss {vl:.4f} (ppl {math.exp(vl):.2f})")
            if vl < best:
                best, best_step = vl, step
                best_state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
    vl = valid_loss()
    history.append(dict(step=step, seconds=round(time.time() - t0, 1), valid_loss=vl))
    log(f"end at step {step}: valid loss {vl:.4f}; best {best:.4f} at step {best_step}")
    if best_state is not None and best < vl:
        model.load_state_dict(best_state)
        log(f"restored the best validation state (step {best_step})")
    else:
        best, best_step = vl, step
    summary["training"] = dict(steps=step, seconds=round(time.time() - t0, 1), batch=args.batch, seq=T, lr=args.lr,
                               tokens_seen=step * args.batch * T, best_valid_loss=best, best_step=best_step,
                               aux_loss=use_aux, history=history,
                               final_train_loss_mean_last_10=float(np.mean(losses[-10:])) if losses else None)
    if mq.Qwen4ExpTextQSAIndexer.forward is fast_forward:
        check_indexer("trained")
    mq.Qwen4ExpTextQSAIndexer.forward = orig_forward
    model.eval()

    model.generation_config.bos_token_id = eot
    model.generation_config.eos_token_id = [eot, ids["<|im_end|>"]]
    model.generation_config.pad_token_id = eot
    model.generation_config.do_sample = True
    model.generation_config.temperature = 0.8
    model.generation_config.top_k = 40
    model.generation_config.top_p = 0.95
    model = model.to("cpu").to(torch.bfloat16)
    model.save_pretrained(model_dir)
    sizes = {fn: os.path.getsize(os.path.join(model_dir, fn)) for fn in sorted(os.listdir(model_dir))}
    log(f"saved {model_dir}: {sizes}")
    summary["files"] = sizes
    if dev.type == "cuda":
        torch.cuda.empty_cache()


# ------------------------------------------------------------------------------------------------
# 5. perplexity
# ------------------------------------------------------------------------------------------------
def perplexity(args, tok, split, model_dir, fx_dir, summary):
    import torch
    from transformers.models.qwen4_exp import modeling_qwen4_exp as mq

    n_ctx, n_chunks = args.ppl_ctx, args.ppl_chunks
    parts, n = [], 0
    for doc in split["test"]:
        parts.append(doc)
        n = len(tok.encode("\n\n".join(parts) + "\n", add_special_tokens=False).ids)
        if n >= n_ctx * n_chunks + 64:
            break
    text = "\n\n".join(parts) + "\n"
    with open(os.path.join(fx_dir, "heldout.txt"), "w", encoding="utf-8") as f:
        f.write(text)
    tokens = tok.encode(text, add_special_tokens=False).ids
    n_chunks = min(n_chunks, len(tokens) // n_ctx)
    log(f"perplexity text: {len(parts)} test chapters, {len(text)} chars, {len(tokens)} tokens, {n_chunks} x {n_ctx}")

    dev = torch.device("cuda" if torch.cuda.is_available() and not args.cpu else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    x = torch.tensor([tokens[i * n_ctx:(i + 1) * n_ctx] for i in range(n_chunks)], dtype=torch.long, device=dev)
    first = n_ctx // 2
    result = {}
    for dtype in (torch.float32, torch.bfloat16):
        model = mq.Qwen4ExpForCausalLM.from_pretrained(model_dir, dtype=dtype, attn_implementation="eager",
                                                       experts_implementation="eager").to(dev).eval()
        with torch.no_grad():
            logits = model(input_ids=x, use_cache=False).logits.to(torch.float64)
        lp = torch.log_softmax(logits[:, first:n_ctx - 1, :], dim=-1)
        tgt = x[:, first + 1:n_ctx]
        nll = -lp.gather(-1, tgt.unsqueeze(-1)).squeeze(-1)          # [chunks, n_ctx - first - 1]
        per_chunk = nll.mean(dim=1).exp().tolist()
        total = float(nll.sum().item())
        count = int(nll.numel())
        name = "fp32" if dtype == torch.float32 else "bf16"
        result[name] = dict(ppl=math.exp(total / count), nll_sum=total, count=count, chunk_ppl=per_chunk)
        log(f"perplexity {name}: {result[name]['ppl']:.4f} over {count} scored tokens; chunks {[round(p, 3) for p in per_chunk]}")
        if name == "fp32":
            try:
                prompt = tok.encode("And it came to pass", add_special_tokens=False).ids
                torch.manual_seed(5)
                out = model.generate(torch.tensor([prompt], device=dev), max_new_tokens=120, do_sample=True,
                                     temperature=0.8, top_k=40, top_p=0.95,
                                     attention_mask=torch.ones(1, len(prompt), dtype=torch.long, device=dev))
                sample = tok.decode(out[0].tolist(), skip_special_tokens=False)
                summary["sample"] = sample
                log(f"sample: {sample!r}")
            except Exception as e:  # noqa: BLE001
                log(f"sample generation failed: {e!r}")
        del model
    doc = dict(
        what="transformers perplexity of models/demo on tests/fixtures/demo/heldout.txt (held-out KJV chapters)",
        method=("llama.cpp perplexity: tokens = tokenizer.encode(whole file, no BOS, specials not parsed); "
                f"n_chunks = min({args.ppl_chunks}, n_tokens // n_ctx) non-overlapping windows "
                "tokens[i*n_ctx:(i+1)*n_ctx], each evaluated from an empty state (fresh caches, PLE n-gram "
                "context reset); in each window the logits at positions first..n_ctx-2 (first = n_ctx/2) "
                "score the next token: nll = -log softmax(logits[p])[tokens[p+1]]; "
                "ppl = exp(sum nll / count), count = n_chunks * (n_ctx - first - 1)"),
        reference=("Qwen4ExpForCausalLM.from_pretrained(models/demo, dtype=float32 (bf16 weights upcast), "
                   "attn_implementation='eager', experts_implementation='eager'), unmodified transformers code, "
                   "TF32 off, log-softmax in float64; bf16 = the same with dtype=bfloat16"),
        text_file="heldout.txt",
        n_ctx=n_ctx,
        n_chunks=n_chunks,
        first=first,
        n_tokens=len(tokens),
        tokens=tokens,
        ppl=result["fp32"]["ppl"],
        fp32=result["fp32"],
        bf16=result.get("bf16"),
        tolerance="our runtime's ppl within 1% of ppl (fp32)",
    )
    with open(os.path.join(fx_dir, "perplexity.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    summary["perplexity"] = dict(fp32=result["fp32"]["ppl"], bf16=result.get("bf16", {}).get("ppl"),
                                 n_ctx=n_ctx, n_chunks=n_chunks)


def main():
    global LOGF
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--corpus", default=os.path.join(HERE, "kjv.txt.gz"))
    ap.add_argument("--train-seconds", type=float, default=270)
    ap.add_argument("--total-seconds", type=float, default=450, help="whole-script budget; training stops in time")
    ap.add_argument("--reserve-seconds", type=float, default=70, help="kept after training for save + perplexity")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=60)
    ap.add_argument("--log-every", type=int, default=100)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--ppl-ctx", type=int, default=512)
    ap.add_argument("--ppl-chunks", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--cpu", action="store_true")
    ap.add_argument("--only-text", action="store_true", help="corpus, tokenizer and fixtures only (no torch)")
    args = ap.parse_args()

    model_dir = os.path.join(args.out, "models", "demo")
    fx_tok = os.path.join(args.out, "tests", "fixtures", "tokenizer")
    fx_chat = os.path.join(args.out, "tests", "fixtures", "chat")
    fx_demo = os.path.join(args.out, "tests", "fixtures", "demo")
    for d in (model_dir, fx_tok, fx_chat, fx_demo):
        os.makedirs(d, exist_ok=True)
    LOGF = open(os.path.join(args.out, "log"), "a", encoding="utf-8")
    summary = dict(stages={}, args=vars(args))
    log(f"python {platform.python_version()} argv {sys.argv}")

    chapters, split = load_corpus(args.corpus)
    log(f"corpus: {len(chapters)} chapters; train {len(split['train'])} valid {len(split['valid'])} "
        f"test {len(split['test'])}")
    summary["corpus"] = {k: dict(chapters=len(v), chars=sum(map(len, v))) for k, v in split.items()}
    with open(os.path.join(HERE, "chat_template.jinja"), encoding="utf-8") as f:
        demo_template = f.read().rstrip("\n")

    import importlib.metadata as md

    def version(p):
        try:
            return md.version(p)
        except Exception:  # noqa: BLE001
            return None

    tv, trv = version("tokenizers"), version("transformers")
    r = stage("tokenizer", lambda: train_tokenizer(split["train"], model_dir, demo_template), summary)
    if r is None:
        raise SystemExit(1)
    tok, ids = r
    summary["token_ids"] = ids
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        with open(os.path.join(model_dir, fn), "rb") as src, open(os.path.join(fx_tok, fn), "wb") as dst:
            dst.write(src.read())
    stage("parity fixture", lambda: make_parity(tok, split["test"], os.path.join(fx_tok, "parity.json"), tv), summary)
    if not args.only_text:
        stage("train", lambda: train_model(args, ids, tok, split, model_dir, summary), summary)
    stage("chat fixture", lambda: make_chat(model_dir, demo_template, os.path.join(fx_chat, "chat.json"), tok, trv),
          summary)
    if not args.only_text and os.path.exists(os.path.join(model_dir, "model.safetensors")):
        stage("perplexity", lambda: perplexity(args, tok, split, model_dir, fx_demo, summary), summary)
    summary["seconds"] = round(time.time() - T_START, 1)
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1, default=str)
    log(f"done in {summary['seconds']}s: {summary['stages']}")


if __name__ == "__main__":
    main()
