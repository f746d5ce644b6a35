/* The CUDA memory plan's arithmetic (src/model/memplan.h) against values computed by hand: the tiny
 * config (every region, the weights of an all-F32 file, a sparse and a dense QSA scratch), and the
 * released config at 4,096 and 262,144 tokens (state, workspaces, one 262K sequence on an H200);
 * a model made from the hyperparameters plans the same bytes as the synthetic file of the same mix. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "convert/mix.h"
#include "model/memplan.h"
#include "model/synth.h"
#include "quant/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GIB ((size_t)1 << 30)

static char g_path[256];

static int setup(void **state) {
    (void)state;
    snprintf(g_path, sizeof g_path, "/tmp/ts_test_memplan_%d.gguf", (int)getpid());
    return 0;
}

static int teardown(void **state) {
    (void)state;
    unlink(g_path);
    return 0;
}

typedef struct {
    const ts_mix *mix;
    uint32_t type;
    const ts_hparams *hp;
} types;

static uint32_t type_of(void *ctx, const ts_tensor_spec *s) {
    const types *t = ctx;
    if (s->role != 'm') return TS_TYPE_F32;
    return t->mix ? ts_mix_type(t->mix, t->hp, s) : ts_synth_fallback_type(t->type, s->ne[0]);
}

/* A model of hp's tensors without a file (hp is consumed). */
static ts_model *virtual_model(ts_hparams *hp, const ts_mix *mix, uint32_t type) {
    char err[256];
    const ts_hparams view = *hp;
    types t = {mix, type, &view};
    ts_model *m;
    if (ts_memplan_model_new(hp, (ts_layout){0}, false, type_of, &t, &m, err, sizeof err))
        fail_msg("%s", err);
    return m;
}

/* ---- the tiny config: H 64, C 4 (W 256), r 32, nh 4, nkv 2, hd 32, ni 2, di 16, B 4, Kb 4, Kc 4,
 * nk 2, dk 16, nv 6, dv 16, E 8, k 2, F = Fs = 32, NH 4, dh 16, Kp 4, n 3, V 512; layers GDN,
 * GDN + PLE, GDN, QSA. */

static void test_tiny_state(void **state) {
    (void)state;
    char err[256];
    ts_hparams hp;
    assert_int_equal(ts_hparams_tiny(&hp, err, sizeof err), 0);
    /* n = 100 tokens. QSA: K and V records of 2·32 + 16 = 80 bytes, 100·2·80 = 16,000 each → 16,128
     * aligned; raw indexer keys 100·16·4 = 6,400; pooled (100/4 + 1)·16·4 = 1,664 → 1,792 aligned. */
    assert_int_equal(ts_memplan_qsa_kv_record(&hp), 80);
    assert_int_equal(ts_memplan_qsa_kv_bytes(&hp, 100), 16000);
    assert_int_equal(ts_memplan_idx_raw_bytes(&hp, 100), 6400);
    assert_int_equal(ts_memplan_idx_blk_bytes(&hp, 100), 1664);
    /* GDN: conv (4 − 1)·(2·2·16 + 6·16) = 480 floats = 1,920 → 2,048; state 6·16·16·4 = 6,144 */
    assert_int_equal(ts_memplan_gdn_conv_bytes(&hp), 1920);
    assert_int_equal(ts_memplan_gdn_state_bytes(&hp), 6144);
    /* PLE: conv (4 − 1)·3·256·4 = 9,216; n-gram context 8 ids = 32 → 256 */
    assert_int_equal(ts_memplan_ple_conv_bytes(&hp), 9216);
    ts_memplan_seq s;
    assert_int_equal(ts_memplan_seq_bytes(&hp, 100, &s), 74496);
    assert_int_equal(s.qsa_kv, 2 * 16128);
    assert_int_equal(s.qsa_idx, 6400 + 1792);
    assert_int_equal(s.gdn, 3 * (2048 + 6144));
    assert_int_equal(s.ple, 9216 + 256);
    assert_int_equal(s.total, 74496);
    ts_hparams_free(&hp);
}

static void test_tiny_work(void **state) {
    (void)state;
    char err[256];
    ts_hparams hp;
    assert_int_equal(ts_hparams_tiny(&hp, err, sizeof err), 0);
    /* one row: every region 256-aligned; R, xn, mix 1,024 each, lr 32 floats → 256, x, y, inj 256
     * each, qkv and u 160 floats → 768, z and o 96 → 512, β|α 256, qg 256 floats = 1,024, kv 128 =
     * 512, iq 256, ik 256, att 512, router 256, top-k ids and weights 256 each, gu 2·2·32 = 128
     * floats = 512, eo 2·64 = 512, sg, route counters, hc_ss, emb, pv 256 each, Rsel 1,024, xsel 256,
     * logits 512 floats = 2,048, the tensor-core x records of one row of the widest input (R's 256,
     * twice: the split products' two records a row): 4 · 72 words = 1,152 → 1,280: 17,152 bytes before
     * the scratch */
    ts_memplan_work w;
    ts_memplan_work_layout(&hp, 1, 16, &w);
    assert_int_equal(w.off[TS_WORK_XN], 1024);
    assert_int_equal(w.off[TS_WORK_QKV], 4096);
    assert_int_equal(w.off[TS_WORK_GU], 10240);
    assert_int_equal(w.off[TS_WORK_LOGITS], 13824);
    assert_int_equal(w.off[TS_WORK_TCX], 15872);
    assert_int_equal(w.scratch_off, 17152);
    /* scratch at context 16: GDN max(α 6 floats → 32, z|β|α 6·18·4 = 432) = 432; QSA: no regions (16/4 = 4
     * blocks, not more than Kb: dense, one split), then the joined projections' outputs of one row, q 4·2·32
     * + k and v 2·32 each + idx_q 2·16 + idx_k 16 = 432 floats → 1,792; MoE: shared 32 + 32 floats = 256, no
     * padded expert rows (F % 4 = 0), expert plan of 2 items in 8 experts: 256 + 256 (2 tiles) + 256 = 768 */
    assert_int_equal(ts_memplan_gdn_scratch(&hp, 1, 16), 432);
    assert_int_equal(ts_memplan_qsa_in_out_bytes(&hp), 1792);
    assert_int_equal(ts_memplan_qsa_scratch(&hp, 1, 16), 1792);
    assert_int_equal(ts_memplan_expert_plan_bytes(2, 8), 768);
    assert_int_equal(ts_memplan_moe_scratch(&hp, 1, 16), 1024);
    assert_int_equal(w.scratch, 1792);
    assert_int_equal(w.total, 18944);
    assert_int_equal(ts_memplan_work_bytes(&hp, 1, 16), 18944);
    /* context 100: 25 blocks > Kb, so rows can be sparse: selected blocks 4 ints → 256, scores of one
     * row 25 floats → 256; the dense worst case (FORCE_DENSE) splits the 100 positions in 2 (one row,
     * 2 kv heads: 128 splits wanted, ⌈100/64⌉ = 2 allowed): partials 1·4·2·32 floats = 1,024 and
     * 1·4·2·2 → 256 */
    ts_memplan_qsa q;
    ts_memplan_qsa_layout(&hp, 1, 100, false, &q);
    assert_int_equal(q.rows_pass, 1);
    assert_int_equal(q.nsplit, 1);
    assert_int_equal(ts_memplan_qsa_total(&q), 512);
    ts_memplan_qsa_layout(&hp, 1, 100, true, &q);
    assert_int_equal(q.nsplit, 2);
    assert_int_equal(ts_memplan_qsa_total(&q), 1280);
    /* the regions of any row: 256 + 256 + 1,280; at one row the dense layout's 1,280, then the joined
     * projections' 1,792 */
    assert_int_equal(ts_memplan_qsa_scratch(&hp, 1, 100), 1280 + 1792);
    assert_int_equal(ts_memplan_work_bytes(&hp, 1, 100), 17152 + 3072);
    ts_hparams_free(&hp);
}

/* Every tiny tensor F32: a matrix is its bytes + 16, aligned; a vector its floats; a hyper-connection's
 * down and inject rows (36 of 1,024 bytes), a GDN layer's z|β|α (108 rows of 256 bytes) and a QSA layer's
 * q|k|v|idx_q|idx_k (256 + 64 + 64 + 32 + 16 = 432 rows of 256 bytes) are joined. */
static const size_t k_tiny_f32_trunk =
    131328 + 131328 /* token_embd, output */ + 67072 /* final mixer: norm 1,024, down 33,024, up 33,024 */ +
    4 * 142336 /* two HC modules a layer: 1,024 + 37,120 + 33,024 each */ +
    4 * 225280 /* MoE: router 2,304, experts 3 × 65,792, shared 3 × 8,448 + 256 */
    + 3 * 97280 /* GDN: qkv 41,216, out 24,832, z|β|α 27,904, vectors 3,328 */ +
    144896                                    /* QSA: q|k|v|idx_q|idx_k 110,848, out 33,024, norms 1,024 */
    + 89600;                                  /* PLE: key 65,792, value 16,640, norms 3,072, conv 4,096 */
static const size_t k_tiny_f32_table = 33024; /* 16 × 512 rows × 4 + 16, aligned */

static void test_tiny_weights(void **state) {
    (void)state;
    char err[256];
    ts_hparams hp;
    assert_int_equal(ts_hparams_tiny(&hp, err, sizeof err), 0);
    ts_synth_opts o = {.type = TS_TYPE_F32, .seed = 1, .sparse = true};
    assert_int_equal(ts_synth_write(&hp, &o, g_path, err, sizeof err), 0);
    ts_model *file;
    if (ts_model_load(g_path, &file, err, sizeof err)) fail_msg("%s", err);
    size_t trunk, table;
    ts_memplan_weights(file, &trunk, &table);
    assert_int_equal(trunk, k_tiny_f32_trunk);
    assert_int_equal(table, k_tiny_f32_table);
    ts_model *v = virtual_model(&hp, NULL, TS_TYPE_F32);
    ts_memplan a, b;
    ts_memplan_make(file, 100, 3, 8, &a);
    ts_memplan_make(v, 100, 3, 8, &b);
    assert_memory_equal(&a, &b, sizeof a);
    assert_int_equal(a.weights, k_tiny_f32_trunk);
    assert_int_equal(a.seq_state, 74496);
    ts_memplan_model_free(v);
    ts_model_free(file);
}

/* synth's mixes, as `synth --type MIX` writes them: ts_mix_type for every matrix */
static int mix_edit(void *ctx, ts_tensor_spec *spec, uint32_t *type) {
    const types *t = ctx;
    if (spec->role == 'm') *type = ts_mix_type(t->mix, t->hp, spec);
    return 1;
}

/* A model made from the hyperparameters plans what the synthetic file of the same types plans. */
static void test_virtual_equals_file(void **state) {
    (void)state;
    const char *names[] = {"q4_k_m", "ud_q2_k_xl", "q8_0", "q4_K"};
    for (int i = 0; i < 4; i++) {
        char err[256];
        ts_hparams hp;
        assert_int_equal(ts_hparams_mid(&hp, err, sizeof err), 0);
        const ts_mix *mix = ts_mix_from_name(names[i]);
        const int t = ts_type_from_name(names[i]);
        assert_true(mix || t >= 0);
        types tc = {mix, mix ? mix->base : (uint32_t)t, &hp};
        ts_synth_opts o = {.type = tc.type, .seed = 1, .sparse = true};
        if (mix) o.edit = mix_edit, o.edit_ctx = &tc;
        assert_int_equal(ts_synth_write(&hp, &o, g_path, err, sizeof err), 0);
        ts_model *file, *v = virtual_model(&hp, mix, tc.type);
        if (ts_model_load(g_path, &file, err, sizeof err)) fail_msg("%s", err);
        ts_memplan a, b;
        ts_memplan_make(file, 4096, 2, 64, &a);
        ts_memplan_make(v, 4096, 2, 64, &b);
        assert_memory_equal(&a, &b, sizeof a);
        ts_memplan_model_free(v);
        ts_model_free(file);
    }
}

/* ---- the released config: 36 GDN and 12 QSA layers, W 10240, kv width 512, di 128, B 4, Kb 512,
 * E 512, k 10, F = Fs = 640, V 248,320. */

static void test_released_state(void **state) {
    (void)state;
    char err[256];
    ts_hparams hp;
    assert_int_equal(ts_hparams_released(&hp, err, sizeof err), 0);
    /* fixed: GDN 36 × (conv 3·10240·4 = 122,880 + state 48·128·128·4 = 3,145,728); PLE conv
     * 3·3·10240·4 = 368,640 + context 256 */
    const size_t fixed = 36 * (122880 + 3145728) + 368640 + 256;
    /* 4,096 tokens, per QSA layer: K, V 4096·2 records of 2·256 + 16 = 528 bytes = 4,325,376 each, raw
     * indexer keys 4096·128·4 = 2,097,152, pooled (1024 + 1)·128·4 = 524,800 (a multiple of 256) */
    assert_int_equal(ts_memplan_seq_bytes(&hp, 4096, NULL), fixed + 12 * (2 * 4325376 + 2097152 + 524800));
    assert_int_equal(ts_memplan_seq_bytes(&hp, 4096, NULL), 253311232);
    /* 262,144 tokens: K, V 276,824,064 each, raw keys 134,217,728, pooled 65,537·512 = 33,554,944 */
    assert_int_equal(ts_memplan_seq_bytes(&hp, 262144, NULL),
                     fixed + (size_t)12 * (2 * 276824064ull + 134217728 + 33554944));
    assert_int_equal(ts_memplan_seq_bytes(&hp, 262144, NULL), 8775088384ull); /* 8.17 GiB */
    ts_hparams_free(&hp);
}

static void test_released_work(void **state) {
    (void)state;
    char err[256];
    ts_hparams hp;
    assert_int_equal(ts_hparams_released(&hp, err, sizeof err), 0);
    /* 512 rows: every region a multiple of 256 bytes, so no padding, but for the route counters: 512 of the
       router, 2,560 / 8 = 320 of the MoE combine and 2 of the hyper-connection read's barrier, 834 words
       padded to 896 */
    const size_t N = 512;
    const size_t regions =
        4 * (3 * N * 10240 /* R, xn, mix */ + N * 320 + 2 * N * 2560 + N * 4 + 2 * N * 10240 /* qkv, u */ +
             2 * N * 6144 /* z, o */ + 2 * N * 48 + N * 24 * 2 * 256 /* qg */ + 2 * N * 512 /* kv */ +
             N * 4 * 128 + N * 128 + N * 24 * 256 /* att */ + N * 512 /* router */ + 2 * N * 10 +
             N * 10 * 2 * 640 /* gu */ + N * 10 * 2560 /* eo */ + N + 896 /* route counters */ +
             N * 4 * 10 /* hc_ss */ + 2 * N * 2560 /* emb, pv */ + N * 10240 + N * 2560 /* Rsel, xsel */ +
             256 * 248320 /* logits */ +
             N * 160 * 72 /* tensor-core x records: 10,240 inputs, two records a row */);
    assert_int_equal(regions, 576919040);
    /* GDN: α 512·48·4 = 98,304, then the chunks' T and P 512·48·128·4 = 12,582,912; MoE shared (327,680 + 327,680)·4 = 2,621,440 + expert plan of 5,120
     * items: 20,480 + the most tiles (those of 8 items: (5,120 + 513·7) / 8 = 1,088)·16 = 17,408 + 256 = 38,144 */
    assert_int_equal(ts_memplan_gdn_scratch(&hp, 512, 4096), 98304 + 12582912);
    assert_int_equal(ts_memplan_expert_plan_bytes(5120, 512), 38144);
    assert_int_equal(ts_memplan_moe_scratch(&hp, 512, 4096), 2621440 + 38144);
    /* QSA at 4,096: 1,024 blocks > 512: selected blocks 512·512·4 = 1,048,576, scores of 512 rows
     * (16 M floats / 1,024 blocks = 16,384 ≥ 512) 512·1024·4 = 2,097,152; partials largest at 127
     * rows, dense, 2 splits: 254·24·256·4 = 6,242,304 and 254·24·2·4 = 48,768 → 48,896 */
    ts_memplan_qsa q;
    ts_memplan_qsa_layout(&hp, 127, 4096, true, &q);
    assert_int_equal(q.nsplit, 2);
    assert_int_equal(q.part_o + q.part_ml, 6242304 + 48896);
    const size_t qsa4k = 1048576 + 2097152 + 6291200;
    assert_int_equal(ts_memplan_qsa_scratch(&hp, 512, 4096), qsa4k);
    /* the scratch is the largest block's: GDN's at 4,096 */
    assert_int_equal(ts_memplan_work_bytes(&hp, 512, 4096), regions + 98304 + 12582912); /* 562.3 MiB */
    /* the tensor-core x records from 128 rows on: whole tiles of 128 rows for the warpgroup products, so
     * 200 rows take 256 rows' records (160 words · 72 · 256); 100 rows take their own */
    ts_memplan_work w;
    ts_memplan_work_layout(&hp, 200, 4096, &w);
    assert_int_equal(w.scratch_off - w.off[TS_WORK_TCX], 4 * 256 * 160 * 72);
    ts_memplan_work_layout(&hp, 100, 4096, &w);
    assert_int_equal(w.scratch_off - w.off[TS_WORK_TCX], 4 * 100 * 160 * 72);
    /* QSA at 262,144: 65,536 blocks, 256 rows a pass: scores 256·65536·4 = 67,108,864; the many-block
     * selection's work area, 64 rows of 4·256 + 2·32 words: 64·1088·4 = 278,528 (none at 4,096: 1,024 blocks) */
    ts_memplan_qsa_layout(&hp, 512, 4096, false, &q);
    assert_int_equal(q.sel_work, 0);
    ts_memplan_qsa_layout(&hp, 512, 262144, false, &q);
    assert_int_equal(q.rows_pass, 256);
    assert_int_equal(q.sel_rows, 64);
    assert_int_equal(q.sel_work, 278528);
    const size_t qsa262k = 1048576 + 67108864 + 278528 + 6291200;
    assert_int_equal(ts_memplan_qsa_scratch(&hp, 512, 262144), qsa262k);
    assert_int_equal(ts_memplan_work_bytes(&hp, 512, 262144), regions + qsa262k); /* 621.5 MiB */
    ts_hparams_free(&hp);
}

/* One 262,144-token sequence on an H200 (139.8 GiB as the runtime reports it) with the q4_k_m mix,
 * the table on the GPU or in host memory. */
static void test_released_262k_fits(void **state) {
    (void)state;
    char err[512];
    ts_hparams hp;
    assert_int_equal(ts_hparams_released(&hp, err, sizeof err), 0);
    ts_model *m = virtual_model(&hp, ts_mix_from_name("q4_k_m"), 0);
    ts_memplan p;
    ts_memplan_make(m, 262144, 1, 512, &p);
    /* the trunk's file bytes (synth --sizes: 83,925,450,240, routers BF16; vectors are F32 in the file too) plus
     * 256 for each of the 672 matrix allocations (16 spare bytes, padded; every matrix is a multiple
     * of 256 bytes): token_embd, output, the final mixer's down and up; per layer two HC modules of 2
     * (down|inject joined, up) and the MoE's 7; per GDN layer qkv, out and z|β|α joined; per QSA layer
     * q|k|v|idx_q|idx_k joined and out where v is Q4_K (6 layers), q|k|idx_q|idx_k joined, v and out
     * where v is Q6_K (use_more_bits: QSA layers 0, 3, 6, 9, 10, 11); the PLE layer's 2:
     * 4 + 48·11 + 36·3 + 6·2 + 6·3 + 2. And 64 for each ssm_a and ssm_dt (48 floats, 192 bytes, padded to
     * 256) of the 36 GDN layers. */
    assert_int_equal(p.weights, 83925450240ull + 672 * 256 + 72 * 64);
    assert_int_equal(p.table, 110ull * 320001536 + 256); /* Q5_0 rows of 160: 110 bytes, + 16 padded */
    const size_t h200 = (size_t)(139.8 * GIB);
    assert_int_equal(ts_memplan_seqs_fit(&p, false, h200), 3);
    assert_int_equal(ts_memplan_seqs_fit(&p, true, h200), 7);
    assert_int_equal(ts_memplan_place(&p, TS_PLE_AUTO, h200, h200, "an H200", err, sizeof err), 0);
    assert_false(p.table_on_host);
    assert_int_equal(p.device, p.weights + p.table + p.seq_state + p.work + TS_MEMPLAN_MARGIN);
    /* four such sequences do not fit with the table on the GPU: auto puts it in host memory */
    ts_memplan_make(m, 262144, 4, 512, &p);
    assert_int_equal(ts_memplan_place(&p, TS_PLE_AUTO, h200, h200, "an H200", err, sizeof err), 0);
    assert_true(p.table_on_host);
    /* and forced onto the GPU they are refused with the numbers */
    assert_int_equal(ts_memplan_place(&p, TS_PLE_DEVICE, h200, h200, "an H200", err, sizeof err), -1);
    assert_non_null(strstr(err, "the model does not fit on an H200: it needs "));
    assert_non_null(strstr(err, "state 32.69 for 4 sequence(s) of 262144 tokens"));
    assert_non_null(strstr(err, "and 139.80 GiB are free of 139.80"));
    /* GPU memory for snapshots counts in the plan; past what the rest leaves, it is named */
    ts_memplan_make(m, 262144, 1, 512, &p);
    const size_t left = h200 - ts_memplan_device_bytes(&p, false);
    p.snapshots = left;
    assert_int_equal(ts_memplan_place(&p, TS_PLE_DEVICE, h200, h200, "an H200", err, sizeof err), 0);
    assert_int_equal(ts_memplan_seqs_fit(&p, false, h200), 1);
    p.snapshots = left + 1;
    assert_int_equal(ts_memplan_place(&p, TS_PLE_DEVICE, h200, h200, "an H200", err, sizeof err), -1);
    assert_non_null(
        strstr(err, "of GPU memory asked for snapshots (serve's --cache-gpu) do not fit on an H200"));
    char want[64];
    snprintf(want, sizeof want, "leaves %.0f MiB of the 139.80 GiB free", left / 1048576.0);
    assert_non_null(strstr(err, want));
    assert_int_equal(ts_memplan_seqs_fit(&p, false, h200), 0);
    ts_memplan_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_state),
        cmocka_unit_test(test_tiny_work),
        cmocka_unit_test_setup_teardown(test_tiny_weights, setup, teardown),
        cmocka_unit_test_setup_teardown(test_virtual_equals_file, setup, teardown),
        cmocka_unit_test(test_released_state),
        cmocka_unit_test(test_released_work),
        cmocka_unit_test(test_released_262k_fits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
