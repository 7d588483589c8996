/*
 * convert.c — `kvbound convert` (llama2.c checkpoint -> GGUF) and
 * `kvbound mkmodel` (random-weight GGUF of a real model shape, for tests and
 * benchmarks). Both quantize 2-D weights to --type and report progress on
 * stderr.
 */
#include "cli.h"

#include <string.h>

static void progress(int32_t done, int32_t total, void *user) {
    (void)user;
    cli_progress("kvbound: writing", done, total);
}

static int parse_type(const char *v, uint32_t *t) {
    if (kvb_type_from_name(v, t) == KVB_OK) return 0;
    fprintf(stderr, "kvbound: --type: %s\n", kvb_last_error());
    return -1;
}

int cmd_convert(int argc, char **argv) {
    struct cli_model_opts mo; /* -m -z */
    cli_model_init(&mo, "convert", CLI_MODEL_TOKENIZER, 0);
    const char *out = NULL;
    uint32_t type = KVB_TYPE_F32;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: kvbound convert -m MODEL.bin -z TOKENIZER.bin -o OUT.gguf [--type f32|f16|bf16|q8_0|q4_0|q5_0|q4_1|q5_1|q4_k|q5_k|q6_k|iq4_nl|iq4_xs|mxfp4]\n\n"
                   "Writes a llama2.c checkpoint (or any model kvbound loads) as GGUF (default type f32).\n");
            return 0;
        }
        const int r = cli_model_option(&mo, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!(v = cli_opt_value("convert", "-o --out --type", argc, argv, &i))) return 2;
        if (!strcmp(a, "-o") || !strcmp(a, "--out")) out = v;
        else if (parse_type(v, &type)) return 2; /* --type */
    }
    if (!mo.path || !out) { fprintf(stderr, "kvbound convert: -m MODEL and -o OUT are required\n"); return 2; }
    if (cli_check_output_file("convert", "-o", out)) return 1; /* before the model is read and quantized */
    struct kvb_model *m;
    if (cli_load_model(&mo, &m, NULL)) return 1;
    kvb_status st = kvb_model_write_gguf(m, out, type, progress, NULL);
    kvb_model_free(m);
    if (st != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); return 1; }
    fprintf(stderr, "kvbound: wrote %s\n", out);
    return 0;
}

int cmd_mkmodel(int argc, char **argv) {
    const char *shape = NULL, *out = NULL, *vocab = NULL;
    uint32_t type = KVB_TYPE_F16;
    long long seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: kvbound mkmodel --shape NAME --type T -o FILE [--seed S] [--vocab VOCAB.gguf]\n\n"
                   "Writes a random-weight GGUF model of a real shape (seeded; default type f16).\n"
                   "--vocab copies a real tokenizer (SentencePiece or byte-level BPE) from any GGUF;\n"
                   "the embedding rows then follow its size. Without it: a synthetic SentencePiece vocabulary.\n"
                   "shapes: %s\ntypes: f32, f16, bf16, q8_0, q4_0, q5_0, q4_1, q5_1, q4_k, q5_k, q6_k, iq4_nl, iq4_xs, mxfp4\n", kvb_model_shapes());
            return 0;
        }
        if (!(v = cli_opt_value("mkmodel", "--shape --type -o --out --vocab --seed", argc, argv, &i))) return 2;
        if (!strcmp(a, "--shape")) shape = v;
        else if (!strcmp(a, "--type")) { if (parse_type(v, &type)) return 2; }
        else if (!strcmp(a, "-o") || !strcmp(a, "--out")) out = v;
        else if (!strcmp(a, "--vocab")) vocab = v;
        else if (!strcmp(a, "--seed")) { if (cli_parse_i64(a, v, 0, (1LL << 62), &seed)) return 2; }
        else { fprintf(stderr, "kvbound mkmodel: unknown option '%s'\n", a); return 2; }
    }
    if (!shape || !out) { fprintf(stderr, "kvbound mkmodel: --shape and -o are required (shapes: %s)\n", kvb_model_shapes()); return 2; }
    if (cli_check_output_file("mkmodel", "-o", out)) return 1;
    struct kvb_model *m;
    void *owned;
    if (kvb_model_make(shape, (uint64_t)seed, vocab, &m, &owned) != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); return 2; }
    kvb_status st = kvb_model_write_gguf(m, out, type, progress, NULL);
    kvb_model_make_free(m, owned);
    if (st != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); return 1; }
    fprintf(stderr, "kvbound: wrote %s (%s, %s)\n", out, shape, kvb_type_name(type));
    return 0;
}
