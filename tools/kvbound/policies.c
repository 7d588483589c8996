/* policies.c — `kvbound policies`: one line per policy with its parameters. */
#include "cli.h"

#include <string.h>

int cmd_policies(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: kvbound policies\n\nLists every eviction policy: name, rule, parameters and defaults.\n"
                   "Details and papers: docs/POLICIES.md.\n");
            return 0;
        }
        fprintf(stderr, "kvbound policies: unknown option '%s'\n", argv[i]);
        return 2;
    }
    for (int id = 0; id < KVB_POLICY_COUNT; id++)
        printf("%-13s %s\n", kvb_policy_name((enum kvb_policy_id)id), kvb_policy_describe((enum kvb_policy_id)id));
    return 0;
}
