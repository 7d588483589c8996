/*
 * cold.c — `kvbound cold FILE...`: checks recall's cold-tier files
 * (kvb_cold_file_check): header, geometry and every committed page. Prints
 * one line or one JSON object per file; exit 1 if any file is refused.
 * A file outlives its run only when the run was killed: normally a cache
 * removes its cold file when it is freed.
 */
#include "cli.h"

#include <string.h>

int cmd_cold(int argc, char **argv) {
    bool json = false;
    int n_files = 0, bad = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: kvbound cold [--json] FILE...\n\n"
                   "Checks cold-tier files (written under --cold-dir by --recall): the header, the geometry, and every\n"
                   "committed page's checksum, sequence, stream, token count and positions. A file cut short of its\n"
                   "committed pages, or with any bad field, is refused naming the page or field; bytes after the\n"
                   "committed pages (a write cut by a crash) are reported as tail_bytes. Exit 1 if any file is refused.\n");
            return 0;
        }
        if (!strcmp(argv[i], "--json")) { json = true; continue; }
        if (argv[i][0] == '-') { fprintf(stderr, "kvbound cold: unknown option '%s'\n", argv[i]); return 2; }
        n_files++;
        struct kvb_cold_file_info in;
        if (kvb_cold_file_check(argv[i], &in) != KVB_OK) {
            fprintf(stderr, "kvbound: %s\n", kvb_last_error());
            if (json) printf("{\"file\":\"%s\",\"ok\":false}\n", argv[i]);
            bad++;
            continue;
        }
        if (json)
            printf("{\"file\":\"%s\",\"ok\":true,\"pages\":%lld,\"tokens\":%lld,\"tail_bytes\":%lld,\"pos_min\":%lld,\"pos_max\":%lld,"
                   "\"streams\":%d,\"block_size\":%d,\"head_dim\":%d,\"dtype\":\"%s\",\"dtype_v\":\"%s\"}\n",
                   argv[i], (long long)in.pages, (long long)in.tokens, (long long)in.tail_bytes, (long long)in.pos_min, (long long)in.pos_max,
                   in.n_streams, in.block_size, in.head_dim, kvb_dtype_name(in.dtype), kvb_dtype_name(in.dtype_v));
        else
            printf("%s: ok: %lld pages, %lld tokens (positions %lld..%lld), %d streams, %d-token pages of %d dims (K %s, V %s), %lld uncommitted tail bytes\n",
                   argv[i], (long long)in.pages, (long long)in.tokens, (long long)in.pos_min, (long long)in.pos_max, in.n_streams, in.block_size,
                   in.head_dim, kvb_dtype_name(in.dtype), kvb_dtype_name(in.dtype_v), (long long)in.tail_bytes);
    }
    if (!n_files) { fprintf(stderr, "kvbound cold: give one or more files (see --help)\n"); return 2; }
    return bad ? 1 : 0;
}
