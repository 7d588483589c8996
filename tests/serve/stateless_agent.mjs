// stateless_agent.mjs URL TURNS — an agent's loop through the official openai
// package that never sends session_id: every request carries the whole
// history, each answer appended exactly as the client got it (streamed turns
// assembled from their chunks), tool calls forced every third turn and
// answered by role "tool" messages. From turn 2 on, each turn must report
// usage.prompt_tokens_details.cached_tokens > 0 and kvbound.implicit.resumed
// equal to the previous turn's kvbound.implicit.checkpoint (implicit
// sessions, issue 49). Prints one line per failed turn, then "ok" or
// "FAIL".
import OpenAI from "openai";

const base = process.argv[2];
const turns = Number(process.argv[3] || 8);
const client = new OpenAI({ baseURL: base + "/v1", apiKey: "unused", maxRetries: 0 });
const tools = [{ type: "function", function: { name: "get_time", description: "The time now in a city",
  parameters: { type: "object", properties: { city: { type: "string", maxLength: 8 } }, required: ["city"] } } }];
const messages = [{ role: "system", content: "You are a careful agent. Call get_time for the time anywhere." }];
let failed = 0;
let prevCheckpoint = null;
const ko = (why) => { failed++; console.log(why); };

for (let t = 1; t <= turns; t++) {
  const last = messages[messages.length - 1];
  if (last.role === "assistant" && last.tool_calls?.length) {
    for (const c of last.tool_calls) messages.push({ role: "tool", tool_call_id: c.id, content: "14:05" });
  } else messages.push({ role: "user", content: `Task ${t}: what time is it in city number ${t}?` });
  const body = { model: "kvbound", messages, tools, temperature: 0, max_tokens: 24 };
  if (t % 3 === 2) Object.assign(body, { tool_choice: { type: "function", function: { name: "get_time" } }, max_tokens: 64 });
  let msg, usage, kvb;
  try {
    if (t % 3 === 0) { // streamed: the message assembled from the deltas
      const stream = await client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
      msg = { role: "assistant", content: "" };
      const calls = [];
      for await (const ch of stream) {
        if (ch.usage) usage = ch.usage;
        if (ch.kvbound) kvb = ch.kvbound;
        for (const c of ch.choices || []) {
          msg.content += c.delta?.content || "";
          for (const tc of c.delta?.tool_calls || []) {
            const i = tc.index ?? 0;
            calls[i] ??= { id: "", type: "function", function: { name: "", arguments: "" } };
            if (tc.id) calls[i].id = tc.id;
            calls[i].function.name += tc.function?.name || "";
            calls[i].function.arguments += tc.function?.arguments || "";
          }
        }
      }
      if (calls.length) { msg.tool_calls = calls; if (!msg.content) msg.content = null; }
    } else {
      const r = await client.chat.completions.create(body);
      msg = r.choices[0].message; usage = r.usage; kvb = r.kvbound;
    }
  } catch (e) {
    ko(`turn ${t}: ${e && e.message ? e.message : e}`);
    break;
  }
  messages.push(msg);
  const cached = usage?.prompt_tokens_details?.cached_tokens ?? 0;
  const imp = kvb?.implicit;
  if (t >= 2 && !(cached > 0)) ko(`turn ${t}: cached_tokens ${cached} of ${usage?.prompt_tokens} prompt tokens (want > 0)`);
  if (t >= 2 && (!imp?.resumed || imp.resumed !== prevCheckpoint))
    ko(`turn ${t}: kvbound.implicit ${JSON.stringify(imp ?? null)}, the previous turn's checkpoint ${prevCheckpoint}`);
  prevCheckpoint = imp?.checkpoint ?? null;
}
console.log(failed ? "FAIL" : "ok");
