#!/usr/bin/env python3
"""render_ref.py -- the reference for `kvbound template`: renders a chat
template with Python's jinja2 in the environment transformers'
apply_chat_template builds (ImmutableSandboxedEnvironment, trim_blocks,
lstrip_blocks, loopcontrols, raise_exception, strftime_now, tojson as
json.dumps(ensure_ascii=False)), with the same arguments as
`kvbound template --template-file`. Prints the prompt with nothing added.

usage: render_ref.py --template-file F --messages F [--tools F]
                     [--no-generation-prompt] [--var NAME=JSON]...
"""
import json
import sys
from datetime import datetime

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.now().strftime(fmt)


def main(argv):
    tmpl = msgs = tools = None
    gen = True
    extra = {}
    i = 1
    while i < len(argv):
        a = argv[i]
        if a == "--no-generation-prompt":
            gen = False
            i += 1
            continue
        v = argv[i + 1]
        i += 2
        if a == "--template-file":
            tmpl = open(v, encoding="utf-8").read()
        elif a == "--messages":
            msgs = json.load(open(v, encoding="utf-8"))
        elif a == "--tools":
            tools = json.load(open(v, encoding="utf-8"))
        elif a == "--var":
            name, _, js = v.partition("=")
            extra[name] = json.loads(js)
        else:
            sys.exit("unknown option " + a)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    kw = dict(messages=msgs, tools=tools, documents=None, add_generation_prompt=gen)
    kw.update(extra)
    try:
        out = env.from_string(tmpl).render(**kw)
    except Exception as e:  # the comparison expects both sides to fail
        sys.stderr.write("render_ref: %s: %s\n" % (type(e).__name__, e))
        sys.exit(1)
    sys.stdout.buffer.write(out.encode("utf-8"))


if __name__ == "__main__":
    main(sys.argv)
