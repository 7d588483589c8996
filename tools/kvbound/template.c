/*
 * template.c — `kvbound template`: a conversation rendered through a Jinja
 * chat template (the model's tokenizer.chat_template, or a file) with
 * kvb_chat_apply, printed exactly: no newline is added.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

static int template_usage(FILE *f) {
    fprintf(f,
            "usage: kvbound template (-m MODEL.gguf | --template-file FILE) --messages FILE.json [options]\n"
            "\n"
            "Renders a conversation through a Jinja chat template as transformers' apply_chat_template\n"
            "does (trim_blocks, lstrip_blocks) and prints the prompt exactly, with no newline added.\n"
            "\n"
            "  -m, --model FILE         GGUF model or vocab-only GGUF: its tokenizer.chat_template, and\n"
            "                           bos_token / eos_token from its vocabulary; a template kvbound cannot\n"
            "                           run falls back to its signature family (said on stderr)\n"
            "      --template-file FILE a Jinja template (bos_token / eos_token only through --var)\n"
            "      --messages FILE      a JSON array of messages ({\"role\": ..., \"content\": ...}); - = stdin\n"
            "      --tools FILE         a JSON array of tool definitions (the template's `tools`)\n"
            "      --no-generation-prompt  add_generation_prompt = false (default: true)\n"
            "      --var NAME=JSON      an extra template variable, e.g. --var enable_thinking=false or\n"
            "                           --var 'bos_token=\"<s>\"' (repeatable)\n");
    return 0;
}

struct tmpl_opts {
    const char *model, *tmpl_file, *messages, *tools;
    bool no_gen;
    struct kvb_str vars; /* a JSON object built from the --var options */
};

static int add_var(struct tmpl_opts *o, const char *v) {
    const char *eq = strchr(v, '=');
    if (!eq || eq == v) {
        fprintf(stderr, "kvbound template: --var wants NAME=JSON, got '%s'\n", v);
        return 2;
    }
    for (const char *q = v; q < eq; q++)
        if (!((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') || *q == '_')) {
            fprintf(stderr, "kvbound template: --var name '%.*s' is not an identifier\n", (int)(eq - v), v);
            return 2;
        }
    kvb_str_printf(&o->vars, "%s\"%.*s\": %s", o->vars.n ? ", " : "{", (int)(eq - v), v, eq + 1);
    return kvb_str_error(&o->vars) ? 1 : 0;
}

static int tmpl_parse(struct tmpl_opts *o, int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return template_usage(stdout);
        if (!strcmp(a, "--no-generation-prompt")) { o->no_gen = true; continue; }
        if (!(v = cli_opt_value("template", "-m --model --template-file --messages --tools --var", argc, argv, &i))) return 2;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) o->model = v;
        else if (!strcmp(a, "--template-file")) o->tmpl_file = v;
        else if (!strcmp(a, "--messages")) o->messages = v;
        else if (!strcmp(a, "--tools")) o->tools = v;
        else {
            int rc = add_var(o, v);
            if (rc) return rc;
        }
    }
    if (!o->model == !o->tmpl_file) {
        fprintf(stderr, "kvbound template: give one of -m MODEL or --template-file FILE (see --help)\n");
        return 2;
    }
    if (!o->messages) {
        fprintf(stderr, "kvbound template: --messages FILE.json is required (see --help)\n");
        return 2;
    }
    return CLI_GO_ON;
}

int cmd_template(int argc, char **argv) {
    struct tmpl_opts o = {0};
    int rc = tmpl_parse(&o, argc, argv);
    char *tmpl = NULL, *msgs = NULL, *tools = NULL, *out = NULL, why[512] = "";
    struct kvb_vocab *vocab = NULL;
    size_t flen = 0;
    if (rc != CLI_GO_ON) goto done;
    rc = 1;
    if (o.vars.n) kvb_str_puts(&o.vars, "}");
    if (kvb_str_error(&o.vars)) goto done;
    if (o.tmpl_file && !(tmpl = cli_read_file(o.tmpl_file, 16u << 20, "template", &flen))) goto done;
    if (!(msgs = cli_read_file(o.messages, 64u << 20, "messages", &flen))) goto done;
    if (o.tools && !(tools = cli_read_file(o.tools, 64u << 20, "tools", &flen))) goto done;
    if (o.model && kvb_vocab_load(o.model, &vocab) != KVB_OK) {
        fprintf(stderr, "kvbound template: %s\n", kvb_last_error());
        goto done;
    }
    struct kvb_chat_apply_params p = kvb_chat_apply_default_params();
    p.template_text = tmpl;
    p.vocab = vocab;
    p.messages_json = msgs;
    p.tools_json = tools;
    p.vars_json = o.vars.p;
    p.add_generation_prompt = !o.no_gen;
    p.fallback = o.model != NULL;
    p.why = why;
    p.why_cap = sizeof why;
    size_t len = 0;
    kvb_status st = kvb_chat_apply(&p, &out, &len);
    if (st != KVB_OK && st != KVB_FALLBACK) {
        fprintf(stderr, "kvbound template: %s\n", kvb_last_error());
        goto done;
    }
    if (st == KVB_FALLBACK) fprintf(stderr, "kvbound template: note: %s\n", why);
    rc = fwrite(out, 1, len, stdout) == len && fflush(stdout) == 0 ? 0 : 1;
    if (rc) fprintf(stderr, "kvbound template: writing the output failed\n");
done:
    kvb_buffer_free(out);
    kvb_vocab_free(vocab);
    free(tmpl);
    free(msgs);
    free(tools);
    kvb_str_free(&o.vars);
    return rc;
}
