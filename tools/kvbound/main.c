/*
 * main.c — the kvbound command-line tool: one binary, one subcommand per
 * file. Errors go to stderr with the offending flag named; exit status 2 for
 * usage errors, 1 for failures.
 */
#include "cli.h"

#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "kvbound %s — bounded-memory KV cache for LLM inference\n"
            "\n"
            "usage: kvbound <command> [options]\n"
            "\n"
            "commands:\n"
            "  run                 generate text from a GGUF or llama2.c model with any cache policy\n"
            "  chat                interactive conversation with a bounded cache (stdin may be a pipe)\n"
            "  serve               an OpenAI-compatible server for many long sessions on one page pool\n"
            "  ppl                 a policy's perplexity on a text, vs the full cache (KL, top-1) or recompute\n"
            "  sweep               quality against KV bytes over policies x budgets (CSV, Markdown, SVG)\n"
            "  needle              passkey retrieval through eviction over length x depth (JSON, Markdown, SVG)\n"
            "  ruler               RULER's synthetic tasks (niah, vt, cwe, fwe) at any length, with a policy (JSON, Markdown)\n"
            "  mem                 KV-cache memory calculator (presets, models, policies)\n"
            "  cold                check recall's cold-tier files (--recall --cold-dir) page by page\n"
            "  template            render a conversation through a Jinja chat template (the model's or a file)\n"
            "  tokenize            text to token ids, in llama-tokenize's formats (vocab-only GGUF works)\n"
            "  grammar             JSON Schema to GBNF; whether a text matches a grammar (constrained decoding)\n"
            "  grammar-bench       the grammar token mask's cost on a model's vocabulary vs its decode step (JSON)\n"
            "  info                print a model's architecture, hyperparameters and tensors\n"
            "  logits              the logits of given token ids, raw float32, to compare with another engine\n"
            "  convert             write a llama2.c checkpoint as GGUF\n"
            "  mkmodel             write a random-weight GGUF of a real model shape\n"
            "  lab                 the synthetic attention lab: policies on known attention (make demo)\n"
            "  policies            list the eviction policies, their rules and parameters\n"
            "  bench cache         benchmark the cache work of decode steps (JSON)\n"
            "  bench decode        decode tok/s and memory-roofline fraction of a model (JSON)\n"
            "  bench prefill       prefill tok/s and GFLOP/s against the FMA peak (JSON)\n"
            "  bench stream        decode latency (p50, p99) and RSS at 1,000, 10,000 and 100,000 tokens,\n"
            "                      streaming vs full, and the speedup over recomputing a window (JSON)\n"
            "  bench tokenize      vocabulary load + encode throughput on a text (JSON)\n"
            "  bench batch         N sequences decoded together on one page pool: tok/s, pool peak (JSON)\n"
            "  bench serve-memory  sessions that fit a KV pool, full vs bounded, and their decode tok/s (JSON)\n"
            "  version             print the version and the kernel family in use\n"
            "  help                this text\n"
            "\n"
            "Run 'kvbound <command> --help' for a command's options.\n",
            KVB_VERSION_STRING);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("kvbound %s (kernels: %s)\n", kvb_version(), kvb_kernels_name());
        return 0;
    }
    if (!strcmp(cmd, "policies")) return cmd_policies(argc - 1, argv + 1);
    if (!strcmp(cmd, "lab")) return cmd_lab(argc - 1, argv + 1);
    if (!strcmp(cmd, "run")) return cmd_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "chat")) return cmd_chat(argc - 1, argv + 1);
    if (!strcmp(cmd, "tokenize")) return cmd_tokenize(argc - 1, argv + 1);
    if (!strcmp(cmd, "grammar")) return cmd_grammar(argc - 1, argv + 1);
    if (!strcmp(cmd, "grammar-bench")) return cmd_grammar_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "template")) return cmd_template(argc - 1, argv + 1);
    if (!strcmp(cmd, "mem")) return cmd_mem(argc - 1, argv + 1);
    if (!strcmp(cmd, "cold")) return cmd_cold(argc - 1, argv + 1);
    if (!strcmp(cmd, "ppl")) return cmd_ppl(argc - 1, argv + 1);
    if (!strcmp(cmd, "sweep")) return cmd_sweep(argc - 1, argv + 1);
    if (!strcmp(cmd, "needle")) return cmd_needle(argc - 1, argv + 1);
    if (!strcmp(cmd, "ruler")) return cmd_ruler(argc - 1, argv + 1);
    if (!strcmp(cmd, "info")) return cmd_info(argc - 1, argv + 1);
    if (!strcmp(cmd, "logits")) return cmd_logits(argc - 1, argv + 1);
    if (!strcmp(cmd, "convert")) return cmd_convert(argc - 1, argv + 1);
    if (!strcmp(cmd, "mkmodel")) return cmd_mkmodel(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return cmd_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "serve")) {
#ifdef KVB_HAVE_SERVE
        return cmd_serve_main(argc - 1, argv + 1);
#else
        fprintf(stderr, "kvbound serve: this kvbound was built without the server; install libmicrohttpd-dev libcjson-dev "
                        "libsqlite3-dev (and libhiredis-dev for Redis) and rebuild\n");
        return 1;
#endif
    }
    fprintf(stderr, "kvbound: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return 2;
}
