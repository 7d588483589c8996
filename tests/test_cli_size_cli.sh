#!/bin/sh
# test_cli_size_cli.sh BUILD_DIR — every command function of the CLI
# (cmd_*, bench_* in tools/kvbound and tools/serve) is at most 80 lines, as
# issue 33 asks: a command is a short function over helpers that parse,
# run and report. tests/fn_lengths.awk measures them; a probe file checks
# that it counts a long function (its signature over two lines), a short
# one, and passes over prototypes.
. "$(dirname "$0")/cli_lib.sh"
MAX=80
R="$(dirname "$0")/.."
L="$(dirname "$0")/fn_lengths.awk"
# "LINES FILE:LINE NAME -", one command function a row
rows=$(cd "$R" && awk -f tests/fn_lengths.awk tools/kvbound/*.c tools/serve/*.c | awk '{ print $0, "-" }')
n=$(printf '%s\n' "$rows" | grep -c ' -$')
over=$(printf '%s\n' "$rows" | awk -v max=$MAX '$4 == "-" && $1 > max { printf " %s %s (%d lines)", $2, $3, $1 }')
longest=$(printf '%s\n' "$rows" | awk '$4 == "-"' | sort -rn | awk '{ print $3 ", " $1 " lines"; exit }')
if [ "$n" -lt 20 ]; then ko cli_commands_short "only $n command functions found: does tests/fn_lengths.awk still read the sources?"
elif [ -n "$over" ]; then ko cli_commands_short "over $MAX lines:$over"
else ok "cli_commands_short ($n command functions; the longest $longest)"; fi

{
    printf 'int cmd_probe_long(int argc,\n                   char **argv) {\n'
    i=0; while [ $i -lt 78 ]; do echo "    (void)argc;"; i=$((i + 1)); done
    printf '}\n\nstatic int bench_probe_short(int argc, char **argv);\nstatic int bench_probe_short(int argc, char **argv) {\n'
    i=0; while [ $i -lt 78 ]; do echo "    (void)argc;"; i=$((i + 1)); done
    printf '}\nint cmd_probe_proto(int argc,\n                    char **argv);\nstatic int helper(void) { return 0; }\n'
} > "$T/probe.c"
got=$(awk -f "$L" "$T/probe.c")
want=$(printf '81 %s:1 cmd_probe_long\n80 %s:84 bench_probe_short' "$T/probe.c" "$T/probe.c")
if [ "$got" = "$want" ]; then ok cli_size_measures_probe
else ko cli_size_measures_probe "got '$got', want '$want'"; fi
cli_summary
