/* turbospark synth: a qwen4exp GGUF with a real config's metadata, tensor set and shapes, filled
 * with seeded random data (or sparse) — for loader tests and benchmarks at real shapes. */
#include "cli/cli.h"

#include "common/error.h"
#include "convert/hf_config.h"
#include "convert/mix.h"
#include "model/synth.h"
#include "quant/quant.h"
#include "tokenizer/tokenizer.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void synth_usage(FILE *f) {
    fprintf(
        f,
        "usage: turbospark synth -o OUT.gguf [--released | --tiny | --mid | --config config.json] [--type "
        "TYPE] [--sparse] [--seed N]\n"
        "                        [--layers N] [--mtp] [--ple-split] [--fused-experts] [--tokenizer-from "
        "FILE.gguf]\n"
        "\n"
        "  --released       the released Qwen3.8-Flash-Next config (48 layers, 1,224 tensors; default)\n"
        "  --tiny           a 4-layer config with every feature on (hidden 64, vocab 512)\n"
        "  --mid            an 8-layer config for CPU benchmarks (hidden 1024, 64 experts, vocab 32768)\n"
        "  --config FILE    any config of the family, from a transformers qwen4_exp config.json\n"
        "  --type TYPE      matrix type: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q4_K q5_K q6_K iq4_nl\n"
        "                   iq3_xxs iq3_s iq2_s iq2_xs iq2_xxs iq1_s iq1_m, or a mix as convert/quantize "
        "make it\n"
        "                   (q4_k_m q5_k_m ud_q3_k_xl ...; IQ1_S, IQ2_XXS/XS with equal importance weights)\n"
        "                   (default q8_0; 256-block types fall back on narrow rows as llama.cpp does)\n"
        "  --sparse         leave tensor data unwritten: a sparse file that takes no disk space\n"
        "  --sizes          write nothing: print the bytes and bits per weight of each tensor role\n"
        "                   with --type MIX (a mix name: q4_k_m, ud_q2_k_xl, ...; no -o needed)\n"
        "  --seed N         random seed (default 1)\n"
        "  --layers N       trunk layers (default: the config's)\n"
        "  --mtp            add one MTP block (blk.L.*, nextn_predict_layers = 1)\n"
        "  --ple-split      per-head PLE tables instead of one joined table\n"
        "  --fused-experts  ffn_gate_up_exps instead of split gate and up experts\n"
        "  --tokenizer-from FILE.gguf\n"
        "                   carry that file's tokenizer (every tokenizer.* key: tokens, merges, types,\n"
        "                   special ids, chat template); --tiny and --mid take its token count as their\n"
        "                   vocabulary, --released and --config keep theirs and pad the token list with\n"
        "                   [PAD<id>] tokens of type UNUSED (a longer list is refused); the PLE's\n"
        "                   end-of-sequence id becomes the tokenizer's\n");
}

/* --sizes: the table of a mix at these shapes (docs/DECISIONS.md shows the released model's). */
static int print_sizes(const ts_mix *mix, const ts_hparams *hp, ts_layout layout) {
    ts_mix_sizes z;
    if (ts_mix_sizes_of(mix, hp, layout, &z)) {
        fprintf(stderr, "turbospark synth: cannot list the tensors of this config\n");
        return 1;
    }
    printf("%s: %u layers, %.3f G parameters, %" PRIu64 " bytes (%.2f GiB), %.3f bits per weight\n",
           mix->name, hp->n_layer, z.total_elements / 1e9, z.total_bytes, z.total_bytes / 1073741824.0,
           8.0 * (double)z.total_bytes / (double)z.total_elements);
    printf("  %-24s %12s %16s %9s  %s\n", "role", "params (G)", "bytes", "bits/w", "types");
    for (int r = 0; r < TS_ROLE_COUNT; r++) {
        if (!z.elements[r]) continue;
        printf("  %-24s %12.4f %16" PRIu64 " %9.3f ", ts_mix_role_name((ts_mix_role)r), z.elements[r] / 1e9,
               z.bytes[r], 8.0 * (double)z.bytes[r] / (double)z.elements[r]);
        for (int i = 0; i < z.n_types[r]; i++) printf(" %s", ts_type_name(z.types[r][i]));
        printf("\n");
    }
    return 0;
}

/* --type with a mix name (q4_k_m, q5_k_m, ...): each matrix gets the type `convert` and `quantize`
 * would give it (src/convert/mix.h), so benchmarks see a real file's mix of types. */
typedef struct {
    const ts_mix *mix;
    const ts_hparams *hp;
} mix_edit_ctx;

static int mix_edit(void *ctx, ts_tensor_spec *spec, uint32_t *type) {
    const mix_edit_ctx *c = ctx;
    if (spec->role == 'm') *type = ts_mix_type(c->mix, c->hp, spec);
    return 1;
}

/* --tokenizer-from: opens the file and fits the config to its tokenizer. --tiny and --mid take its token
 * count as their vocabulary (their PLE multipliers follow it); the others keep theirs, which must hold
 * every token. The PLE's end-of-sequence id becomes the file's own when it is a qwen4exp model (the
 * document separator, <|endoftext|>: not always the tokenizer's eos, which may be <|im_end|>), else the
 * tokenizer's eos. */
static int take_tokenizer(const char *path, bool resize, ts_hparams *hp, ts_gguf **out, char *note,
                          size_t notelen, char *err, size_t errlen) {
    ts_tokenizer *t;
    char e2[768];
    if (ts_gguf_open(path, out, e2, sizeof e2) || ts_tokenizer_load(*out, &t, e2, sizeof e2))
        return ts_errf(err, errlen, "--tokenizer-from %s: %s", path, e2);
    const uint32_t n = (uint32_t)ts_tokenizer_n_tokens(t);
    const int32_t eos = ts_tokenizer_eos(t);
    ts_tokenizer_free(t);
    const uint32_t was = hp->n_vocab;
    if (resize) hp->n_vocab = n, ts_ple_multipliers(n, hp->ple_n, 1234, 0, hp->ple_mult);
    if (n > hp->n_vocab)
        return ts_errf(
            err, errlen,
            "--tokenizer-from %s: its tokenizer has %" PRIu32 " tokens, more than this config's vocabulary "
            "of %" PRIu32 " (--tiny and --mid take the tokenizer's size; --released and --config keep "
            "their own)",
            path, n, hp->n_vocab);
    const ts_gguf_value *own = ts_gguf_find(*out, "qwen4exp.ple.eos_token_id");
    int64_t ple_eos = eos;
    if (own && !(ts_gguf_value_as_i64(own, &ple_eos) && ple_eos >= 0 && ple_eos < n))
        return ts_errf(err, errlen,
                       "--tokenizer-from %s: qwen4exp.ple.eos_token_id is not a token id below %" PRIu32,
                       path, n);
    if (ple_eos < 0)
        return ts_errf(err, errlen,
                       "--tokenizer-from %s: the file has neither qwen4exp.ple.eos_token_id nor "
                       "tokenizer.ggml.eos_token_id, one of which the n-gram embedding (PLE) needs as its "
                       "end-of-sequence id",
                       path);
    hp->ple_eos = (uint32_t)ple_eos;
    if (n < hp->n_vocab)
        snprintf(note, notelen,
                 "%s's tokenizer: %" PRIu32 " tokens, padded to %" PRIu32
                 " with [PAD<id>] tokens of type UNUSED; PLE end-of-sequence id %" PRIu32,
                 path, n, hp->n_vocab, hp->ple_eos);
    else
        snprintf(note, notelen, "%s's tokenizer: %" PRIu32 " tokens%s; PLE end-of-sequence id %" PRIu32, path,
                 n, n != was ? " (the config's vocabulary resized to it)" : "", hp->ple_eos);
    return 0;
}

int ts_cmd_synth(int argc, char **argv) {
    const char *out = NULL;
    int config = 0; /* 0 released, 1 tiny, 2 mid, 3 config.json */
    const char *config_json = NULL, *tokenizer_from = NULL;
    long layers = -1;
    int mtp = 0;
    ts_synth_opts o = {.type = TS_TYPE_Q8_0, .seed = 1};
    mix_edit_ctx mix = {0};
    const char *type_name = NULL;
    bool sizes = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            synth_usage(stdout);
            return 0;
        } else if (!strcmp(a, "-o") && has_val)
            out = argv[++i];
        else if (!strcmp(a, "--released"))
            config = 0;
        else if (!strcmp(a, "--tiny"))
            config = 1;
        else if (!strcmp(a, "--mid"))
            config = 2;
        else if (!strcmp(a, "--config") && has_val)
            config = 3, config_json = argv[++i];
        else if (!strcmp(a, "--sparse"))
            o.sparse = true;
        else if (!strcmp(a, "--sizes"))
            sizes = true;
        else if (!strcmp(a, "--mtp"))
            mtp = 1;
        else if (!strcmp(a, "--ple-split"))
            o.layout.ple_split = true;
        else if (!strcmp(a, "--fused-experts"))
            o.layout.fused_experts = true;
        else if (!strcmp(a, "--tokenizer-from") && has_val)
            tokenizer_from = argv[++i];
        else if (!strcmp(a, "--seed") && has_val)
            o.seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(a, "--layers") && has_val) {
            char *end;
            layers = strtol(argv[++i], &end, 10);
            if (*end || layers < 1 || layers > 4096) {
                fprintf(stderr, "turbospark synth: --layers must be a number from 1 to 4096\n");
                return 2;
            }
        } else if (!strcmp(a, "--type") && has_val) {
            int t = ts_type_from_name(type_name = argv[++i]);
            mix.mix = t < 0 ? ts_mix_from_name(argv[i]) : NULL;
            if (mix.mix) {
                o.type = mix.mix->base, o.edit = mix_edit, o.edit_ctx = &mix;
                continue;
            }
            if (t < 0 || !(ts_can_quantize((uint32_t)t) || ts_quantize_needs_imatrix((uint32_t)t))) {
                fprintf(stderr, "turbospark synth: unknown or unsupported type '%s'\n", argv[i]);
                return 2;
            }
            o.type = (uint32_t)t;
        } else {
            fprintf(stderr, "turbospark synth: unknown or incomplete option '%s'\n", a);
            synth_usage(stderr);
            return 2;
        }
    }
    const ts_mix *sizes_mix = sizes && type_name ? ts_mix_from_name(type_name) : NULL;
    if (sizes && !sizes_mix) {
        fprintf(stderr, "turbospark synth: --sizes needs --type with a mix name (one of: %s)\n",
                ts_mix_names());
        return 2;
    }
    if (!out && !sizes) {
        fprintf(stderr, "turbospark synth: no output file given (-o OUT.gguf)\n");
        synth_usage(stderr);
        return 2;
    }
    char err[1024];
    ts_hparams hp;
    int rc;
    if (config == 3) { /* a transformers config.json: the hyperparameters convert would write */
        ts_hf_config hc;
        rc = ts_hf_config_read(config_json, &hc, err, sizeof err);
        if (!rc)
            hp = hc.hp, memset(&hc.hp, 0, sizeof hc.hp), ts_hf_config_free(&hc);
        else
            memset(&hp, 0, sizeof hp);
    } else {
        rc = config == 1   ? ts_hparams_tiny(&hp, err, sizeof err)
             : config == 2 ? ts_hparams_mid(&hp, err, sizeof err)
                           : ts_hparams_released(&hp, err, sizeof err);
    }
    mix.hp = &hp;
    if (!rc && sizes &&
        !ts_hparams_set_layers(&hp, layers > 0 ? (uint32_t)layers : hp.n_layer, (uint32_t)mtp, err,
                               sizeof err)) {
        rc = print_sizes(sizes_mix, &hp, o.layout);
        ts_hparams_free(&hp);
        return rc;
    }
    ts_gguf *tok_file = NULL;
    char note[1024] = "";
    if (rc ||
        ts_hparams_set_layers(&hp, layers > 0 ? (uint32_t)layers : hp.n_layer, (uint32_t)mtp, err,
                              sizeof err) ||
        (tokenizer_from && take_tokenizer(tokenizer_from, config == 1 || config == 2, &hp, &tok_file, note,
                                          sizeof note, err, sizeof err)) ||
        (o.tokenizer = tok_file, ts_synth_write(&hp, &o, out, err, sizeof err))) {
        fprintf(stderr, "turbospark synth: %s\n", err);
        ts_gguf_close(tok_file);
        ts_hparams_free(&hp);
        return 1;
    }
    ts_gguf_close(tok_file);
    fprintf(stderr, "wrote %s: %s config, %" PRIu32 " layers%s, matrices %s%s\n", out,
            config == 1   ? "tiny"
            : config == 2 ? "mid"
            : config == 3 ? config_json
                          : "released",
            hp.n_layer, mtp ? " + MTP" : "", mix.mix ? mix.mix->name : ts_type_name(o.type),
            o.sparse ? ", sparse (no data written)" : "");
    if (note[0]) fprintf(stderr, "%s\n", note);
    ts_hparams_free(&hp);
    return 0;
}
