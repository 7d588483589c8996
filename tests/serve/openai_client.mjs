// openai_client.mjs URL — the official openai package against kvbound serve:
// a streamed chat completion, a streamed completion, a non-streamed chat with
// a session over two turns, and the errors the package raises for 400/404.
// Prints one "ok NAME" or "FAIL NAME: why" line per case.
import OpenAI from "openai";

const base = process.argv[2];
const client = new OpenAI({ baseURL: base + "/v1", apiKey: "unused", maxRetries: 0 });
let failed = 0;
const ok = (n) => console.log("ok   " + n);
const ko = (n, why) => { failed++; console.log(`FAIL ${n}: ${why}`); };

async function run(name, fn) {
  try { await fn(); } catch (e) { ko(name, e && e.message ? e.message : String(e)); }
}

await run("openai_models", async () => {
  const list = await client.models.list();
  const ids = list.data.map((m) => m.id);
  if (ids.length === 1 && ids[0].length > 0) ok("openai_models"); else ko("openai_models", JSON.stringify(ids));
});

await run("openai_chat_stream", async () => {
  const stream = await client.chat.completions.create({
    model: "any", messages: [{ role: "user", content: "Tell me about a cat" }], max_tokens: 24, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  });
  let text = "", chunks = 0, finish = null, usage = null;
  for await (const c of stream) {
    chunks++;
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) { text += ch.delta?.content ?? ""; finish = ch.finish_reason ?? finish; }
  }
  const whole = await client.chat.completions.create({
    model: "any", messages: [{ role: "user", content: "Tell me about a cat" }], max_tokens: 24, temperature: 0,
  });
  if (chunks >= 2 && text.length > 0 && text === whole.choices[0].message.content && finish === "length" && usage && usage.completion_tokens === 24)
    ok("openai_chat_stream");
  else ko("openai_chat_stream", `chunks ${chunks}, '${text}' vs '${whole.choices[0].message.content}', finish ${finish}, usage ${JSON.stringify(usage)}`);
});

await run("openai_completion_stream", async () => {
  const stream = await client.completions.create({ model: "any", prompt: "Once upon a time", max_tokens: 16, temperature: 0, stream: true });
  let text = "", finish = null;
  for await (const c of stream) for (const ch of c.choices) { text += ch.text ?? ""; finish = ch.finish_reason ?? finish; }
  const whole = await client.completions.create({ model: "any", prompt: "Once upon a time", max_tokens: 16, temperature: 0 });
  if (text.length > 0 && text === whole.choices[0].text && finish === "length") ok("openai_completion_stream");
  else ko("openai_completion_stream", `'${text}' vs '${whole.choices[0].text}' (${finish})`);
});

await run("openai_session_turns", async () => {
  const sid = "openai-" + process.pid;
  const t1 = await client.chat.completions.create({
    model: "any", messages: [{ role: "user", content: "Once upon a time there was a fox" }], max_tokens: 20, temperature: 0, session_id: sid,
  });
  const t2 = await client.chat.completions.create({
    model: "any", messages: [{ role: "user", content: "The fox jumped" }], max_tokens: 20, temperature: 0, session_id: sid,
  });
  if (t2.kvbound && t1.kvbound && t2.kvbound.position > t1.kvbound.position && t2.usage.prompt_tokens < t1.usage.prompt_tokens + 20)
    ok("openai_session_turns");
  else ko("openai_session_turns", JSON.stringify([t1.kvbound, t2.kvbound, t1.usage, t2.usage]));
});

await run("openai_errors", async () => {
  let status = 0, type = "";
  try {
    await client.chat.completions.create({ model: "any", messages: [{ role: "user", content: "x" }], max_tokens: -3 });
  } catch (e) { status = e.status; type = e.error?.type ?? ""; }
  let status404 = 0;
  try { await client.get("/nothing"); } catch (e) { status404 = e.status; }
  if (status === 400 && type === "invalid_request_error" && status404 === 404) ok("openai_errors");
  else ko("openai_errors", `bad max_tokens -> ${status} ${type}; unknown route -> ${status404}`);
});

process.exit(failed ? 1 : 0);
