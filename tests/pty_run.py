#!/usr/bin/env python3
"""pty_run.py [--keys FILE] [--timeout S] CMD ARGS... — runs CMD on a
pseudo-terminal (stdin, stdout and stderr are its tty, as in a terminal) and
prints everything it wrote, \\r included. With --keys, FILE holds one chunk of
keystrokes per line as a Python bytes literal (b"hi\\x1b[D!\\r"); each chunk is
typed once the program has been quiet for 0.3 s, as a person types after
seeing the prompt. A line (S, b"...") types its chunk S seconds after the
previous one, whatever the program is writing (b"\\x03", Ctrl-C, during an
answer).
The exit status is the program's (128 + signal when killed); past --timeout
(default 60 s) it is killed and the status is 124.
Used by tests/test_eval_cli.sh (ppl's progress on a terminal) and
tests/test_usage_cli.sh (chat's line editor, history and Ctrl-C)."""
import ast
import os
import pty
import select
import signal
import sys
import time


def main():
    args = sys.argv[1:]
    keys, timeout = [], 60.0
    while args and args[0].startswith("--"):
        if args[0] == "--keys":
            with open(args[1]) as f:
                keys = [ast.literal_eval(line) for line in f if line.strip()]
            args = args[2:]
        elif args[0] == "--timeout":
            timeout = float(args[1])
            args = args[2:]
        else:
            break
    pid, fd = pty.fork()
    if pid == 0:
        try:
            os.execv(args[0], args)
        finally:
            os._exit(127)
    out = bytearray()
    t_end = time.time() + timeout
    last = sent = time.time()
    status = None
    while True:
        now = time.time()
        if now > t_end:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            sys.stdout.write(out.decode(errors="replace"))
            return 124
        r, _, _ = select.select([fd], [], [], 0.05)
        if r and not (keys and isinstance(keys[0], tuple) and time.time() - sent > keys[0][0]):
            try:
                d = os.read(fd, 4096)
            except OSError:
                d = b""
            if not d:
                break
            out += d
            last = time.time()
            continue
        if status is None:
            done, st = os.waitpid(pid, os.WNOHANG)
            if done:
                status = st
        timed = keys and isinstance(keys[0], tuple)
        if keys and ((timed and time.time() - sent > keys[0][0]) or (not timed and time.time() - last > 0.3)):
            k = keys.pop(0)
            os.write(fd, k[1] if timed else k)
            last = sent = time.time()
        elif not keys and status is not None:
            # drain what is left, then stop
            while select.select([fd], [], [], 0.1)[0]:
                try:
                    d = os.read(fd, 4096)
                except OSError:
                    break
                if not d:
                    break
                out += d
            break
    if status is None:
        _, status = os.waitpid(pid, 0)
    sys.stdout.write(out.decode(errors="replace"))
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


if __name__ == "__main__":
    sys.exit(main())
