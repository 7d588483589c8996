// page_test.mjs URL [KEY] — the page at / in Debian's Chromium (headless, through
// puppeteer-core): send a message, see streamed text arrive, see the cache map
// drawn and then redrawn with a later position after a second message, and the
// pool bar filled; its session id is a random UUID. With KEY (a server started
// with --api-key KEY): a message before the key is typed is refused (401), the
// key typed into the page is used and kept in sessionStorage only (not
// localStorage, not the address), and a ?key= link is moved out of the address.
// Prints "ok NAME" / "FAIL NAME: why" lines.
import puppeteer from "puppeteer-core";

const url = process.argv[2];
const apiKey = process.argv[3];
const chromium = process.env.CHROMIUM || "/usr/bin/chromium";
let failed = 0;
const ok = (n) => console.log("ok   " + n);
const ko = (n, why) => { failed++; console.log(`FAIL ${n}: ${why}`); };

const browser = await puppeteer.launch({ executablePath: chromium, headless: true, args: ["--no-sandbox", "--disable-gpu"] });
try {
  const page = await browser.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(url + "/", { waitUntil: "load" });
  async function say(text) {
    const before = await page.$$eval(".msg.assistant", (els) => els.length);
    await page.type("#input", text);
    await page.click("#send");
    await page.waitForFunction((n) => {
      const els = document.querySelectorAll(".msg.assistant");
      return els.length > n && els[els.length - 1].dataset.done === "1";
    }, { timeout: 60000 }, before);
    return page.$$eval(".msg.assistant", (els) => els[els.length - 1].textContent);
  }
  const sidText = await page.$eval("#sid", (e) => e.textContent);
  if (/^web-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/.test(sidText)) ok("page_session_id_uuid");
  else ko("page_session_id_uuid", sidText);
  if (apiKey) {
    await page.type("#input", "Once upon a time");
    await page.click("#send");
    await page.waitForFunction(() => { const e = document.querySelector(".msg.err"); return e && e.dataset.done === "1"; }, { timeout: 60000 });
    const refused = await page.$eval(".msg.err", (e) => e.textContent);
    const errShown = /API key/.test(refused);
    await page.type("#key", apiKey);
    const answered = await say("Once upon a time there was a little bird");
    const kept = await page.evaluate(() => ({ s: sessionStorage.getItem("kvbound-api-key"), l: localStorage.length, href: location.href }));
    if (errShown && answered.trim().length > 0 && kept.s === apiKey && kept.l === 0 && !kept.href.includes(apiKey))
      ok("page_key_typed_kept_for_tab");
    else ko("page_key_typed_kept_for_tab", JSON.stringify({ refused, errShown, answered, kept }));
    const p2 = await browser.newPage();
    await p2.goto(url + "/?key=" + encodeURIComponent(apiKey), { waitUntil: "load" });
    const moved = await p2.evaluate(() => ({ s: sessionStorage.getItem("kvbound-api-key"), href: location.href, box: document.getElementById("key").value }));
    if (moved.s === apiKey && !moved.href.includes("key=") && moved.box === apiKey) ok("page_key_link_moved_out_of_address");
    else ko("page_key_link_moved_out_of_address", JSON.stringify(moved));
  } else {
  const a1 = await say("Once upon a time there was a little bird");
  const v1 = await page.$eval("#map", (c) => ({ v: Number(c.dataset.version || 0), p: Number(c.dataset.position || 0), h: c.height }));
  // the map really has colour in it: count non-background pixels
  const painted = await page.$eval("#map", (c) => {
    const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let i = 0; i < d.length; i += 4) if (!(d[i] === 244 && d[i + 1] === 244 && d[i + 2] === 244)) n++;
    return n;
  });
  if (a1.trim().length > 0 && !errors.length) ok("page_streams_text"); else ko("page_streams_text", `answer '${a1}', errors ${errors}`);
  if (v1.v >= 1 && v1.p > 0 && painted > 100) ok("page_draws_map"); else ko("page_draws_map", JSON.stringify({ ...v1, painted }));
  const a2 = await say("The bird flew away");
  const v2 = await page.$eval("#map", (c) => ({ v: Number(c.dataset.version || 0), p: Number(c.dataset.position || 0) }));
  if (a2.trim().length > 0 && v2.v > v1.v && v2.p > v1.p) ok("page_map_changes"); else ko("page_map_changes", JSON.stringify({ v1, v2 }));
  if (process.env.SCREENSHOT) await page.screenshot({ path: process.env.SCREENSHOT });
  const pool = await page.$eval("#poolinfo", (e) => e.textContent);
  if (/MiB used of/.test(pool)) ok("page_pool_usage"); else ko("page_pool_usage", pool);
  }
} catch (e) {
  ko("page", String(e));
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);
