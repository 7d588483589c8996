// agent_loop.mjs URL TURNS — an agent's loop through the official openai
// package against kvbound serve, on one bounded session: tools defined on
// every turn; turns that force a named call, that require some call (after
// the previous calls' results come back as role "tool" messages), that leave
// the choice to the model, and that ask for a JSON answer by json_schema.
// Every answer is checked: calls name a defined tool and their arguments
// parse and validate against its parameters; JSON answers parse and
// validate; streamed calls equal the same call unstreamed. The last turn
// ends with a final json_schema answer. Prints "ok NAME" / "FAIL NAME: why".
import OpenAI from "openai";

const base = process.argv[2];
const turns = Number(process.argv[3] || 20);
const client = new OpenAI({ baseURL: base + "/v1", apiKey: "unused", maxRetries: 0 });
let failed = 0;
const ok = (n) => console.log("ok   " + n);
const ko = (n, why) => { failed++; console.log(`FAIL ${n}: ${why}`); };

const tools = [
  { type: "function", function: { name: "get_weather", description: "The weather in a city",
    parameters: { type: "object", properties: {
      location: { type: "string", minLength: 1, maxLength: 16 },
      unit: { type: "string", enum: ["celsius", "fahrenheit"] } },
      required: ["location", "unit"], additionalProperties: false } } },
  { type: "function", function: { name: "set_alarm", description: "Sets an alarm",
    parameters: { type: "object", properties: {
      hour: { type: "integer", minimum: 0, maximum: 23 },
      label: { type: "string", maxLength: 12 },
      repeat: { type: "boolean" } },
      required: ["hour", "repeat"], additionalProperties: false } } },
];
const answerSchema = { type: "object", properties: {
  answer: { type: "string", maxLength: 24 },
  done: { type: "boolean" },
  tags: { type: "array", items: { type: "string", enum: ["weather", "alarm", "other"] }, maxItems: 3 } },
  required: ["answer", "done"], additionalProperties: false };

// A validator for the keywords these schemas use.
function validate(schema, v, path = "$") {
  const t = schema.type;
  if (t === "object") {
    if (typeof v !== "object" || v === null || Array.isArray(v)) return `${path} is not an object`;
    for (const r of schema.required || []) if (!(r in v)) return `${path}.${r} is missing`;
    for (const [k, x] of Object.entries(v)) {
      if (!(schema.properties || {})[k]) { if (schema.additionalProperties === false) return `${path}.${k} is not allowed`; continue; }
      const e = validate(schema.properties[k], x, `${path}.${k}`);
      if (e) return e;
    }
  } else if (t === "string") {
    if (typeof v !== "string") return `${path} is not a string`;
    const n = [...v].length;
    if (schema.minLength !== undefined && n < schema.minLength) return `${path} is shorter than ${schema.minLength}`;
    if (schema.maxLength !== undefined && n > schema.maxLength) return `${path} is longer than ${schema.maxLength}`;
    if (schema.enum && !schema.enum.includes(v)) return `${path} '${v}' is not in ${schema.enum}`;
  } else if (t === "integer") {
    if (!Number.isInteger(v)) return `${path} is not an integer`;
    if (schema.minimum !== undefined && v < schema.minimum) return `${path} < ${schema.minimum}`;
    if (schema.maximum !== undefined && v > schema.maximum) return `${path} > ${schema.maximum}`;
  } else if (t === "boolean") {
    if (typeof v !== "boolean") return `${path} is not a boolean`;
  } else if (t === "array") {
    if (!Array.isArray(v)) return `${path} is not an array`;
    if (schema.maxItems !== undefined && v.length > schema.maxItems) return `${path} has more than ${schema.maxItems} items`;
    for (let i = 0; i < v.length; i++) { const e = validate(schema.items, v[i], `${path}[${i}]`); if (e) return e; }
  }
  return null;
}

function checkCalls(calls) {
  if (!Array.isArray(calls) || calls.length === 0) return "no tool_calls";
  for (const c of calls) {
    const tool = tools.find((t) => t.function.name === c.function?.name);
    if (!tool) return `call of an unknown tool '${c.function?.name}'`;
    if (typeof c.id !== "string" || !c.id) return "a call without an id";
    let args;
    try { args = JSON.parse(c.function.arguments); } catch (e) { return `arguments do not parse: ${c.function.arguments}`; }
    const e = validate(tool.function.parameters, args);
    if (e) return `arguments ${c.function.arguments}: ${e}`;
  }
  return null;
}

const sid = "agent-" + process.pid;
const common = { model: "any", tools, max_tokens: 160, temperature: 0.7, session_id: sid, kv_budget: 512 };
const messages = [{ role: "system", content: "You are an agent. Use the tools." }];
let calls = 0, jsons = 0, autos = 0, position = 0;
const questions = ["What is the weather in Paris?", "Wake me at seven.", "And in Tokyo, in fahrenheit?", "Summarise."];

for (let turn = 0; turn < turns; turn++) {
  const name = `agent_turn_${turn}`;
  try {
    const kind = turn === turns - 1 ? 3 : turn % 4;
    const last = messages[messages.length - 1];
    if (last.role !== "tool") messages.push({ role: "user", content: questions[turn % 4] + ` (turn ${turn})` });
    const req = { ...common, messages, seed: turn };
    if (kind === 0) req.tool_choice = { type: "function", function: { name: "get_weather" } };
    else if (kind === 1) req.tool_choice = "required";
    else if (kind === 2) req.tool_choice = "auto";
    else { req.tool_choice = "none"; req.response_format = { type: "json_schema", json_schema: { name: "answer", schema: answerSchema, strict: true } }; }
    const r = await client.chat.completions.create(req);
    const m = r.choices[0].message;
    if (!r.kvbound || r.kvbound.position <= position) throw new Error(`the session did not advance: ${JSON.stringify(r.kvbound)}`);
    // the budget bounds the conversation; the pinned instructions (system message and tools) sit on top of it
    const pinned = r.kvbound.keep ? r.kvbound.keep.pinned : 0;
    if (!pinned) throw new Error(`the system message and tools are not pinned: ${JSON.stringify(r.kvbound)}`);
    if (r.kvbound.cache_tokens > 512 + pinned) throw new Error(`the cache holds ${r.kvbound.cache_tokens} tokens, over the budget 512 + ${pinned} pinned`);
    position = r.kvbound.position;
    if (kind === 0 || kind === 1 || (kind === 2 && m.tool_calls && m.tool_calls.length)) {
      const e = checkCalls(m.tool_calls);
      if (e) throw new Error(`${e} (finish ${r.choices[0].finish_reason}, content ${JSON.stringify(m.content)})`);
      if (kind === 0 && m.tool_calls[0].function.name !== "get_weather") throw new Error(`named get_weather, called ${m.tool_calls[0].function.name}`);
      if (r.choices[0].finish_reason !== "tool_calls") throw new Error(`finish_reason ${r.choices[0].finish_reason}`);
      calls++;
      if (kind === 2) autos++;
      // the next request carries the calls and their results, as an agent sends them
      messages.push({ role: "assistant", content: m.content ?? null, tool_calls: m.tool_calls });
      for (const c of m.tool_calls) messages.push({ role: "tool", tool_call_id: c.id, content: JSON.stringify({ ok: true, turn }) });
    } else {
      if (kind === 3) {
        let v;
        try { v = JSON.parse(m.content); } catch (e) { throw new Error(`not JSON: ${m.content} (finish ${r.choices[0].finish_reason})`); }
        const e = validate(answerSchema, v);
        if (e) throw new Error(`${e}: ${m.content}`);
        jsons++;
      }
      messages.push({ role: "assistant", content: m.content ?? "" });
    }
    ok(name);
  } catch (e) {
    ko(name, e && e.message ? e.message : String(e));
  }
}
if (calls >= Math.floor(turns / 2) && jsons >= 1) ok("agent_loop_counts");
else ko("agent_loop_counts", `${calls} calls, ${jsons} JSON answers in ${turns} turns`);

// a forced call streamed equals the same call unstreamed (a fresh session each)
try {
  const req = { model: "any", tools, max_tokens: 160, temperature: 0, messages: [{ role: "user", content: "Weather in Oslo?" }],
    tool_choice: { type: "function", function: { name: "get_weather" } } };
  const whole = await client.chat.completions.create(req);
  const stream = await client.chat.completions.create({ ...req, stream: true });
  const got = [];
  let finish = null;
  for await (const c of stream) {
    for (const ch of c.choices) {
      finish = ch.finish_reason ?? finish;
      for (const d of ch.delta?.tool_calls ?? []) {
        got[d.index] ??= { id: "", name: "", arguments: "" };
        if (d.id) got[d.index].id = d.id;
        if (d.function?.name) got[d.index].name += d.function.name;
        if (d.function?.arguments) got[d.index].arguments += d.function.arguments;
      }
    }
  }
  const w = whole.choices[0].message.tool_calls;
  if (finish === "tool_calls" && w && got.length === w.length && got.every((g, i) => g.name === w[i].function.name && g.arguments === w[i].function.arguments))
    ok("agent_stream_equals_whole");
  else ko("agent_stream_equals_whole", `${JSON.stringify(got)} vs ${JSON.stringify(w)} (${finish})`);
} catch (e) {
  ko("agent_stream_equals_whole", e && e.message ? e.message : String(e));
}
process.exit(failed ? 1 : 0);
