# fn_lengths.awk FILE... — the length of every command function (cmd_*,
# bench_*) defined in the C files given: one line "LINES FILE:LINE NAME"
# each, LINES counted from the line that names the function to its closing
# brace (a "}" in column 0), both included. Prototypes are passed over,
# also those that span lines. For tests/test_cli_size_cli.sh (issue 33).
FNR == 1 { start = 0 }
start && !body {
    if ($0 ~ /\{[ \t]*$/) body = 1
    else if ($0 ~ /;[ \t]*$/) start = 0
    next
}
start && /^}/ {
    printf "%d %s:%d %s\n", FNR - start + 1, FILENAME, start, name
    start = 0
    next
}
!start && /^[a-z]/ && match($0, /[A-Za-z_][A-Za-z0-9_]*\(/) {
    fn = substr($0, RSTART, RLENGTH - 1)
    if (fn !~ /^(cmd|bench)_/ || $0 ~ /;[ \t]*$/) next
    name = fn
    start = FNR
    body = $0 ~ /\{[ \t]*$/
}
