/* turbospark plan: what the CUDA backend's memory plan (src/model/memplan.h) reserves on a GPU for a
 * model, and how many sequences of which context length fit, computed on any machine: no GPU is
 * needed and nothing is allocated. The model is a GGUF file (its metadata and tensor table only) or
 * a configuration (synth's --released, --tiny, --mid, --config) with a mix's matrix types.
 *
 * The numbers are the ones ts_cuda_ctx_new and ts_cuda_seq_new allocate (they call the same
 * functions); the GPU memory is what the plan compares them with: the free memory when the CUDA
 * context is made, which --gpu-mem stands for. */
#include "cli/cli.h"

#include "cli/args.h"

#include "common/error.h"
#include "convert/hf_config.h"
#include "convert/mix.h"
#include "model/memplan.h"
#include "model/synth.h"
#include "quant/quant.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The default GPU: an H200 as the CUDA runtime reports its memory (139.8 GiB, docs/BENCHMARKS.md).
 * The CUDA context's own allocations come off it before the plan reads the free memory. */
#define PLAN_H200_GIB 139.8
#define PLAN_MAX_CTX 16
#define GIB 1073741824.0

static void plan_usage(FILE *f) {
    fprintf(
        f,
        "usage: turbospark plan (-m FILE.gguf | --released | --tiny | --mid | --config config.json [--type "
        "MIX])\n"
        "                       [--gpu-mem GiB] [-c 4096,32768,...] [--ple auto|gpu|host] [-ub N] [-np N] "
        "[--cache-gpu MiB]\n"
        "                       [-o md|json]\n"
        "\n"
        "What the CUDA backend reserves on the GPU for a model (weights, PLE table, workspaces, each\n"
        "sequence's state) and how many sequences of each context fit, computed without a GPU: the same\n"
        "arithmetic the backend allocates by (src/model/memplan.h). Nothing is allocated.\n"
        "\n"
        "  -m, --model FILE     a qwen4exp GGUF (its metadata and tensor table are read, not its weights)\n"
        "  --released           the released Qwen3.8-Flash-Next shapes instead of a file (also --tiny,\n"
        "  --tiny, --mid         --mid, --config config.json: synth's configurations)\n"
        "  --config FILE\n"
        "  --type T             with a configuration: the matrices' mix (default q4_k_m; ud_q2_k_xl, ...)\n"
        "                       or type (q8_0, ...), as synth and quantize write them\n"
        "  --gpu-mem GiB        GPU memory the plan may fill (default %.1f: an H200 as the CUDA runtime\n"
        "                       reports it; the backend compares with the free memory once its context\n"
        "                       exists, which is lower: `turbospark devices` prints it on the GPU machine)\n"
        "  -c, --ctx LIST       tokens a sequence holds, up to %d values separated by commas\n"
        "                       (default 4096,32768,131072,262144)\n"
        "  --ple P              where the PLE n-gram table lives: gpu, host (pinned host memory), or auto\n"
        "                       (default: both are shown; the backend puts it on the GPU when all fits)\n"
        "  -ub, --ubatch-size N rows of a micro-batch, which size the workspaces (default 512; run, chat\n"
        "                       and bench take 4096 on CUDA where it fits: 2.2 GiB more at context 4096;\n"
        "                       serve's micro-batch holds a step: -b + -np rows, at least -ub)\n"
        "  -np, --parallel N    check N sequences of each context as the backend would (exit status 1,\n"
        "                       with its sentence, when they do not fit)\n"
        "  --cache-gpu MiB      GPU memory serve's prefix cache keeps snapshots in (serve --cache-gpu),\n"
        "                       reserved before the sequences (default 0)\n"
        "  -o, --output FMT     md (default) or json\n",
        PLAN_H200_GIB, PLAN_MAX_CTX);
}

typedef struct type_ctx {
    const ts_mix *mix;
    uint32_t type;
    const ts_hparams *hp;
} type_ctx;

/* The types synth writes: vectors F32, matrices the mix's type (or the one type, with llama.cpp's
 * fallback on rows too short for its blocks). */
static uint32_t type_of(void *ctx, const ts_tensor_spec *s) {
    const type_ctx *c = ctx;
    if (s->role != 'm') return TS_TYPE_F32;
    return c->mix ? ts_mix_type(c->mix, c->hp, s) : ts_synth_fallback_type(c->type, s->ne[0]);
}

static int parse_ctx_list(const char *s, int64_t *out, int *n) {
    *n = 0;
    if (!*s) return -1;
    while (*s) {
        char *end;
        errno = 0;
        long long v = strtoll(s, &end, 10);
        if (errno || end == s || v < 1 || v > TS_MEMPLAN_MAX_SEQ_CTX || *n == PLAN_MAX_CTX) return -1;
        out[(*n)++] = v;
        if (*end == ',' && end[1])
            end++;
        else if (*end)
            return -1;
        s = end;
    }
    return 0;
}

/* The longest context one sequence can hold (with the workspaces sized for it) in free bytes: 0
 * when none, else at most TS_MEMPLAN_MAX_SEQ_CTX. */
static int64_t longest_ctx(const ts_model *m, int64_t max_rows, size_t snapshots, bool on_host,
                           size_t free_bytes) {
    int64_t lo = 0, hi = TS_MEMPLAN_MAX_SEQ_CTX;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo + 1) / 2;
        ts_memplan p;
        ts_memplan_make(m, mid, 1, max_rows, &p);
        p.snapshots = snapshots;
        if (ts_memplan_seqs_fit(&p, on_host, free_bytes) >= 1)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* b bytes in the largest unit that keeps a digit before the point */
static const char *fmt_bytes(char *buf, size_t n, double b) {
    if (b >= GIB)
        snprintf(buf, n, "%.2f GiB", b / GIB);
    else if (b >= 1048576.0)
        snprintf(buf, n, "%.1f MiB", b / 1048576.0);
    else if (b >= 1024.0)
        snprintf(buf, n, "%.1f KiB", b / 1024.0);
    else
        snprintf(buf, n, "%.0f bytes", b);
    return buf;
}

int ts_cmd_plan(int argc, char **argv) {
    const char *path = NULL, *config_json = NULL, *type_name = NULL, *ple_name = "auto", *out_fmt = "md";
    int config = -1; /* -1 a file, 0 released, 1 tiny, 2 mid, 3 config.json */
    size_t gpu_mem = (size_t)(PLAN_H200_GIB * GIB);
    long cache_gpu_mib = 0; /* --cache-gpu */
    bool gpu_mem_given = false;
    int64_t ctx[PLAN_MAX_CTX] = {4096, 32768, 131072, 262144};
    int n_ctx = 4;
    long ub = 512, np = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            plan_usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--released") || !strcmp(a, "--tiny") || !strcmp(a, "--mid")) {
            config = a[2] == 'r' ? 0 : a[2] == 't' ? 1 : 2;
            continue;
        }
        if (!v) {
            fprintf(stderr, "turbospark plan: unknown or incomplete option '%s'\n", a);
            plan_usage(stderr);
            return 2;
        }
        i++;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            path = v;
        } else if (!strcmp(a, "--config")) {
            config = 3, config_json = v;
        } else if (!strcmp(a, "--type")) {
            type_name = v;
        } else if (!strcmp(a, "--gpu-mem")) {
            if (ts_cli_gpu_mem(v, &gpu_mem)) {
                fprintf(
                    stderr,
                    "turbospark plan: --gpu-mem takes the GPU's memory in GiB, a number above 0 (as 139.8, "
                    "80 or 141GB; from 1 MiB to 64 TiB), not '%s'\n",
                    v);
                return 2;
            }
            gpu_mem_given = true;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx") || !strcmp(a, "--ctx-size")) {
            if (parse_ctx_list(v, ctx, &n_ctx)) {
                fprintf(
                    stderr,
                    "turbospark plan: %s takes up to %d token counts from 1 to %d separated by commas (as "
                    "4096,262144), not '%s'\n",
                    a, PLAN_MAX_CTX, TS_MEMPLAN_MAX_SEQ_CTX, v);
                return 2;
            }
        } else if (!strcmp(a, "--ple")) {
            ple_name = v;
        } else if (!strcmp(a, "-ub") || !strcmp(a, "--ubatch-size") || !strcmp(a, "--ubatch")) {
            if (ts_cli_long(v, 1, 1 << 20, &ub)) {
                fprintf(stderr, "turbospark plan: %s takes the rows of a micro-batch, 1 to %d, not '%s'\n", a,
                        1 << 20, v);
                return 2;
            }
        } else if (!strcmp(a, "-np") || !strcmp(a, "--parallel")) {
            if (ts_cli_long(v, 1, 1024, &np)) {
                fprintf(stderr, "turbospark plan: %s takes a number of sequences, 1 to 1024, not '%s'\n", a,
                        v);
                return 2;
            }
        } else if (!strcmp(a, "--cache-gpu")) {
            if (ts_cli_long(v, 0, 1 << 24, &cache_gpu_mib)) {
                fprintf(stderr,
                        "turbospark plan: --cache-gpu takes the MiB of GPU memory for the prefix cache's "
                        "snapshots, 0 to %d, not '%s'\n",
                        1 << 24, v);
                return 2;
            }
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            out_fmt = v;
        } else {
            fprintf(stderr, "turbospark plan: unknown option '%s'\n", a);
            plan_usage(stderr);
            return 2;
        }
    }
    const bool json = !strcmp(out_fmt, "json");
    if (!json && strcmp(out_fmt, "md")) {
        fprintf(stderr, "turbospark plan: -o is md or json, not '%s'\n", out_fmt);
        return 2;
    }
    ts_ple_placement ple = !strcmp(ple_name, "auto")   ? TS_PLE_AUTO
                           : !strcmp(ple_name, "gpu")  ? TS_PLE_DEVICE
                           : !strcmp(ple_name, "host") ? TS_PLE_HOST
                                                       : (ts_ple_placement)-1;
    if ((int)ple < 0) {
        fprintf(stderr, "turbospark plan: --ple is auto, gpu or host, not '%s'\n", ple_name);
        return 2;
    }
    if (path && config >= 0) {
        fprintf(stderr, "turbospark plan: give a file (-m) or a configuration (--released, ...), not both\n");
        return 2;
    }
    if (!path && config < 0) {
        fprintf(stderr,
                "turbospark plan: no model: give -m FILE.gguf, or --released for the released shapes\n");
        plan_usage(stderr);
        return 2;
    }
    if (path && type_name) {
        fprintf(stderr,
                "turbospark plan: --type is for a configuration; a file's tensors have their own types\n");
        return 2;
    }

    char err[1024], what[512];
    ts_model *m = NULL;
    bool virtual_model = false;
    if (path) {
        if (ts_model_load(path, &m, err, sizeof err)) {
            fprintf(stderr, "turbospark plan: %s\n", err);
            return 1;
        }
        snprintf(what, sizeof what, "%s", path);
    } else {
        type_ctx tc = {.type = TS_TYPE_Q4_K};
        const char *tn = type_name ? type_name : "q4_k_m";
        const int t = ts_type_from_name(tn);
        tc.mix = t < 0 ? ts_mix_from_name(tn) : NULL;
        if (!tc.mix && (t < 0 || !ts_type_get((uint32_t)t))) {
            fprintf(stderr, "turbospark plan: unknown type or mix '%s' (mixes: %s)\n", tn, ts_mix_names());
            return 2;
        }
        if (!tc.mix) tc.type = (uint32_t)t;
        ts_hparams hp;
        int rc;
        if (config == 3) {
            ts_hf_config hc;
            rc = ts_hf_config_read(config_json, &hc, err, sizeof err);
            if (!rc) hp = hc.hp, memset(&hc.hp, 0, sizeof hc.hp), ts_hf_config_free(&hc);
        } else {
            rc = config == 1   ? ts_hparams_tiny(&hp, err, sizeof err)
                 : config == 2 ? ts_hparams_mid(&hp, err, sizeof err)
                               : ts_hparams_released(&hp, err, sizeof err);
        }
        if (rc) {
            fprintf(stderr, "turbospark plan: %s\n", err);
            return 1;
        }
        /* type_of reads the hyperparameters while the model is made (the model owns their arrays then) */
        const ts_hparams view = hp;
        tc.hp = &view;
        if (ts_memplan_model_new(&hp, (ts_layout){0}, false, type_of, &tc, &m, err, sizeof err)) {
            fprintf(stderr, "turbospark plan: %s\n", err);
            return 1;
        }
        virtual_model = true;
        snprintf(what, sizeof what, "%s configuration, %s %s (computed from the hyperparameters; no file)",
                 config == 0   ? "the released"
                 : config == 1 ? "the tiny"
                 : config == 2 ? "the mid"
                               : config_json,
                 tc.mix ? tc.mix->name : ts_type_name(tc.type), tc.mix ? "mix" : "matrices");
    }
    const ts_hparams *hp = &m->hp;
    const size_t snapshots = (size_t)cache_gpu_mib << 20;

    /* the parts that do not depend on the context */
    ts_memplan base;
    ts_memplan_make(m, ctx[0], 1, ub, &base);
    ts_memplan_seq s1;
    ts_memplan_seq_bytes(hp, 1, &s1);
    uint32_t n_qsa = 0;
    for (uint32_t l = 0; l < hp->n_layer; l++) n_qsa += hp->kind[l] == TS_LAYER_QSA;
    const double kv_token = (double)n_qsa * 2 * ts_memplan_qsa_kv_bytes(hp, 1);
    const double idx_token =
        n_qsa ? (double)n_qsa *
                    (ts_memplan_idx_raw_bytes(hp, 1) +
                     (double)(ts_memplan_idx_blk_bytes(hp, hp->compress) - ts_memplan_idx_blk_bytes(hp, 0)) /
                         hp->compress)
              : 0;
    const bool show_gpu = ple != TS_PLE_HOST, show_host = ple != TS_PLE_DEVICE;
    const bool has_table = base.table > 0;

    int status = 0;
    if (json) {
        printf("{\"model\": ");
        ts_cli_json_str(stdout, what);
        printf(
            ", \"gpu_mem_bytes\": %zu, \"weights_bytes\": %zu, \"table_bytes\": %zu, \"margin_bytes\": %zu, "
            "\"max_rows\": %ld, \"seq_fixed_bytes\": %zu, \"seq_token_bytes\": %.1f, \"n_ctx_train\": "
            "%" PRIu32 ", \"snapshot_bytes\": %zu, \"contexts\": [",
            gpu_mem, base.weights, base.table, base.margin, ub, s1.gdn + s1.ple, kv_token + idx_token,
            hp->n_ctx_train, snapshots);
    } else {
        char b1[32], b2[32], b3[32], b4[32], b5[32], b6[32];
        printf("turbospark plan: %s\n", what);
        printf("GPU memory   %.2f GiB%s\n", gpu_mem / GIB,
               gpu_mem_given
                   ? " (--gpu-mem)"
                   : " (default: an H200 as the CUDA runtime reports it; the backend plans with the "
                     "free memory once its context exists, which is lower: see --help)");
        printf("weights      %s on the GPU (matrices in their file encoding, vectors fp32)\n",
               fmt_bytes(b1, sizeof b1, (double)base.weights));
        if (has_table)
            printf("PLE table    %s, on the GPU or in pinned host memory (--ple %s)\n",
                   fmt_bytes(b1, sizeof b1, (double)base.table), ple_name);
        else
            printf("PLE table    none\n");
        printf("kept free    %s (the margin)\n", fmt_bytes(b1, sizeof b1, (double)base.margin));
        if (snapshots)
            printf("snapshots    %s of GPU memory for the prefix cache (--cache-gpu)\n",
                   fmt_bytes(b1, sizeof b1, (double)snapshots));
        printf("workspaces   for micro-batches of %ld rows (-ub), sized for the context (below)\n", ub);
        printf("a sequence   %s at any length (GDN %s, PLE %s) + %s a token (QSA K/V %s, indexer keys %s)\n",
               fmt_bytes(b1, sizeof b1, (double)(s1.gdn + s1.ple)), fmt_bytes(b2, sizeof b2, (double)s1.gdn),
               fmt_bytes(b3, sizeof b3, (double)s1.ple), fmt_bytes(b4, sizeof b4, kv_token + idx_token),
               fmt_bytes(b5, sizeof b5, kv_token), fmt_bytes(b6, sizeof b6, idx_token));
        printf("\n| context | state of a sequence | workspaces |%s%s%s\n",
               show_gpu ? " sequences, table on the GPU |" : "",
               show_host ? " sequences, table in host memory |" : "", np ? " -np check |" : "");
        printf("|---:|---:|---:|%s%s%s\n", show_gpu ? "---:|" : "", show_host ? "---:|" : "",
               np ? "---|" : "");
    }
    char refusal[PLAN_MAX_CTX][1024];
    int n_refused = 0;
    for (int i = 0; i < n_ctx; i++) {
        ts_memplan p;
        ts_memplan_make(m, ctx[i], np ? (int)np : 1, ub, &p);
        p.snapshots = snapshots;
        const int64_t fit_gpu = ts_memplan_seqs_fit(&p, false, gpu_mem),
                      fit_host = ts_memplan_seqs_fit(&p, true, gpu_mem);
        int refused = 0;
        char e2[1024] = "";
        if (np) {
            char dev[64];
            snprintf(dev, sizeof dev, "a GPU of %.2f GiB", gpu_mem / GIB);
            refused = ts_memplan_place(&p, ple, gpu_mem, gpu_mem, dev, e2, sizeof e2) != 0;
            if (refused) snprintf(refusal[n_refused++], sizeof refusal[0], "%s", e2);
        }
        if (json) {
            printf("%s{\"ctx\": %" PRId64
                   ", \"seq_state_bytes\": %zu, \"work_bytes\": %zu, \"seqs_table_gpu\": %" PRId64
                   ", \"seqs_table_host\": %" PRId64,
                   i ? ", " : "", ctx[i], p.seq_state, p.work, fit_gpu, fit_host);
            if (np)
                printf(", \"np\": %ld, \"fits\": %s, \"table_on_host\": %s, \"device_bytes\": %zu", np,
                       refused ? "false" : "true", p.table_on_host ? "true" : "false", p.device);
            printf("}");
        } else {
            char st[32], wk[32], chk[96] = "";
            fmt_bytes(st, sizeof st, (double)p.seq_state), fmt_bytes(wk, sizeof wk, (double)p.work);
            if (np)
                snprintf(chk, sizeof chk, " %s |",
                         refused           ? "does not fit"
                         : p.table_on_host ? "fits, table in host memory"
                                           : "fits, table on the GPU");
            printf("| %" PRId64 "%s | %s | %s |", ctx[i],
                   ctx[i] > (int64_t)hp->n_ctx_train ? " (past the trained context)" : "", st, wk);
            if (show_gpu) printf(" %" PRId64 " |", fit_gpu);
            if (show_host) printf(" %" PRId64 " |", fit_host);
            printf("%s\n", chk);
        }
    }
    const int64_t long_gpu = show_gpu ? longest_ctx(m, ub, snapshots, false, gpu_mem) : -1;
    const int64_t long_host = show_host ? longest_ctx(m, ub, snapshots, true, gpu_mem) : -1;
    if (json) {
        printf("], \"longest_ctx_table_gpu\": %" PRId64 ", \"longest_ctx_table_host\": %" PRId64 "}\n",
               long_gpu, long_host);
    } else {
        printf("\nThe longest context of one sequence that fits:");
        if (show_gpu)
            printf(" %" PRId64 " tokens with the table on the GPU%s", long_gpu, show_host ? "," : "");
        if (show_host) printf(" %" PRId64 " in host memory", long_host);
        printf(" (trained context %" PRIu32 "; a CUDA sequence holds at most %d).\n", hp->n_ctx_train,
               TS_MEMPLAN_MAX_SEQ_CTX);
        if (!has_table) printf("This model has no PLE table: both columns are the same.\n");
        printf("Computed by the memory plan the CUDA backend allocates by (src/model/memplan.h), not "
               "measured.\n");
    }
    for (int i = 0; i < n_refused; i++) fprintf(stderr, "turbospark plan: -np %ld: %s\n", np, refusal[i]);
    if (n_refused) status = 1;
    if (virtual_model)
        ts_memplan_model_free(m);
    else
        ts_model_free(m);
    return status;
}
